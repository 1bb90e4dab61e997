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
mod tests;
