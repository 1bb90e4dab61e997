//! Unit tests of `cell`.

use super::*;
use crate::algorithm::table::{S, T0};
use proptest::prelude::*;

#[test]
fn parameters_in_ns_as_redis_cell_computes_them() {
    // 7 per 61 s: T = 8 714 285 714 ns (truncated), limit 101.
    let cell = CellGcra::new(100, 7, 61).unwrap();
    assert_eq!(cell.emission_interval_ns(), 8_714_285_714);
    assert_eq!(cell.delay_variation_tolerance_ns(), 8_714_285_714 * 101);
    assert_eq!(cell.limit(), 101);
    // Past 2⁵³ ns the f64 quotient is redis-cell's: 31 622 398 s / 3
    // rounds to …334 ns, where the integer quotient is …333.
    let slow = CellGcra::new(0, 3, 31_622_398).unwrap();
    assert_eq!(slow.emission_interval_ns(), 10_540_799_333_333_334);
    assert_eq!(
        quotient_as_f64(100_000_000_000_000_001, 3),
        33_333_333_333_333_332
    );
    assert_eq!(quotient_as_f64(-7, 2), -3);
    assert_eq!(quotient_as_f64(i128::MAX, 1), i64::MAX);
}

#[test]
fn a_tat_past_the_nanosecond_range_is_written_as_the_last_microsecond_value() {
    let mut buf = [0u8; STATE_BUF_LEN];
    // 10²¹ ns (year 33658) is past i64 ns: µs, clamped below the floor
    // from which a value reads as ns.
    let n = CellGcra::encode(&1_000_000_000_000_000_000_000, &mut buf);
    assert_eq!(&buf[..n], b"99999999999999999");
    assert_eq!(
        CellGcra::decode(&buf[..n]),
        Some(i128::from(NANOSECOND_TAT_FLOOR - 1) * NS_PER_US)
    );
    // Before 1973 (below the floor in ns): µs, rounded up.
    let n = CellGcra::encode(&1_500, &mut buf);
    assert_eq!(&buf[..n], b"2");
}

#[test]
fn a_zero_cost_call_writes_nothing() {
    // CL.THROTTLE with quantity 0 reports the state and changes nothing,
    // on a missing key as on a stored TAT ahead of now.
    let cell = CellGcra::new(4, 1, 1).unwrap();
    let ahead = now_ns(T0) + 2 * NS_PER_SEC;
    for tat in [None, Some(ahead)] {
        let out = cell.decide(tat, T0, 0).unwrap();
        assert!(!out.decision.limited, "{tat:?}");
        assert_eq!(out.update, None, "{tat:?}");
    }
    // One token does write.
    assert!(cell.decide(None, T0, 1).unwrap().update.is_some());
}

#[test]
fn a_refund_moves_the_tat_back_and_a_full_limiter_loses_its_key() {
    // 1 per second, burst 4 (limit 5); three taken at T0.
    let cell = CellGcra::new(4, 1, 1).unwrap();
    let now = T0;
    let taken = now_ns(now) + 3 * NS_PER_SEC;
    let r = cell.refund(Some(taken), now, 1).unwrap();
    let back = now_ns(now) + 2 * NS_PER_SEC;
    assert_eq!(
        r.write,
        RefundWrite::Set(Update {
            state: back,
            expire_at_us: now + 2 * S,
        })
    );
    assert_eq!((r.decision.limited, r.decision.remaining), (false, 3));
    assert_eq!(
        cell.refund(Some(taken), now, 3).unwrap().write,
        RefundWrite::Delete
    );
    assert_eq!(
        cell.refund(Some(taken), now, 9).unwrap().write,
        RefundWrite::Delete
    );
    assert_eq!(
        cell.refund(None, now, 1).unwrap().write,
        RefundWrite::Nothing
    );
}

#[test]
fn microseconds_floor_and_saturate() {
    assert_eq!(floor_us(1_999), 1);
    assert_eq!(floor_us(-1), -1);
    assert_eq!(floor_us(i128::MAX), i64::MAX);
    assert_eq!(floor_us(i128::MIN), i64::MIN);
}

proptest! {
    /// Below 2⁵³ the f64 quotient is the integer one (truncated toward
    /// zero), which the docs of `emission_interval_ns` rely on.
    #[test]
    fn the_f64_quotient_is_exact_below_2_pow_53(a in -(1i128 << 53) + 1..(1i128 << 53), b in 1i128..(1i128 << 53)) {
        prop_assert_eq!(i128::from(quotient_as_f64(a, b)), a / b);
    }
}

#[test]
fn a_tolerance_past_i128_is_an_overflow_error() {
    // T ≈ 9.2 × 10²⁶ ns times a limit of 9.2 × 10¹² would pass i128: the
    // period's bound (366 days) refuses it first.
    assert!(matches!(
        CellGcra::new(9_200_000_000_001, 1, 922_337_203_685_477_580),
        Err(Error::OutOfRange { .. })
    ));
    // The largest period with the largest burst: an error, not a wrap.
    assert_eq!(
        CellGcra::new(i64::MAX - 1, 1, 31_622_400),
        Err(Error::Overflow)
    );
}

#[test]
fn reads_nanosecond_and_microsecond_tats() {
    assert_eq!(
        CellGcra::decode(b"1795297437157000"),
        Some(1_795_297_437_157_000_000)
    );
    assert_eq!(
        CellGcra::decode(b"1795297437157000001"),
        Some(1_795_297_437_157_000_001)
    );
    assert_eq!(
        CellGcra::decode(b"99999999999999999"),
        Some(99_999_999_999_999_999_000)
    );
    assert_eq!(
        CellGcra::decode(b"100000000000000000"),
        Some(100_000_000_000_000_000)
    );
    assert_eq!(CellGcra::decode(b"foo"), None);
    assert_eq!(CellGcra::decode(b"-5"), None);
}

#[test]
fn writes_nanoseconds_that_read_back_and_microseconds_past_2262() {
    let mut buf = [0u8; STATE_BUF_LEN];
    let tat = i128::from(T0) * 1_000 + 123;
    let len = CellGcra::encode(&tat, &mut buf);
    assert_eq!(&buf[..len], (tat).to_string().as_bytes());
    assert_eq!(CellGcra::decode(&buf[..len]), Some(tat));
    // Past i64::MAX ns: µs, rounded up.
    let far = i128::from(i64::MAX) + 1_001;
    let len = CellGcra::encode(&far, &mut buf);
    assert_eq!(
        CellGcra::decode(&buf[..len]),
        Some((far + 999) / 1_000 * 1_000)
    );
    // A bogus clock before 1973: µs, rounded up, read back as µs.
    let len = CellGcra::encode(&5_001, &mut buf);
    assert_eq!(
        (&buf[..len], CellGcra::decode(&buf[..len])),
        (&b"6"[..], Some(6_000))
    );
}

#[test]
fn the_emission_interval_is_truncated_to_the_nanosecond() {
    assert_eq!(emission_interval_ns(61, 7), 8_714_285_714);
    assert_eq!(emission_interval_ns(60, 30), 2_000_000_000);
    assert_eq!(emission_interval_ns(1, 3), 333_333_333);
    // Above 2⁵³ ns redis-cell's f64 quotient is kept.
    let (p, c) = (10_000_000_i64, 3_i64);
    assert_eq!(
        emission_interval_ns(p, c),
        ((p as f64 * 1e9) / c as f64) as i128
    );
    // The f64 path agrees with the integer quotient just below 2⁵³.
    for count in 1..2_000 {
        let p = 9_007_199;
        assert_eq!(
            ((i128::from(p) * NS_PER_SEC) as f64 / count as f64) as i128,
            i128::from(p) * NS_PER_SEC / i128::from(count)
        );
    }
}

#[test]
fn bad_parameters_are_errors() {
    assert!(matches!(
        CellGcra::new(-1, 1, 1),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        CellGcra::new(0, 0, 1),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        CellGcra::new(0, 1, 0),
        Err(Error::BadPeriod { .. })
    ));
    assert!(matches!(
        CellGcra::new(0, 1_000_001, 1),
        Err(Error::RateTooHigh { .. })
    ));
    assert!(CellGcra::new(0, 1_000_000, 1).is_ok());
    assert!(CellGcra::new(0, 1, 31_622_400).is_ok());
    assert!(matches!(
        CellGcra::new(0, 1, 31_622_401),
        Err(Error::OutOfRange { .. })
    ));
    // A full burst must refill within 366 days.
    assert!(CellGcra::new(1, 2, 31_622_400).is_ok());
    assert_eq!(CellGcra::new(2, 2, 31_622_400), Err(Error::RefillTooLong));
    assert!(matches!(
        CellGcra::new(i64::MAX, 1, 1),
        Err(Error::Overflow)
    ));
    // The largest period is fine when the rate keeps τ in bounds.
    assert!(CellGcra::new(0, 31_622_400_000_000, 31_622_400).is_ok());
}

#[test]
fn reply_seconds_round_up_only_a_nonzero_millisecond_part() {
    assert_eq!(reply_secs(0), 0);
    assert_eq!(reply_secs(999), 0);
    assert_eq!(reply_secs(1_000), 1);
    assert_eq!(reply_secs(S), 1);
    assert_eq!(reply_secs(S + 999), 1);
    assert_eq!(reply_secs(S + 1_000), 2);
    assert_eq!(retry_after_secs(true, Some(286)), 1);
    assert_eq!(retry_after_secs(true, Some(S + 4)), 1);
    assert_eq!(retry_after_secs(true, None), -1);
    assert_eq!(retry_after_secs(false, None), -1);
    // Only a refusal is held to at least 1 s.
    assert_eq!(retry_after_secs(false, Some(286)), 0);
    assert_eq!(retry_after_secs(true, Some(2 * S + 1_000)), 3);
}
