//! redis-cell's GCRA arithmetic, in nanoseconds: the algorithm of
//! `CL.THROTTLE`.
//!
//! Source: brandur's redis-cell 0.5.0, `src/cell/mod.rs` (`Rate::per_period`,
//! `RateLimiter::new`, `RateLimiter::rate_limit`) and `src/lib.rs` (how the
//! reply's durations become seconds). It is the GCRA of [`super::gcra`] with
//! redis-cell's units and roundings, so that `CL.THROTTLE` replies what
//! redis-cell replies:
//!
//! * emission interval `T = period_ns / count_per_period`, **truncated to the
//!   ns** (redis-cell divides in `f64` and truncates; below 2⁵³ ns, about 104
//!   days, that is exactly the integer quotient);
//! * delay variation tolerance `τ = T × (max_burst + 1)`, in ns;
//! * the TAT in ns; the server's µs clock is read as `now_ns = now_us × 1000`;
//! * a request of `n` tokens is allowed when `max(TAT, now) + n·T − τ ≤ now`;
//! * the reply's durations in seconds: whole seconds, plus one when the
//!   **millisecond** part is non-zero ([`reply_secs`]), so 122.000004 s is
//!   122 s. A limited request's `retry_after` is never 0 (see
//!   [`retry_after_secs`]).
//!
//! The state is the TAT as a decimal integer of **nanoseconds** since the Unix
//! epoch, as redis-cell writes it. A stored value below 10¹⁷ is a TAT in µs
//! (what `CL.THROTTLE` wrote before it kept redis-cell's nanoseconds, and what
//! `RL.GCRA` writes): 10¹⁷ ns was in 1973, 10¹⁷ µs lies past the year 5000.
//! A TAT past `i64::MAX` ns (the year 2262), reachable only with limiters
//! whose burst takes centuries to refill, is written in µs (rounded up).

use super::{parse_decimal, refunded, write_decimal, Algorithm, Decision, Outcome, RefundWrite};
use super::{Refunded, Update, STATE_BUF_LEN};
use crate::error::{Error, Result};

/// Nanoseconds per µs.
const NS_PER_US: i128 = 1_000;
/// Nanoseconds per second.
const NS_PER_SEC: i128 = 1_000_000_000;

/// Stored TATs at or above this are nanoseconds; below it, µs.
pub const NANOSECOND_TAT_FLOOR: i64 = 100_000_000_000_000_000;

/// The longest delay variation tolerance (time for a full burst to refill)
/// accepted, in µs: 9 × 10¹⁶ µs, about 2,850 years, so that a TAT written in
/// µs (past the year 2262) stays below [`NANOSECOND_TAT_FLOOR`] for
/// centuries. (redis-cell itself overflows its nanosecond clock past 292
/// years.)
pub const MAX_TOLERANCE_US: i64 = 90_000_000_000_000_000;

/// `CL.THROTTLE`'s GCRA parameters, validated, in ns. Build with
/// [`CellGcra::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellGcra {
    emission_interval_ns: i128,
    limit: i64,
    delay_variation_tolerance_ns: i128,
}

/// redis-cell's emission interval, in ns: `period_secs × 10⁹ /
/// count_per_period` divided in `f64` and truncated (`Rate::per_period` in
/// redis-cell's `src/cell/mod.rs`). Below 2⁵³ ns this is the truncated
/// integer quotient (a correctly rounded quotient of integers below 2⁵³
/// never reaches the next integer); above, redis-cell's `f64` rounding.
fn emission_interval_ns(period_secs: i64, count_per_period: i64) -> i128 {
    let period_ns = i128::from(period_secs) * NS_PER_SEC; // ≤ 9.3 × 10²⁷: fits
                                                          // Both operands are exact or correctly rounded, as in redis-cell; the
                                                          // quotient is ≤ 9.3 × 10²⁷, so the saturating cast is exact in range.
    (period_ns as f64 / count_per_period as f64) as i128
}

/// `a / b` (`b` ≥ 1) as redis-cell computes it, `(a as f64 / b as f64) as
/// i64`: for `|a|` below 2⁵³ this is the integer quotient truncated toward
/// zero; above, redis-cell's `f64` rounding (the cast saturates).
fn quotient_as_f64(a: i128, b: i128) -> i64 {
    (a as f64 / b as f64) as i64
}

impl CellGcra {
    /// Validates the parameters of `CL.THROTTLE key max_burst
    /// count_per_period period`:
    ///
    /// * `max_burst` ≥ 0: tokens that may be taken at once beyond the first;
    /// * `count_per_period` ≥ 1 tokens refill every `period_secs` seconds
    ///   (≥ 1);
    /// * `T` (ns, truncated as redis-cell does) must be at least 1 µs.
    ///
    /// Errors: [`Error::OutOfRange`] for a bound, [`Error::BadPeriod`] for a
    /// period below 1 s, [`Error::RateTooHigh`] when `T` < 1 µs (redis-cell's
    /// `remaining` divides by `T` in whole µs), [`Error::Overflow`] when `τ`
    /// exceeds [`MAX_TOLERANCE_US`], [`Error::RefillTooLong`] when it exceeds
    /// 366 days (a period over 366 days is an [`Error::OutOfRange`]).
    ///
    /// ```
    /// use ratelimit_core::algorithm::cell::CellGcra;
    /// // 7 per 61 s: T = 8 714 285 714 ns (truncated), limit 101.
    /// let cell = CellGcra::new(100, 7, 61).unwrap();
    /// assert_eq!(cell.emission_interval_ns(), 8_714_285_714);
    /// assert_eq!(cell.delay_variation_tolerance_ns(), 8_714_285_714 * 101);
    /// assert_eq!(cell.limit(), 101);
    /// ```
    pub fn new(max_burst: i64, count_per_period: i64, period_secs: i64) -> Result<Self> {
        if max_burst < 0 {
            return Err(Error::OutOfRange {
                arg: "max_burst",
                bound: ">= 0",
            });
        }
        if count_per_period < 1 {
            return Err(Error::OutOfRange {
                arg: "count_per_period",
                bound: ">= 1",
            });
        }
        if period_secs < 1 {
            return Err(Error::BadPeriod { arg: "period" });
        }
        if period_secs > crate::time::MAX_PERIOD_US / crate::time::US_PER_SEC {
            return Err(Error::OutOfRange {
                arg: "period",
                bound: ">= 1 and <= 31622400 (366 days)",
            });
        }
        let emission_interval_ns = emission_interval_ns(period_secs, count_per_period);
        if emission_interval_ns < NS_PER_US {
            return Err(Error::RateTooHigh {
                arg: "count_per_period",
            });
        }
        let limit = max_burst.checked_add(1).ok_or(Error::Overflow)?;
        // T reaches 9.3 × 10²⁷ ns and the limit 2⁶³: the product can pass
        // i128's 1.7 × 10³⁸ (found by the fuzz test).
        let delay_variation_tolerance_ns = emission_interval_ns
            .checked_mul(i128::from(limit))
            .ok_or(Error::Overflow)?;
        if delay_variation_tolerance_ns > i128::from(MAX_TOLERANCE_US) * NS_PER_US {
            return Err(Error::Overflow);
        }
        // The TAT lies at most τ ahead: the key expires within it.
        if delay_variation_tolerance_ns > i128::from(crate::time::MAX_PERIOD_US) * NS_PER_US {
            return Err(Error::RefillTooLong);
        }
        Ok(Self {
            emission_interval_ns,
            limit,
            delay_variation_tolerance_ns,
        })
    }

    /// The emission interval `T`, in ns.
    pub fn emission_interval_ns(&self) -> i128 {
        self.emission_interval_ns
    }

    /// The delay variation tolerance `τ = T × limit`, in ns.
    pub fn delay_variation_tolerance_ns(&self) -> i128 {
        self.delay_variation_tolerance_ns
    }

    /// `max_burst + 1`.
    pub fn limit(&self) -> i64 {
        self.limit
    }

    /// Tokens available when the schedule runs `ttl_ns` ahead of now, as
    /// redis-cell counts them: `τ − ttl` and `T`, each truncated to whole
    /// µs, divided and truncated (0 unless `τ − ttl > −T`). Because of the
    /// truncations this may count a token due a few µs from now (or further
    /// when `T` is not a whole number of µs and the burst is large); it is
    /// kept, but never above `limit`.
    fn remaining(&self, ttl_ns: i128) -> i64 {
        let next_ns = self.delay_variation_tolerance_ns - ttl_ns;
        if next_ns <= -self.emission_interval_ns {
            return 0;
        }
        let count = quotient_as_f64(next_ns / NS_PER_US, self.emission_interval_ns / NS_PER_US);
        count.clamp(0, self.limit)
    }

    /// The decision. A request refused for want of tokens (`cost` ≤ limit)
    /// reports fewer than `cost` remaining: redis-cell can report `cost` or
    /// more there (a token that is due in under a µs, or its µs-truncated
    /// `T`), which contradicts the refusal.
    fn decision(
        &self,
        cost: i64,
        limited: bool,
        ttl_ns: i128,
        retry_after_ns: Option<i128>,
    ) -> Decision {
        let mut remaining = self.remaining(ttl_ns);
        // A retry: refused for want of tokens (allowed calls and costs
        // above the limit have none).
        if retry_after_ns.is_some() {
            remaining = remaining.min(cost.saturating_sub(1)).max(0);
        }
        Decision {
            limited,
            limit: self.limit,
            remaining,
            retry_after_us: retry_after_ns.map(floor_us),
            reset_after_us: floor_us(ttl_ns),
        }
    }
}

/// `ns` in whole µs, truncated (which keeps its whole milliseconds, all that
/// [`reply_secs`] reads), saturating at the `i64` bounds.
fn floor_us(ns: i128) -> i64 {
    let us = ns.div_euclid(NS_PER_US);
    us.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// The server's µs clock in ns.
fn now_ns(now_us: i64) -> i128 {
    i128::from(now_us) * NS_PER_US
}

/// When the key expires: the TAT rounded up to the µs.
fn expire_at_us(tat_ns: i128) -> i64 {
    let us = tat_ns.div_euclid(NS_PER_US) + i128::from(tat_ns.rem_euclid(NS_PER_US) != 0);
    i64::try_from(us).unwrap_or(i64::MAX)
}

impl Algorithm for CellGcra {
    /// The theoretical arrival time, ns since the Unix epoch.
    type State = i128;

    /// The TAT, in µs (rounded down).
    fn latest_us(tat_ns: &i128) -> i64 {
        i64::try_from(tat_ns / NS_PER_US).unwrap_or(i64::MAX)
    }

    /// Reads a TAT: nanoseconds from [`NANOSECOND_TAT_FLOOR`] up (redis-cell's,
    /// and this command's), µs below it (older `CL.THROTTLE` keys).
    fn decode(bytes: &[u8]) -> Option<i128> {
        let tat = parse_decimal(bytes)?;
        Some(if tat >= NANOSECOND_TAT_FLOOR {
            i128::from(tat)
        } else {
            i128::from(tat) * NS_PER_US
        })
    }

    /// Writes the TAT in ns when it reads back as ns (from 10¹⁷ up to
    /// `i64::MAX`), else in µs, rounded up (before 1973 or after 2262).
    fn encode(tat_ns: &i128, buf: &mut [u8; STATE_BUF_LEN]) -> usize {
        let tat_ns = *tat_ns;
        let value = match i64::try_from(tat_ns) {
            Ok(ns) if ns >= NANOSECOND_TAT_FLOOR => ns,
            _ => expire_at_us(tat_ns).clamp(0, NANOSECOND_TAT_FLOOR - 1),
        };
        write_decimal(value, buf, 0)
    }

    /// Decides `cost` tokens at `now_us` as redis-cell's
    /// `RateLimiter::rate_limit` does. `cost` 0 reads the state without
    /// consuming (nothing is written). A cost above the limit is refused with
    /// `retry_after_us = None`: it can never be allowed (redis-cell: `-1`).
    ///
    /// The decision's durations are the ns ones truncated to the µs.
    fn decide(&self, tat_ns: Option<i128>, now_us: i64, cost: i64) -> Result<Outcome<i128>> {
        let now = now_ns(now_us);
        let tat = tat_ns.map_or(now, |t| t.max(now));
        // The schedule's lead over now; > τ only after the clock stepped back.
        let ttl = tat - now;
        if cost > self.limit {
            return Ok(Outcome {
                decision: self.decision(cost, true, ttl, None),
                update: None,
            });
        }
        // 0 ≤ cost ≤ limit: the increment is at most τ; all within i128.
        let increment = self.emission_interval_ns * i128::from(cost.max(0));
        let new_tat = tat + increment;
        let new_ttl = new_tat - now;
        if new_ttl > self.delay_variation_tolerance_ns {
            let retry = new_ttl - self.delay_variation_tolerance_ns;
            return Ok(Outcome {
                decision: self.decision(cost, true, ttl, Some(retry)),
                update: None,
            });
        }
        Ok(Outcome {
            decision: self.decision(cost, false, new_ttl, None),
            // A zero-cost request changes nothing.
            update: (increment > 0).then_some(Update {
                state: new_tat,
                expire_at_us: expire_at_us(new_tat),
            }),
        })
    }

    /// Moves the TAT `tokens`·T earlier, not before now; a TAT at or before
    /// now is a full limiter: the key is deleted.
    fn refund(&self, tat_ns: Option<i128>, now_us: i64, tokens: i64) -> Result<Refunded<i128>> {
        let Some(tat) = tat_ns else {
            return refunded(self, None, now_us, RefundWrite::Nothing);
        };
        let now = now_ns(now_us);
        let back = self
            .emission_interval_ns
            .saturating_mul(i128::from(tokens.max(0)));
        let new_tat = tat.saturating_sub(back).max(now);
        if new_tat <= now {
            return refunded(self, None, now_us, RefundWrite::Delete);
        }
        let write = RefundWrite::Set(Update {
            state: new_tat,
            expire_at_us: expire_at_us(new_tat),
        });
        refunded(self, Some(new_tat), now_us, write)
    }
}

/// A duration in redis-cell's reply seconds: the whole seconds, plus one when
/// the millisecond part is non-zero (redis-cell's `src/lib.rs`:
/// `as_seconds_f64() as i64`, `+ 1` if `subsec_milliseconds() > 0`). So
/// 122.000004 s is 122, 121.9999 s is 122, 0.0004 s is 0.
///
/// redis-cell's `f64` sum can also round a fraction of `0.999999999…` up to
/// the next second for durations from 2²⁴ s (194 days), and then still add
/// one; this returns the true rounding there.
///
/// ```
/// use ratelimit_core::algorithm::cell::reply_secs;
/// assert_eq!(reply_secs(122_000_004), 122);
/// assert_eq!(reply_secs(121_999_999), 122);
/// assert_eq!(reply_secs(122_001_000), 123);
/// assert_eq!(reply_secs(999), 0);
/// ```
pub const fn reply_secs(duration_us: i64) -> i64 {
    let secs = duration_us / 1_000_000; // toward zero, as `as i64`
    let ms = duration_us % 1_000_000 / 1_000;
    secs + (ms > 0) as i64
}

/// The reply's `retry_after`, in seconds: `-1` for `None` (allowed, or a cost
/// above the limit), else [`reply_secs`], **but at least 1 when limited**.
///
/// redis-cell replies 0 when the wait is under a millisecond, which sends
/// the client straight back to be refused again; this replies 1 there.
pub fn retry_after_secs(limited: bool, retry_after_us: Option<i64>) -> i64 {
    match retry_after_us {
        None => -1,
        Some(us) if limited => reply_secs(us).max(1),
        Some(us) => reply_secs(us),
    }
}

#[cfg(test)]
mod tests;
