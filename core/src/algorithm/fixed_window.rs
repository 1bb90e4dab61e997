//! The fixed window counter.
//!
//! Source: the classic fixed-window counter of API rate limiting (e.g. Alex
//! Xu, *System Design Interview*, ch. 4; the "time bucketed" counter of the
//! Redis INCR + EXPIRE pattern). Time is cut into windows aligned to the Unix
//! epoch — window index `⌊now / window⌋` — and at most `limit` tokens are
//! admitted per window. Simple and cheap, but up to `2 × limit` may pass
//! around a window edge (the *edge burst*).
//!
//! **Stored value:** `<window_start_us>:<count>`, decimal: the window's start
//! in µs since the epoch, and its count. Storing the start makes the counter
//! exact even when the window end is not a whole millisecond (key expiry has
//! millisecond resolution, and a key is still readable during the millisecond
//! it expires in): a count from another window is never reused. Being an
//! absolute time, it also stays meaningful when the `window` parameter of an
//! existing key changes: a start that is not the current window's begins a
//! new window. The key expires at the window's end.
//!
//! If the clock steps back into an earlier window (the stored start lies
//! ahead of now), the stored window keeps counting: the limiter never admits
//! more than `limit` per window.
//!
//! **Debt** (`FORCE`): a count written past the limit is stored with `:D`
//! at the end (`<window_start_us>:<count>:D`); what exceeds the limit is
//! carried into the next windows, each repaying `limit`, and the key
//! expires when it is all repaid. A state without `:D` never carries.
//!
//! **`ALIGN FIRST`** ([`FixedWindow::first`]): a window starts at the first
//! request that finds no open window and lasts `window` — the "time-bucketed"
//! counter of the GCRA seed document (set the limit with an expiry at the
//! first request, count down, refuse below zero), and the fixed window of
//! rate-limiter-flexible and `limits`. Its stored value is
//! `F<window_start_us>:<count>`: the `F` says which alignment wrote it, and a
//! key is never read with the other one ([`Error::AlignMismatch`]).
//!
//! **Calendar windows** ([`FixedWindow::calendar`], `window` `DAY`, `WEEK`,
//! `MONTH` or `YEAR`, `[TZ zone]`): windows from one local boundary of the
//! unit to the next ([`crate::calendar`]), stored as epoch-aligned windows
//! are (the start is the boundary's instant): a key keeps its format, and a
//! count is only reused by a call whose window starts at the same instant.

use super::{
    check_limit_and_window, parse_decimal, refunded, sub, window_start, write_decimal, Algorithm,
    Decision, Outcome, RefundWrite, Refunded, Update, EXACT_LIMIT, STATE_BUF_LEN,
};
use crate::calendar::{Calendar, Zone};
use crate::error::{Error, Result};

/// The count of one window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowCount {
    /// Start of the window counted, µs since the epoch.
    pub window_start_us: i64,
    /// Tokens admitted in that window.
    pub count: i64,
    /// Written with `ALIGN FIRST` (stored with an `F` in front).
    pub first: bool,
    /// `count` is past the limit (`FORCE`'s debt, stored with `:D` at the
    /// end): what exceeds the limit is carried into the next windows. Only
    /// such a state carries: a count written within its limit never does,
    /// whatever limit later calls give.
    pub debt: bool,
}

/// Where windows start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// At multiples of `window` since the Unix epoch (`ALIGN EPOCH`, the default).
    Epoch,
    /// At the first request that finds no open window (`ALIGN FIRST`).
    First,
}

/// Fixed window parameters, validated. Build with [`FixedWindow::new`] or
/// [`FixedWindow::first`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindow {
    limit: i64,
    /// The window's length; for a calendar window, its unit's longest.
    window_us: i64,
    align: Align,
    /// A calendar window (aligned to its boundaries, never `First`).
    calendar: Option<Calendar>,
}

impl FixedWindow {
    /// Validates `RL.FIXEDWINDOW key limit window`: `limit` ≥ 1 tokens per
    /// window of `window_us` ≥ 1 µs.
    ///
    /// ```
    /// use ratelimit_core::algorithm::{fixed_window::FixedWindow, Algorithm};
    /// let fw = FixedWindow::new(2, 1_000_000).unwrap();
    /// // 0.8 s into a window: allowed, the window ends in 200 ms.
    /// let d = fw.decide(None, 5_800_000, 1).unwrap().decision;
    /// assert_eq!((d.limited, d.remaining, d.reset_after_us), (false, 1, 200_000));
    /// ```
    #[inline]
    pub fn new(limit: i64, window_us: i64) -> Result<Self> {
        check_limit_and_window(limit, window_us)?;
        Ok(Self {
            limit,
            window_us,
            align: Align::Epoch,
            calendar: None,
        })
    }

    /// Validates `RL.FIXEDWINDOW key limit unit [TZ zone]`: `limit` ≥ 1
    /// tokens per calendar window.
    ///
    /// ```
    /// use ratelimit_core::algorithm::{fixed_window::FixedWindow, Algorithm};
    /// use ratelimit_core::calendar::{Calendar, Unit, Zone};
    /// let month = Calendar { unit: Unit::Month, zone: Zone::Offset(0) };
    /// let fw = FixedWindow::calendar(1_000, month).unwrap();
    /// // 2026-02-28 23:30 UTC: the month ends in 30 minutes.
    /// let d = fw.decide(None, 1_772_321_400_000_000, 1).unwrap().decision;
    /// assert_eq!((d.remaining, d.reset_after_us), (999, 1_800_000_000));
    /// ```
    pub fn calendar(limit: i64, calendar: Calendar) -> Result<Self> {
        Ok(Self {
            calendar: Some(calendar),
            ..Self::new(limit, calendar.unit.longest_us())?
        })
    }

    /// This limiter's calendar window, if it has one.
    pub fn calendar_window(&self) -> Option<Calendar> {
        self.calendar
    }

    /// This calendar limiter in `zone` (`TZ zone`); `None` for a window in
    /// seconds.
    pub fn in_zone(self, zone: Zone) -> Option<Self> {
        let calendar = self.calendar?;
        Some(Self {
            calendar: Some(Calendar { zone, ..calendar }),
            ..self
        })
    }

    /// Validates `RL.FIXEDWINDOW key limit window ALIGN FIRST`: as
    /// [`FixedWindow::new`], with each window starting at the first request
    /// that finds none open.
    ///
    /// ```
    /// use ratelimit_core::algorithm::{fixed_window::FixedWindow, Algorithm};
    /// let fw = FixedWindow::first(2, 1_000_000).unwrap();
    /// // 0.8 s into an epoch-aligned second: this window lasts a whole second.
    /// let d = fw.decide(None, 5_800_000, 1).unwrap().decision;
    /// assert_eq!((d.limited, d.remaining, d.reset_after_us), (false, 1, 1_000_000));
    /// ```
    pub fn first(limit: i64, window_us: i64) -> Result<Self> {
        Self::new(limit, window_us)?.aligned_first()
    }

    /// This limiter with `ALIGN FIRST`.
    ///
    /// Errors: [`Error::AlignFirstCalendar`] for a calendar window.
    pub fn aligned_first(self) -> Result<Self> {
        if self.calendar.is_some() {
            return Err(Error::AlignFirstCalendar);
        }
        Ok(Self {
            align: Align::First,
            ..self
        })
    }

    /// Where this limiter's windows start.
    pub fn align(&self) -> Align {
        self.align
    }

    /// The window that counts at `now_us` for `state` (its start and count):
    /// the stored one while it is open (or when it lies ahead of now: the
    /// clock stepped back), else a new one with the stored window's debt
    /// carried in (nothing, unless `FORCE` counted past the limit).
    ///
    /// Errors: [`Error::AlignMismatch`] for a state of the other alignment.
    #[inline(always)]
    fn counted(&self, state: Option<WindowCount>, now_us: i64) -> Result<(i64, i64, i64, bool)> {
        let (start_us, count, end_us) = self.counted_window(state, now_us)?;
        // In debt: a stored debt's own window, or a debt carried in.
        let debt = state.is_some_and(|s| s.debt) && count > self.limit;
        Ok((start_us, count, end_us, debt))
    }

    /// [`Self::counted`]'s window of seconds: its start and count.
    #[inline(always)]
    fn counted_seconds(&self, state: Option<WindowCount>, now_us: i64) -> Result<(i64, i64)> {
        let first = self.align == Align::First;
        if let Some(s) = state {
            if s.first != first {
                return Err(Error::AlignMismatch {
                    stored: if s.first { "FIRST" } else { "EPOCH" },
                });
            }
        }
        Ok(match (self.align, state) {
            // The clock stepped back: the stored (later) window keeps counting.
            (_, Some(s)) if s.window_start_us > now_us => (s.window_start_us, s.count),
            (Align::Epoch, _) => {
                let current_start_us = window_start(now_us, self.window_us)?;
                match state {
                    Some(s) if s.window_start_us == current_start_us => (current_start_us, s.count),
                    Some(s) => (current_start_us, self.carried(s, current_start_us)),
                    None => (current_start_us, 0),
                }
            }
            (Align::First, Some(s))
                if s.window_start_us
                    .checked_add(self.window_us)
                    .is_some_and(|end| now_us < end) =>
            {
                (s.window_start_us, s.count)
            }
            (Align::First, Some(s)) => {
                // The window of the stored one's chain that holds now.
                let windows = (now_us - s.window_start_us) / self.window_us; // ≥ 1
                let start_us = s.window_start_us + windows * self.window_us; // ≤ now
                match self.carried(s, start_us) {
                    0 => (now_us, 0),
                    debt => (start_us, debt),
                }
            }
            (Align::First, None) => (now_us, 0),
        })
    }

    /// The window that counts at `now_us` (its start, count and end): for a
    /// calendar window, the one of its boundaries (or a stored later one:
    /// the clock stepped back); else [`FixedWindow::counted_seconds`]'s,
    /// `window` long.
    #[inline(always)]
    fn counted_window(&self, state: Option<WindowCount>, now_us: i64) -> Result<(i64, i64, i64)> {
        match self.calendar {
            None => {
                let (start_us, count) = self.counted_seconds(state, now_us)?;
                let end_us = start_us
                    .checked_add(self.window_us)
                    .ok_or(Error::Overflow)?;
                Ok((start_us, count, end_us))
            }
            Some(calendar) => counted_calendar(calendar, state, now_us),
        }
    }
}

/// [`FixedWindow::counted_window`] of a calendar window (aligned to its
/// boundaries: a state of `ALIGN FIRST` is the other alignment's).
#[inline(never)]
fn counted_calendar(
    calendar: Calendar,
    state: Option<WindowCount>,
    now_us: i64,
) -> Result<(i64, i64, i64)> {
    if state.is_some_and(|s| s.first) {
        return Err(Error::AlignMismatch { stored: "FIRST" });
    }
    match state {
        // The clock stepped back: the stored (later) window keeps counting.
        Some(s) if s.window_start_us > now_us => {
            let end_us = calendar.window_us(s.window_start_us)?.1;
            Ok((s.window_start_us, s.count, end_us))
        }
        _ => {
            let (start_us, end_us) = calendar.window_us(now_us)?;
            let count = match state {
                Some(s) if s.window_start_us == start_us => s.count,
                _ => 0,
            };
            Ok((start_us, count, end_us))
        }
    }
}

impl Algorithm for FixedWindow {
    type State = WindowCount;

    /// The window's start.
    fn latest_us(state: &WindowCount) -> i64 {
        state.window_start_us
    }

    fn decode(bytes: &[u8]) -> Option<WindowCount> {
        let (first, bytes) = match bytes.strip_prefix(b"F") {
            Some(rest) => (true, rest),
            None => (false, bytes),
        };
        // Digits end a state not in debt: one comparison on the common path.
        let (debt, bytes) = match bytes.last() {
            Some(b'D') => (true, bytes.strip_suffix(b":D")?),
            _ => (false, bytes),
        };
        let colon = bytes.iter().position(|&b| b == b':')?;
        Some(WindowCount {
            window_start_us: parse_decimal(&bytes[..colon])?,
            count: parse_decimal(&bytes[colon + 1..])?,
            first,
            debt,
        })
    }

    fn encode(s: &WindowCount, buf: &mut [u8; STATE_BUF_LEN]) -> usize {
        let start = usize::from(s.first);
        if s.first {
            buf[0] = b'F';
        }
        let end = write_decimal(s.window_start_us, buf, start);
        buf[end] = b':';
        let end = write_decimal(s.count, buf, end + 1);
        if !s.debt {
            return end;
        }
        buf[end..end + 2].copy_from_slice(b":D");
        end + 2
    }

    fn decide(
        &self,
        state: Option<WindowCount>,
        now_us: i64,
        cost: i64,
    ) -> Result<Outcome<WindowCount>> {
        let (start_us, count, window_end_us, debt) = self.counted(state, now_us)?;
        if debt {
            return self.decide_in_debt(start_us, count, now_us, cost);
        }
        let to_end_us = sub(window_end_us, now_us)?;
        let decision = |limited, count: i64, retry_after_us| Decision {
            limited,
            limit: self.limit,
            remaining: (self.limit - count).max(0),
            retry_after_us,
            reset_after_us: if count > 0 { to_end_us } else { 0 },
        };
        if cost > self.limit {
            return Ok(Outcome {
                decision: decision(true, count, None),
                update: None,
            });
        }
        let new_count = count.saturating_add(cost);
        if new_count > self.limit {
            // The cost fits in a fresh window: retry when the next one starts.
            return Ok(Outcome {
                decision: decision(true, count, Some(to_end_us)),
                update: None,
            });
        }
        Ok(Outcome {
            decision: decision(false, new_count, None),
            update: (cost > 0).then_some(Update {
                state: WindowCount {
                    window_start_us: start_us,
                    count: new_count,
                    first: self.align == Align::First,
                    debt: false,
                },
                expire_at_us: window_end_us,
            }),
        })
    }

    /// The window counts `cost` past its limit (`FORCE`); the count beyond
    /// the limit is carried into the next windows, each repaying `limit`,
    /// and the key expires when it is all repaid.
    fn charge(
        &self,
        state: Option<WindowCount>,
        now_us: i64,
        cost: i64,
    ) -> Result<Update<WindowCount>> {
        let (start_us, count, end_us, _) = self.counted(state, now_us)?;
        // Counts stay below 2^53, as the Functions library's exact integers
        // do: the same forced cost is refused by both engines.
        let new_count = count
            .checked_add(cost.max(0))
            .filter(|&c| c < EXACT_LIMIT)
            .ok_or(Error::ForceTooMuch {
                why: crate::error::FORCE_PAST_HORIZON,
            })?;
        // A calendar window's count past the limit lasts to its end: its
        // windows are of several lengths, no debt is carried over them.
        let debt = new_count > self.limit && self.calendar.is_none();
        let expire_at_us = if debt {
            self.repaid_at(start_us, new_count, true)
                .map_err(|_| Error::ForceTooMuch {
                    why: crate::error::FORCE_PAST_HORIZON,
                })?
        } else {
            end_us
        };
        Ok(Update {
            state: WindowCount {
                window_start_us: start_us,
                count: new_count,
                first: self.align == Align::First,
                debt,
            },
            expire_at_us,
        })
    }

    /// The counted window's count drops by `tokens`, not below 0 (the key is
    /// deleted then). A stored window that is over counts nothing.
    fn refund(
        &self,
        state: Option<WindowCount>,
        now_us: i64,
        tokens: i64,
    ) -> Result<Refunded<WindowCount>> {
        let Some(s) = state else {
            return refunded(self, None, now_us, RefundWrite::Nothing);
        };
        let (start_us, count, end_us, debt) = self.counted(Some(s), now_us)?;
        let new_count = count.saturating_sub(tokens.max(0)).max(0);
        let debt = debt && new_count > self.limit;
        if new_count == 0 {
            return refunded(self, None, now_us, RefundWrite::Delete);
        }
        let new_state = WindowCount {
            window_start_us: start_us,
            count: new_count,
            debt,
            ..s
        };
        let write = RefundWrite::Set(Update {
            state: new_state,
            expire_at_us: if debt {
                self.repaid_at(start_us, new_count, true)?
            } else {
                end_us
            },
        });
        refunded(self, Some(new_state), now_us, write)
    }
}

mod debt;
#[cfg(test)]
mod tests;
