//! Unit tests of `gcra`.

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
