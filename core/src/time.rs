//! Time: units and conversions. (The server clock, read once per command,
//! is the module's: `server::clock_us`; the algorithms take `now` as an
//! argument.)
//!
//! Every instant and duration inside the module is an `i64` count of
//! microseconds (names end in `_us`): instants since the Unix epoch, durations
//! as differences. Replies round durations **up** to milliseconds (`RL.*`) or
//! seconds (`CL.THROTTLE`) so that waiting the returned time is always enough.

/// Microseconds per millisecond.
pub const US_PER_MS: i64 = 1_000;
/// Microseconds per second.
pub const US_PER_SEC: i64 = 1_000_000;
/// Largest accepted duration (period, window, `BLOCK`), in seconds: 366
/// days, so that a yearly limit fits in a leap year too. It also bounds the
/// time a limiter takes to refill from empty, so every key the module writes
/// expires within 366 days of the call that wrote it (a sliding window's
/// within two windows, 732 days). Far from every overflow: twice it plus
/// today's clock is under 2^51 µs, and the key's expiry in ms stays a plain
/// positive integer, never a "no expiry" sentinel.
pub const MAX_PERIOD_SECS: f64 = 31_622_400.0;
/// [`MAX_PERIOD_SECS`] in µs.
pub const MAX_PERIOD_US: i64 = 31_622_400 * US_PER_SEC;

/// How far after the clock a time stored in a limiter's state may lie: a
/// TAT, a bucket's full time or a block's end is at most one longest
/// duration ([`MAX_PERIOD_US`]) ahead when written, and so is a lease's
/// expiry (`RL.CONCURRENCY`); window starts and sliding-log entries are not
/// ahead at all. A state holding a later time
/// was not written by the module (or the server's clock stepped back by
/// more than that) and is refused with
/// [`crate::error::Error::ForeignState`] rather than kept for years.
pub const STATE_HORIZON_US: i64 = MAX_PERIOD_US;

/// Converts a period given in seconds (as parsed by Redis's float parser) to
/// whole microseconds, rounding to the nearest µs.
///
/// Returns `None` unless `secs` is finite, > 0, at most [`MAX_PERIOD_SECS`], and
/// at least 1 µs after rounding.
///
/// ```
/// use ratelimit_core::time::seconds_to_us;
/// assert_eq!(seconds_to_us(0.5), Some(500_000));
/// assert_eq!(seconds_to_us(1e-9), None);
/// ```
pub fn seconds_to_us(secs: f64) -> Option<i64> {
    if !secs.is_finite() || secs <= 0.0 || secs > MAX_PERIOD_SECS {
        return None;
    }
    let us = (secs * 1e6).round();
    // In range by the bound above (9.2e18 < i64::MAX ≈ 9.22e18).
    if us < 1.0 {
        return None;
    }
    Some(us as i64)
}

/// `⌈a / b⌉` for `a ≥ 0`, `b > 0`, without overflow.
#[inline]
pub const fn ceil_div(a: i64, b: i64) -> i64 {
    a / b + (a % b != 0) as i64
}

/// A non-negative duration in µs, rounded up to whole milliseconds.
#[inline]
pub const fn ceil_ms(us: i64) -> i64 {
    ceil_div(us, US_PER_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_convert_to_microseconds() {
        let cases = [
            (1.0, Some(1_000_000)),
            (0.5, Some(500_000)),
            (0.1, Some(100_000)),
            (0.000001, Some(1)),
            (0.0000005, Some(1)), // rounds to nearest: 0.5 µs → 1 µs
            (0.0000004, None),    // rounds to 0 µs
            (1e-9, None),
            (0.0, None),
            (-1.0, None),
            (f64::NAN, None),
            (f64::INFINITY, None),
            (f64::NEG_INFINITY, None),
            (1e300, None),
            (9.2e12, None),
            (31_622_400.0, Some(MAX_PERIOD_US)),
            (31_622_400.000001, None),
        ];
        for (secs, want) in cases {
            assert_eq!(seconds_to_us(secs), want, "{secs}");
        }
    }

    #[test]
    fn durations_round_up() {
        assert_eq!(ceil_ms(0), 0);
        assert_eq!(ceil_ms(1), 1);
        assert_eq!(ceil_ms(1_000), 1);
        assert_eq!(ceil_ms(1_001), 2);
        assert_eq!(ceil_ms(i64::MAX), i64::MAX / 1000 + 1);
    }
}
