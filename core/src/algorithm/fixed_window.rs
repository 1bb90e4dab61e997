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
//! **`ALIGN FIRST`** ([`FixedWindow::first`]): a window starts at the first
//! request that finds no open window and lasts `window` — the "time-bucketed"
//! counter of the GCRA seed document (set the limit with an expiry at the
//! first request, count down, refuse below zero), and the fixed window of
//! rate-limiter-flexible and `limits`. Its stored value is
//! `F<window_start_us>:<count>`: the `F` says which alignment wrote it, and a
//! key is never read with the other one ([`Error::AlignMismatch`]).

use super::{
    check_limit_and_window, parse_decimal, refunded, sub, window_start, write_decimal, Algorithm,
    Decision, Outcome, RefundWrite, Refunded, Update, STATE_BUF_LEN,
};
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
    window_us: i64,
    align: Align,
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
    pub fn new(limit: i64, window_us: i64) -> Result<Self> {
        check_limit_and_window(limit, window_us)?;
        Ok(Self {
            limit,
            window_us,
            align: Align::Epoch,
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
        Ok(Self {
            align: Align::First,
            ..Self::new(limit, window_us)?
        })
    }

    /// This limiter with `ALIGN FIRST`.
    pub fn aligned_first(self) -> Self {
        Self {
            align: Align::First,
            ..self
        }
    }

    /// Where this limiter's windows start.
    pub fn align(&self) -> Align {
        self.align
    }

    /// The window that counts at `now_us` for `state` (its start and count):
    /// the stored one while it is open (or when it lies ahead of now: the
    /// clock stepped back), else a new one with nothing counted.
    ///
    /// Errors: [`Error::AlignMismatch`] for a state of the other alignment.
    fn counted(&self, state: Option<WindowCount>, now_us: i64) -> Result<(i64, i64)> {
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
                    _ => (current_start_us, 0),
                }
            }
            (Align::First, Some(s))
                if s.window_start_us
                    .checked_add(self.window_us)
                    .is_some_and(|end| now_us < end) =>
            {
                (s.window_start_us, s.count)
            }
            (Align::First, _) => (now_us, 0),
        })
    }
}

impl Algorithm for FixedWindow {
    type State = WindowCount;

    fn decode(bytes: &[u8]) -> Option<WindowCount> {
        let (first, bytes) = match bytes.strip_prefix(b"F") {
            Some(rest) => (true, rest),
            None => (false, bytes),
        };
        let colon = bytes.iter().position(|&b| b == b':')?;
        Some(WindowCount {
            window_start_us: parse_decimal(&bytes[..colon])?,
            count: parse_decimal(&bytes[colon + 1..])?,
            first,
        })
    }

    fn encode(s: &WindowCount, buf: &mut [u8; STATE_BUF_LEN]) -> usize {
        let start = usize::from(s.first);
        if s.first {
            buf[0] = b'F';
        }
        let end = write_decimal(s.window_start_us, buf, start);
        buf[end] = b':';
        write_decimal(s.count, buf, end + 1)
    }

    fn decide(
        &self,
        state: Option<WindowCount>,
        now_us: i64,
        cost: i64,
    ) -> Result<Outcome<WindowCount>> {
        let (start_us, count) = self.counted(state, now_us)?;
        let window_end_us = start_us
            .checked_add(self.window_us)
            .ok_or(Error::Overflow)?;
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
                },
                expire_at_us: window_end_us,
            }),
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
        let (start_us, count) = self.counted(Some(s), now_us)?;
        let count = if start_us == s.window_start_us {
            count
        } else {
            0
        };
        let new_count = count.saturating_sub(tokens.max(0)).max(0);
        if new_count == 0 {
            return refunded(self, None, now_us, RefundWrite::Delete);
        }
        let new_state = WindowCount {
            count: new_count,
            ..s
        };
        let expire_at_us = s
            .window_start_us
            .checked_add(self.window_us)
            .ok_or(Error::Overflow)?;
        let write = RefundWrite::Set(Update {
            state: new_state,
            expire_at_us,
        });
        refunded(self, Some(new_state), now_us, write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::algorithm::table::{run, MS, S, T0};

    #[test]
    fn a_refund_lowers_the_current_windows_count() {
        let fw = FixedWindow::new(5, S).unwrap();
        let s = WindowCount {
            window_start_us: T0,
            count: 4,
            first: false,
        };
        let r = fw.refund(Some(s), T0 + 200 * MS, 3).unwrap();
        let back = WindowCount {
            window_start_us: T0,
            count: 1,
            first: false,
        };
        assert_eq!(
            r.write,
            RefundWrite::Set(Update {
                state: back,
                expire_at_us: T0 + S
            })
        );
        assert_eq!(
            (
                r.decision.limited,
                r.decision.remaining,
                r.decision.retry_after_us,
                r.decision.reset_after_us
            ),
            (false, 4, None, 800 * MS)
        );
        assert_eq!(
            fw.refund(Some(s), T0, 9).unwrap().write,
            RefundWrite::Delete
        );
        // A window that is over has nothing to give back.
        assert_eq!(
            fw.refund(Some(s), T0 + S, 1).unwrap().write,
            RefundWrite::Delete
        );
        assert_eq!(fw.refund(None, T0, 1).unwrap().write, RefundWrite::Nothing);
    }

    #[test]
    fn admits_the_edge_burst_of_two_windows() {
        // 2 per 1 s: two at 0.8 s and two at 1.1 s are all admitted.
        run(
            &FixedWindow::new(2, S).unwrap(),
            &[
                (800 * MS, 1, false, 1, None, 200 * MS),
                (800 * MS, 1, false, 0, None, 200 * MS),
                (900 * MS, 1, true, 0, Some(100 * MS), 100 * MS),
                (1_100 * MS, 1, false, 1, None, 900 * MS),
                (1_100 * MS, 1, false, 0, None, 900 * MS),
                (1_999 * MS, 1, true, 0, Some(MS), MS),
            ],
        );
    }

    #[test]
    fn align_first_windows_start_at_the_first_request() {
        // 2 per 1 s, first request 0.8 s into an epoch second: the window is
        // [0.8 s, 1.8 s); the next one opens at the first request after it.
        run(
            &FixedWindow::first(2, S).unwrap(),
            &[
                (800 * MS, 1, false, 1, None, S),
                (900 * MS, 1, false, 0, None, 900 * MS),
                (1_100 * MS, 1, true, 0, Some(700 * MS), 700 * MS),
                (1_799 * MS, 1, true, 0, Some(MS), MS),
                (1_800 * MS, 1, false, 1, None, S),
                (2_500 * MS, 1, false, 0, None, 300 * MS),
                (2_500 * MS, 3, true, 0, None, 300 * MS),
                (4 * S, 2, false, 0, None, S),
            ],
        );
    }

    #[test]
    fn aligned_first_is_first() {
        let epoch = FixedWindow::new(2, S).unwrap();
        assert_eq!(epoch.align(), Align::Epoch);
        assert_eq!(epoch.aligned_first(), FixedWindow::first(2, S).unwrap());
        assert_eq!(epoch.aligned_first().align(), Align::First);
    }

    #[test]
    fn a_stored_start_at_now_off_the_window_grid_starts_afresh() {
        // Written with another window length: the stored window starts now,
        // but not where a 1 s window starts, so it is not counted.
        let fw = FixedWindow::new(2, S).unwrap();
        let s = WindowCount {
            window_start_us: T0 + 500 * MS,
            count: 2,
            first: false,
        };
        let d = fw.decide(Some(s), T0 + 500 * MS, 1).unwrap().decision;
        assert_eq!((d.limited, d.remaining), (false, 1));
    }

    #[test]
    fn a_key_is_never_read_with_the_other_alignment() {
        let epoch = FixedWindow::new(5, S).unwrap();
        let first = FixedWindow::first(5, S).unwrap();
        let e = epoch.decide(None, T0, 1).unwrap().update.unwrap().state;
        let f = first.decide(None, T0, 1).unwrap().update.unwrap().state;
        assert_eq!(
            first.decide(Some(e), T0, 1),
            Err(Error::AlignMismatch { stored: "EPOCH" })
        );
        assert_eq!(
            epoch.decide(Some(f), T0, 1),
            Err(Error::AlignMismatch { stored: "FIRST" })
        );
        assert_eq!(
            epoch.refund(Some(f), T0, 1),
            Err(Error::AlignMismatch { stored: "FIRST" })
        );
        let mut buf = [0u8; STATE_BUF_LEN];
        let n = FixedWindow::encode(&f, &mut buf);
        assert_eq!(&buf[..n], format!("F{T0}:1").as_bytes());
        assert_eq!(FixedWindow::decode(&buf[..n]), Some(f));
        for bad in [&b"F"[..], b"F:1", b"FF1:1", b"f1:1", b"F-1:1"] {
            assert_eq!(FixedWindow::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn align_first_refunds_lower_the_open_windows_count() {
        let first = FixedWindow::first(5, S).unwrap();
        let s = first.decide(None, T0, 4).unwrap().update.unwrap().state;
        let r = first.refund(Some(s), T0 + 300 * MS, 3).unwrap();
        assert_eq!(
            r.write,
            RefundWrite::Set(Update {
                state: WindowCount { count: 1, ..s },
                expire_at_us: T0 + S
            })
        );
        assert_eq!(r.decision.remaining, 4);
        assert_eq!(
            first.refund(Some(s), T0 + S, 1).unwrap().write,
            RefundWrite::Delete
        );
    }

    #[test]
    fn costs_count_and_a_cost_above_the_limit_is_never_allowed() {
        run(
            &FixedWindow::new(5, S).unwrap(),
            &[
                (0, 6, true, 5, None, 0),
                (0, 3, false, 2, None, S),
                (10 * MS, 3, true, 2, Some(990 * MS), 990 * MS),
                (10 * MS, 6, true, 2, None, 990 * MS),
                (10 * MS, 2, false, 0, None, 990 * MS),
            ],
        );
    }

    #[test]
    fn a_count_from_another_window_is_never_reused() {
        let fw = FixedWindow::new(1, 1_500).unwrap(); // 1.5 ms windows
        let s = fw.decide(None, 0, 1).unwrap().update.unwrap();
        assert_eq!(s.expire_at_us, 1_500);
        // At 1.5 ms the key may still be readable (ms expiry): a new window.
        assert!(!fw.decide(Some(s.state), 1_500, 1).unwrap().decision.limited);
        assert!(fw.decide(Some(s.state), 1_499, 1).unwrap().decision.limited);
    }

    #[test]
    fn changing_the_window_of_a_key_starts_a_new_window_not_a_far_future_one() {
        // Written with 1 s windows, read with 60 s ones.
        let one_second = FixedWindow::new(2, S).unwrap();
        let s = one_second
            .decide(None, T0 + 37 * S, 2)
            .unwrap()
            .update
            .unwrap()
            .state;
        let minute = FixedWindow::new(2, 60 * S).unwrap();
        let out = minute.decide(Some(s), T0 + 37 * S + 500 * MS, 1).unwrap();
        assert!(!out.decision.limited);
        assert_eq!(out.decision.reset_after_us, 60 * S - 37 * S - 500 * MS);
        assert_eq!(out.update.unwrap().expire_at_us, T0 + 60 * S);
    }

    #[test]
    fn clock_stepping_back_keeps_counting_the_later_window() {
        let fw = FixedWindow::new(2, S).unwrap();
        let s = fw
            .decide(None, T0 + 5 * S, 2)
            .unwrap()
            .update
            .unwrap()
            .state;
        let d = fw.decide(Some(s), T0, 1).unwrap().decision;
        assert!(d.limited);
        assert_eq!((d.retry_after_us, d.reset_after_us), (Some(6 * S), 6 * S));
    }

    #[test]
    fn state_codec_round_trips_and_rejects_foreign_values() {
        let mut buf = [0u8; STATE_BUF_LEN];
        let s = WindowCount {
            window_start_us: 1_763_700_000_000_000,
            count: 42,
            first: false,
        };
        let n = FixedWindow::encode(&s, &mut buf);
        assert_eq!(&buf[..n], b"1763700000000000:42");
        assert_eq!(FixedWindow::decode(&buf[..n]), Some(s));
        for bad in [
            &b"42"[..],
            b"",
            b":",
            b"1:",
            b":1",
            b"1:2:3",
            b"a:1",
            b"-1:1",
        ] {
            assert_eq!(FixedWindow::decode(bad), None, "{bad:?}");
        }
    }
}
