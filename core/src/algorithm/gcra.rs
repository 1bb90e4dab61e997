//! The Generic Cell Rate Algorithm (GCRA), virtual-scheduling form.
//!
//! Source: ITU-T Recommendation I.371, *Traffic control and congestion control
//! in B-ISDN*, Annex A (the virtual scheduling algorithm), with the parameters
//! and reply of brandur's redis-cell and of the `GCRA` command added to Redis
//! 8.8:
//!
//! * `limit = max_burst + 1` — the most tokens that can be taken at once;
//! * emission interval `T = period / tokens_per_period`, rounded to the nearest
//!   µs — the steady-state spacing between two tokens;
//! * delay variation tolerance `τ = T × limit` — how far ahead of `now` the
//!   schedule may run;
//! * state: the theoretical arrival time (TAT), the instant at which the
//!   limiter is full again. No key means `TAT ≤ now`.
//!
//! A request of `n` tokens at `now` is allowed when
//! `max(TAT, now) + n·T − τ ≤ now`; it then moves the TAT to
//! `max(TAT, now) + n·T`. A refused request leaves the TAT alone. The key
//! expires at the TAT, when its state becomes equal to "no key".
//!
//! The stored value is the TAT as a decimal integer of µs since the Unix epoch.

use super::{
    parse_decimal, refunded, write_decimal, Algorithm, Decision, Outcome, RefundWrite, Refunded,
    Update, STATE_BUF_LEN,
};
use crate::error::{Error, Result};

/// GCRA parameters, validated. Build with [`Gcra::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    emission_interval_us: i64,
    limit: i64,
    delay_variation_tolerance_us: i64,
}

impl Gcra {
    /// Validates the parameters of `RL.GCRA key max_burst tokens_per_period period`.
    ///
    /// * `max_burst` ≥ 0: tokens that may be taken at once beyond the first;
    /// * `tokens_per_period` ≥ 1 tokens refill every `period_us` µs (≥ 1);
    /// * the emission interval `period_us / tokens_per_period` is rounded to
    ///   the nearest µs (halves up), as Redis's `GCRA` command does.
    ///
    /// Errors: [`Error::OutOfRange`] for a bound; [`Error::RateTooHigh`] when
    /// `tokens_per_period > period_us` (more than one token per µs);
    /// [`Error::BadPeriod`] for a period over 366 days;
    /// [`Error::RefillTooLong`] when `τ = T × (max_burst + 1)` (how far ahead
    /// the TAT, and the key's expiry, can lie) is over 366 days;
    /// [`Error::Overflow`] when `max_burst + 1` does not fit in `i64`.
    ///
    /// ```
    /// use ratelimit_core::algorithm::gcra::Gcra;
    /// // 10 tokens per second with bursts of 4 more: T = 100 ms, τ = 500 ms.
    /// let gcra = Gcra::new(4, 10, 1_000_000).unwrap();
    /// assert_eq!(gcra.emission_interval_us(), 100_000);
    /// assert_eq!(gcra.delay_variation_tolerance_us(), 500_000);
    /// assert_eq!(gcra.limit(), 5);
    /// ```
    #[inline]
    pub fn new(max_burst: i64, tokens_per_period: i64, period_us: i64) -> Result<Self> {
        Self::with_names(
            max_burst,
            tokens_per_period,
            period_us,
            ["max_burst", "tokens_per_period"],
        )
    }

    /// [`Gcra::new`] with the argument names used in error messages
    /// (`CL.THROTTLE` calls its second parameter `count_per_period`).
    pub fn with_names(
        max_burst: i64,
        tokens_per_period: i64,
        period_us: i64,
        names: [&'static str; 2],
    ) -> Result<Self> {
        if max_burst < 0 {
            return Err(Error::OutOfRange {
                arg: names[0],
                bound: ">= 0",
            });
        }
        if tokens_per_period < 1 {
            return Err(Error::OutOfRange {
                arg: names[1],
                bound: ">= 1",
            });
        }
        if !(1..=crate::time::MAX_PERIOD_US).contains(&period_us) {
            return Err(Error::BadPeriod { arg: "period" });
        }
        if tokens_per_period > period_us {
            return Err(Error::RateTooHigh { arg: names[1] });
        }
        let quotient = period_us / tokens_per_period;
        let rest = period_us % tokens_per_period;
        // Round half up without overflow: rest ≥ tokens_per_period / 2.
        let emission_interval_us = quotient + i64::from(rest >= tokens_per_period - rest);
        let limit = max_burst.checked_add(1).ok_or(Error::Overflow)?;
        let delay_variation_tolerance_us = emission_interval_us
            .checked_mul(limit)
            .ok_or(Error::RefillTooLong)?;
        // The TAT lies at most τ ahead: the key expires within it.
        if delay_variation_tolerance_us > crate::time::MAX_PERIOD_US {
            return Err(Error::RefillTooLong);
        }
        Ok(Self {
            emission_interval_us,
            limit,
            delay_variation_tolerance_us,
        })
    }

    /// The emission interval `T`, in µs.
    pub fn emission_interval_us(&self) -> i64 {
        self.emission_interval_us
    }

    /// The delay variation tolerance `τ = T × limit`, in µs.
    pub fn delay_variation_tolerance_us(&self) -> i64 {
        self.delay_variation_tolerance_us
    }

    /// `max_burst + 1`.
    pub fn limit(&self) -> i64 {
        self.limit
    }

    /// Tokens available when the schedule runs `ttl_us` ahead of now.
    fn remaining(&self, ttl_us: i64) -> i64 {
        // ttl ≥ 0 and ≤ τ except after the clock stepped back; clamp at 0.
        ((self.delay_variation_tolerance_us - ttl_us) / self.emission_interval_us).max(0)
    }
}

impl Algorithm for Gcra {
    /// The theoretical arrival time, µs since the Unix epoch.
    type State = i64;

    /// The TAT.
    fn latest_us(tat_us: &i64) -> i64 {
        *tat_us
    }

    fn decode(bytes: &[u8]) -> Option<i64> {
        parse_decimal(bytes)
    }

    fn encode(tat_us: &i64, buf: &mut [u8; STATE_BUF_LEN]) -> usize {
        write_decimal(*tat_us, buf, 0)
    }

    /// Decides `cost` tokens at `now_us`. `cost` 0 reads the state without
    /// consuming (nothing is written). A cost above the limit is refused with
    /// `retry_after_us = None`: it can never be allowed.
    fn decide(&self, tat_us: Option<i64>, now_us: i64, cost: i64) -> Result<Outcome<i64>> {
        let tat_us = tat_us.map_or(now_us, |t| t.max(now_us));
        // The schedule's lead over now; > τ only after the clock stepped back.
        let ttl_us = tat_us.checked_sub(now_us).ok_or(Error::Overflow)?;
        let refuse = |retry_after_us| Outcome {
            decision: Decision {
                limited: true,
                limit: self.limit,
                remaining: self.remaining(ttl_us),
                retry_after_us,
                reset_after_us: ttl_us,
            },
            update: None,
        };
        if cost > self.limit {
            return Ok(refuse(None));
        }
        // cost ≤ limit, so the increment ≤ τ, which fits.
        let increment_us = self.emission_interval_us * cost.max(0);
        let new_tat_us = tat_us.checked_add(increment_us).ok_or(Error::Overflow)?;
        // Allowed when new_tat − τ ≤ now, i.e. new_tat − now ≤ τ.
        let new_ttl_us = new_tat_us.checked_sub(now_us).ok_or(Error::Overflow)?;
        if new_ttl_us > self.delay_variation_tolerance_us {
            return Ok(refuse(Some(new_ttl_us - self.delay_variation_tolerance_us)));
        }
        Ok(Outcome {
            decision: Decision {
                limited: false,
                limit: self.limit,
                remaining: self.remaining(new_ttl_us),
                retry_after_us: None,
                reset_after_us: new_ttl_us,
            },
            // A zero-cost request changes nothing.
            update: (increment_us > 0).then_some(Update {
                state: new_tat_us,
                expire_at_us: new_tat_us,
            }),
        })
    }

    /// Moves the TAT `tokens`·T earlier, not before now; a TAT at or before
    /// now is a full limiter: the key is deleted.
    fn refund(&self, tat_us: Option<i64>, now_us: i64, tokens: i64) -> Result<Refunded<i64>> {
        let Some(tat_us) = tat_us else {
            return refunded(self, None, now_us, RefundWrite::Nothing);
        };
        let back_us = self.emission_interval_us.saturating_mul(tokens.max(0));
        let new_tat_us = tat_us.saturating_sub(back_us).max(now_us);
        if new_tat_us <= now_us {
            return refunded(self, None, now_us, RefundWrite::Delete);
        }
        let write = RefundWrite::Set(Update {
            state: new_tat_us,
            expire_at_us: new_tat_us,
        });
        refunded(self, Some(new_tat_us), now_us, write)
    }

    /// The TAT moves `cost`·T ahead whatever τ says (`FORCE`); the key
    /// expires at the new TAT.
    fn charge(&self, tat_us: Option<i64>, now_us: i64, cost: i64) -> Result<Update<i64>> {
        let tat_us = tat_us.map_or(now_us, |t| t.max(now_us));
        let new_tat_us = self
            .emission_interval_us
            .checked_mul(cost.max(0))
            .and_then(|increment| tat_us.checked_add(increment))
            .ok_or(Error::ForceTooMuch {
                why: crate::error::FORCE_PAST_HORIZON,
            })?;
        Ok(Update {
            state: new_tat_us,
            expire_at_us: new_tat_us,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::algorithm::table::{run, MS, S, T0};

    #[test]
    fn a_refund_moves_the_tat_back_never_before_now() {
        // max_burst 4, 10 per second: T = 100 ms.
        let gcra = Gcra::new(4, 10, S).unwrap();
        let tat = T0 + 300 * MS; // three tokens taken at T0
        let r = gcra.refund(Some(tat), T0, 2).unwrap();
        assert_eq!(
            r.write,
            RefundWrite::Set(Update {
                state: T0 + 100 * MS,
                expire_at_us: T0 + 100 * MS
            })
        );
        assert_eq!(
            (
                r.decision.limited,
                r.decision.remaining,
                r.decision.retry_after_us
            ),
            (false, 4, None)
        );
        assert_eq!(r.decision.reset_after_us, 100 * MS);
        // Giving back more than was taken stops at full: the key goes.
        let r = gcra.refund(Some(tat), T0, 9).unwrap();
        assert_eq!(r.write, RefundWrite::Delete);
        assert_eq!((r.decision.remaining, r.decision.reset_after_us), (5, 0));
        // A missing key changes nothing and reads full.
        let r = gcra.refund(None, T0, 1).unwrap();
        assert_eq!((r.write, r.decision.remaining), (RefundWrite::Nothing, 5));
        // Taking back what was refunded gives the same answer as before.
        let before = gcra.decide(Some(tat), T0, 1).unwrap();
        let RefundWrite::Set(u) = gcra.refund(Some(tat), T0, 1).unwrap().write else {
            panic!("expected a write")
        };
        let again = gcra.decide(Some(u.state), T0, 1).unwrap();
        assert_eq!(again.decision.remaining, before.decision.remaining + 1);
    }

    #[test]
    fn a_forced_cost_moves_the_tat_past_the_tolerance() {
        use crate::algorithm::table::run_forced;
        // Limit 5, 10 per second: T = 100 ms, τ = 500 ms.
        let gcra = Gcra::new(4, 10, S).unwrap();
        run_forced(
            &gcra,
            &[
                // It fits: an ordinary admission.
                (0, 3, true, false, 2, None, 300 * MS),
                // It does not: the TAT 800 ms ahead, 300 ms past τ; one
                // more token is admitted when it is 400 ms ahead.
                (0, 5, true, true, 0, Some(400 * MS), 800 * MS),
                // Unforced calls are refused with that same retry…
                (0, 1, false, true, 0, Some(400 * MS), 800 * MS),
                (399 * MS, 1, false, true, 0, Some(MS), 401 * MS),
                // … and admitted then, not a µs earlier.
                (400 * MS, 1, false, false, 0, None, 500 * MS),
                // A cost above the limit is recorded too.
                (400 * MS, 6, true, true, 0, Some(700 * MS), 1_100 * MS),
            ],
        );
        // Past the 366-day horizon: an error, nothing recorded.
        let slow = Gcra::new(0, 1, crate::time::MAX_PERIOD_US).unwrap();
        assert_eq!(
            crate::algorithm::forced(&slow, None, T0, 2),
            Err(Error::ForceTooMuch {
                why: crate::error::FORCE_PAST_HORIZON
            })
        );
        assert!(crate::algorithm::forced(&slow, None, T0, 1).is_ok());
        assert_eq!(
            crate::algorithm::forced(&gcra, None, T0, i64::MAX),
            Err(Error::ForceTooMuch {
                why: crate::error::FORCE_PAST_HORIZON
            })
        );
    }

    #[test]
    fn burst_of_five_then_limited_then_refilled() {
        // max_burst 4, 10 per second: T = 100 ms, limit 5.
        let gcra = Gcra::new(4, 10, S).unwrap();
        run(
            &gcra,
            &[
                (0, 1, false, 4, None, 100 * MS),
                (0, 1, false, 3, None, 200 * MS),
                (0, 1, false, 2, None, 300 * MS),
                (0, 1, false, 1, None, 400 * MS),
                (0, 1, false, 0, None, 500 * MS),
                (0, 1, true, 0, Some(100 * MS), 500 * MS),
                // 100 ms later exactly one token is back.
                (100 * MS, 1, false, 0, None, 500 * MS),
                (100 * MS, 1, true, 0, Some(100 * MS), 500 * MS),
                // Part-way: the retry shrinks with time.
                (130 * MS, 1, true, 0, Some(70 * MS), 470 * MS),
                // After a full reset the whole burst is back.
                (700 * MS, 5, false, 0, None, 500 * MS),
            ],
        );
    }

    #[test]
    fn matches_redis_cells_decision_table() {
        // redis-cell's own `it_rate_limits` cases: limit 5 (max_burst 4), 1 per second.
        let gcra = Gcra::new(4, 1, S).unwrap();
        let never = None;
        run(
            &gcra,
            &[
                (0, 6, true, 5, never, 0),
                (0, 1, false, 4, None, S),
                (0, 1, false, 3, None, 2 * S),
                (0, 1, false, 2, None, 3 * S),
                (0, 1, false, 1, None, 4 * S),
                (0, 1, false, 0, None, 5 * S),
                (0, 1, true, 0, Some(S), 5 * S),
                (3_000 * MS, 1, false, 2, None, 3_000 * MS),
                (3_100 * MS, 1, false, 1, None, 3_900 * MS),
                (4_000 * MS, 1, false, 1, None, 4_000 * MS),
                (8_000 * MS, 1, false, 4, None, 1_000 * MS),
                (9_500 * MS, 1, false, 4, None, 1_000 * MS),
                (9_500 * MS, 0, false, 4, None, S),
                (9_500 * MS, 2, false, 2, None, 3 * S),
                (9_500 * MS, 5, true, 2, Some(3 * S), 3 * S),
            ],
        );
    }

    #[test]
    fn costs_above_the_limit_can_never_be_allowed() {
        let gcra = Gcra::new(4, 10, S).unwrap();
        run(
            &gcra,
            &[
                (0, 6, true, 5, None, 0),
                (0, 5, false, 0, None, 500 * MS),
                (0, 6, true, 0, None, 500 * MS),
            ],
        );
    }

    #[test]
    fn zero_cost_reads_without_consuming() {
        let gcra = Gcra::new(4, 10, S).unwrap();
        run(
            &gcra,
            &[
                (0, 0, false, 5, None, 0),
                (0, 2, false, 3, None, 200 * MS),
                (50 * MS, 0, false, 3, None, 150 * MS),
            ],
        );
    }

    #[test]
    fn emission_interval_rounds_to_the_nearest_microsecond() {
        let cases = [
            (1, 3, 0),  // 1/3 µs: more than one token per µs
            (3, 1, 3),  // exact
            (10, 3, 3), // 3.33 → 3
            (5, 2, 3),  // 2.5 → 3 (halves up)
            (1_000_000, 3, 333_333),
            (2_000_000, 3, 666_667),
            (crate::time::MAX_PERIOD_US, 1, crate::time::MAX_PERIOD_US),
            (
                crate::time::MAX_PERIOD_US - 1,
                2,
                crate::time::MAX_PERIOD_US / 2,
            ),
        ];
        for (period_us, tokens, want) in cases {
            match Gcra::new(0, tokens, period_us) {
                Ok(g) => assert_eq!(g.emission_interval_us(), want, "{period_us}/{tokens}"),
                Err(e) => assert_eq!(
                    (want, e),
                    (
                        0,
                        Error::RateTooHigh {
                            arg: "tokens_per_period"
                        }
                    )
                ),
            }
        }
    }

    #[test]
    fn parameters_are_validated() {
        assert_eq!(
            Gcra::new(-1, 1, S),
            Err(Error::OutOfRange {
                arg: "max_burst",
                bound: ">= 0"
            })
        );
        assert_eq!(
            Gcra::new(0, 0, S),
            Err(Error::OutOfRange {
                arg: "tokens_per_period",
                bound: ">= 1"
            })
        );
        assert_eq!(
            Gcra::new(0, -5, S),
            Err(Error::OutOfRange {
                arg: "tokens_per_period",
                bound: ">= 1"
            })
        );
        assert_eq!(
            Gcra::new(0, 2, 1),
            Err(Error::RateTooHigh {
                arg: "tokens_per_period"
            })
        );
        // τ = T × (max_burst + 1) must be at most 366 days, and never wraps.
        assert_eq!(Gcra::new(i64::MAX, 1, S), Err(Error::Overflow));
        assert_eq!(Gcra::new(1 << 40, 1, 1 << 30), Err(Error::RefillTooLong));
        let max = crate::time::MAX_PERIOD_US;
        assert!(Gcra::new(max - 1, 1, 1).is_ok());
        assert_eq!(Gcra::new(max, 1, 1), Err(Error::RefillTooLong));
        assert!(matches!(
            Gcra::new(0, 1, max + 1),
            Err(Error::BadPeriod { .. })
        ));
    }

    #[test]
    fn a_state_far_in_the_future_is_an_error_not_a_wrap() {
        let gcra = Gcra::new(crate::time::MAX_PERIOD_US - 1, 1, 1).unwrap();
        assert_eq!(
            gcra.decide(Some(i64::MAX - 5), T0, 10),
            Err(Error::Overflow)
        );
    }

    #[test]
    fn clock_stepping_back_gives_no_negative_times() {
        let gcra = Gcra::new(4, 10, S).unwrap();
        let out = gcra.decide(None, T0, 5).unwrap();
        let tat = out.update.unwrap().state;
        // The clock steps back by 10 s.
        let d = gcra.decide(Some(tat), T0 - 10 * S, 1).unwrap().decision;
        assert!(d.limited);
        assert_eq!(d.remaining, 0);
        assert_eq!(d.retry_after_us, Some(10 * S + 100 * MS));
        assert_eq!(d.reset_after_us, 10 * S + 500 * MS);
    }

    #[test]
    fn state_codec_round_trips() {
        let mut buf = [0u8; STATE_BUF_LEN];
        let n = Gcra::encode(&1_763_761_234_567_890, &mut buf);
        assert_eq!(&buf[..n], b"1763761234567890");
        assert_eq!(Gcra::decode(&buf[..n]), Some(1_763_761_234_567_890));
        assert_eq!(Gcra::decode(b"foo"), None);
        assert_eq!(Gcra::decode(b"-5"), None);
    }
}
