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
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::algorithm::table::{run, MS, S, T0};

    #[test]
    fn a_refund_puts_tokens_back_up_to_the_capacity() {
        let bucket = TokenBucket::new(5, 10, S).unwrap();
        // Four taken at T0: full again at T0 + 400 ms.
        let taken = FullAt {
            full_at_us: T0 + 400 * MS,
            remainder: 0,
        };
        let r = bucket.refund(Some(taken), T0 + 100 * MS, 1).unwrap();
        let back = FullAt {
            full_at_us: T0 + 300 * MS,
            remainder: 0,
        };
        assert_eq!(
            r.write,
            RefundWrite::Set(Update {
                state: back,
                expire_at_us: T0 + 300 * MS
            })
        );
        assert_eq!(
            (
                r.decision.limited,
                r.decision.remaining,
                r.decision.retry_after_us,
                r.decision.reset_after_us
            ),
            (false, 3, None, 200 * MS)
        );
        let r = bucket.refund(Some(taken), T0 + 100 * MS, 3).unwrap();
        assert_eq!((r.write, r.decision.remaining), (RefundWrite::Delete, 5));
        assert_eq!(
            bucket.refund(None, T0, 2).unwrap().write,
            RefundWrite::Nothing
        );
        // A fractional refill step (3 per second) stays exact.
        let thirds = TokenBucket::new(3, 3, S).unwrap();
        let out = thirds.decide(None, T0, 2).unwrap().update.unwrap().state;
        let r = thirds.refund(Some(out), T0, 1).unwrap();
        assert_eq!(r.decision.remaining, 2);
        let RefundWrite::Set(u) = r.write else {
            panic!()
        };
        assert_eq!(
            thirds
                .decide(Some(u.state), T0, 1)
                .unwrap()
                .decision
                .remaining,
            1
        );
    }

    #[test]
    fn capacity_five_refill_ten_per_second_matches_the_gcra_sequence() {
        let bucket = TokenBucket::new(5, 10, S).unwrap();
        run(
            &bucket,
            &[
                (0, 1, false, 4, None, 100 * MS),
                (0, 1, false, 3, None, 200 * MS),
                (0, 1, false, 2, None, 300 * MS),
                (0, 1, false, 1, None, 400 * MS),
                (0, 1, false, 0, None, 500 * MS),
                (0, 1, true, 0, Some(100 * MS), 500 * MS),
                (100 * MS, 1, false, 0, None, 500 * MS),
                (150 * MS, 2, true, 0, Some(150 * MS), 450 * MS),
                (1_000 * MS, 5, false, 0, None, 500 * MS),
            ],
        );
    }

    #[test]
    fn refill_is_exact_when_a_token_is_not_a_whole_microsecond() {
        // 3 tokens per second: 333 333.33… µs each.
        let bucket = TokenBucket::new(3, 3, S).unwrap();
        let state = run(
            &bucket,
            &[
                (0, 1, false, 2, None, 333_334),
                (0, 1, false, 1, None, 666_667),
                (0, 1, false, 0, None, S),
                (0, 1, true, 0, Some(333_334), S),
            ],
        );
        assert_eq!(
            state,
            Some(FullAt {
                full_at_us: T0 + S,
                remainder: 0
            })
        );
        // One token after exactly 1/3 s (rounded up to the µs).
        let s1 = bucket.decide(None, T0, 1).unwrap().update.unwrap().state;
        assert_eq!(
            s1,
            FullAt {
                full_at_us: T0 + 333_333,
                remainder: 1
            }
        );
        // Taking one token every 333 333 µs (a hair faster than the rate) must
        // be refused within a few thousand steps; an exact 1/3 s pace never is.
        let mut f = None;
        let mut refused = false;
        for k in 0..3_000_000i64 {
            let out = bucket.decide(f, T0 + k * 333_333, 1).unwrap();
            if out.decision.limited {
                refused = true;
                break;
            }
            f = out.update.map(|u| u.state);
        }
        assert!(
            refused,
            "a pace faster than the rate must eventually be refused"
        );
        let mut f = None;
        for k in 0..30_000i64 {
            let now = T0 + (k * S).div_euclid(3) + i64::from((k * S).rem_euclid(3) != 0);
            let out = bucket.decide(f, now, 1).unwrap();
            assert!(!out.decision.limited, "step {k}");
            f = out.update.map(|u| u.state);
        }
    }

    #[test]
    fn a_remainder_left_by_a_larger_refill_count_reads_as_the_largest_one() {
        // A key written while the bucket refilled 3 tokens per period keeps
        // a remainder in thirds of a µs (here 2); read with 2 tokens per
        // period, remainders are halves, and 2 is read as 1.
        let bucket = TokenBucket::new(2, 2, 5).unwrap();
        let state = FullAt {
            full_at_us: T0 + 2,
            remainder: 2,
        };
        // Deficit 2.5 µs (5 half-µs): one token (5 µs per 2 tokens) is left.
        assert_eq!(bucket.wait_us(Some(state), T0).unwrap(), 3);
        let out = bucket.decide(Some(state), T0, 1).unwrap();
        assert_eq!(
            (out.decision.limited, out.decision.remaining),
            (false, 0),
            "read as 3 half-µs, the token would be missing"
        );
    }

    #[test]
    fn costs_above_capacity_can_never_be_allowed() {
        let bucket = TokenBucket::new(5, 10, S).unwrap();
        run(
            &bucket,
            &[
                (0, 6, true, 5, None, 0),
                (0, 2, false, 3, None, 200 * MS),
                (0, 6, true, 3, None, 200 * MS),
            ],
        );
    }

    #[test]
    fn parameters_are_validated() {
        assert_eq!(
            TokenBucket::new(0, 1, S),
            Err(Error::OutOfRange {
                arg: "capacity",
                bound: ">= 1"
            })
        );
        assert_eq!(
            TokenBucket::new(1, 0, S),
            Err(Error::OutOfRange {
                arg: "refill_tokens",
                bound: ">= 1"
            })
        );
        assert_eq!(
            TokenBucket::new(1, 2, 1),
            Err(Error::RateTooHigh {
                arg: "refill_tokens"
            })
        );
        // Refilling from empty must take at most 366 days.
        let max = crate::time::MAX_PERIOD_US;
        assert_eq!(TokenBucket::new(i64::MAX, 1, 2), Err(Error::RefillTooLong));
        assert!(TokenBucket::new(max, max, max).is_ok());
        assert_eq!(
            TokenBucket::new(max + 1, max, max),
            Err(Error::RefillTooLong)
        );
        assert!(matches!(
            TokenBucket::new(1, 1, max + 1),
            Err(Error::BadPeriod { .. })
        ));
    }

    #[test]
    fn state_codec_round_trips_and_rejects_foreign_values() {
        let mut buf = [0u8; STATE_BUF_LEN];
        for f in [
            FullAt {
                full_at_us: 17,
                remainder: 0,
            },
            FullAt {
                full_at_us: i64::MAX,
                remainder: i64::MAX,
            },
        ] {
            let n = TokenBucket::encode(&f, &mut buf);
            assert_eq!(TokenBucket::decode(&buf[..n]), Some(f));
        }
        let n = TokenBucket::encode(
            &FullAt {
                full_at_us: 5,
                remainder: 2,
            },
            &mut buf,
        );
        assert_eq!(&buf[..n], b"5:2");
        for bad in [
            &b"foo"[..],
            b"",
            b":",
            b"5:",
            b":5",
            b"5:2:1",
            b"-5",
            b"5:-2",
        ] {
            assert_eq!(TokenBucket::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn clock_stepping_back_gives_no_negative_times() {
        let bucket = TokenBucket::new(5, 10, S).unwrap();
        let f = bucket.decide(None, T0, 5).unwrap().update.unwrap().state;
        let d = bucket.decide(Some(f), T0 - 10 * S, 1).unwrap().decision;
        assert!(d.limited);
        assert_eq!(
            (d.remaining, d.retry_after_us, d.reset_after_us),
            (0, Some(10 * S + 100 * MS), 10 * S + 500 * MS)
        );
    }
}
