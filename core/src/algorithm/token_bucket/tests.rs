//! Unit tests of `token_bucket`.

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

#[test]
fn a_forced_cost_takes_the_bucket_below_zero() {
    use crate::algorithm::table::run_forced;
    // Capacity 5, 10 per second: one token every 100 ms.
    let bucket = TokenBucket::new(5, 10, S).unwrap();
    let last = run_forced(
        &bucket,
        &[
            (0, 3, true, false, 2, None, 300 * MS),
            // 3 below zero: full again in 800 ms, one more in 400 ms.
            (0, 5, true, true, 0, Some(400 * MS), 800 * MS),
            (0, 1, false, true, 0, Some(400 * MS), 800 * MS),
            (399 * MS, 1, false, true, 0, Some(MS), 401 * MS),
            (400 * MS, 1, false, false, 0, None, 500 * MS),
        ],
    );
    // The debt is the instant the bucket is full again, further ahead: the
    // encoding of a bucket not in debt is unchanged.
    let mut buf = [0u8; STATE_BUF_LEN];
    let n = TokenBucket::encode(&last.unwrap(), &mut buf);
    assert_eq!(&buf[..n], format!("{}", T0 + 900 * MS).as_bytes());
    // A third of a token: exact in debt too.
    let thirds = TokenBucket::new(3, 3, S).unwrap();
    let out = crate::algorithm::forced(&thirds, None, T0, 4).unwrap();
    assert_eq!(
        out.update.unwrap().state,
        FullAt {
            full_at_us: T0 + 1_333_333,
            remainder: 1
        }
    );
    assert_eq!(out.decision.retry_after_us, Some(666_667));
    // Past the horizon: an error.
    let slow = TokenBucket::new(1, 1, crate::time::MAX_PERIOD_US).unwrap();
    assert_eq!(
        crate::algorithm::forced(&slow, None, T0, 2),
        Err(Error::ForceTooMuch {
            why: crate::error::FORCE_PAST_HORIZON
        })
    );
}
