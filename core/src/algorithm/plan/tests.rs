//! Unit tests of `plan`.

use super::*;
use crate::error::Error;

use crate::algorithm::table::{decision as d, S, T0 as NOW};

type P = Plan<&'static str, &'static str>;

/// `(decision, stored, stored block, BLOCK, expected change, limited,
/// blocked, retry_after)`.
type Case = (
    Decision,
    bool,
    Option<i64>,
    Option<i64>,
    Change<&'static str, &'static str>,
    bool,
    bool,
    Option<i64>,
);

/// `plan` of a take whose algorithm answers `decision` (and writes
/// "new state" when allowed).
fn take(decision: Decision, stored: bool, blocked: Option<i64>, block_us: Option<i64>) -> P {
    let update = (!decision.limited).then_some("new state");
    plan(
        Op::Take(1),
        false,
        |_| Ok((decision, update)),
        |_| unreachable!("a take never refunds"),
        stored,
        blocked,
        NOW,
        block_us,
    )
    .unwrap()
}

#[test]
fn takes_refusals_and_blocks() {
    let allowed = d(false, 4, None, S);
    let refused = d(true, 0, Some(S), 5 * S);
    let never = d(true, 0, None, 5 * S);
    let cases: [Case; 8] = [
        // Allowed: the update, whatever BLOCK says; an ended block goes.
        (
            allowed,
            true,
            None,
            Some(60 * S),
            Change::Take("new state"),
            false,
            false,
            None,
        ),
        (
            allowed,
            true,
            Some(NOW - 1),
            None,
            Change::Take("new state"),
            false,
            false,
            None,
        ),
        // Refused without BLOCK, or on a missing key: nothing.
        (
            refused,
            true,
            None,
            None,
            Change::Nothing,
            true,
            false,
            Some(S),
        ),
        (
            refused,
            false,
            None,
            Some(60 * S),
            Change::Nothing,
            true,
            false,
            Some(S),
        ),
        // Refused with BLOCK on a stored key: blocked for the duration.
        (
            refused,
            true,
            None,
            Some(60 * S),
            Change::Block {
                until_us: NOW + 60 * S,
            },
            true,
            false,
            Some(60 * S),
        ),
        // A block in force refuses an allowed request, with its time.
        (
            allowed,
            true,
            Some(NOW + 10 * S),
            None,
            Change::Nothing,
            true,
            true,
            Some(10 * S),
        ),
        // … and a BLOCK extends it, never shortens it.
        (
            refused,
            true,
            Some(NOW + 90 * S),
            Some(60 * S),
            Change::Block {
                until_us: NOW + 90 * S,
            },
            true,
            true,
            Some(90 * S),
        ),
        // A cost that can never be allowed starts no block.
        (
            never,
            true,
            None,
            Some(60 * S),
            Change::Nothing,
            true,
            false,
            None,
        ),
    ];
    for (i, (decision, stored, blocked_until, block_us, change, limited, blocked, retry)) in
        cases.into_iter().enumerate()
    {
        let p = take(decision, stored, blocked_until, block_us);
        assert_eq!(p.change, change, "case {i}");
        assert_eq!(p.decision.limited, limited, "case {i}");
        assert_eq!(p.blocked, blocked, "case {i}");
        assert_eq!(p.decision.retry_after_us, retry, "case {i}");
    }
}

#[test]
fn a_forced_take_is_recorded_past_the_limit_and_under_any_block() {
    let fits = d(false, 4, None, S);
    let debt = d(true, 0, Some(S), 5 * S);
    let long_debt = d(true, 0, Some(90 * S), 95 * S);
    let forced = |decision: Decision, stored, blocked_until, block_us| -> P {
        plan(
            Op::Take(7),
            true,
            |cost| {
                assert_eq!(cost, 7);
                Ok((decision, Some("recorded")))
            },
            |_| unreachable!("a take never refunds"),
            stored,
            blocked_until,
            NOW,
            block_us,
        )
        .unwrap()
    };
    let block = |until_us| Change::TakeBlocked {
        take: "recorded",
        until_us,
    };
    // (decision, stored, stored block, BLOCK, change, limited, blocked, retry)
    let cases: [Case; 7] = [
        // It fits: an ordinary admission.
        (
            fits,
            true,
            None,
            None,
            Change::Take("recorded"),
            false,
            false,
            None,
        ),
        // It does not: recorded all the same, the retry of one more.
        (
            debt,
            true,
            None,
            None,
            Change::Take("recorded"),
            true,
            false,
            Some(S),
        ),
        // … on a missing key too, with BLOCK: the debt behind the block.
        (
            debt,
            false,
            None,
            Some(60 * S),
            block(NOW + 60 * S),
            true,
            false,
            Some(60 * S),
        ),
        // The later of the two retries.
        (
            long_debt,
            true,
            None,
            Some(60 * S),
            block(NOW + 60 * S),
            true,
            false,
            Some(90 * S),
        ),
        // During a block in force: recorded behind it, refused with it.
        (
            fits,
            true,
            Some(NOW + 10 * S),
            None,
            block(NOW + 10 * S),
            true,
            true,
            Some(10 * S),
        ),
        // … and a BLOCK extends it.
        (
            debt,
            true,
            Some(NOW + 10 * S),
            Some(60 * S),
            block(NOW + 60 * S),
            true,
            true,
            Some(60 * S),
        ),
        // A block that ended goes with the write.
        (
            debt,
            true,
            Some(NOW),
            None,
            Change::Take("recorded"),
            true,
            false,
            Some(S),
        ),
    ];
    for (i, (decision, stored, blocked_until, block_us, change, limited, blocked, retry)) in
        cases.into_iter().enumerate()
    {
        let p = forced(decision, stored, blocked_until, block_us);
        assert_eq!(p.change, change, "case {i}");
        assert_eq!(p.decision.limited, limited, "case {i}");
        assert_eq!(p.blocked, blocked, "case {i}");
        assert_eq!(p.decision.retry_after_us, retry, "case {i}");
    }
}

#[test]
fn refunds_keep_the_block_in_force() {
    let full = d(false, 5, None, 0);
    let p: P = plan(
        Op::Refund(2),
        false,
        |_| unreachable!("a refund never takes"),
        |tokens| {
            assert_eq!(tokens, 2);
            Ok((full, Some("refunded")))
        },
        true,
        Some(NOW + S),
        NOW,
        Some(60 * S),
    )
    .unwrap();
    assert_eq!(p.change, Change::Refund("refunded"));
    assert_eq!(p.block_in_force_until_us, Some(NOW + S));
    assert!(!p.blocked && !p.decision.limited);
}

#[test]
fn errors_write_nothing() {
    let r: Result<P> = plan(
        Op::Take(1),
        false,
        |_| Err(Error::Overflow),
        |_| unreachable!(),
        true,
        None,
        NOW,
        None,
    );
    assert_eq!(r, Err(Error::Overflow));
    // A block end past the clock's range is an overflow, not a wrap.
    let refused = d(true, 0, Some(S), S);
    let r: Result<P> = plan(
        Op::Take(1),
        false,
        |_| Ok((refused, None)),
        |_| unreachable!(),
        true,
        None,
        i64::MAX - 1,
        Some(60 * S),
    );
    assert_eq!(r, Err(Error::Overflow));
}
