//! Property tests of the window algorithms ([`FixedWindow`], [`SlidingWindow`],
//! [`SlidingLog`]) and of the [`LeakyBucket`].
//!
//! Timelines of requests are simulated the way the command layer runs them:
//! each allowed request's update is stored (a string state, or for the
//! sliding log the [`LogUpdate`] applied to the sorted set) and fed to the
//! next call. The key may be dropped once it has expired: the command layer
//! sets the expiry to `expire_at_us` rounded up to the millisecond, and the
//! server drops the key at some instant between then and the clock passing
//! that millisecond, so the simulations drop it anywhere from `expire_at_us`
//! (the state must read as "no key" from then on) to the end of that
//! millisecond. Every property is checked per algorithm, each in its own test.
//!
//! **The clock stepping back.** A key that expired while the clock was ahead
//! is gone when the clock comes back, and everything it recorded is forgotten:
//! after an expiry and a step back, the tokens admitted before the expiry can
//! share a window with those admitted after it. No algorithm can prevent that
//! (the information is gone with the key), so with a clock that steps back the
//! window invariants are checked per *key lifetime* (the requests between two
//! expiries of the key), and on the whole timeline when the key never expires.
//! Within a lifetime the invariants hold in *stored* time — the instants
//! (windows) the algorithms record tokens at — not in the requests' real
//! time: after a step back, tokens are recorded in the later, stored window,
//! so real-time windows may see more than `limit`.

use std::collections::HashMap;
use std::fmt::Debug;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::strategies::{
    check_round_trip, decide, rate, start, wide, wide_nonneg, TestResult, EXTREME_CASES, MAX_STEPS,
};

use crate::harness::{
    admitted, apply_log, check_decode, decide_log, new_result_is_documented, simulate,
    simulate_log, state_bytes, Expiry, Limiter, Requests, Step,
};
use ratelimit_core::algorithm::fixed_window::{FixedWindow, WindowCount};
use ratelimit_core::algorithm::leaky_bucket::LeakyBucket;
use ratelimit_core::algorithm::sliding_log::{LogOutcome, SlidingLog};
use ratelimit_core::algorithm::sliding_window::{SlidingWindow, WindowCounts};
use ratelimit_core::algorithm::token_bucket::FullAt;
use ratelimit_core::algorithm::{Algorithm, Decision, Outcome};
use ratelimit_core::error::{Error, Result};
use ratelimit_core::time::{ceil_div, ceil_ms, US_PER_MS};

/// Cases per property: with timelines of at most [`MAX_STEPS`] requests the
/// whole file runs in a few seconds in a debug build.
const CASES: u32 = 192;
/// How far the clock may jump back at once, in windows (leak periods).
const MAX_BACK: i64 = 10;

/// For every instant `t` of `points` (instant, tokens), the tokens at
/// instants in `(t − window, t]` are at most `limit`. The busiest window of
/// length `window` ends at one of the points, so this covers every window: in
/// particular, for any two points `a ≤ b` with `b − a < window`, the tokens in
/// `[a, b]` are at most `limit`.
fn check_no_window_exceeds(points: &[(i64, i64)], window_us: i64, limit: i64) -> TestResult {
    for &(t, _) in points {
        let in_window: i64 = points
            .iter()
            .filter(|&&(s, _)| s > t - window_us && s <= t)
            .map(|&(_, n)| n)
            .sum();
        prop_assert!(
            in_window <= limit,
            "{} tokens in ({}, {}], limit {}",
            in_window,
            t - window_us,
            t,
            limit
        );
    }
    Ok(())
}

/// How an allowed request's `retry_after_us` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    /// `None` (the window algorithms).
    Meter,
    /// `Some(delay ≥ 0)`: the queueing delay (the leaky bucket).
    Queue,
}

/// The invariants of every decision: `0 ≤ remaining ≤ limit`, `reset ≥ 0`; a
/// refusal carries a retry `> 0` exactly when the cost can ever be allowed
/// (cost ≤ limit), and a cost above the limit is always refused; an allowed
/// request carries no retry (`Meter`) or its delay `≥ 0` (`Queue`). An update
/// (`expire_at_us`) is written exactly when tokens were taken, and expires no
/// earlier than now.
fn check_decision(
    reply: Reply,
    limit: i64,
    now_us: i64,
    cost: i64,
    d: &Decision,
    expire_at_us: Option<i64>,
) -> TestResult {
    prop_assert_eq!(d.limit, limit);
    prop_assert!(
        (0..=limit).contains(&d.remaining),
        "remaining {} outside 0..={}",
        d.remaining,
        limit
    );
    prop_assert!(
        d.reset_after_us >= 0,
        "reset_after_us {} < 0",
        d.reset_after_us
    );
    if d.limited {
        if cost > limit {
            prop_assert_eq!(d.retry_after_us, None, "cost above the limit: no retry");
        } else {
            let retry = d.retry_after_us;
            prop_assert!(
                retry.is_some_and(|r| r > 0),
                "refused cost {} ≤ limit {} with retry {:?}",
                cost,
                limit,
                retry
            );
        }
    } else {
        prop_assert!(cost <= limit, "cost {} > limit {} was allowed", cost, limit);
        match reply {
            Reply::Meter => {
                prop_assert_eq!(d.retry_after_us, None, "an allowed request has no retry")
            }
            Reply::Queue => prop_assert!(
                d.retry_after_us.is_some_and(|delay| delay >= 0),
                "an accepted request's delay is {:?}",
                d.retry_after_us
            ),
        }
    }
    prop_assert_eq!(
        expire_at_us.is_some(),
        !d.limited && cost > 0,
        "an update is written iff tokens were taken"
    );
    if let Some(expire_at_us) = expire_at_us {
        prop_assert!(
            expire_at_us >= now_us,
            "expire_at_us {} < now {}",
            expire_at_us,
            now_us
        );
    }
    Ok(())
}

/// [`check_decision`] for an outcome of a string-backed algorithm.
fn check_outcome<S>(
    reply: Reply,
    limit: i64,
    now_us: i64,
    cost: i64,
    outcome: &Outcome<S>,
) -> TestResult {
    let expire_at_us = outcome.update.as_ref().map(|u| u.expire_at_us);
    check_decision(reply, limit, now_us, cost, &outcome.decision, expire_at_us)
}

/// [`check_decision`] for the sliding log, and its update: `cost` entries
/// logged at `max(now, newest entry)` (never before now), removing what has
/// left the window that ends there, expiring when they leave it.
fn check_log_outcome(
    limit: i64,
    window_us: i64,
    before: &[i64],
    now_us: i64,
    cost: i64,
    outcome: &LogOutcome,
) -> TestResult {
    let expire_at_us = outcome.update.map(|u| u.expire_at_us);
    check_decision(
        Reply::Meter,
        limit,
        now_us,
        cost,
        &outcome.decision,
        expire_at_us,
    )?;
    if let Some(u) = outcome.update {
        let newest = before.last().copied().unwrap_or(i64::MIN);
        prop_assert_eq!(u.add_at_us, now_us.max(newest));
        prop_assert_eq!(u.add_count, cost);
        prop_assert_eq!(u.remove_through_us, u.add_at_us - window_us);
        prop_assert_eq!(u.expire_at_us, u.add_at_us + window_us);
    }
    Ok(())
}

/// Costs probed at every step besides the step's own.
fn probe_costs(limit: i64) -> [i64; 5] {
    [0, 1, limit, limit + 1, i64::MAX]
}

/// When `decide(now, cost)` is refused with `Some(retry)`: the same request
/// (same state) is allowed at `now + retry` and after waiting the replied
/// `ceil_ms(retry)` milliseconds, and still refused at `now + retry − 1`.
fn check_retry(decide: impl Fn(i64, i64) -> Decision, now_us: i64, cost: i64) -> TestResult {
    let d = decide(now_us, cost);
    if !d.limited {
        return Ok(());
    }
    let Some(retry_us) = d.retry_after_us else {
        return Ok(());
    };
    prop_assert!(retry_us >= 1, "retry {} µs", retry_us);
    let at_retry = decide(now_us + retry_us, cost);
    prop_assert!(
        !at_retry.limited,
        "cost {} at {} refused with retry {} µs, but refused again then: {:?}",
        cost,
        now_us,
        retry_us,
        at_retry
    );
    let waited_ms = decide(now_us + ceil_ms(retry_us) * US_PER_MS, cost);
    prop_assert!(
        !waited_ms.limited,
        "cost {} at {}: refused after waiting the replied {} ms: {:?}",
        cost,
        now_us,
        ceil_ms(retry_us),
        waited_ms
    );
    let early = decide(now_us + retry_us - 1, cost);
    prop_assert!(
        early.limited,
        "cost {} at {} refused with retry {} µs, but allowed 1 µs earlier: {:?}",
        cost,
        now_us,
        retry_us,
        early
    );
    Ok(())
}

/// The instants at which a key expiring at `expire_at_us` may still be read:
/// the expiry itself, the millisecond the command layer rounds it up to, and
/// the last µs of that millisecond.
fn readable_after_expiry(expire_at_us: i64) -> [i64; 3] {
    let ms_us = ceil_ms(expire_at_us) * US_PER_MS;
    [expire_at_us, ms_us, ms_us + US_PER_MS - 1]
}

/// After an allowed request that wrote a state: `expire_at − now ==
/// reset_after`; from `expire_at` until the server must have dropped the key,
/// the state reads as full (`remaining == limit`, `reset == 0` for cost 0) and
/// decides every cost exactly as no key; 1 µs before `expire_at` it is not
/// full yet.
fn check_expiry<A: Limiter>(alg: &A, limit: i64, step: &Step<A::State>) -> TestResult {
    let Some(update) = step.outcome.update else {
        return Ok(());
    };
    prop_assert_eq!(
        update.expire_at_us - step.now_us,
        step.outcome.decision.reset_after_us
    );
    let state = Some(update.state);
    for at in readable_after_expiry(update.expire_at_us) {
        let full = decide(alg, state, at, 0).decision;
        prop_assert_eq!(full.remaining, limit, "not full at {}", at);
        prop_assert_eq!(full.reset_after_us, 0);
        for cost in [0, 1, limit, limit + 1] {
            prop_assert_eq!(
                decide(alg, state, at, cost),
                decide(alg, None, at, cost),
                "at {} (expiry {}) the state differs from no key (cost {})",
                at,
                update.expire_at_us,
                cost
            );
        }
    }
    // Taking tokens makes reset_after ≥ 1 µs, so expire_at − 1 ≥ now.
    let just_before = decide(alg, state, update.expire_at_us - 1, 0).decision;
    prop_assert!(
        just_before.remaining < limit,
        "already full 1 µs before expire_at_us {}",
        update.expire_at_us
    );
    Ok(())
}

/// A `decide` at any inputs returned `Ok` (a decision with the usual
/// invariants, checked by `check`) or `Err(Overflow)`.
fn check_total<T>(result: Result<T>, check: impl FnOnce(&T) -> TestResult) -> TestResult {
    match result {
        Ok(outcome) => check(&outcome),
        Err(Error::Overflow) => Ok(()),
        Err(e) => Err(TestCaseError::fail(format!("unexpected error {e:?}"))),
    }
}

/// The sliding window counter's estimate of `state` read at `t`, scaled by
/// the window (exact): `previous × (W − elapsed) + current × W` when `t` is
/// in the state's window, `current × (W − elapsed)` in the next one, 0 later.
/// `t` must not be before the state's window.
fn estimate_scaled(state: Option<WindowCounts>, t: i64, window_us: i64) -> i128 {
    let Some(s) = state else {
        return 0;
    };
    let index = t.div_euclid(window_us);
    let stored = s.window_start_us.div_euclid(window_us);
    assert!(stored <= index, "{s:?} read at {t}, before its window");
    let w = i128::from(window_us);
    let left = w - i128::from(t.rem_euclid(window_us)); // W − elapsed
    if stored == index {
        i128::from(s.previous) * left + i128::from(s.current) * w
    } else if stored == index - 1 {
        i128::from(s.current) * left
    } else {
        0
    }
}

/// Accepted requests of the leaky bucket leave the queue (`now + delay`) in
/// order, each at least the previous one's `cost × P / R` after it.
///
/// Exactly: the queue-empty instant `F` is a multiple of `1 / R` µs; an
/// accepted request leaves at `D = max(F, now)` and moves `F` to
/// `D + cost × P / R`. So the next accepted request leaves at `D' ≥ F ≥ D +
/// cost × P / R`, also when the key expired in between (it is dropped only
/// once `now ≥ expire_at = ⌈F⌉`) on a clock that never steps back. The reply
/// rounds each delay up to the µs, so `departure = now + delay = ⌈D⌉`, in
/// `[D, D + (R − 1) / R]`: the previous departure may be rounded up by up to
/// `(R − 1) / R` µs while the next one is exact, so the gap may fall short of
/// `cost × P / R` by that much (and this bound is reached): `gap × R ≥
/// cost_prev × P − (R − 1)`, i.e. less than 1 µs short.
///
/// With `clock_steps_back`, only what the key remembers is ordered: each
/// accepted request is compared with the last accepted request that took
/// tokens (wrote `F`) in the same key lifetime. A read (cost 0) writes
/// nothing, and after the key expired nothing is remembered: a request after
/// either and a step back of the clock leaves earlier.
fn check_departures(
    steps: &[Step<FullAt>],
    (period_us, leak_tokens): (i64, i64),
    clock_steps_back: bool,
) -> TestResult {
    let p = i128::from(period_us);
    let r = i128::from(leak_tokens);
    // (departure, cost, lifetime) of the request the next one is compared with.
    let mut previous: Option<(i64, i64, usize)> = None;
    for s in steps {
        let d = s.outcome.decision;
        if d.limited {
            continue;
        }
        let Some(delay_us) = d.retry_after_us else {
            return Err(TestCaseError::fail(format!(
                "accepted without delay: {d:?}"
            )));
        };
        let departure_us = s.now_us + delay_us;
        if let Some((prev_us, prev_cost, prev_lifetime)) = previous {
            if !clock_steps_back || prev_lifetime == s.lifetime {
                let gap = i128::from(departure_us - prev_us);
                prop_assert!(
                    gap >= 0,
                    "departure {} before the previous one {}",
                    departure_us,
                    prev_us
                );
                prop_assert!(
                    gap * r >= i128::from(prev_cost) * p - (r - 1),
                    "departures {} and {} only {} µs apart after {} tokens at {} per {} µs",
                    prev_us,
                    departure_us,
                    gap,
                    prev_cost,
                    leak_tokens,
                    period_us
                );
            }
        }
        if !clock_steps_back || s.cost > 0 {
            previous = Some((departure_us, s.cost, s.lifetime));
        }
    }
    Ok(())
}

// ---- strategies ----

/// Random requests: a step from the previous instant (0, about one token's
/// share of the window `unit_us`, up to a window `span_us` or three, exactly
/// `span_us`, or back by up to `back_us`), a cost (mostly 1, else
/// `0 ..= limit + 2`) and a coin.
fn requests(
    unit_us: i64,
    span_us: i64,
    limit: i64,
    back_us: i64,
) -> impl Strategy<Value = Requests> {
    let step = prop_oneof![
        3 => Just(0i64),
        4 => 0..=unit_us,
        2 => 0..=span_us,
        1 => 0..=3 * span_us,
        1 => Just(span_us),
        1 => -back_us..=0,
    ];
    let cost = prop_oneof![3 => Just(1i64), 2 => 0..=limit + 2];
    vec((step, cost, any::<bool>()), 1..=MAX_STEPS)
}

/// Windows of 1 µs ..= 10 s, some whole milliseconds.
fn window() -> impl Strategy<Value = i64> {
    prop_oneof![
        1i64..=1_000,
        (1i64..=10_000).prop_map(|ms| ms * US_PER_MS),
        1i64..=10_000_000,
    ]
}

/// Limits (capacities) 1 ..= 50, mostly small so that the limit is reached.
fn limit() -> impl Strategy<Value = i64> {
    prop_oneof![2 => 1i64..=4, 1 => 1i64..=50]
}

fn expiry() -> impl Strategy<Value = Expiry> {
    prop_oneof![
        Just(Expiry::Never),
        Just(Expiry::Exact),
        Just(Expiry::Millis),
        Just(Expiry::Late),
        Just(Expiry::Anytime),
    ]
}

/// `(limit, window_us, start, requests)` for the window algorithms, starting
/// at least 100 windows after the epoch; with `clock_steps_back` the clock may
/// jump back by up to [`MAX_BACK`] windows.
fn window_timeline(clock_steps_back: bool) -> impl Strategy<Value = (i64, i64, i64, Requests)> {
    (limit(), window(), start()).prop_flat_map(move |(limit, window_us, t0)| {
        let back_us = if clock_steps_back {
            MAX_BACK * window_us
        } else {
            0
        };
        (
            Just(limit),
            Just(window_us),
            Just(t0 + 100 * window_us),
            requests(ceil_div(window_us, limit), window_us, limit, back_us),
        )
    })
}

/// A leaky bucket, its `(leak_period_us, leak_tokens)`, a start at least 100
/// periods after the epoch and requests; with `clock_steps_back` the clock may
/// jump back by up to [`MAX_BACK`] periods.
fn leaky_timeline(
    clock_steps_back: bool,
) -> impl Strategy<Value = (LeakyBucket, (i64, i64), i64, Requests)> {
    (limit(), rate(), start()).prop_flat_map(move |(capacity, (period_us, tokens), t0)| {
        let lb = LeakyBucket::new(capacity, tokens, period_us).unwrap();
        let back_us = if clock_steps_back {
            MAX_BACK * period_us
        } else {
            0
        };
        let unit_us = ceil_div(period_us, tokens);
        let span_us = ceil_div(capacity * period_us, tokens);
        (
            Just(lb),
            Just((period_us, tokens)),
            Just(t0 + 100 * period_us),
            requests(unit_us, span_us, capacity, back_us),
        )
    })
}

/// Any parameters `LeakyBucket::new` accepts, biased to the edges.
fn extreme_leaky() -> impl Strategy<Value = LeakyBucket> {
    (wide_nonneg(), wide_nonneg(), wide_nonneg()).prop_map(|(capacity, tokens, period_us)| {
        let period_us = period_us.clamp(1, ratelimit_core::time::MAX_PERIOD_US);
        let tokens = tokens.clamp(1, period_us);
        // ⌈capacity × period / tokens⌉ ≤ MAX ⟺ capacity ≤ MAX × tokens / period.
        let most = (i128::from(ratelimit_core::time::MAX_PERIOD_US) * i128::from(tokens)
            / i128::from(period_us))
        .min(i128::from(i64::MAX)) as i64;
        LeakyBucket::new(capacity.clamp(1, most), tokens, period_us).unwrap()
    })
}

/// Sliding log limits: any accepted one, biased to the bounds.
fn extreme_log_limit() -> impl Strategy<Value = i64> {
    prop_oneof![
        1i64..=3,
        1i64..=SlidingLog::MAX_LIMIT,
        (SlidingLog::MAX_LIMIT - 3)..=SlidingLog::MAX_LIMIT,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    // ---- 1. admitted tokens per window, on a clock that never steps back ----

    #[test]
    fn sliding_log_never_admits_more_than_limit_in_any_window(
        (limit, window_us, t0, reqs) in window_timeline(false),
        expiry in expiry(),
    ) {
        let sl = SlidingLog::new(limit, window_us).unwrap();
        let points: Vec<(i64, i64)> = simulate_log(&sl, t0, &reqs, expiry)
            .iter()
            .map(|s| (s.now_us, admitted(&s.outcome.decision, s.cost)))
            .collect();
        check_no_window_exceeds(&points, window_us, limit)?;
    }

    #[test]
    fn sliding_log_refuses_only_requests_that_would_overfill_the_window(
        (limit, window_us, t0, reqs) in window_timeline(false),
        expiry in expiry(),
    ) {
        let sl = SlidingLog::new(limit, window_us).unwrap();
        let steps = simulate_log(&sl, t0, &reqs, expiry);
        for (i, s) in steps.iter().enumerate() {
            // Tokens admitted in (now − window, now] before this request.
            let live: i64 = steps[..i]
                .iter()
                .filter(|p| p.now_us > s.now_us - window_us)
                .map(|p| admitted(&p.outcome.decision, p.cost))
                .sum();
            let d = s.outcome.decision;
            prop_assert_eq!(
                d.limited,
                s.cost > limit || live + s.cost > limit,
                "cost {} with {} live at {}", s.cost, live, s.now_us
            );
            prop_assert_eq!(d.remaining, limit - live - admitted(&d, s.cost));
        }
    }

    #[test]
    fn fixed_window_never_admits_more_than_limit_in_one_window(
        (limit, window_us, t0, reqs) in window_timeline(false),
        expiry in expiry(),
    ) {
        let fw = FixedWindow::new(limit, window_us).unwrap();
        let mut per_window: HashMap<i64, i64> = HashMap::new();
        for s in simulate(&fw, t0, &reqs, expiry) {
            let index = s.now_us.div_euclid(window_us);
            let total = per_window.entry(index).or_default();
            *total += admitted(&s.outcome.decision, s.cost);
            prop_assert!(*total <= limit, "{} tokens in window {}", *total, index);
        }
    }

    #[test]
    fn fixed_window_first_never_admits_more_than_limit_in_one_window(
        (limit, window_us, t0, reqs) in window_timeline(false),
        expiry in expiry(),
    ) {
        // ALIGN FIRST: the windows are those the states name; they never
        // overlap, and none admits more than `limit`.
        let fw = FixedWindow::first(limit, window_us).unwrap();
        let mut per_window: HashMap<i64, i64> = HashMap::new();
        for s in simulate(&fw, t0, &reqs, expiry) {
            let Some(u) = s.outcome.update else { continue };
            let start = u.state.window_start_us;
            prop_assert!(u.state.first);
            prop_assert!(start <= s.now_us && s.now_us < start + window_us);
            prop_assert_eq!(u.expire_at_us, start + window_us);
            let total = per_window.entry(start).or_default();
            *total += admitted(&s.outcome.decision, s.cost);
            prop_assert!(*total <= limit, "{} tokens in the window from {}", *total, start);
        }
        let mut starts: Vec<i64> = per_window.keys().copied().collect();
        starts.sort_unstable();
        for pair in starts.windows(2) {
            prop_assert!(pair[1] >= pair[0] + window_us, "windows overlap: {:?}", pair);
        }
    }

    #[test]
    fn fixed_window_first_decides_as_its_model(
        (limit, window_us, t0, reqs) in window_timeline(false),
        expiry in expiry(),
    ) {
        // The model: a window opens at the first admitted request that finds
        // none open and lasts `window`.
        let fw = FixedWindow::first(limit, window_us).unwrap();
        let mut window: Option<(i64, i64)> = None; // (start, count)
        for s in simulate(&fw, t0, &reqs, expiry) {
            let (start, count) = match window {
                Some((start, count)) if s.now_us < start + window_us => (start, count),
                _ => (s.now_us, 0),
            };
            let d = s.outcome.decision;
            prop_assert_eq!(d.limited, s.cost > limit || count + s.cost > limit);
            let count = count + admitted(&d, s.cost);
            prop_assert_eq!(d.remaining, limit - count);
            prop_assert_eq!(d.reset_after_us, if count > 0 { start + window_us - s.now_us } else { 0 });
            if count > 0 {
                window = Some((start, count));
            }
            if d.limited && s.cost <= limit {
                prop_assert_eq!(d.retry_after_us, Some(start + window_us - s.now_us));
            }
        }
    }

    #[test]
    fn fixed_window_refuses_only_requests_that_would_overfill_the_window(
        (limit, window_us, t0, reqs) in window_timeline(false),
        expiry in expiry(),
    ) {
        let fw = FixedWindow::new(limit, window_us).unwrap();
        let mut per_window: HashMap<i64, i64> = HashMap::new();
        for s in simulate(&fw, t0, &reqs, expiry) {
            let index = s.now_us.div_euclid(window_us);
            let count = per_window.entry(index).or_default();
            let d = s.outcome.decision;
            prop_assert_eq!(
                d.limited,
                s.cost > limit || *count + s.cost > limit,
                "cost {} with {} counted in window {}", s.cost, *count, index
            );
            *count += admitted(&d, s.cost);
            prop_assert_eq!(d.remaining, limit - *count);
            let to_end_us = (index + 1) * window_us - s.now_us;
            prop_assert_eq!(d.reset_after_us, if *count > 0 { to_end_us } else { 0 });
        }
    }

    // ---- 2. the sliding window counter's estimate ----

    #[test]
    fn sliding_window_estimate_never_exceeds_limit_and_remaining_is_its_floor(
        (limit, window_us, t0, reqs) in window_timeline(false),
        expiry in expiry(),
    ) {
        let sw = SlidingWindow::new(limit, window_us).unwrap();
        let limit_scaled = i128::from(limit) * i128::from(window_us);
        for s in simulate(&sw, t0, &reqs, expiry) {
            // The state after the decision: the one written, or the one read.
            let after = s.outcome.update.map(|u| u.state).or(s.before);
            let estimate = estimate_scaled(after, s.now_us, window_us);
            prop_assert!(
                estimate <= limit_scaled,
                "estimate {}/{} > limit {} after {:?}", estimate, window_us, limit, s
            );
            // ⌊limit − estimate⌋ = ⌊(limit × W − estimate × W) / W⌋, of a value ≥ 0.
            let floor = (limit_scaled - estimate) / i128::from(window_us);
            prop_assert_eq!(i128::from(s.outcome.decision.remaining), floor, "{:?}", s);
        }
    }

    #[test]
    fn sliding_window_admits_a_request_iff_it_fits_under_the_estimate(
        (limit, window_us, t0, reqs) in window_timeline(false),
        expiry in expiry(),
    ) {
        let sw = SlidingWindow::new(limit, window_us).unwrap();
        let w = i128::from(window_us);
        for s in simulate(&sw, t0, &reqs, expiry) {
            let before = estimate_scaled(s.before, s.now_us, window_us);
            let d = s.outcome.decision;
            let fits = s.cost <= limit && before + i128::from(s.cost) * w <= i128::from(limit) * w;
            prop_assert_eq!(!d.limited, fits, "{:?}", s);
            if let Some(u) = s.outcome.update {
                // The tokens count in full in the current window.
                let after = estimate_scaled(Some(u.state), s.now_us, window_us);
                prop_assert_eq!(after, before + i128::from(s.cost) * w, "{:?}", s);
            }
        }
    }

    // ---- 3. the leaky bucket's queue ----

    #[test]
    fn leaky_bucket_departures_are_spaced_by_the_emission_interval(
        (lb, rate, t0, reqs) in leaky_timeline(false),
        expiry in expiry(),
    ) {
        check_departures(&simulate(&lb, t0, &reqs, expiry), rate, false)?;
    }

    /// No accepted request waits more than `(capacity − cost)` emission
    /// intervals (rounded up to the µs); and exactly: a request is accepted
    /// iff its tokens fit behind the work queued ahead of it (the queue-empty
    /// instant `F` read from the state, minus now), and then waits exactly
    /// that, rounded up to the µs. Also when the clock steps back.
    #[test]
    fn leaky_bucket_delays_each_request_by_the_queue_ahead_within_the_capacity(
        (lb, (period_us, leak_tokens), t0, reqs) in leaky_timeline(true),
        expiry in expiry(),
    ) {
        let capacity = lb.capacity();
        let p = i128::from(period_us);
        let r = i128::from(leak_tokens);
        for s in simulate(&lb, t0, &reqs, expiry) {
            let d = s.outcome.decision;
            // The work queued ahead, in units of 1 / R µs (one token is P units).
            let ahead = s.before.map_or(0, |f| {
                let empty_at = i128::from(f.full_at_us) * r + i128::from(f.remainder);
                (empty_at - i128::from(s.now_us) * r).max(0)
            });
            let fits = s.cost <= capacity
                && ahead + i128::from(s.cost) * p <= i128::from(capacity) * p;
            prop_assert_eq!(!d.limited, fits, "{} units queued ahead: {:?}", ahead, s);
            if d.limited {
                continue;
            }
            let delay = i128::from(d.retry_after_us.unwrap_or(i64::MAX));
            // (capacity − cost) emission intervals, in units of 1 / R µs.
            let room = i128::from(capacity - s.cost) * p;
            prop_assert!(
                delay <= (room + r - 1) / r,
                "accepted cost {} delayed {} µs: more than {} / {} µs", s.cost, delay, room, r
            );
            prop_assert_eq!(delay, (ahead + r - 1) / r, "{} units queued ahead: {:?}", ahead, s);
        }
    }

    // ---- 4. sane decisions and stored-time windows when the clock steps back ----

    #[test]
    fn sliding_log_decisions_are_sane_when_the_clock_steps_back(
        (limit, window_us, t0, reqs) in window_timeline(true),
        expiry in expiry(),
    ) {
        let sl = SlidingLog::new(limit, window_us).unwrap();
        for s in simulate_log(&sl, t0, &reqs, expiry) {
            check_log_outcome(limit, window_us, &s.before, s.now_us, s.cost, &s.outcome)?;
            for cost in probe_costs(limit) {
                let probe = decide_log(&sl, &s.before, s.now_us, cost);
                check_log_outcome(limit, window_us, &s.before, s.now_us, cost, &probe)?;
            }
        }
    }

    #[test]
    fn fixed_window_decisions_are_sane_when_the_clock_steps_back(
        (limit, window_us, t0, reqs) in window_timeline(true),
        expiry in expiry(),
    ) {
        let fw = FixedWindow::new(limit, window_us).unwrap();
        for s in simulate(&fw, t0, &reqs, expiry) {
            check_outcome(Reply::Meter, limit, s.now_us, s.cost, &s.outcome)?;
            for cost in probe_costs(limit) {
                let probe = decide(&fw, s.before, s.now_us, cost);
                check_outcome(Reply::Meter, limit, s.now_us, cost, &probe)?;
            }
        }
    }

    #[test]
    fn sliding_window_decisions_are_sane_when_the_clock_steps_back(
        (limit, window_us, t0, reqs) in window_timeline(true),
        expiry in expiry(),
    ) {
        let sw = SlidingWindow::new(limit, window_us).unwrap();
        for s in simulate(&sw, t0, &reqs, expiry) {
            check_outcome(Reply::Meter, limit, s.now_us, s.cost, &s.outcome)?;
            for cost in probe_costs(limit) {
                let probe = decide(&sw, s.before, s.now_us, cost);
                check_outcome(Reply::Meter, limit, s.now_us, cost, &probe)?;
            }
        }
    }

    #[test]
    fn leaky_bucket_decisions_are_sane_when_the_clock_steps_back(
        (lb, _rate, t0, reqs) in leaky_timeline(true),
        expiry in expiry(),
    ) {
        let capacity = lb.capacity();
        for s in simulate(&lb, t0, &reqs, expiry) {
            check_outcome(Reply::Queue, capacity, s.now_us, s.cost, &s.outcome)?;
            for cost in probe_costs(capacity) {
                let probe = decide(&lb, s.before, s.now_us, cost);
                check_outcome(Reply::Queue, capacity, s.now_us, cost, &probe)?;
            }
        }
    }

    /// Entries are logged at `max(now, newest)`, so within one key lifetime
    /// the stored instants never decrease and every window of stored time
    /// holds at most `limit` tokens (see the module documentation for why
    /// neither real time nor windows across an expiry can be bounded).
    #[test]
    fn sliding_log_never_admits_more_than_limit_in_a_stored_window_when_the_clock_steps_back(
        (limit, window_us, t0, reqs) in window_timeline(true),
        expiry in expiry(),
    ) {
        let sl = SlidingLog::new(limit, window_us).unwrap();
        let mut lifetimes: HashMap<usize, Vec<(i64, i64)>> = HashMap::new();
        for s in simulate_log(&sl, t0, &reqs, expiry) {
            if let Some(u) = s.outcome.update {
                let logged = lifetimes.entry(s.lifetime).or_default();
                if let Some(&(newest, _)) = logged.last() {
                    prop_assert!(u.add_at_us >= newest, "logged {} after {}", u.add_at_us, newest);
                }
                logged.push((u.add_at_us, u.add_count));
            }
        }
        for logged in lifetimes.values() {
            check_no_window_exceeds(logged, window_us, limit)?;
        }
    }

    /// A stored window later than now's keeps counting, so within one key
    /// lifetime the stored window never moves back (nor before now's), its
    /// count is exactly the tokens admitted into it, and that is at most
    /// `limit` (see the module documentation for what cannot be bounded).
    #[test]
    fn fixed_window_never_admits_more_than_limit_in_a_stored_window_when_the_clock_steps_back(
        (limit, window_us, t0, reqs) in window_timeline(true),
        expiry in expiry(),
    ) {
        let fw = FixedWindow::new(limit, window_us).unwrap();
        let mut per_window: HashMap<(usize, i64), i64> = HashMap::new();
        let mut last: Option<(usize, i64)> = None;
        for s in simulate(&fw, t0, &reqs, expiry) {
            let Some(u) = s.outcome.update else { continue };
            let index = u.state.window_start_us.div_euclid(window_us);
            prop_assert!(index >= s.now_us.div_euclid(window_us), "{:?}", s);
            if let Some((lifetime, previous)) = last {
                if lifetime == s.lifetime {
                    prop_assert!(index >= previous, "window {} after {}", index, previous);
                }
            }
            last = Some((s.lifetime, index));
            let total = per_window.entry((s.lifetime, index)).or_default();
            *total += s.cost;
            prop_assert_eq!(u.state.count, *total, "{:?}", s);
            prop_assert!(*total <= limit, "{} tokens in window {}", *total, index);
        }
    }

    /// Within one key lifetime the state counts exactly the tokens admitted
    /// in the window it is read in (now's, or a later stored one) and in the
    /// one before. The estimate never increases with the time it is read at,
    /// and a request is admitted only when it fits at the instant it is read
    /// at, which is never after the latest instant read so far; so the
    /// estimate read at that latest instant stays ≤ limit. (Read earlier,
    /// after a step back within a window, it may exceed the limit: the
    /// algorithm then refuses.)
    #[test]
    fn sliding_window_estimate_at_the_latest_read_never_exceeds_limit_when_the_clock_steps_back(
        (limit, window_us, t0, reqs) in window_timeline(true),
        expiry in expiry(),
    ) {
        let sw = SlidingWindow::new(limit, window_us).unwrap();
        let limit_scaled = i128::from(limit) * i128::from(window_us);
        let mut latest: Option<(usize, i64)> = None;
        // Tokens admitted per (lifetime, window read in).
        let mut per_window: HashMap<(usize, i64), i64> = HashMap::new();
        for s in simulate(&sw, t0, &reqs, expiry) {
            let read_at = match s.before {
                Some(b) => b.window_start_us.max(s.now_us),
                None => s.now_us,
            };
            let latest_us = match latest {
                Some((lifetime, t)) if lifetime == s.lifetime => t.max(read_at),
                _ => read_at,
            };
            latest = Some((s.lifetime, latest_us));
            if let Some(u) = s.outcome.update {
                // The state holds exactly the tokens admitted in the window
                // read in and in the one before (nothing is forgotten).
                let index = read_at.div_euclid(window_us);
                prop_assert_eq!(u.state.window_start_us.div_euclid(window_us), index, "{:?}", s);
                *per_window.entry((s.lifetime, index)).or_default() += s.cost;
                let count = |i: i64| per_window.get(&(s.lifetime, i)).copied().unwrap_or(0);
                prop_assert_eq!(
                    (u.state.previous, u.state.current),
                    (count(index - 1), count(index)),
                    "{:?}", s
                );
            }
            let after = s.outcome.update.map(|u| u.state).or(s.before);
            let estimate = estimate_scaled(after, latest_us, window_us);
            prop_assert!(
                estimate <= limit_scaled,
                "estimate {}/{} > limit {} at {} after {:?}",
                estimate, window_us, limit, latest_us, s
            );
        }
    }

    #[test]
    fn leaky_bucket_departures_stay_spaced_when_the_clock_steps_back(
        (lb, rate, t0, reqs) in leaky_timeline(true),
        expiry in expiry(),
    ) {
        check_departures(&simulate(&lb, t0, &reqs, expiry), rate, true)?;
    }

    // ---- 5. retry_after ----

    #[test]
    fn sliding_log_is_allowed_at_retry_after_and_refused_just_before(
        (limit, window_us, t0, reqs) in window_timeline(true),
    ) {
        let sl = SlidingLog::new(limit, window_us).unwrap();
        for s in simulate_log(&sl, t0, &reqs, Expiry::Never) {
            let probe = |now_us, cost| decide_log(&sl, &s.before, now_us, cost).decision;
            let remaining = probe(s.now_us, 0).remaining;
            for cost in [s.cost, 1, remaining + 1, limit] {
                check_retry(probe, s.now_us, cost)?;
            }
        }
    }

    #[test]
    fn fixed_window_is_allowed_at_retry_after_and_refused_just_before(
        (limit, window_us, t0, reqs) in window_timeline(true),
    ) {
        let fw = FixedWindow::new(limit, window_us).unwrap();
        for s in simulate(&fw, t0, &reqs, Expiry::Never) {
            let probe = |now_us, cost| decide(&fw, s.before, now_us, cost).decision;
            let remaining = probe(s.now_us, 0).remaining;
            for cost in [s.cost, 1, remaining + 1, limit] {
                check_retry(probe, s.now_us, cost)?;
            }
        }
    }

    #[test]
    fn fixed_window_first_is_allowed_at_retry_after_and_refused_just_before(
        (limit, window_us, t0, reqs) in window_timeline(true),
    ) {
        let fw = FixedWindow::first(limit, window_us).unwrap();
        for s in simulate(&fw, t0, &reqs, Expiry::Never) {
            let probe = |now_us, cost| decide(&fw, s.before, now_us, cost).decision;
            let remaining = probe(s.now_us, 0).remaining;
            for cost in [s.cost, 1, remaining + 1, limit] {
                check_retry(probe, s.now_us, cost)?;
            }
        }
    }

    #[test]
    fn sliding_window_is_allowed_at_retry_after_and_refused_just_before(
        (limit, window_us, t0, reqs) in window_timeline(true),
    ) {
        let sw = SlidingWindow::new(limit, window_us).unwrap();
        for s in simulate(&sw, t0, &reqs, Expiry::Never) {
            let probe = |now_us, cost| decide(&sw, s.before, now_us, cost).decision;
            let remaining = probe(s.now_us, 0).remaining;
            for cost in [s.cost, 1, remaining + 1, limit] {
                check_retry(probe, s.now_us, cost)?;
            }
        }
    }

    #[test]
    fn leaky_bucket_is_allowed_at_retry_after_and_refused_just_before(
        (lb, _rate, t0, reqs) in leaky_timeline(true),
    ) {
        let capacity = lb.capacity();
        for s in simulate(&lb, t0, &reqs, Expiry::Never) {
            let probe = |now_us, cost| decide(&lb, s.before, now_us, cost).decision;
            let remaining = probe(s.now_us, 0).remaining;
            for cost in [s.cost, 1, remaining + 1, capacity] {
                check_retry(probe, s.now_us, cost)?;
            }
        }
    }

    // ---- 6. the key expires exactly when the limiter is full again ----

    #[test]
    fn sliding_log_key_expires_exactly_when_the_window_is_empty(
        (limit, window_us, t0, reqs) in window_timeline(true),
        expiry in expiry(),
    ) {
        let sl = SlidingLog::new(limit, window_us).unwrap();
        for s in simulate_log(&sl, t0, &reqs, expiry) {
            let Some(u) = s.outcome.update else { continue };
            prop_assert_eq!(u.expire_at_us - s.now_us, s.outcome.decision.reset_after_us);
            let mut log = s.before.clone();
            apply_log(&mut log, &u);
            for at in readable_after_expiry(u.expire_at_us) {
                let full = decide_log(&sl, &log, at, 0).decision;
                prop_assert_eq!((full.remaining, full.reset_after_us), (limit, 0));
                for cost in [0, 1, limit, limit + 1] {
                    prop_assert_eq!(
                        decide_log(&sl, &log, at, cost),
                        decide_log(&sl, &[], at, cost),
                        "at {} (expiry {}) the log differs from no key (cost {})",
                        at, u.expire_at_us, cost
                    );
                }
            }
            let just_before = decide_log(&sl, &log, u.expire_at_us - 1, 0).decision;
            prop_assert!(just_before.remaining < limit, "already empty 1 µs before expiry");
        }
    }

    #[test]
    fn fixed_window_key_expires_exactly_when_the_window_ends(
        (limit, window_us, t0, reqs) in window_timeline(true),
        expiry in expiry(),
    ) {
        let fw = FixedWindow::new(limit, window_us).unwrap();
        for s in simulate(&fw, t0, &reqs, expiry) {
            check_expiry(&fw, limit, &s)?;
        }
    }

    #[test]
    fn fixed_window_first_key_expires_exactly_when_its_window_ends(
        (limit, window_us, t0, reqs) in window_timeline(true),
        expiry in expiry(),
    ) {
        let fw = FixedWindow::first(limit, window_us).unwrap();
        for s in simulate(&fw, t0, &reqs, expiry) {
            check_expiry(&fw, limit, &s)?;
        }
    }

    #[test]
    fn sliding_window_key_expires_exactly_when_both_counts_have_left(
        (limit, window_us, t0, reqs) in window_timeline(true),
        expiry in expiry(),
    ) {
        let sw = SlidingWindow::new(limit, window_us).unwrap();
        for s in simulate(&sw, t0, &reqs, expiry) {
            check_expiry(&sw, limit, &s)?;
        }
    }

    #[test]
    fn leaky_bucket_key_expires_exactly_when_the_queue_is_empty(
        (lb, _rate, t0, reqs) in leaky_timeline(true),
        expiry in expiry(),
    ) {
        for s in simulate(&lb, t0, &reqs, expiry) {
            check_expiry(&lb, lb.capacity(), &s)?;
        }
    }

    // ---- 7. the state codecs ----

    #[test]
    fn fixed_window_state_codec_round_trips(
        (limit, window_us, t0, reqs) in window_timeline(true),
        window_index in 0..=i64::MAX,
        count in 0..=i64::MAX,
    ) {
        let fw = FixedWindow::new(limit, window_us).unwrap();
        for s in simulate(&fw, t0, &reqs, Expiry::Never) {
            if let Some(u) = s.outcome.update {
                check_round_trip::<FixedWindow>(&u.state)?;
            }
        }
        check_round_trip::<FixedWindow>(&WindowCount { window_start_us: window_index, count, first: false, debt: false })?;
        check_round_trip::<FixedWindow>(&WindowCount { window_start_us: window_index, count, first: true, debt: true })?;
    }

    #[test]
    fn sliding_window_state_codec_round_trips(
        (limit, window_us, t0, reqs) in window_timeline(true),
        window_index in 0..=i64::MAX,
        previous in 0..=i64::MAX,
        current in 0..=i64::MAX,
    ) {
        let sw = SlidingWindow::new(limit, window_us).unwrap();
        for s in simulate(&sw, t0, &reqs, Expiry::Never) {
            if let Some(u) = s.outcome.update {
                check_round_trip::<SlidingWindow>(&u.state)?;
            }
        }
        check_round_trip::<SlidingWindow>(&WindowCounts { window_start_us: window_index, previous, current })?;
        let most = WindowCounts { window_start_us: i64::MAX, previous: i64::MAX, current: i64::MAX };
        check_round_trip::<SlidingWindow>(&most)?;
    }

    #[test]
    fn leaky_bucket_state_codec_round_trips(
        (lb, _rate, t0, reqs) in leaky_timeline(true),
        full_at_us in 0..=i64::MAX,
        remainder in 0..=i64::MAX,
    ) {
        for s in simulate(&lb, t0, &reqs, Expiry::Never) {
            if let Some(u) = s.outcome.update {
                check_round_trip::<LeakyBucket>(&u.state)?;
            }
        }
        check_round_trip::<LeakyBucket>(&FullAt { full_at_us, remainder })?;
    }

    #[test]
    fn fixed_window_decode_never_panics_on_arbitrary_bytes(bytes in state_bytes()) {
        check_decode::<FixedWindow>(&bytes)?;
    }

    #[test]
    fn sliding_window_decode_never_panics_on_arbitrary_bytes(bytes in state_bytes()) {
        check_decode::<SlidingWindow>(&bytes)?;
    }

    #[test]
    fn leaky_bucket_decode_never_panics_on_arbitrary_bytes(bytes in state_bytes()) {
        check_decode::<LeakyBucket>(&bytes)?;
    }
}

proptest! {
    // Each case is a single call: many cases are cheap, and the overflows
    // need several extreme inputs at once. States are any the codecs decode
    // (non-negative fields; the sliding log's scores may be anything).
    #![proptest_config(ProptestConfig::with_cases(EXTREME_CASES))]

    // ---- 8. totality at extreme values ----

    #[test]
    fn fixed_window_decide_never_panics_at_extreme_values(
        raw in (wide(), wide()),
        (limit, window_us) in (wide_nonneg(), wide_nonneg()),
        state in proptest::option::of((wide_nonneg(), wide_nonneg())),
        now_us in wide(),
        cost in wide_nonneg(),
    ) {
        new_result_is_documented(FixedWindow::new(raw.0, raw.1))?;
        let (limit, window_us) = (limit.max(1), window_us.clamp(1, ratelimit_core::time::MAX_PERIOD_US));
        let fw = FixedWindow::new(limit, window_us).unwrap();
        let state = state.map(|(window_start_us, count)| WindowCount { window_start_us, count, first: false, debt: false });
        check_total(fw.decide(state, now_us, cost), |o| {
            check_outcome(Reply::Meter, limit, now_us, cost, o)
        })?;
    }

    #[test]
    fn sliding_window_decide_never_panics_at_extreme_values(
        raw in (wide(), wide()),
        (limit, window_us) in (wide_nonneg(), wide_nonneg()),
        state in proptest::option::of((wide_nonneg(), wide_nonneg(), wide_nonneg())),
        now_us in wide(),
        cost in wide_nonneg(),
    ) {
        new_result_is_documented(SlidingWindow::new(raw.0, raw.1))?;
        let (limit, window_us) = (limit.max(1), window_us.clamp(1, ratelimit_core::time::MAX_PERIOD_US));
        let sw = SlidingWindow::new(limit, window_us).unwrap();
        let state = state.map(|(window_start_us, previous, current)| WindowCounts {
            window_start_us,
            previous,
            current,
        });
        check_total(sw.decide(state, now_us, cost), |o| {
            check_outcome(Reply::Meter, limit, now_us, cost, o)
        })?;
    }

    #[test]
    fn sliding_log_decide_never_panics_at_extreme_values(
        raw in (wide(), wide()),
        (limit, window_us) in (extreme_log_limit(), wide_nonneg()),
        mut log in vec(wide(), 0..=6),
        now_us in wide(),
        cost in wide_nonneg(),
    ) {
        new_result_is_documented(SlidingLog::new(raw.0, raw.1))?;
        let window_us = window_us.clamp(1, ratelimit_core::time::MAX_PERIOD_US);
        let sl = SlidingLog::new(limit, window_us).unwrap();
        log.sort_unstable();
        check_total(sl.decide(&log[..], now_us, cost), |o| {
            check_log_outcome(limit, window_us, &log, now_us, cost, o)
        })?;
    }

    #[test]
    fn leaky_bucket_decide_never_panics_at_extreme_values(
        raw in (wide(), wide(), wide()),
        lb in extreme_leaky(),
        full_at in proptest::option::of((wide(), wide())),
        now_us in wide(),
        cost in wide_nonneg(),
    ) {
        new_result_is_documented(LeakyBucket::new(raw.0, raw.1, raw.2))?;
        let state = full_at.map(|(full_at_us, remainder)| FullAt { full_at_us, remainder });
        check_total(lb.decide(state, now_us, cost), |o| {
            check_outcome(Reply::Queue, lb.capacity(), now_us, cost, o)
        })?;
    }
}

// ---- minimal cases of the extreme-value properties ----
//
// Kept as plain tests so that each is checked whichever one the random cases
// happen to find first.

/// `⌊now / W⌋ × W` is below `i64::MIN` when `now` is within one window of it.
#[test]
fn sliding_window_decide_near_the_most_negative_clock_is_ok_or_overflow() {
    let sw = SlidingWindow::new(1, 50).unwrap();
    let now_us = i64::MIN + 4;
    let result = std::panic::catch_unwind(|| sw.decide(None, now_us, 0));
    assert!(
        matches!(result, Ok(Ok(_) | Err(Error::Overflow))),
        "decide(None, {now_us}, 0) panicked or failed: {result:?}"
    );
}

/// `previous × (W − elapsed) + (current + cost) × W` exceeds `i128` when
/// both counts of a (decodable) state and the cost are near the limit.
#[test]
fn sliding_window_decide_with_counts_near_i64_max_is_ok_or_overflow() {
    let sw = SlidingWindow::new(i64::MAX, ratelimit_core::time::MAX_PERIOD_US).unwrap();
    let state = WindowCounts {
        window_start_us: 0,
        previous: i64::MAX,
        current: i64::MAX,
    };
    let result = std::panic::catch_unwind(|| sw.decide(Some(state), 0, 17));
    assert!(
        matches!(result, Ok(Ok(_) | Err(Error::Overflow))),
        "decide({state:?}, 0, 17) panicked or failed: {result:?}"
    );
}
