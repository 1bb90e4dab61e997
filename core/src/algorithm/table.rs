//! Table-driven tests with an injected clock, shared by every algorithm whose
//! state is one string: each case is a request at a chosen instant, and the
//! expected fields of its decision.

use super::Algorithm;

/// One second, in µs.
pub const S: i64 = 1_000_000;
/// One millisecond, in µs.
pub const MS: i64 = 1_000;
/// An arbitrary instant for the injected clock, on a whole-minute boundary
/// (so also the start of 1 s and 60 s windows).
pub const T0: i64 = 1_763_700_000 * S;

/// At `T0 + at_us`, take `cost` tokens; expect
/// `(limited, remaining, retry_after_us, reset_after_us)`:
/// `(at_us, cost, limited, remaining, retry_after_us, reset_after_us)`.
pub type Case = (i64, i64, bool, i64, Option<i64>, i64);

/// Runs `cases` in order, feeding each written state back, and checks each
/// decision; also that a call writes exactly when it took tokens, that the
/// limit never changes, and that the key expires exactly when the limiter is
/// full again (`expire_at − now == reset_after`). Returns the last state.
pub fn run<A: Algorithm>(algorithm: &A, cases: &[Case]) -> Option<A::State> {
    let mut state = None;
    let mut limit = None;
    for (i, &(at, cost, limited, remaining, retry, reset)) in cases.iter().enumerate() {
        let out = algorithm.decide(state, T0 + at, cost).unwrap();
        let d = out.decision;
        assert_eq!(
            (d.limited, d.remaining, d.retry_after_us, d.reset_after_us),
            (limited, remaining, retry, reset),
            "case {i}"
        );
        assert_eq!(
            *limit.get_or_insert(d.limit),
            d.limit,
            "case {i}: the limit changed"
        );
        assert_eq!(
            out.update.is_none(),
            limited || cost == 0,
            "case {i}: writes iff it took tokens"
        );
        if let Some(u) = out.update {
            assert_eq!(
                u.expire_at_us - (T0 + at),
                reset,
                "case {i}: expires when full again"
            );
            state = Some(u.state);
        }
    }
    state
}

/// A decision of a limit of 5: `(limited, remaining, retry_after_us,
/// reset_after_us)`.
pub fn decision(limited: bool, remaining: i64, retry: Option<i64>, reset: i64) -> super::Decision {
    super::Decision {
        limited,
        limit: 5,
        remaining,
        retry_after_us: retry,
        reset_after_us: reset,
    }
}

/// A case of [`run_forced`]: `(at_us, cost, force, limited, remaining,
/// retry_after_us, reset_after_us)`.
pub type ForcedCase = (i64, i64, bool, bool, i64, Option<i64>, i64);

/// [`run`] with calls that may `FORCE` ([`super::forced`]): a forced call
/// always writes, and is limited with `remaining` 0 exactly when it went
/// past the limit; every write expires when the limiter is full again.
pub fn run_forced<A: Algorithm>(algorithm: &A, cases: &[ForcedCase]) -> Option<A::State> {
    let mut state = None;
    for (i, &(at, cost, force, limited, remaining, retry, reset)) in cases.iter().enumerate() {
        let out = if force {
            super::forced(algorithm, state, T0 + at, cost).unwrap()
        } else {
            algorithm.decide(state, T0 + at, cost).unwrap()
        };
        let d = out.decision;
        assert_eq!(
            (d.limited, d.remaining, d.retry_after_us, d.reset_after_us),
            (limited, remaining, retry, reset),
            "case {i}"
        );
        assert_eq!(
            out.update.is_some(),
            force || !limited,
            "case {i}: writes iff it took tokens"
        );
        if let Some(u) = out.update {
            assert_eq!(
                u.expire_at_us - (T0 + at),
                reset,
                "case {i}: expires when full again"
            );
            state = Some(u.state);
        }
    }
    state
}
