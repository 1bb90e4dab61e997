//! The sliding window counter (weighted estimate of the sliding window).
//!
//! Source: Cloudflare, "How we built rate limiting capable of scaling to
//! millions of domains" (2017); also Alex Xu, *System Design Interview*, ch. 4.
//! Two fixed windows are counted (aligned to the Unix epoch, index
//! `⌊now / window⌋`), and the number of tokens in the sliding window that ends
//! now is estimated as
//!
//! ```text
//! estimate = previous × (window − elapsed) / window + current
//! ```
//!
//! where `elapsed` is the time since the current window started: the previous
//! window's count weighted by the fraction of it still inside the sliding
//! window. A request of `n` tokens is allowed when `estimate + n ≤ limit`.
//! All arithmetic is exact (scaled by `window`, `i128`), never floating point.
//!
//! Without further requests the estimate never increases with time, so the
//! earliest instant at which a cost fits is found from the formula: either
//! later in the current window (as the previous window's weight drops), or in
//! the next one (when the current count becomes the previous).
//!
//! **Stored value:** `<window_start_us>:<previous>:<current>`, decimal: the
//! start of the current window in µs since the epoch, and the two counts. An
//! absolute start stays meaningful if the `window` parameter of an existing
//! key changes (a start that is neither the current nor the previous window's
//! begins afresh). The key expires at the end of the next window, when both
//! counts have left the sliding window. If the clock steps back into an
//! earlier window (the stored start lies ahead of now), the stored window is
//! taken as current from its start (the most conservative reading).

use super::{
    check_limit_and_window, parse_decimal, refunded, sub, to_i64, window_start, write_decimal,
    Algorithm, Decision, Outcome, RefundWrite, Refunded, Update, EXACT_LIMIT, STATE_BUF_LEN,
};
use crate::error::{Error, Result};

/// The counts of the current window and the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowCounts {
    /// Start of the window `current` counts, µs since the epoch.
    pub window_start_us: i64,
    /// Tokens admitted in the window before it.
    pub previous: i64,
    /// Tokens admitted in that window.
    pub current: i64,
}

/// Sliding window counter parameters, validated. Build with [`SlidingWindow::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindow {
    limit: i64,
    window_us: i64,
}

impl SlidingWindow {
    /// Validates `RL.SLIDINGWINDOW key limit window`: `limit` ≥ 1 tokens in any
    /// sliding window of `window_us` ≥ 1 µs (estimated).
    #[inline]
    pub fn new(limit: i64, window_us: i64) -> Result<Self> {
        check_limit_and_window(limit, window_us)?;
        Ok(Self { limit, window_us })
    }

    /// `⌊(limit × W − weighted) / W⌋`, at least 0.
    fn remaining(&self, weighted: i128) -> Result<i64> {
        let w = i128::from(self.window_us);
        to_i64(((i128::from(self.limit) * w - weighted) / w).max(0))
    }
}

impl Algorithm for SlidingWindow {
    type State = WindowCounts;

    /// Two windows: the current one and the one before, which still counts.
    const EXPIRY_HORIZON_US: i64 = 2 * crate::time::MAX_PERIOD_US;

    /// The current window's start.
    fn latest_us(state: &WindowCounts) -> i64 {
        state.window_start_us
    }

    fn decode(bytes: &[u8]) -> Option<WindowCounts> {
        let mut parts = bytes.splitn(3, |&b| b == b':');
        let window_start_us = parse_decimal(parts.next()?)?;
        let previous = parse_decimal(parts.next()?)?;
        let current = parse_decimal(parts.next()?)?;
        Some(WindowCounts {
            window_start_us,
            previous,
            current,
        })
    }

    fn mismatch(bytes: &[u8]) -> Option<Error> {
        super::bucket_window::is_bucket_state(bytes).then_some(Error::BucketsMismatch {
            stored: "with BUCKETS",
        })
    }

    fn encode(s: &WindowCounts, buf: &mut [u8; STATE_BUF_LEN]) -> usize {
        let mut end = write_decimal(s.window_start_us, buf, 0);
        buf[end] = b':';
        end = write_decimal(s.previous, buf, end + 1);
        buf[end] = b':';
        write_decimal(s.current, buf, end + 1)
    }

    fn decide(
        &self,
        state: Option<WindowCounts>,
        now_us: i64,
        cost: i64,
    ) -> Result<Outcome<WindowCounts>> {
        let w = self.window_us;
        let w128 = i128::from(w);
        // The instant the limiter is read at: now, or the start of a stored
        // window that lies ahead of now (the clock stepped back).
        let t = match state {
            Some(s) => s.window_start_us.max(now_us),
            None => now_us,
        };
        let start_us = window_start(t, w)?;
        let elapsed = t - start_us; // 0 ≤ elapsed < W
        let (previous, current) = match state {
            Some(s) if s.window_start_us == start_us => (s.previous, s.current),
            Some(s) if Some(s.window_start_us) == start_us.checked_sub(w) => (s.current, 0),
            _ => (0, 0),
        };
        let ahead = sub(t, now_us)?; // ≥ 0
        let window_start = |k: i64| {
            k.checked_mul(w)
                .and_then(|d| start_us.checked_add(d))
                .ok_or(Error::Overflow)
        };
        let reset_after = |current: i64| -> Result<i64> {
            Ok(if current > 0 {
                sub(window_start(2)?, now_us)?
            } else if previous > 0 {
                sub(window_start(1)?, now_us)?
            } else {
                0
            })
        };
        // The estimate, scaled by W. Counts near i64::MAX (only in a foreign
        // value) could overflow even i128: checked.
        let weighted = i128::from(previous)
            .checked_mul(i128::from(w - elapsed))
            .and_then(|p| p.checked_add(i128::from(current) * w128))
            .ok_or(Error::Overflow)?;
        let limit = i128::from(self.limit);
        let refuse = |retry_after_us| -> Result<Outcome<WindowCounts>> {
            Ok(Outcome {
                decision: Decision {
                    limited: true,
                    limit: self.limit,
                    remaining: self.remaining(weighted)?,
                    retry_after_us,
                    reset_after_us: reset_after(current)?,
                },
                update: None,
            })
        };
        if cost > self.limit {
            return refuse(None);
        }
        let need = i128::from(cost.max(0)) * w128;
        let new_weighted = weighted.checked_add(need).ok_or(Error::Overflow)?;
        if new_weighted <= limit * w128 {
            let new_current = current.checked_add(cost.max(0)).ok_or(Error::Overflow)?;
            return Ok(Outcome {
                decision: Decision {
                    limited: false,
                    limit: self.limit,
                    remaining: self.remaining(new_weighted)?,
                    retry_after_us: None,
                    reset_after_us: reset_after(new_current)?,
                },
                update: (cost > 0).then_some(Update {
                    state: WindowCounts {
                        window_start_us: start_us,
                        previous,
                        current: new_current,
                    },
                    expire_at_us: window_start(2)?,
                }),
            });
        }
        // Later in this window, as the previous window's weight drops:
        // previous × (W − elapsed − d) ≤ (limit − current − cost) × W.
        // Possible when the limit leaves room for `current + cost` (then
        // `previous` > 0, or the call would have been allowed). When that room
        // is exactly 0 the answer is this window's end, which is also what the
        // next-window formula gives: either branch may take that case.
        let headroom = limit - i128::from(current) - i128::from(cost);
        if let Ok(headroom) = u64::try_from(headroom) {
            // previous > 0 here; the checked division keeps that unproven.
            let q = (i128::from(headroom) * w128)
                .checked_div(i128::from(previous))
                .ok_or(Error::Internal {
                    what: "a limited sliding window with no previous count",
                })?;
            let d = (i128::from(w - elapsed) - q).max(0);
            return refuse(Some(ahead.checked_add(to_i64(d)?).ok_or(Error::Overflow)?));
        }
        // In the next window, where `current` becomes the previous count:
        // current × (W − e) ≤ (limit − cost) × W. Here `current` > 0: no
        // room for `current + cost` while `cost ≤ limit`.
        let next_headroom = limit - i128::from(cost);
        let q = (next_headroom * w128)
            .checked_div(i128::from(current))
            .ok_or(Error::Internal {
                what: "a limited sliding window with no current count",
            })?;
        let e = (w128 - q).max(0);
        refuse(Some(
            sub(window_start(1)?, now_us)?
                .checked_add(to_i64(e)?)
                .ok_or(Error::Overflow)?,
        ))
    }
    /// The current window counts `cost` past the limit (`FORCE`): the
    /// estimate stays above the limit until the counts weigh less, at the
    /// latest two windows on, when the key expires.
    fn charge(
        &self,
        state: Option<WindowCounts>,
        now_us: i64,
        cost: i64,
    ) -> Result<Update<WindowCounts>> {
        let w = self.window_us;
        // The windows as `decide` reads them.
        let t = state.map_or(now_us, |s| s.window_start_us.max(now_us));
        let start_us = window_start(t, w)?;
        let (previous, current) = match state {
            Some(s) if s.window_start_us == start_us => (s.previous, s.current),
            Some(s) if Some(s.window_start_us) == start_us.checked_sub(w) => (s.current, 0),
            _ => (0, 0),
        };
        // Below 2^53, as the Functions library's exact integers: a forced
        // cost past it is refused by both engines alike.
        let current = current
            .checked_add(cost.max(0))
            .filter(|&c| c < EXACT_LIMIT)
            .ok_or(Error::Overflow)?;
        let expire_at_us = w
            .checked_mul(2)
            .and_then(|d| start_us.checked_add(d))
            .ok_or(Error::Overflow)?;
        Ok(Update {
            state: WindowCounts {
                window_start_us: start_us,
                previous,
                current,
            },
            expire_at_us,
        })
    }

    /// The current window's count drops by `tokens`, not below 0; with both
    /// counts at 0 the limiter is full (the key is deleted).
    fn refund(
        &self,
        state: Option<WindowCounts>,
        now_us: i64,
        tokens: i64,
    ) -> Result<Refunded<WindowCounts>> {
        let Some(s) = state else {
            return refunded(self, None, now_us, RefundWrite::Nothing);
        };
        let w = self.window_us;
        // The windows as `decide` reads them.
        let start_us = window_start(s.window_start_us.max(now_us), w)?;
        let (previous, current) = if s.window_start_us == start_us {
            (s.previous, s.current)
        } else if Some(s.window_start_us) == start_us.checked_sub(w) {
            (s.current, 0)
        } else {
            (0, 0)
        };
        let new_current = current.saturating_sub(tokens.max(0)).max(0);
        if previous == 0 && new_current == 0 {
            return refunded(self, None, now_us, RefundWrite::Delete);
        }
        let new_state = WindowCounts {
            window_start_us: start_us,
            previous,
            current: new_current,
        };
        let expire_at_us = w
            .checked_mul(2)
            .and_then(|d| start_us.checked_add(d))
            .ok_or(Error::Overflow)?;
        let write = RefundWrite::Set(Update {
            state: new_state,
            expire_at_us,
        });
        refunded(self, Some(new_state), now_us, write)
    }
}

#[cfg(test)]
mod tests;
