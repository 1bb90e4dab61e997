//! Unit tests of `concurrency`.

use super::*;
use crate::algorithm::table::{S, T0};

fn set<'s>(slots: &'s [(i64, &'s str)], id: &'s str) -> Slots<'s> {
    Slots { slots, id }
}

/// Applies `update` for the lease `id` to `slots` (the reference of
/// what an update means).
fn apply(slots: &mut Vec<(i64, &'static str)>, id: &'static str, u: &LeaseUpdate) {
    slots.sort_unstable();
    let mut removed = 0;
    slots.retain(|&(t, who)| {
        let go = who != id && t <= u.expired_through_us && removed < u.remove_expired_at_most;
        removed += i64::from(go);
        !go
    });
    slots.retain(|&(_, who)| who != id);
    for _ in 0..u.slots {
        slots.push((u.expires_at_us, id));
    }
}

#[test]
fn acquire_renew_release_one_limiter() {
    let c = Concurrency::new(3, 10 * S).unwrap();
    let mut slots: Vec<(i64, &'static str)> = Vec::new();
    // (at, id, op, n, limited, remaining, retry, reset)
    type Case = (i64, &'static str, LeaseOp, i64, bool, i64, Option<i64>, i64);
    use LeaseOp::*;
    let cases: &[Case] = &[
        (0, "a", Acquire, 1, false, 2, None, 10 * S),
        (S, "b", Acquire, 1, false, 1, None, 10 * S),
        // A retried acquire renews: no second slot.
        (2 * S, "b", Acquire, 1, false, 1, None, 10 * S),
        (2 * S, "c", Acquire, 2, true, 1, Some(8 * S), 10 * S),
        (3 * S, "c", Acquire, 4, true, 1, None, 9 * S),
        (3 * S, "c", Acquire, 1, false, 0, None, 10 * S),
        (4 * S, "d", Acquire, 1, true, 0, Some(6 * S), 9 * S),
        // A lease that is not held is not renewed.
        (4 * S, "d", Renew, 1, true, 0, None, 9 * S),
        (4 * S, "a", Renew, 1, false, 0, None, 10 * S),
        (5 * S, "b", Release, 1, false, 1, None, 9 * S),
        // Releasing again (or an unknown id) answers what is free.
        (5 * S, "b", Release, 1, false, 1, None, 9 * S),
        (5 * S, "zz", Release, 1, false, 1, None, 9 * S),
        // c's lease expired at 13 s: its slot is free without a release.
        (13 * S, "d", Acquire, 2, false, 0, None, 10 * S),
        (13 * S, "c", Renew, 1, true, 0, None, 10 * S),
        (30 * S, "d", Release, 1, false, 3, None, 0),
    ];
    for (i, &(at, id, op, n, limited, remaining, retry, reset)) in cases.iter().enumerate() {
        let now = T0 + at;
        let out = c.decide(&set(&slots, id), now, op, n).unwrap();
        let d = out.decision;
        assert_eq!(
            (d.limited, d.remaining, d.retry_after_us, d.reset_after_us),
            (limited, remaining, retry, reset),
            "case {i}"
        );
        assert_eq!(d.limited, out.update.is_none() && op != Release, "case {i}");
        if let Some(u) = out.update {
            apply(&mut slots, id, &u);
            let live = slots.iter().filter(|(t, _)| *t > now).count() as i64;
            assert!(live <= 3, "case {i}: {live} slots held");
            assert_eq!(3 - live, d.remaining, "case {i}");
            match u.expire_at_us {
                Some(at) => assert_eq!(at - now, d.reset_after_us, "case {i}"),
                None => assert_eq!(live, 0, "case {i}"),
            }
        }
    }
}

#[test]
fn release_of_the_last_lease_deletes() {
    let c = Concurrency::new(2, 10 * S).unwrap();
    let slots = [(T0 + 5 * S, "a"), (T0 - S, "b")];
    let out = c
        .decide(&set(&slots, "a"), T0, LeaseOp::Release, 1)
        .unwrap();
    let u = out.update.unwrap();
    assert_eq!((u.slots, u.held_slots, u.expire_at_us), (0, 1, None));
    // An id holding nothing writes nothing.
    let out = c
        .decide(&set(&slots, "x"), T0, LeaseOp::Release, 1)
        .unwrap();
    assert_eq!(out.update, None);
    assert_eq!(out.decision.remaining, 1);
}

#[test]
fn reset_held_is_the_leases_held_now_not_the_one_taken() {
    let c = Concurrency::new(3, 3600 * S).unwrap();
    // (slots, id, reset_held)
    type Case = (&'static [(i64, &'static str)], &'static str, i64);
    let cases: &[Case] = &[
        (&[], "c", 0),
        (&[(T0 - S, "a")], "c", 0),
        (&[(T0 + 5 * S, "a"), (T0 + 2 * S, "b")], "c", 5 * S),
        // The call's own live lease counts: it is held.
        (&[(T0 + 5 * S, "a"), (T0 + 9 * S, "c")], "c", 9 * S),
    ];
    for (i, &(slots, id, reset_held)) in cases.iter().enumerate() {
        for op in [LeaseOp::Acquire, LeaseOp::Renew, LeaseOp::Release] {
            let out = c.decide(&set(slots, id), T0, op, 1).unwrap();
            assert_eq!(out.reset_held_us, reset_held, "case {i} {op:?}");
        }
        let out = c.decide(&set(slots, id), T0, LeaseOp::Acquire, 1).unwrap();
        assert_eq!(out.decision.reset_after_us, 3600 * S, "case {i}");
    }
}

#[test]
fn bounds() {
    assert!(Concurrency::new(0, S).is_err());
    assert!(Concurrency::new(100_001, S).is_err());
    assert!(Concurrency::new(1, 0).is_err());
    assert!(Concurrency::new(1, crate::time::MAX_PERIOD_US + 1).is_err());
    assert_eq!(LeaseOp::of(b"acquire"), Some(LeaseOp::Acquire));
    assert_eq!(LeaseOp::of(b"RENEW"), Some(LeaseOp::Renew));
    assert_eq!(LeaseOp::of(b"Release"), Some(LeaseOp::Release));
    assert_eq!(LeaseOp::of(b"TAKE"), None);
}
