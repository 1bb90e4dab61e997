//! Unit tests of `sliding_window`.

use super::*;

#[test]
fn a_bucketed_state_is_named_as_such() {
    let mut bucketed = Vec::new();
    let bw = super::super::bucket_window::BucketWindow::new(5, 1_000_000, 10).unwrap();
    let u = bw.decide(None, 1_000_000, 1).unwrap().update.unwrap();
    super::super::bucket_window::encode(&u.state, &mut bucketed);
    assert_eq!(SlidingWindow::decode(&bucketed), None);
    assert_eq!(
        SlidingWindow::mismatch(&bucketed),
        Some(Error::BucketsMismatch {
            stored: "with BUCKETS"
        })
    );
    assert_eq!(SlidingWindow::mismatch(b"foo"), None);
}

use crate::algorithm::table::{run, MS, S, T0};

#[test]
fn a_refund_lowers_the_current_windows_count() {
    let sw = SlidingWindow::new(4, S).unwrap();
    let s = WindowCounts {
        window_start_us: T0,
        previous: 2,
        current: 3,
    };
    // Half-way: the estimate is 2 × 0.5 + 3 = 4; giving 2 back leaves 2.
    let r = sw.refund(Some(s), T0 + 500 * MS, 2).unwrap();
    let back = WindowCounts {
        window_start_us: T0,
        previous: 2,
        current: 1,
    };
    assert_eq!(
        r.write,
        RefundWrite::Set(Update {
            state: back,
            expire_at_us: T0 + 2 * S
        })
    );
    assert_eq!(
        (
            r.decision.limited,
            r.decision.remaining,
            r.decision.retry_after_us
        ),
        (false, 2, None)
    );
    // Only the current window gives back: the previous count stays.
    let r = sw.refund(Some(s), T0 + 500 * MS, 9).unwrap();
    assert!(
        matches!(r.write, RefundWrite::Set(u) if u.state.current == 0 && u.state.previous == 2)
    );
    let empty = WindowCounts {
        window_start_us: T0,
        previous: 0,
        current: 3,
    };
    assert_eq!(
        sw.refund(Some(empty), T0, 3).unwrap().write,
        RefundWrite::Delete
    );
    assert_eq!(sw.refund(None, T0, 1).unwrap().write, RefundWrite::Nothing);
}

#[test]
fn a_forced_count_past_the_limit_weighs_on_the_next_window() {
    use crate::algorithm::table::run_forced;
    run_forced(
        &SlidingWindow::new(10, S).unwrap(),
        &[
            (0, 10, true, false, 0, None, 2 * S),
            // 20 in this window: one more fits once they weigh 9, 55 %
            // into the next one.
            (0, 10, true, true, 0, Some(1_550 * MS), 2 * S),
            (S, 1, false, true, 0, Some(550 * MS), S),
            (1_549 * MS, 1, false, true, 0, Some(MS), 451 * MS),
            (1_550 * MS, 1, false, false, 0, None, 1_450 * MS),
        ],
    );
}

#[test]
fn denies_the_edge_burst() {
    // 2 per 1 s: two at 0.8 s are admitted; at 1.1 s the previous window
    // still weighs 2 × 0.9 = 1.8, so neither of the next two fits…
    run(
        &SlidingWindow::new(2, S).unwrap(),
        &[
            (800 * MS, 1, false, 1, None, S + 200 * MS),
            (800 * MS, 1, false, 0, None, S + 200 * MS),
            // …until the weight drops to 0.5 at 1.5 s: retry 400 ms.
            (1_100 * MS, 1, true, 0, Some(400 * MS), 900 * MS),
            (1_100 * MS, 1, true, 0, Some(400 * MS), 900 * MS),
            (1_500 * MS, 1, false, 0, None, 1_500 * MS),
        ],
    );
}

#[test]
fn the_retry_may_fall_in_the_next_window() {
    // 10 per 1 s; 10 taken at 0.5 s. At 0.6 s a cost of 3 fits only when
    // the 10 weigh ≤ 7: 30 % into the next window (1.3 s).
    run(
        &SlidingWindow::new(10, S).unwrap(),
        &[
            (500 * MS, 10, false, 0, None, 1_500 * MS),
            (600 * MS, 3, true, 0, Some(700 * MS), 1_400 * MS),
            (1_299 * MS, 3, true, 2, Some(MS), 701 * MS), // estimate 7.01
            (1_300 * MS, 3, false, 0, None, 1_700 * MS),
        ],
    );
    // A cost of the whole limit waits until both windows are empty.
    run(
        &SlidingWindow::new(10, S).unwrap(),
        &[
            (0, 1, false, 9, None, 2 * S),
            (0, 10, true, 9, Some(2 * S), 2 * S),
        ],
    );
}

#[test]
fn remaining_is_the_floor_of_limit_minus_estimate() {
    // 5 per 1 s, 3 in the previous window, at 0.5 s: estimate 1.5 → 3.
    let sw = SlidingWindow::new(5, S).unwrap();
    let prev = WindowCounts {
        window_start_us: T0 - S,
        previous: 0,
        current: 3,
    };
    let d = sw.decide(Some(prev), T0 + 500 * MS, 1).unwrap().decision;
    assert_eq!((d.limited, d.remaining), (false, 2)); // 5 − 2.5
    let d = sw.decide(Some(prev), T0 + 500 * MS, 4).unwrap().decision;
    assert_eq!(
        (d.limited, d.remaining, d.retry_after_us),
        (true, 3, Some(S / 6 + 1))
    );
}

#[test]
fn costs_above_the_limit_can_never_be_allowed() {
    run(
        &SlidingWindow::new(3, S).unwrap(),
        &[(0, 4, true, 3, None, 0)],
    );
}

#[test]
fn clock_stepping_back_reads_the_stored_window_from_its_start() {
    let sw = SlidingWindow::new(2, S).unwrap();
    let s = sw
        .decide(None, T0 + 5 * S, 2)
        .unwrap()
        .update
        .unwrap()
        .state;
    let d = sw.decide(Some(s), T0, 1).unwrap().decision;
    assert!(d.limited);
    assert!(
        d.retry_after_us.unwrap() > 5 * S && d.reset_after_us == 7 * S,
        "{d:?}"
    );
}

#[test]
fn state_codec_round_trips_and_rejects_foreign_values() {
    let mut buf = [0u8; STATE_BUF_LEN];
    let s = WindowCounts {
        window_start_us: 1_763_700_000_000_000,
        previous: 7,
        current: 42,
    };
    let n = SlidingWindow::encode(&s, &mut buf);
    assert_eq!(&buf[..n], b"1763700000000000:7:42");
    assert_eq!(SlidingWindow::decode(&buf[..n]), Some(s));
    for bad in [&b"42"[..], b"1:2", b"1:2:3:4", b"::", b"a:1:2", b"1:-2:3"] {
        assert_eq!(SlidingWindow::decode(bad), None, "{bad:?}");
    }
}
