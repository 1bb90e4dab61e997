//! Unit tests of `bucket_window`.

use super::*;
use crate::algorithm::table::{MS, S, T0};
use proptest::prelude::*;

/// Runs `(at_us, cost)` requests from no key; the decisions and the
/// state after each.
fn run(bw: &BucketWindow, requests: &[(i64, i64)]) -> Vec<(Decision, Option<BucketCounts>)> {
    let mut state: Option<(BucketCounts, i64)> = None;
    let mut out = Vec::new();
    for &(at, cost) in requests {
        if state.is_some_and(|(_, expire)| at >= expire) {
            state = None;
        }
        let o = bw.decide(state.as_ref().map(|(s, _)| s), at, cost).unwrap();
        if let Some(u) = o.update {
            state = Some((u.state, u.expire_at_us));
        }
        out.push((o.decision, state.map(|(s, _)| s)));
    }
    out
}

#[test]
fn parameters() {
    assert_eq!(BucketWindow::new(5, 60 * S, 60).unwrap().sub_window_us(), S);
    // ⌈1 s / 7⌉.
    assert_eq!(BucketWindow::new(5, S, 7).unwrap().sub_window_us(), 142_858);
    for (limit, window, k) in [(0, S, 2), (5, 0, 2), (5, S, 1), (5, S, 61), (1 << 32, S, 2)] {
        assert!(
            BucketWindow::new(limit, window, k).is_err(),
            "{limit} {window} {k}"
        );
    }
    assert!(BucketWindow::new(u32::MAX.into(), S, 2).is_ok());
}

#[test]
fn the_seeds_edge_burst_is_refused_as_the_sliding_log_refuses_it() {
    // 2 per minute, 60 one-second counters: 00:50 and 01:05 pass, the
    // third at 01:05 does not; at 01:50 (00:50's second has left) it does.
    let bw = BucketWindow::new(2, 60 * S, 60).unwrap();
    let minute = T0 - T0.rem_euclid(60 * S);
    let got = run(
        &bw,
        &[
            (minute + 50 * S, 1),
            (minute + 65 * S, 1),
            (minute + 65 * S, 1),
            (minute + 110 * S - 1, 1),
            (minute + 110 * S, 1),
        ],
    );
    let limited: Vec<bool> = got.iter().map(|(d, _)| d.limited).collect();
    assert_eq!(limited, [false, false, true, true, false]);
    assert_eq!(got[2].0.retry_after_us, Some(45 * S));
    assert_eq!(got[2].0.reset_after_us, 60 * S); // 01:05's second leaves at 02:05
                                                 // The fixed window admits that burst, and 4 in 15 s with 2 more.
}

#[test]
fn counts_are_kept_per_sub_window_and_leave_one_by_one() {
    // 10 per second in 10 sub-windows of 100 ms.
    let bw = BucketWindow::new(10, S, 10).unwrap();
    let base = T0; // T0 is a whole second
    let got = run(
        &bw,
        &[
            (base, 4),               // sub-window 0: 4
            (base + 250 * MS, 3),    // sub-window 2: 3
            (base + 900 * MS, 3),    // sub-window 9: 3 → 10
            (base + 950 * MS, 1),    // refused: retry when sub-window 0 leaves (at 1.0 s)
            (base + S, 4),           // sub-window 0 left: 6 + 4 = 10
            (base + S + 50 * MS, 1), // refused until sub-window 2 leaves (1.2 s)
        ],
    );
    let summary: Vec<(bool, i64, Option<i64>, i64)> = got
        .iter()
        .map(|(d, _)| (d.limited, d.remaining, d.retry_after_us, d.reset_after_us))
        .collect();
    assert_eq!(
        summary,
        [
            // The newest count leaves k sub-windows after its own.
            (false, 6, None, S),
            (false, 3, None, 950 * MS),
            (false, 0, None, S),
            (true, 0, Some(50 * MS), 950 * MS),
            (false, 0, None, S),
            (true, 0, Some(150 * MS), 950 * MS),
        ]
    );
    // Newest first: 1.0 s (4), 0.9 s (3), then 0.2 s (3).
    let state = got[4].1.unwrap();
    assert_eq!(&state.counts[..state.len], &[4, 3, 0, 0, 0, 0, 0, 0, 3]);
}

#[test]
fn the_whole_limit_at_once_on_an_empty_limiter_and_no_write_for_nothing() {
    let bw = BucketWindow::new(5, S, 10).unwrap();
    assert_eq!(bw.limit(), 5);
    let first = bw.decide(None, T0, 5).unwrap();
    assert!(!first.decision.limited);
    assert_eq!(first.decision.remaining, 0);
    let state = first.update.expect("a write").state;
    // A call of cost 0 decides without writing.
    let zero = bw.decide(Some(&state), T0 + 10 * MS, 0).unwrap();
    assert!(!zero.decision.limited);
    assert_eq!(zero.update, None);
    assert_eq!(bw.decide(None, T0, 0).unwrap().update, None);
}

#[test]
fn a_refund_gives_back_from_the_newest_sub_windows() {
    let bw = BucketWindow::new(10, S, 10).unwrap();
    let s = run(&bw, &[(T0, 3), (T0 + 500 * MS, 2)])[1].1.unwrap();
    let r = bw.refund(Some(&s), T0 + 500 * MS, 3).unwrap();
    let RefundWrite::Set(u) = r.write else {
        panic!("{:?}", r.write)
    };
    assert_eq!(&u.state.counts[..u.state.len], &[2]);
    assert_eq!(u.state.newest_index, s.newest_index - 5);
    assert_eq!(u.expire_at_us, T0 + S);
    assert_eq!((r.decision.remaining, r.decision.limited), (8, false));
    assert_eq!(
        bw.refund(Some(&s), T0 + 500 * MS, 99).unwrap().write,
        RefundWrite::Delete
    );
    assert_eq!(bw.refund(None, T0, 1).unwrap().write, RefundWrite::Nothing);
}

#[test]
fn another_sub_window_length_is_read_conservatively() {
    let ten = BucketWindow::new(10, S, 10).unwrap();
    let s = run(&ten, &[(T0, 6), (T0 + 600 * MS, 3)])[1].1.unwrap();
    // Read with 4 sub-windows of 250 ms at 0.7 s: all 9 still count.
    let four = BucketWindow::new(10, S, 4).unwrap();
    let d = four.decide(Some(&s), T0 + 700 * MS, 2).unwrap().decision;
    assert!(d.limited);
    assert_eq!(d.remaining, 1);
    // At 1.1 s the window is [0.1 s, 1.1 s): the sub-window [0, 0.1 s)
    // has just left it, only the 3 of 0.6 s count.
    let d = four.decide(Some(&s), T0 + 1_100 * MS, 7).unwrap().decision;
    assert!(!d.limited);
    assert_eq!(d.remaining, 0);
    let d = four
        .decide(Some(&s), T0 + 1_100 * MS - 1, 7)
        .unwrap()
        .decision;
    assert!(d.limited, "a µs earlier the 6 of [0, 0.1 s) still count");
}

#[test]
fn codec_round_trips_and_refuses_foreign_values() {
    let bw = BucketWindow::new(1000, 60 * S, 60).unwrap();
    let s = run(&bw, &[(T0, 7), (T0 + 3 * S, 900)])[1].1.unwrap();
    let mut out = Vec::new();
    encode(&s, &mut out);
    assert_eq!(out.len(), 1 + 3 + 5 + 4 * 4);
    assert!(is_bucket_state(&out));
    assert_eq!(decode(&out), Some(s));
    for bad in [
        &b""[..],
        b"K",
        b"K\x01",
        b"K\x01\x02",
        b"K\x01\x02\x01\x02\x03",
        b"K\x00\x02\x01\x00\x00\x00",
        b"K\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
        b"1763700000000000:1:2",
    ] {
        assert_eq!(decode(bad), None, "{bad:?}");
    }
    let mut many = vec![b'K', 1, 2];
    many.extend(std::iter::repeat_n(1u8, 4 * 61));
    assert_eq!(decode(&many), None);
    // The extremes: every varint length, the 10th byte's one bit, and
    // the longest state, which MAX_STATE_LEN holds exactly.
    for (sub_us, newest_index) in [
        (1, 0),
        (127, 63),
        (128, 64),
        (255, -65),
        (16_384, 1 << 40),
        (i64::MAX, i64::MIN),
        (i64::MAX, i64::MAX),
    ] {
        let longest = BucketCounts {
            sub_us,
            newest_index,
            len: MAX_BUCKETS as usize,
            counts: [u32::MAX; MAX_BUCKETS as usize],
        };
        out.clear();
        encode(&longest, &mut out);
        assert_eq!(decode(&out), Some(longest), "{sub_us} {newest_index}");
        if newest_index == i64::MIN {
            assert_eq!(out.len(), MAX_STATE_LEN);
        }
    }
    // A 10th byte above 1 is past 64 bits.
    let mut past = vec![b'K', 1];
    past.extend([0xff; 9]);
    past.push(0x02);
    past.extend([0; 4]);
    assert_eq!(decode(&past), None);
    past[11] = 0x01;
    assert!(decode(&past).is_some());
}

fn timeline() -> impl Strategy<Value = (i64, i64, i64, Vec<(i64, i64)>)> {
    (1i64..12, 1i64..5_000, 2i64..=12).prop_flat_map(|(limit, window_ms, k)| {
        let window_us = window_ms * 1_000 + 7;
        (
            Just(limit),
            Just(window_us),
            Just(k),
            prop::collection::vec((0..window_us / 3 + 2, 0..=limit + 1), 1..40),
        )
    })
}

proptest! {
    /// Over any interval of length `window`, at most `limit` plus the
    /// count of the one sub-window the interval starts in are admitted.
    #[test]
    fn admits_at_most_limit_plus_one_sub_window_per_window((limit, window_us, k, reqs) in timeline()) {
        let bw = BucketWindow::new(limit, window_us, k).unwrap();
        let s = bw.sub_window_us();
        let mut now = T0;
        let mut state: Option<(BucketCounts, i64)> = None;
        let mut admitted: Vec<(i64, i64)> = Vec::new();
        for (dt, cost) in reqs {
            now += dt;
            if state.is_some_and(|(_, e)| now >= e) {
                state = None;
            }
            let o = bw.decide(state.as_ref().map(|(s, _)| s), now, cost).unwrap();
            if !o.decision.limited && cost > 0 {
                admitted.push((now, cost));
            }
            if let Some(u) = o.update {
                state = Some((u.state, u.expire_at_us));
            }
        }
        for &(t, _) in &admitted {
            let in_window: i64 = admitted.iter().filter(|(a, _)| *a >= t && *a < t + window_us).map(|(_, c)| c).sum();
            let first_sub: i64 = admitted.iter().filter(|(a, _)| a.div_euclid(s) == t.div_euclid(s) && *a >= t).map(|(_, c)| c).sum();
            prop_assert!(in_window <= limit + first_sub, "{} in [{}, +{}) with {} in its first sub-window", in_window, t, window_us, first_sub);
        }
    }

    /// A refused request is allowed at `now + retry_after` and refused
    /// 1 µs (and 1 ms, the replies' unit) earlier; the key expires exactly
    /// when it reads as no key.
    #[test]
    fn retry_is_tight_and_expiry_exact((limit, window_us, k, reqs) in timeline()) {
        let bw = BucketWindow::new(limit, window_us, k).unwrap();
        let mut now = T0;
        let mut state: Option<(BucketCounts, i64)> = None;
        for (dt, cost) in reqs {
            now += dt;
            if state.is_some_and(|(_, e)| now >= e) {
                state = None;
            }
            let before = state.as_ref().map(|(s, _)| *s);
            let o = bw.decide(before.as_ref(), now, cost).unwrap();
            if let (true, Some(retry)) = (o.decision.limited, o.decision.retry_after_us) {
                prop_assert!(retry >= 1);
                prop_assert!(!bw.decide(before.as_ref(), now + retry, cost).unwrap().decision.limited);
                prop_assert!(bw.decide(before.as_ref(), now + retry - 1, cost).unwrap().decision.limited);
                let ms = crate::time::ceil_ms(retry) * 1_000;
                prop_assert!(!bw.decide(before.as_ref(), now + ms, cost).unwrap().decision.limited);
                prop_assert!(bw.decide(before.as_ref(), now + ms - 1_000, cost).unwrap().decision.limited);
            }
            if let Some(u) = o.update {
                prop_assert_eq!(u.expire_at_us - now, o.decision.reset_after_us);
                for c in [0, 1, limit, limit + 1] {
                    prop_assert_eq!(
                        bw.decide(Some(&u.state), u.expire_at_us, c).unwrap().decision,
                        bw.decide(None, u.expire_at_us, c).unwrap().decision
                    );
                }
                prop_assert!(bw.decide(Some(&u.state), u.expire_at_us - 1, 0).unwrap().decision.remaining < limit);
                let mut bytes = Vec::new();
                encode(&u.state, &mut bytes);
                prop_assert_eq!(decode(&bytes), Some(u.state));
                prop_assert!(bytes.len() <= 1 + 10 + 10 + 4 * k as usize);
                state = Some((u.state, u.expire_at_us));
            }
            // A refund never leaves more than the limit.
            if let Some((s, _)) = state {
                let r = bw.refund(Some(&s), now, 1 + cost).unwrap();
                prop_assert!(r.decision.remaining <= limit && !r.decision.limited);
            }
        }
    }
}
