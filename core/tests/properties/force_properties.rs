//! `FORCE` (issue 43's proofs): for every algorithm,
//!
//! 1. after a forced overshoot the next admission comes exactly at the
//!    reply's `retry_after` (when the debt and one more token have been
//!    regained), never a µs earlier, and the limiter is full again at its
//!    `reset_after`, when the key expires;
//! 2. over any window, the tokens admitted without `FORCE` never exceed what
//!    the limit allows once the forced ones are counted.
//!
//! Timelines mix forced and ordinary calls on one key, the state fed back
//! and dropped when it expires, the clock moving forward.

use std::fmt::Debug;

use proptest::collection::vec;
use proptest::prelude::*;

use crate::strategies::{TestResult, EPOCH_2025_US};
use ratelimit_core::algorithm::bucket_window::{BucketCounts, BucketWindow};
use ratelimit_core::algorithm::fixed_window::FixedWindow;
use ratelimit_core::algorithm::gcra::Gcra;
use ratelimit_core::algorithm::leaky_bucket::LeakyBucket;
use ratelimit_core::algorithm::sliding_log::SlidingLog;
use ratelimit_core::algorithm::sliding_window::SlidingWindow;
use ratelimit_core::algorithm::token_bucket::TokenBucket;
use ratelimit_core::algorithm::{forced, Algorithm, Decision, Outcome};

const CASES: u32 = 256;

/// Calls of a timeline: (µs since the previous call, cost, forced).
type Calls = Vec<(i64, i64, bool)>;

fn calls(max_step_us: i64, max_cost: i64) -> impl Strategy<Value = Calls> {
    vec(
        (
            prop_oneof![Just(0i64), 0..=max_step_us],
            1..=max_cost,
            any::<bool>(),
        ),
        1..40,
    )
}

/// One call of a timeline: when, whether forced, what it
/// recorded (its cost when it wrote, else 0) and its decision.
#[derive(Debug, Clone, Copy)]
struct Call {
    now_us: i64,
    forced: bool,
    recorded: i64,
    decision: Decision,
}

/// Runs `calls` against `alg` from no key, the state dropped when it
/// expires; checks property 1 after every forced overshoot.
fn run<A: Algorithm<State: Debug + PartialEq> + Debug>(
    alg: &A,
    calls: &Calls,
) -> Result<Vec<Call>, TestCaseError> {
    let mut now_us = EPOCH_2025_US;
    let mut state: Option<(A::State, i64)> = None;
    let mut out = Vec::new();
    for &(step, cost, force) in calls {
        now_us += step;
        if state.is_some_and(|(_, expire)| now_us >= expire) {
            state = None;
        }
        let before = state.map(|(s, _)| s);
        let Outcome { decision, update } = if force {
            forced(alg, before, now_us, cost).map_err(|e| TestCaseError::fail(format!("{e}")))?
        } else {
            alg.decide(before, now_us, cost)
                .map_err(|e| TestCaseError::fail(format!("{e}")))?
        };
        prop_assert_eq!(update.is_some(), force || !decision.limited);
        if let Some(u) = update {
            if force && decision.limited {
                exact_retry(alg, u.state, now_us, &decision)?;
                prop_assert_eq!(u.expire_at_us - now_us, decision.reset_after_us);
            }
            state = Some((u.state, u.expire_at_us));
        }
        out.push(Call {
            now_us,
            forced: force,
            recorded: if update.is_some() { cost } else { 0 },
            decision,
        });
    }
    Ok(out)
}

/// Property 1 on the state a forced overshoot left at `now_us`.
fn exact_retry<A: Algorithm<State: Debug + PartialEq> + Debug>(
    alg: &A,
    state: A::State,
    now_us: i64,
    d: &Decision,
) -> TestResult {
    prop_assert!(d.limited && d.remaining == 0, "{d:?}");
    let retry = d.retry_after_us.expect("a forced overshoot has a retry");
    prop_assert!(retry >= 1, "{d:?}");
    let early = alg.decide(Some(state), now_us + retry - 1, 1).unwrap();
    prop_assert!(early.decision.limited, "admitted {retry} - 1 µs on: {d:?}");
    prop_assert_eq!(early.decision.retry_after_us, Some(1));
    let on_time = alg.decide(Some(state), now_us + retry, 1).unwrap();
    prop_assert!(!on_time.decision.limited, "refused at its retry: {d:?}");
    // Full again at reset_after: the whole limit fits.
    let full = alg
        .decide(Some(state), now_us + d.reset_after_us, d.limit)
        .unwrap();
    prop_assert!(!full.decision.limited, "not full at its reset: {d:?}");
    Ok(())
}

/// Property 2 for a rate `tokens_per_us = per / period_us` with a burst of
/// `limit`: for every admission without FORCE at `u` and every call at
/// `a ≤ u`, the tokens recorded from `a` to `u` (forced or not) are at
/// most `limit + (u − a) × per / period_us`.
fn within_rate(calls: &[Call], limit: i64, per: i64, period_us: i64) -> TestResult {
    for (j, u) in calls.iter().enumerate() {
        if u.forced || u.decision.limited {
            continue;
        }
        let mut sum = 0i128;
        for a in calls[..=j].iter().rev() {
            sum += i128::from(a.recorded);
            let allowed = i128::from(limit) * i128::from(period_us)
                + i128::from(u.now_us - a.now_us) * i128::from(per);
            prop_assert!(
                sum * i128::from(period_us) <= allowed,
                "{sum} tokens from {} to {} (limit {limit}, {per} per {period_us} µs)",
                a.now_us,
                u.now_us
            );
        }
    }
    Ok(())
}

/// GCRA's and the bucket's exact regain: `d + 1` tokens after an overshoot
/// of `d` from a full limiter.
fn regain_us(d: i64, per: i64, period_us: i64) -> i64 {
    let units = i128::from(d + 1) * i128::from(period_us);
    let per = i128::from(per);
    i64::try_from(units / per + i128::from(units % per != 0)).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn gcra_forced_debt_is_repaid_exactly(
        burst in 0i64..6, per in 1i64..5, period_us in 1_000i64..100_000,
        calls in calls(60_000, 12), d in 1i64..20,
    ) {
        let alg = Gcra::new(burst, per, period_us).unwrap();
        let t = alg.emission_interval_us();
        let timeline = run(&alg, &calls)?;
        // T is the rounded emission interval: the rate is one per T.
        within_rate(&timeline, alg.limit(), 1, t)?;
        let out = forced(&alg, None, EPOCH_2025_US, alg.limit() + d).unwrap();
        prop_assert_eq!(out.decision.retry_after_us, Some((d + 1) * t));
    }

    #[test]
    fn token_bucket_forced_debt_is_repaid_exactly(
        capacity in 1i64..6, per in 1i64..5, period_us in 1_000i64..100_000,
        calls in calls(60_000, 12), d in 1i64..20,
    ) {
        let alg = TokenBucket::new(capacity, per, period_us).unwrap();
        let timeline = run(&alg, &calls)?;
        within_rate(&timeline, capacity, per, period_us)?;
        let out = forced(&alg, None, EPOCH_2025_US, capacity + d).unwrap();
        prop_assert_eq!(out.decision.retry_after_us, Some(regain_us(d, per, period_us)));
    }

    #[test]
    fn leaky_bucket_forced_debt_is_repaid_exactly(
        capacity in 1i64..6, per in 1i64..5, period_us in 1_000i64..100_000,
        calls in calls(60_000, 12),
    ) {
        let alg = LeakyBucket::new(capacity, per, period_us).unwrap();
        let timeline = run(&alg, &calls)?;
        within_rate(&timeline, capacity, per, period_us)?;
    }

    #[test]
    fn fixed_window_forced_debt_is_repaid_window_by_window(
        limit in 1i64..6, window_us in 1_000i64..100_000, first in any::<bool>(),
        calls in calls(120_000, 12), d in 1i64..20,
    ) {
        let alg = if first {
            FixedWindow::first(limit, window_us).unwrap()
        } else {
            FixedWindow::new(limit, window_us).unwrap()
        };
        let timeline = run(&alg, &calls)?;
        // Any span of time touches at most ⌈span / window⌉ + 1 windows,
        // each of which admits `limit` once the debt before it is repaid.
        for (j, u) in timeline.iter().enumerate() {
            if u.forced || u.decision.limited {
                continue;
            }
            let mut sum = 0;
            for a in timeline[..=j].iter().rev() {
                sum += a.recorded;
                let span = u.now_us - a.now_us;
                let windows = span / window_us + i64::from(span % window_us != 0) + 1;
                prop_assert!(sum <= limit * windows, "{sum} in {windows} windows");
            }
        }
        // d + 1 regained: the first window boundary by which `limit` per
        // window has repaid them.
        let start = EPOCH_2025_US - EPOCH_2025_US % window_us;
        let out = forced(&alg, None, start, limit + d).unwrap();
        let windows = (d + 1 + limit - 1) / limit;
        prop_assert_eq!(out.decision.retry_after_us, Some(windows * window_us));
    }

    #[test]
    fn sliding_window_forced_debt_is_repaid_exactly(
        limit in 1i64..6, window_us in 1_000i64..100_000,
        calls in calls(120_000, 12),
    ) {
        let alg = SlidingWindow::new(limit, window_us).unwrap();
        run(&alg, &calls)?;
    }

    #[test]
    fn bucketed_window_forced_debt_is_repaid_exactly(
        limit in 1i64..6, window_us in 1_000i64..100_000, k in 2i64..8,
        calls in calls(120_000, 12),
    ) {
        let alg = BucketWindow::new(limit, window_us, k).unwrap();
        let s = alg.sub_window_us();
        let mut now_us = EPOCH_2025_US;
        let mut state: Option<(BucketCounts, i64)> = None;
        // (sub-window index, tokens recorded) of every write.
        let mut recorded: Vec<(i64, i64)> = Vec::new();
        for &(step, cost, force) in &calls {
            now_us += step;
            if state.as_ref().is_some_and(|(_, expire)| now_us >= *expire) {
                state = None;
            }
            let before = state.as_ref().map(|(st, _)| st);
            let out = if force {
                alg.force(before, now_us, cost).unwrap()
            } else {
                alg.decide(before, now_us, cost).unwrap()
            };
            let d = out.decision;
            if let Some(u) = out.update {
                if force && d.limited {
                    let retry = d.retry_after_us.unwrap();
                    let early = alg.decide(Some(&u.state), now_us + retry - 1, 1).unwrap();
                    prop_assert!(early.decision.limited);
                    let on_time = alg.decide(Some(&u.state), now_us + retry, 1).unwrap();
                    prop_assert!(!on_time.decision.limited);
                    prop_assert_eq!(u.expire_at_us - now_us, d.reset_after_us);
                }
                recorded.push((now_us / s, cost));
                state = Some((u.state, u.expire_at_us));
            }
            if !force && !d.limited {
                // The k sub-windows ending with now's count what was
                // recorded in them, forced or not: at most the limit.
                let current = now_us / s;
                let counted: i64 = recorded
                    .iter()
                    .filter(|(i, _)| current - i < k)
                    .map(|(_, c)| c)
                    .sum();
                prop_assert!(counted <= limit, "{counted} counted");
            }
        }
    }

    #[test]
    fn sliding_log_forced_debt_is_repaid_exactly(
        limit in 1i64..6, window_us in 1_000i64..100_000,
        calls in calls(60_000, 12),
    ) {
        let sl = SlidingLog::new(limit, window_us).unwrap();
        let mut now_us = EPOCH_2025_US;
        let mut log: Vec<i64> = Vec::new();
        let mut expire_at_us = i64::MIN;
        for &(step, cost, force) in &calls {
            now_us += step;
            if now_us >= expire_at_us {
                log.clear();
            }
            let out = if force {
                match sl.force(&log[..], now_us, cost) {
                    Ok(out) => out,
                    Err(ratelimit_core::error::Error::ForceTooMuch { .. }) => {
                        // Past twice the limit: refused, nothing logged.
                        let live = log.iter().filter(|&&t| t > now_us - window_us).count();
                        prop_assert!(live as i64 + cost > 2 * limit);
                        continue;
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
                }
            } else {
                sl.decide(&log[..], now_us, cost).unwrap()
            };
            let d = out.decision;
            if let Some(u) = out.update {
                u.apply_to(&mut log);
                expire_at_us = u.expire_at_us;
                if force && d.limited {
                    let retry = d.retry_after_us.unwrap();
                    let early = sl.decide(&log[..], now_us + retry - 1, 1).unwrap();
                    prop_assert!(early.decision.limited);
                    let on_time = sl.decide(&log[..], now_us + retry, 1).unwrap();
                    prop_assert!(!on_time.decision.limited);
                    prop_assert_eq!(u.expire_at_us - now_us, d.reset_after_us);
                }
            }
            if !force && !d.limited {
                // Exact: every token logged in the window, forced or not.
                let live = log.iter().filter(|&&t| t > now_us - window_us).count();
                prop_assert!(live as i64 <= limit, "{live} in the window");
            }
        }
    }
}
