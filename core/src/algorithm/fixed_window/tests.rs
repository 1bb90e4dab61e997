//! Unit tests of `fixed_window`.

use super::*;

use crate::algorithm::table::{run, MS, S, T0};

#[test]
fn a_refund_lowers_the_current_windows_count() {
    let fw = FixedWindow::new(5, S).unwrap();
    let s = WindowCount {
        window_start_us: T0,
        count: 4,
        first: false,
        debt: false,
    };
    let r = fw.refund(Some(s), T0 + 200 * MS, 3).unwrap();
    let back = WindowCount {
        window_start_us: T0,
        count: 1,
        first: false,
        debt: false,
    };
    assert_eq!(
        r.write,
        RefundWrite::Set(Update {
            state: back,
            expire_at_us: T0 + S
        })
    );
    assert_eq!(
        (
            r.decision.limited,
            r.decision.remaining,
            r.decision.retry_after_us,
            r.decision.reset_after_us
        ),
        (false, 4, None, 800 * MS)
    );
    assert_eq!(
        fw.refund(Some(s), T0, 9).unwrap().write,
        RefundWrite::Delete
    );
    // A window that is over has nothing to give back.
    assert_eq!(
        fw.refund(Some(s), T0 + S, 1).unwrap().write,
        RefundWrite::Delete
    );
    assert_eq!(fw.refund(None, T0, 1).unwrap().write, RefundWrite::Nothing);
}

#[test]
fn admits_the_edge_burst_of_two_windows() {
    // 2 per 1 s: two at 0.8 s and two at 1.1 s are all admitted.
    run(
        &FixedWindow::new(2, S).unwrap(),
        &[
            (800 * MS, 1, false, 1, None, 200 * MS),
            (800 * MS, 1, false, 0, None, 200 * MS),
            (900 * MS, 1, true, 0, Some(100 * MS), 100 * MS),
            (1_100 * MS, 1, false, 1, None, 900 * MS),
            (1_100 * MS, 1, false, 0, None, 900 * MS),
            (1_999 * MS, 1, true, 0, Some(MS), MS),
        ],
    );
}

#[test]
fn align_first_windows_start_at_the_first_request() {
    // 2 per 1 s, first request 0.8 s into an epoch second: the window is
    // [0.8 s, 1.8 s); the next one opens at the first request after it.
    run(
        &FixedWindow::first(2, S).unwrap(),
        &[
            (800 * MS, 1, false, 1, None, S),
            (900 * MS, 1, false, 0, None, 900 * MS),
            (1_100 * MS, 1, true, 0, Some(700 * MS), 700 * MS),
            (1_799 * MS, 1, true, 0, Some(MS), MS),
            (1_800 * MS, 1, false, 1, None, S),
            (2_500 * MS, 1, false, 0, None, 300 * MS),
            (2_500 * MS, 3, true, 0, None, 300 * MS),
            (4 * S, 2, false, 0, None, S),
        ],
    );
}

#[test]
fn aligned_first_is_first() {
    let epoch = FixedWindow::new(2, S).unwrap();
    assert_eq!(epoch.align(), Align::Epoch);
    assert_eq!(
        epoch.aligned_first().unwrap(),
        FixedWindow::first(2, S).unwrap()
    );
    assert_eq!(epoch.aligned_first().unwrap().align(), Align::First);
}

#[test]
fn a_stored_start_at_now_off_the_window_grid_starts_afresh() {
    // Written with another window length: the stored window starts now,
    // but not where a 1 s window starts, so it is not counted.
    let fw = FixedWindow::new(2, S).unwrap();
    let s = WindowCount {
        window_start_us: T0 + 500 * MS,
        count: 2,
        first: false,
        debt: false,
    };
    let d = fw.decide(Some(s), T0 + 500 * MS, 1).unwrap().decision;
    assert_eq!((d.limited, d.remaining), (false, 1));
}

#[test]
fn a_key_is_never_read_with_the_other_alignment() {
    let epoch = FixedWindow::new(5, S).unwrap();
    let first = FixedWindow::first(5, S).unwrap();
    let e = epoch.decide(None, T0, 1).unwrap().update.unwrap().state;
    let f = first.decide(None, T0, 1).unwrap().update.unwrap().state;
    assert_eq!(
        first.decide(Some(e), T0, 1),
        Err(Error::AlignMismatch { stored: "EPOCH" })
    );
    assert_eq!(
        epoch.decide(Some(f), T0, 1),
        Err(Error::AlignMismatch { stored: "FIRST" })
    );
    assert_eq!(
        epoch.refund(Some(f), T0, 1),
        Err(Error::AlignMismatch { stored: "FIRST" })
    );
    let mut buf = [0u8; STATE_BUF_LEN];
    let n = FixedWindow::encode(&f, &mut buf);
    assert_eq!(&buf[..n], format!("F{T0}:1").as_bytes());
    assert_eq!(FixedWindow::decode(&buf[..n]), Some(f));
    for bad in [&b"F"[..], b"F:1", b"FF1:1", b"f1:1", b"F-1:1"] {
        assert_eq!(FixedWindow::decode(bad), None, "{bad:?}");
    }
}

#[test]
fn align_first_refunds_lower_the_open_windows_count() {
    let first = FixedWindow::first(5, S).unwrap();
    let s = first.decide(None, T0, 4).unwrap().update.unwrap().state;
    let r = first.refund(Some(s), T0 + 300 * MS, 3).unwrap();
    assert_eq!(
        r.write,
        RefundWrite::Set(Update {
            state: WindowCount { count: 1, ..s },
            expire_at_us: T0 + S
        })
    );
    assert_eq!(r.decision.remaining, 4);
    assert_eq!(
        first.refund(Some(s), T0 + S, 1).unwrap().write,
        RefundWrite::Delete
    );
}

#[test]
fn costs_count_and_a_cost_above_the_limit_is_never_allowed() {
    run(
        &FixedWindow::new(5, S).unwrap(),
        &[
            (0, 6, true, 5, None, 0),
            (0, 3, false, 2, None, S),
            (10 * MS, 3, true, 2, Some(990 * MS), 990 * MS),
            (10 * MS, 6, true, 2, None, 990 * MS),
            (10 * MS, 2, false, 0, None, 990 * MS),
        ],
    );
}

#[test]
fn a_count_from_another_window_is_never_reused() {
    let fw = FixedWindow::new(1, 1_500).unwrap(); // 1.5 ms windows
    let s = fw.decide(None, 0, 1).unwrap().update.unwrap();
    assert_eq!(s.expire_at_us, 1_500);
    // At 1.5 ms the key may still be readable (ms expiry): a new window.
    assert!(!fw.decide(Some(s.state), 1_500, 1).unwrap().decision.limited);
    assert!(fw.decide(Some(s.state), 1_499, 1).unwrap().decision.limited);
}

#[test]
fn changing_the_window_of_a_key_starts_a_new_window_not_a_far_future_one() {
    // Written with 1 s windows, read with 60 s ones.
    let one_second = FixedWindow::new(2, S).unwrap();
    let s = one_second
        .decide(None, T0 + 37 * S, 2)
        .unwrap()
        .update
        .unwrap()
        .state;
    let minute = FixedWindow::new(2, 60 * S).unwrap();
    let out = minute.decide(Some(s), T0 + 37 * S + 500 * MS, 1).unwrap();
    assert!(!out.decision.limited);
    assert_eq!(out.decision.reset_after_us, 60 * S - 37 * S - 500 * MS);
    assert_eq!(out.update.unwrap().expire_at_us, T0 + 60 * S);
}

#[test]
fn clock_stepping_back_keeps_counting_the_later_window() {
    let fw = FixedWindow::new(2, S).unwrap();
    let s = fw
        .decide(None, T0 + 5 * S, 2)
        .unwrap()
        .update
        .unwrap()
        .state;
    let d = fw.decide(Some(s), T0, 1).unwrap().decision;
    assert!(d.limited);
    assert_eq!((d.retry_after_us, d.reset_after_us), (Some(6 * S), 6 * S));
}

#[test]
fn state_codec_round_trips_and_rejects_foreign_values() {
    let mut buf = [0u8; STATE_BUF_LEN];
    let s = WindowCount {
        window_start_us: 1_763_700_000_000_000,
        count: 42,
        first: false,
        debt: false,
    };
    let n = FixedWindow::encode(&s, &mut buf);
    assert_eq!(&buf[..n], b"1763700000000000:42");
    assert_eq!(FixedWindow::decode(&buf[..n]), Some(s));
    for bad in [
        &b"42"[..],
        b"",
        b":",
        b"1:",
        b":1",
        b"1:2:3",
        b"a:1",
        b"-1:1",
    ] {
        assert_eq!(FixedWindow::decode(bad), None, "{bad:?}");
    }
}

#[test]
fn a_forced_count_past_the_limit_is_repaid_by_the_next_windows() {
    use crate::algorithm::table::run_forced;
    // 10 per second.
    for fw in [
        FixedWindow::new(10, S).unwrap(),
        FixedWindow::first(10, S).unwrap(),
    ] {
        run_forced(
            &fw,
            &[
                (0, 8, true, false, 2, None, S),
                // 23 counted: 13 past the limit. The next window repays
                // 10 (3 still owed), the one after is free again.
                (0, 15, true, true, 0, Some(2 * S), 3 * S),
                (0, 1, false, true, 0, Some(2 * S), 3 * S),
                // The next window starts in debt: 13 counted.
                (S, 1, false, true, 0, Some(S), 2 * S),
                (2 * S - 1, 1, false, true, 0, Some(1), S + 1),
                // Then 3 are still counted.
                (2 * S, 1, false, false, 6, None, S),
            ],
        );
    }
    // A count within the limit is never carried (old keys read as before),
    // even under a lower limit: only a state written in debt carries.
    let fw = FixedWindow::new(10, S).unwrap();
    let full = WindowCount {
        window_start_us: T0,
        count: 10,
        first: false,
        debt: false,
    };
    let d = fw.decide(Some(full), T0 + S, 10).unwrap().decision;
    assert!(!d.limited);
    let lower = FixedWindow::new(4, S).unwrap();
    let d = lower.decide(Some(full), T0 + S, 4).unwrap().decision;
    assert!(!d.limited);
    let mut buf = [0u8; crate::algorithm::STATE_BUF_LEN];
    let n = FixedWindow::encode(&WindowCount { debt: true, ..full }, &mut buf);
    assert_eq!(&buf[..n], format!("{T0}:10:D").as_bytes());
    // The ALIGN FIRST chain: a window in debt at T0 + 0.5 s rolls on at
    // T0 + 1.5 s, T0 + 2.5 s…; once repaid, the next request starts one.
    let first = FixedWindow::first(2, S).unwrap();
    let s = crate::algorithm::forced(&first, None, T0 + 500 * MS, 5)
        .unwrap()
        .update
        .unwrap();
    assert_eq!(s.expire_at_us, T0 + 3_500 * MS);
    let d = first.decide(Some(s.state), T0 + 2_600 * MS, 1).unwrap();
    assert_eq!(
        (d.decision.limited, d.decision.remaining),
        (false, 0),
        "one owed in the third window, one taken"
    );
    assert_eq!(d.update.unwrap().state.window_start_us, T0 + 2_500 * MS);
    let d = first.decide(Some(s.state), T0 + 3_600 * MS, 1).unwrap();
    assert_eq!(d.update.unwrap().state.window_start_us, T0 + 3_600 * MS);
    // A refund lowers the debt.
    let r = fw
        .refund(
            Some(WindowCount {
                window_start_us: T0,
                count: 25,
                first: false,
                debt: true,
            }),
            T0 + S,
            4,
        )
        .unwrap();
    assert_eq!(
        r.write,
        RefundWrite::Set(Update {
            state: WindowCount {
                window_start_us: T0 + S,
                count: 11,
                first: false,
                debt: true,
            },
            expire_at_us: T0 + 3 * S
        })
    );
    // Past the horizon: an error.
    let yearly = FixedWindow::new(1, crate::time::MAX_PERIOD_US).unwrap();
    assert_eq!(
        crate::algorithm::forced(&yearly, None, T0, 2),
        Err(Error::ForceTooMuch {
            why: crate::error::FORCE_PAST_HORIZON
        })
    );
}

#[test]
fn a_full_calendar_window_refuses_until_its_boundary_and_admits_after_it() {
    use crate::calendar::{Calendar, Unit, Zone};
    // 2 per Paris day; T0 + `at` runs from 2026-10-25 22:59:59.000 UTC to
    // just after midnight: the 25-hour day ends at 2026-10-25T23:00:00Z.
    let paris = Zone::parse(b"Europe/Paris").unwrap();
    let fw = FixedWindow::calendar(
        2,
        Calendar {
            unit: Unit::Day,
            zone: paris,
        },
    )
    .unwrap();
    let boundary = 1_792_969_200 * S; // 2026-10-25T23:00:00Z
    let at = |us: i64| boundary + us - T0;
    run(
        &fw,
        &[
            (at(-S), 1, false, 1, None, S),
            (at(-S), 1, false, 0, None, S),
            (at(-1), 1, true, 0, Some(1), 1),
            (at(0), 1, false, 1, None, 24 * 3_600 * S),
            (
                at(1),
                2,
                true,
                1,
                Some(24 * 3_600 * S - 1),
                24 * 3_600 * S - 1,
            ),
        ],
    );
    // The state a calendar window stores is the epoch-aligned window's
    // format: its start (the boundary) and its count.
    let out = fw.decide(None, boundary + 5 * S, 1).unwrap();
    let mut buf = [0u8; STATE_BUF_LEN];
    let state = out.update.unwrap().state;
    let n = FixedWindow::encode(&state, &mut buf);
    assert_eq!(&buf[..n], b"1792969200000000:1");
    // A refund expires with the window too.
    let r = fw.refund(Some(WindowCount { count: 2, ..state }), boundary + 5 * S, 1);
    assert_eq!(
        r.unwrap().write,
        RefundWrite::Set(Update {
            state,
            expire_at_us: boundary + 24 * 3_600 * S
        })
    );
    // ALIGN FIRST has no meaning for a calendar window.
    assert_eq!(fw.aligned_first(), Err(Error::AlignFirstCalendar));
}

#[test]
fn a_calendar_window_keeps_counting_a_later_stored_window() {
    use crate::calendar::{Calendar, Unit, Zone};
    // The clock stepped back from March into February (UTC months): the
    // stored March window keeps counting and ends with March.
    let fw = FixedWindow::calendar(
        3,
        Calendar {
            unit: Unit::Month,
            zone: Zone::Offset(0),
        },
    )
    .unwrap();
    let march = 1_772_323_200 * S; // 2026-03-01T00:00:00Z
    let april = 1_775_001_600 * S;
    let s = WindowCount {
        window_start_us: march,
        count: 3,
        first: false,
        debt: false,
    };
    let out = fw.decide(Some(s), march - S, 1).unwrap();
    assert_eq!(
        (out.decision.limited, out.decision.retry_after_us),
        (true, Some(april - march + S))
    );
}
