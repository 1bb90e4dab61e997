//! A fixed window in debt (`FORCE`'s count past the limit, stored with
//! `:D`): what it carries into the next windows, when it is repaid, and its
//! decision.

use super::{FixedWindow, WindowCount};
use crate::algorithm::{sub, Decision, Outcome};
use crate::error::{Error, Result};

impl FixedWindow {
    /// What the count `s` (its window over) still owes in the window starting
    /// at `start_us`: each window that began since repaid `limit` tokens.
    /// 0 for every count within the limit (a state without debt).
    #[inline(never)]
    pub(super) fn carried(&self, s: WindowCount, start_us: i64) -> i64 {
        if !s.debt || s.count <= self.limit {
            return 0;
        }
        let windows = ((start_us - s.window_start_us) / self.window_us).max(1);
        let repaid = windows.saturating_mul(self.limit);
        s.count.saturating_sub(repaid).max(0)
    }

    /// When a count of `count` tokens in the window starting at `start_us`
    /// is repaid: the end of that window, or, in `debt`, of a later one
    /// (each window repays `limit`; at most past the horizon, where a
    /// foreign count would take longer).
    pub(super) fn repaid_at(&self, start_us: i64, count: i64, debt: bool) -> Result<i64> {
        let most = crate::time::MAX_PERIOD_US / self.window_us + 2;
        let windows = if debt {
            crate::time::ceil_div(count.max(0), self.limit).clamp(1, most)
        } else {
            1
        };
        windows
            .checked_mul(self.window_us)
            .and_then(|d| start_us.checked_add(d))
            .ok_or(Error::Overflow)
    }

    /// [`Algorithm::decide`] of a window in debt (a count past the limit,
    /// `FORCE`'s): refused (every cost past the limit), the retry in the
    /// first window whose carried count leaves room, full when all is
    /// repaid. Out of the common path.
    #[cold]
    #[inline(never)]
    pub(super) fn decide_in_debt(
        &self,
        start_us: i64,
        count: i64,
        now_us: i64,
        cost: i64,
    ) -> Result<Outcome<WindowCount>> {
        let retry_after_us = if cost > self.limit {
            None
        } else {
            let retry_at_us = self.repaid_at(start_us, count - self.limit + cost, true)?;
            Some(sub(retry_at_us, now_us)?)
        };
        Ok(Outcome {
            decision: Decision {
                limited: true,
                limit: self.limit,
                remaining: 0,
                retry_after_us,
                reset_after_us: sub(self.repaid_at(start_us, count, true)?, now_us)?,
            },
            update: None,
        })
    }
}
