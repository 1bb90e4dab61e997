//! The token bucket, with exact rational refill.
//!
//! Source: the token bucket of traffic shaping (J. Turner, "New directions in
//! communications", IEEE Communications Magazine 24(10), 1986; RFC 2697 /
//! RFC 2698 use the same meter). A bucket holds at most `capacity` tokens,
//! starts full, and refills continuously at `refill_tokens` per
//! `refill_period`. A request of `n` tokens is allowed when the bucket holds at
//! least `n`; it then takes them. A refused request takes nothing.
//!
//! **Representation.** Continuous refill makes the level a function of one
//! instant: the time `F` at which the bucket is full again (no key means
//! `F ≤ now`). The level at `now` is `capacity − (F − now) × refill_tokens /
//! refill_period`, and taking `n` tokens moves `F` to `max(F, now) + n ×
//! refill_period / refill_tokens`. To stay exact when one token's time is not
//! a whole number of µs (3 tokens per second is 333 333.3… µs each), `F` is
//! kept as `full_at_us + remainder / refill_tokens` with
//! `0 ≤ remainder < refill_tokens`, and all arithmetic is done in units of
//! `1 / refill_tokens` µs with `i128` intermediates: no rounding ever
//! accumulates, so the bucket admits exactly `capacity + rate × t` tokens over
//! any `t`.
//!
//! **Stored value:** `<full_at_us>` when the remainder is 0, else
//! `<full_at_us>:<remainder>`, both decimal. If the key is later used with a
//! different `refill_tokens`, a remainder that no longer fits is clamped (an
//! effect of less than 1 µs). The key expires when the bucket is full again:
//! the update carries `F` rounded up to the µs, and the command layer rounds
//! that up to the millisecond for the key's expiry.

use super::{
    ceil_div_i128, parse_decimal, refunded, to_i64, write_decimal, Algorithm, Decision, Outcome,
    RefundWrite, Refunded, Update, STATE_BUF_LEN,
};
use crate::error::{Error, Result};

/// When the bucket is full again: `full_at_us + remainder / refill_tokens` µs
/// since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FullAt {
    pub full_at_us: i64,
    pub remainder: i64,
}

/// Token bucket parameters, validated. Build with [`TokenBucket::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    capacity: i64,
    refill_tokens: i64,
    refill_period_us: i64,
}

impl TokenBucket {
    /// Validates `RL.TOKENBUCKET key capacity refill_tokens refill_period`.
    ///
    /// * `capacity` ≥ 1 tokens, the bucket's size and the limit;
    /// * `refill_tokens` ≥ 1 tokens are added every `refill_period_us` µs (≥ 1).
    ///
    /// Errors: [`Error::OutOfRange`]; [`Error::RateTooHigh`] when
    /// `refill_tokens > refill_period_us` (more than one token per µs);
    /// [`Error::BadPeriod`] for a period over 366 days;
    /// [`Error::RefillTooLong`] when refilling from empty (when the key
    /// expires at the latest) takes more than 366 days.
    ///
    /// ```
    /// use ratelimit_core::algorithm::{token_bucket::TokenBucket, Algorithm};
    /// // 5 tokens, refilled at 10 per second: one token every 100 ms.
    /// let bucket = TokenBucket::new(5, 10, 1_000_000).unwrap();
    /// let first = bucket.decide(None, 0, 1).unwrap().decision;
    /// assert_eq!((first.limited, first.remaining, first.reset_after_us), (false, 4, 100_000));
    /// ```
    #[inline]
    pub fn new(capacity: i64, refill_tokens: i64, refill_period_us: i64) -> Result<Self> {
        Self::with_names(
            capacity,
            refill_tokens,
            refill_period_us,
            ["refill_tokens", "refill_period"],
        )
    }

    /// [`TokenBucket::new`] with the names of the rate's two arguments used
    /// in error messages (the leaky bucket calls them `leak_tokens` and
    /// `leak_period`).
    pub fn with_names(
        capacity: i64,
        refill_tokens: i64,
        refill_period_us: i64,
        names: [&'static str; 2],
    ) -> Result<Self> {
        if capacity < 1 {
            return Err(Error::OutOfRange {
                arg: "capacity",
                bound: ">= 1",
            });
        }
        if refill_tokens < 1 {
            return Err(Error::OutOfRange {
                arg: names[0],
                bound: ">= 1",
            });
        }
        if !(1..=crate::time::MAX_PERIOD_US).contains(&refill_period_us) {
            return Err(Error::BadPeriod { arg: names[1] });
        }
        if refill_tokens > refill_period_us {
            return Err(Error::RateTooHigh { arg: names[0] });
        }
        // Time to refill from empty, in µs: the key expires within it.
        let full_refill = i128::from(capacity) * i128::from(refill_period_us);
        let full_refill_us = ceil_div_i128(full_refill, i128::from(refill_tokens));
        if full_refill_us > i128::from(crate::time::MAX_PERIOD_US) {
            return Err(Error::RefillTooLong);
        }
        Ok(Self {
            capacity,
            refill_tokens,
            refill_period_us,
        })
    }

    /// µs from `now_us` until `state`'s deficit is made up (rounded up to
    /// the µs): for the leaky bucket, until the queue ahead has drained.
    pub fn wait_us(&self, state: Option<FullAt>, now_us: i64) -> Result<i64> {
        let now = i128::from(now_us) * i128::from(self.refill_tokens);
        let debt = match state {
            Some(f) => self
                .scaled(f)
                .checked_sub(now)
                .ok_or(Error::Overflow)?
                .max(0),
            None => 0,
        };
        to_i64(ceil_div_i128(debt, i128::from(self.refill_tokens)))
    }

    /// The bucket's size: the most tokens that can be taken at once.
    pub fn capacity(&self) -> i64 {
        self.capacity
    }

    /// `F` in units of `1 / refill_tokens` µs.
    fn scaled(&self, f: FullAt) -> i128 {
        let r = i128::from(self.refill_tokens);
        i128::from(f.full_at_us) * r + i128::from(f.remainder.clamp(0, self.refill_tokens - 1))
    }

    /// The decision fields for a bucket whose deficit is `debt` (units of
    /// `1 / refill_tokens` µs; one token is `refill_period_us` units).
    fn decision(&self, limited: bool, debt: i128, retry_after_us: Option<i64>) -> Result<Decision> {
        let p = i128::from(self.refill_period_us);
        let capacity_units = i128::from(self.capacity) * p;
        Ok(Decision {
            limited,
            limit: self.capacity,
            // debt > capacity only after the clock stepped back: clamp at 0.
            remaining: to_i64(((capacity_units - debt) / p).max(0))?,
            retry_after_us,
            reset_after_us: to_i64(ceil_div_i128(debt, i128::from(self.refill_tokens)))?,
        })
    }
}

impl Algorithm for TokenBucket {
    type State = FullAt;

    /// When the bucket is full.
    fn latest_us(state: &FullAt) -> i64 {
        state.full_at_us
    }

    fn decode(bytes: &[u8]) -> Option<FullAt> {
        let (us, rem) = match bytes.iter().position(|&b| b == b':') {
            None => (bytes, None),
            Some(i) => (&bytes[..i], Some(&bytes[i + 1..])),
        };
        Some(FullAt {
            full_at_us: parse_decimal(us)?,
            remainder: match rem {
                None => 0,
                Some(r) => parse_decimal(r)?,
            },
        })
    }

    fn encode(f: &FullAt, buf: &mut [u8; STATE_BUF_LEN]) -> usize {
        let end = write_decimal(f.full_at_us, buf, 0);
        if f.remainder == 0 {
            return end;
        }
        buf[end] = b':';
        write_decimal(f.remainder, buf, end + 1)
    }

    fn decide(&self, state: Option<FullAt>, now_us: i64, cost: i64) -> Result<Outcome<FullAt>> {
        let r = i128::from(self.refill_tokens);
        let p = i128::from(self.refill_period_us);
        let now = i128::from(now_us) * r;
        // Magnitudes stay below 2^127 except for absurd clocks or states,
        // which the checked operations turn into Overflow.
        let debt = match state {
            Some(f) => self
                .scaled(f)
                .checked_sub(now)
                .ok_or(Error::Overflow)?
                .max(0),
            None => 0,
        };
        let capacity_units = i128::from(self.capacity) * p;
        if cost > self.capacity {
            return Ok(Outcome {
                decision: self.decision(true, debt, None)?,
                update: None,
            });
        }
        let need = i128::from(cost.max(0)) * p;
        let new_debt = debt.checked_add(need).ok_or(Error::Overflow)?;
        let excess = new_debt - capacity_units;
        if excess > 0 {
            let retry_after_us = to_i64(ceil_div_i128(excess, r))?;
            return Ok(Outcome {
                decision: self.decision(true, debt, Some(retry_after_us))?,
                update: None,
            });
        }
        let full_at = now.checked_add(new_debt).ok_or(Error::Overflow)?;
        let new_state = FullAt {
            full_at_us: to_i64(full_at.div_euclid(r))?,
            remainder: to_i64(full_at.rem_euclid(r))?,
        };
        let expire_at_us = to_i64(ceil_div_i128(full_at, r))?;
        Ok(Outcome {
            decision: self.decision(false, new_debt, None)?,
            update: (need > 0).then_some(Update {
                state: new_state,
                expire_at_us,
            }),
        })
    }

    /// Puts `tokens` back, at most up to `capacity`: the deficit shrinks by
    /// `tokens` refill steps; none left is a full bucket (the key is deleted).
    fn refund(&self, state: Option<FullAt>, now_us: i64, tokens: i64) -> Result<Refunded<FullAt>> {
        let Some(f) = state else {
            return refunded(self, None, now_us, RefundWrite::Nothing);
        };
        let r = i128::from(self.refill_tokens);
        let now = i128::from(now_us) * r;
        let debt = self
            .scaled(f)
            .checked_sub(now)
            .ok_or(Error::Overflow)?
            .max(0);
        let back = i128::from(tokens.max(0)) * i128::from(self.refill_period_us);
        let new_debt = (debt - back).max(0);
        if new_debt == 0 {
            return refunded(self, None, now_us, RefundWrite::Delete);
        }
        let full_at = now + new_debt;
        let new_state = FullAt {
            full_at_us: to_i64(full_at.div_euclid(r))?,
            remainder: to_i64(full_at.rem_euclid(r))?,
        };
        let write = RefundWrite::Set(Update {
            state: new_state,
            expire_at_us: to_i64(ceil_div_i128(full_at, r))?,
        });
        refunded(self, Some(new_state), now_us, write)
    }

    /// The deficit grows by `cost` refill steps whatever the capacity says
    /// (`FORCE`): the bucket's level goes below zero, which its state (the
    /// instant it is full again) holds as an instant further ahead; the
    /// stored bytes of a bucket not in debt are unchanged. The key expires
    /// when it is full again.
    fn charge(&self, state: Option<FullAt>, now_us: i64, cost: i64) -> Result<Update<FullAt>> {
        let r = i128::from(self.refill_tokens);
        let now = i128::from(now_us) * r;
        let debt = match state {
            Some(f) => self
                .scaled(f)
                .checked_sub(now)
                .ok_or(Error::Overflow)?
                .max(0),
            None => 0,
        };
        let need = i128::from(cost.max(0)) * i128::from(self.refill_period_us);
        let new_debt = debt.checked_add(need).ok_or(Error::Overflow)?;
        // Past the horizon: refused before any conversion could overflow.
        if ceil_div_i128(new_debt, r) > i128::from(crate::time::STATE_HORIZON_US) {
            return Err(Error::ForceTooMuch {
                why: crate::error::FORCE_PAST_HORIZON,
            });
        }
        let full_at = now.checked_add(new_debt).ok_or(Error::Overflow)?;
        Ok(Update {
            state: FullAt {
                full_at_us: to_i64(full_at.div_euclid(r))?,
                remainder: to_i64(full_at.rem_euclid(r))?,
            },
            expire_at_us: to_i64(ceil_div_i128(full_at, r))?,
        })
    }
}

#[cfg(test)]
mod tests;
