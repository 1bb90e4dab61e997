//! Unit tests of `sliding_log`.

use super::*;

const S: i64 = 1_000_000;
const MS: i64 = 1_000;
const T0: i64 = 1_763_700_000 * S;

/// `(at_us relative to T0, cost, limited, remaining, retry_after_us, reset_after_us)`
type Case = (i64, i64, bool, i64, Option<i64>, i64);

fn run(sl: &SlidingLog, cases: &[Case]) -> Vec<i64> {
    let mut log = Vec::new();
    for (i, &(at, cost, limited, remaining, retry, reset)) in cases.iter().enumerate() {
        let out = sl.decide(log.as_slice(), T0 + at, cost).unwrap();
        let d = out.decision;
        assert_eq!(
            (d.limited, d.remaining, d.retry_after_us, d.reset_after_us),
            (limited, remaining, retry, reset),
            "case {i}"
        );
        assert_eq!(out.update.is_none(), limited, "case {i}");
        if let Some(u) = out.update {
            assert_eq!(u.expire_at_us - (T0 + at), reset, "case {i}");
            u.apply_to(&mut log);
        }
    }
    log
}

#[test]
fn denies_the_edge_burst() {
    // 2 per 1 s: two at 0.8 s, then at 1.1 s both are still in the window.
    run(
        &SlidingLog::new(2, S).unwrap(),
        &[
            (800 * MS, 1, false, 1, None, S),
            (800 * MS, 1, false, 0, None, S),
            (1_100 * MS, 1, true, 0, Some(700 * MS), 700 * MS),
            (1_100 * MS, 1, true, 0, Some(700 * MS), 700 * MS),
            // An entry exactly one window old is outside.
            (1_800 * MS, 2, false, 0, None, S),
        ],
    );
}

#[test]
fn retry_waits_for_enough_of_the_oldest_entries() {
    let log = run(
        &SlidingLog::new(4, S).unwrap(),
        &[
            (0, 1, false, 3, None, S),
            (100 * MS, 2, false, 1, None, S),
            (200 * MS, 1, false, 0, None, S),
            // A cost of 3 needs the three oldest (0, 0.1, 0.1 s) to leave.
            (300 * MS, 3, true, 0, Some(800 * MS), 900 * MS),
            (300 * MS, 1, true, 0, Some(700 * MS), 900 * MS),
            (300 * MS, 5, true, 0, None, 900 * MS),
            // At 1.0 s the first entry has left; its removal is part of the update.
            (1_000 * MS, 1, false, 0, None, S),
        ],
    );
    assert_eq!(log, [T0 + 100 * MS, T0 + 100 * MS, T0 + 200 * MS, T0 + S]);
}

#[test]
fn limits_are_bounded() {
    assert!(SlidingLog::new(100_000, S).is_ok());
    assert_eq!(
        SlidingLog::new(100_001, S),
        Err(Error::LimitAboveSetting { max: 100_000 })
    );
    assert_eq!(
        SlidingLog::new(0, S),
        Err(Error::OutOfRange {
            arg: "limit",
            bound: ">= 1"
        })
    );
    assert_eq!(
        SlidingLog::new(1, 0),
        Err(Error::BadPeriod { arg: "window" })
    );
}

#[test]
fn stale_entries_are_removed_a_bounded_number_at_a_time() {
    // 10,000 entries that left the window long ago, then two live ones.
    let sl = SlidingLog::new(3, S).unwrap();
    let mut log: Vec<i64> = (0..10_000).map(|i| T0 - 100 * S + i).collect();
    log.extend([T0 - 500 * MS, T0 - 400 * MS]);
    let out = sl.decide(log.as_slice(), T0, 1).unwrap();
    let d = out.decision;
    assert_eq!(
        (d.limited, d.remaining),
        (false, 0),
        "only live entries count"
    );
    let u = out.update.unwrap();
    assert_eq!(u.remove_at_most, 1 + SlidingLog::STALE_REMOVED_PER_CALL);
    u.apply_to(&mut log);
    assert_eq!(log.len(), 10_000 - 129 + 2 + 1);
    // Full now: limited, exact retry (the oldest live entry leaves at +0.5 s).
    let d = sl.decide(log.as_slice(), T0, 1).unwrap().decision;
    assert_eq!((d.limited, d.retry_after_us), (true, Some(500 * MS)));
    // Every later allowed call sheds more, until none is left.
    let mut now = T0 + S;
    while log.first().is_some_and(|&t| t < T0 - 50 * S) {
        let u = sl.decide(log.as_slice(), now, 1).unwrap().update.unwrap();
        u.apply_to(&mut log);
        now += S;
    }
}

#[test]
fn a_log_above_a_lowered_limit_decides_exactly() {
    // Five live entries (the limit was 5), now limit 2: a request of 1
    // is refused until only one entry is left in the window.
    let sl = SlidingLog::new(2, S).unwrap();
    let log: Vec<i64> = (1..=5).map(|i| T0 + i * 100 * MS).collect();
    let d = sl
        .decide(log.as_slice(), T0 + 600 * MS, 1)
        .unwrap()
        .decision;
    assert_eq!((d.limited, d.remaining), (true, 0));
    // Allowed when at most 1 is left: the 2nd newest (T0 + 0.4 s) leaves at T0 + 1.4 s.
    assert_eq!(d.retry_after_us, Some(800 * MS));
    let d = sl
        .decide(log.as_slice(), T0 + 600 * MS, 0)
        .unwrap()
        .decision;
    assert!(d.limited, "a read is refused too while over the limit");
}

#[test]
fn a_refund_removes_the_newest_entries_inside_the_window() {
    let sl = SlidingLog::new(4, S).unwrap();
    assert_eq!(sl.limit(), 4);
    // One stale entry, three live ones.
    let log = [T0 - 2 * S, T0 + 100 * MS, T0 + 200 * MS, T0 + 300 * MS];
    let r = sl.refund(&log[..], T0 + 500 * MS, 2).unwrap();
    assert_eq!(
        (r.remove_newest, r.delete, r.expire_at_us),
        (2, false, T0 + 1_100 * MS)
    );
    assert_eq!(
        (
            r.decision.limited,
            r.decision.remaining,
            r.decision.retry_after_us,
            r.decision.reset_after_us
        ),
        (false, 3, None, 600 * MS)
    );
    // More than is inside the window: all of it goes, with the key (the
    // stale entry left behind sets no expiry and no reset).
    let r = sl.refund(&log[..], T0 + 500 * MS, 9).unwrap();
    assert_eq!(
        (r.remove_newest, r.delete, r.decision.remaining),
        (3, true, 4)
    );
    assert_eq!(
        (r.expire_at_us, r.decision.reset_after_us),
        (T0 + 500 * MS, 0)
    );
    // Nothing inside the window (or no key): nothing changes.
    let r = sl.refund(&log[..], T0 + 2 * S, 1).unwrap();
    assert_eq!((r.remove_newest, r.delete), (0, false));
    let r = sl.refund(&[][..], T0, 1).unwrap();
    assert_eq!(
        (r.remove_newest, r.delete, r.decision.remaining),
        (0, false, 4)
    );
}

#[test]
fn clock_stepping_back_logs_at_the_newest_entry() {
    let sl = SlidingLog::new(3, S).unwrap();
    let log = [T0 + 5 * S];
    let out = sl.decide(&log[..], T0, 1).unwrap();
    let u = out.update.unwrap();
    assert_eq!(u.add_at_us, T0 + 5 * S);
    assert_eq!(out.decision.reset_after_us, 6 * S);
    let full = [T0 + 5 * S; 3];
    let d = sl.decide(&full[..], T0, 1).unwrap().decision;
    assert_eq!(
        (d.limited, d.retry_after_us, d.reset_after_us),
        (true, Some(6 * S), 6 * S)
    );
}
