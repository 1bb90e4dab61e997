//! Property tests of RL.ALL, REFUND and BLOCK over random timelines.
//!
//! Timelines mix requests and refunds the way the command layer runs them:
//! an allowed request stores its update, a refund stores its write (or
//! deletes the key), a refused request changes nothing.

use proptest::collection::vec;
use proptest::prelude::*;

use crate::strategies::{TestResult, EPOCH_2025_US};
use ratelimit_core::algorithm::all::binding;
use ratelimit_core::algorithm::block;
use ratelimit_core::algorithm::fixed_window::FixedWindow;
use ratelimit_core::algorithm::gcra::Gcra;
use ratelimit_core::algorithm::sliding_log::SlidingLog;
use ratelimit_core::algorithm::sliding_window::SlidingWindow;
use ratelimit_core::algorithm::token_bucket::TokenBucket;
use ratelimit_core::algorithm::{Algorithm, Decision, RefundWrite};

const S: i64 = 1_000_000;

/// One step: wait `gap_us`, then take (`refund` false) or give back `n`.
#[derive(Debug, Clone, Copy)]
struct Step {
    gap_us: i64,
    refund: bool,
    n: i64,
}

fn steps(max_n: i64) -> impl Strategy<Value = Vec<Step>> {
    vec(
        (0..2 * S, any::<bool>(), 1..=max_n).prop_map(|(gap_us, refund, n)| Step {
            gap_us,
            refund,
            n,
        }),
        1..40,
    )
}

/// Runs `steps` against `alg` and checks after every refund: `remaining`
/// never exceeds `limit`, the reply is never limited, the written state is
/// never more permissive than a missing key, and taking back at once what
/// was given back (when nothing was clamped) is allowed.
fn check_refunds<A: Algorithm<State: std::fmt::Debug + PartialEq>>(
    alg: &A,
    limit: i64,
    steps: &[Step],
) -> TestResult {
    let mut state: Option<A::State> = None;
    let mut now = EPOCH_2025_US;
    for step in steps {
        now += step.gap_us;
        if !step.refund {
            let out = alg
                .decide(state, now, step.n)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            if let Some(u) = out.update {
                state = Some(u.state);
            }
            continue;
        }
        let before = alg
            .decide(state, now, 0)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let r = alg
            .refund(state, now, step.n)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let d = r.decision;
        prop_assert!(!d.limited && d.retry_after_us.is_none(), "{d:?}");
        prop_assert!(
            d.remaining <= limit,
            "remaining {} > limit {limit}",
            d.remaining
        );
        prop_assert!(
            d.remaining >= before.decision.remaining,
            "a refund took tokens: {d:?}"
        );
        state = match r.write {
            RefundWrite::Nothing => state,
            RefundWrite::Set(u) => {
                prop_assert!(u.expire_at_us > now, "written state expires at once");
                Some(u.state)
            }
            RefundWrite::Delete => None,
        };
        let full = alg
            .decide(None, now, 0)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let after = alg
            .decide(state, now, 0)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(after.decision.remaining <= full.decision.remaining);
        let given = d.remaining - before.decision.remaining;
        if given > 0 {
            let again = alg
                .decide(state, now, given)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(
                !again.decision.limited,
                "taking back {given} refunded tokens was refused"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn gcra_refunds_never_exceed_the_limit(burst in 0..10i64, rate in 1..20i64, steps in steps(12)) {
        let gcra = Gcra::new(burst, rate, S).unwrap();
        check_refunds(&gcra, gcra.limit(), &steps)?;
    }

    #[test]
    fn token_bucket_refunds_never_exceed_the_capacity(cap in 1..10i64, rate in 1..20i64, steps in steps(12)) {
        let bucket = TokenBucket::new(cap, rate, S).unwrap();
        check_refunds(&bucket, cap, &steps)?;
    }

    #[test]
    fn fixed_window_refunds_never_exceed_the_limit(limit in 1..10i64, window in 1..3i64, steps in steps(12)) {
        let fw = FixedWindow::new(limit, window * S).unwrap();
        check_refunds(&fw, limit, &steps)?;
    }

    #[test]
    fn sliding_window_refunds_never_exceed_the_limit(limit in 1..10i64, window in 1..3i64, steps in steps(12)) {
        let sw = SlidingWindow::new(limit, window * S).unwrap();
        check_refunds(&sw, limit, &steps)?;
    }

    #[test]
    fn sliding_log_refunds_never_exceed_the_limit(limit in 1..10i64, window in 1..3i64, steps in steps(12)) {
        let sl = SlidingLog::new(limit, window * S).unwrap();
        let mut log: Vec<i64> = Vec::new();
        let mut now = EPOCH_2025_US;
        for step in &steps {
            now += step.gap_us;
            if step.refund {
                let r = sl.refund(log.as_slice(), now, step.n).unwrap();
                prop_assert!(r.decision.remaining <= limit && !r.decision.limited);
                if r.delete {
                    log.clear();
                } else {
                    let keep = log.len() - usize::try_from(r.remove_newest).unwrap();
                    log.truncate(keep);
                }
            } else if let Some(u) = sl.decide(log.as_slice(), now, step.n).unwrap().update {
                let stale = log.partition_point(|&t| t <= u.remove_through_us);
                log.drain(..stale.min(usize::try_from(u.remove_at_most).unwrap()));
                log.extend(std::iter::repeat_n(u.add_at_us, usize::try_from(u.add_count).unwrap()));
            }
            // Never more than `limit` entries inside any window.
            let inside = log.iter().filter(|&&t| t > now - window * S).count();
            prop_assert!(inside as i64 <= limit);
        }
    }

    /// A blocked limiter admits nothing before the block ends, whatever the
    /// limiter says, and tells the caller to wait at least until then.
    #[test]
    fn a_block_admits_nothing_before_it_ends(
        limited in any::<bool>(),
        remaining in 0..10i64,
        retry in proptest::option::of(0..10 * S),
        reset in 0..10 * S,
        left in 1..100 * S,
    ) {
        let d = Decision { limited, limit: 10, remaining, retry_after_us: retry, reset_after_us: reset };
        let now = EPOCH_2025_US;
        let b = block::blocked_decision(d, now + left, now).unwrap();
        prop_assert!(b.limited && b.remaining == 0);
        let never = limited && retry.is_none();
        match b.retry_after_us {
            Some(r) => prop_assert!(!never && r >= left && r >= retry.unwrap_or(0)),
            None => prop_assert!(never),
        }
        prop_assert!(b.reset_after_us >= left);
        // A block never ends earlier because of a later one.
        let until = block::extend(&b, Some(now + left), now, 1).unwrap();
        prop_assert!(until.is_none_or(|u| u >= now + left));
    }

    /// RL.ALL over a GCRA and a fixed window: a refused call changes no
    /// state, and each limit's states are exactly those it reaches alone when
    /// fed only the requests RL.ALL admitted, each of which it allowed
    /// alone: RL.ALL never lets a limit admit more than it alone would.
    #[test]
    fn all_admits_only_what_every_limit_admits_alone(
        burst in 0..6i64,
        rate in 1..10i64,
        limit in 1..8i64,
        window in 1..3i64,
        requests in vec((0..S, 1..4i64), 1..60),
    ) {
        let gcra = Gcra::new(burst, rate, S).unwrap();
        let fw = FixedWindow::new(limit, window * S).unwrap();
        let (mut a, mut b) = (None, None);
        let (mut a_alone, mut b_alone) = (None, None);
        let mut now = EPOCH_2025_US;
        for (gap, cost) in requests {
            now += gap;
            let oa = gcra.decide(a, now, cost).unwrap();
            let ob = fw.decide(b, now, cost).unwrap();
            let (at, d, allowed) = binding([oa.decision, ob.decision]).unwrap();
            prop_assert_eq!(allowed, !oa.decision.limited && !ob.decision.limited);
            prop_assert_eq!(d, [oa.decision, ob.decision][at]);
            if !allowed {
                // Nothing is written: the states stay.
                prop_assert!(d.limited);
                continue;
            }
            // Admitted: each limit alone, at its own state, allows it too.
            let alone_a = gcra.decide(a_alone, now, cost).unwrap();
            let alone_b = fw.decide(b_alone, now, cost).unwrap();
            prop_assert!(!alone_a.decision.limited && !alone_b.decision.limited);
            if let Some(u) = oa.update { a = Some(u.state); }
            if let Some(u) = ob.update { b = Some(u.state); }
            if let Some(u) = alone_a.update { a_alone = Some(u.state); }
            if let Some(u) = alone_b.update { b_alone = Some(u.state); }
            prop_assert_eq!((a, b), (a_alone, b_alone));
        }
    }
}
