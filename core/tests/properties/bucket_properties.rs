//! Property tests of the pure algorithms ([`Gcra`] and [`TokenBucket`]).
//!
//! Timelines of requests are simulated the way the command layer runs them:
//! each allowed request's `update.state` is stored and fed to the next call,
//! optionally dropped once the key has expired. Every property is checked for
//! both algorithms, each in its own test.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::strategies::{
    check_round_trip, decide, rate, start, wide, wide_nonneg, TestResult, EXTREME_CASES, MAX_STEPS,
};

use crate::harness::{
    check_decode, new_result_is_documented, simulate, state_bytes, Expiry, Limiter, Requests, Step,
};
use ratelimit_core::algorithm::gcra::Gcra;
use ratelimit_core::algorithm::token_bucket::{FullAt, TokenBucket};
use ratelimit_core::algorithm::Outcome;
use ratelimit_core::error::Error;
use ratelimit_core::time::{ceil_div, ceil_ms, US_PER_MS};

/// Cases per property: with timelines of at most [`MAX_STEPS`] requests the
/// whole file runs in a few seconds in a debug build.
const CASES: u32 = 256;

/// What these properties need beyond the harness's [`Limiter`].
trait MaxCost: Limiter {
    /// The most tokens one request may take (`Decision::limit`).
    fn max_cost(&self) -> i64;
}

impl MaxCost for Gcra {
    fn max_cost(&self) -> i64 {
        self.limit()
    }
}

impl MaxCost for TokenBucket {
    fn max_cost(&self) -> i64 {
        self.capacity()
    }
}

/// Checks `within(admitted, t2 − t1)` for the tokens admitted at instants in
/// `[t1, t2]`, for every pair of request instants `t1 ≤ t2` of a timeline
/// whose instants never decrease.
fn check_every_window<S>(steps: &[Step<S>], within: impl Fn(i64, i64) -> bool) -> TestResult {
    let n = steps.len();
    let mut prefix = vec![0i64; n + 1];
    for (i, s) in steps.iter().enumerate() {
        let admitted = if s.outcome.decision.limited {
            0
        } else {
            s.cost.max(0)
        };
        prefix[i + 1] = prefix[i] + admitted;
    }
    for i in 0..n {
        // Windows start at the first request of an instant …
        if i > 0 && steps[i - 1].now_us == steps[i].now_us {
            continue;
        }
        for j in i..n {
            // … and end at the last request of an instant.
            if j + 1 < n && steps[j + 1].now_us == steps[j].now_us {
                continue;
            }
            let admitted = prefix[j + 1] - prefix[i];
            let span_us = steps[j].now_us - steps[i].now_us;
            prop_assert!(
                within(admitted, span_us),
                "{} tokens admitted in [{}, {}] ({} µs)",
                admitted,
                steps[i].now_us,
                steps[j].now_us,
                span_us
            );
        }
    }
    Ok(())
}

/// The invariants of every decision: `0 ≤ remaining ≤ limit`, `reset ≥ 0`, a
/// retry is `> 0` and only on a refusal of a cost that can ever be allowed, a
/// cost above the limit is refused without a retry, and an update is written
/// exactly when tokens were taken, to expire no earlier than `now`.
fn check_decision<A: MaxCost>(
    alg: &A,
    now_us: i64,
    cost: i64,
    outcome: &Outcome<A::State>,
) -> TestResult {
    let d = outcome.decision;
    let limit = alg.max_cost();
    prop_assert_eq!(d.limit, limit);
    prop_assert!(d.remaining >= 0, "remaining {} < 0", d.remaining);
    prop_assert!(
        d.remaining <= limit,
        "remaining {} > limit {}",
        d.remaining,
        limit
    );
    prop_assert!(
        d.reset_after_us >= 0,
        "reset_after_us {} < 0",
        d.reset_after_us
    );
    if let Some(retry_us) = d.retry_after_us {
        prop_assert!(retry_us > 0, "retry_after_us {} ≤ 0", retry_us);
    }
    if !d.limited {
        prop_assert_eq!(d.retry_after_us, None, "an allowed request has no retry");
    }
    if cost > limit {
        prop_assert!(d.limited, "cost {} > limit {} was allowed", cost, limit);
        prop_assert_eq!(d.retry_after_us, None, "cost above the limit: no retry");
    } else if d.limited {
        prop_assert!(
            d.retry_after_us.is_some(),
            "refused cost {} ≤ limit without retry",
            cost
        );
    }
    prop_assert_eq!(
        outcome.update.is_some(),
        !d.limited && cost > 0,
        "an update is written iff tokens were taken"
    );
    if let Some(u) = outcome.update {
        prop_assert!(
            u.expire_at_us >= now_us,
            "expire_at_us {} < now {}",
            u.expire_at_us,
            now_us
        );
    }
    Ok(())
}

/// `decide(state, now, cost)`: when refused with `Some(retry)`, the same request
/// is allowed at `now + retry` and at `now + ceil_ms(retry)` ms, and still
/// refused at `now + retry − 1`.
fn check_retry<A: Limiter>(alg: &A, state: Option<A::State>, now_us: i64, cost: i64) -> TestResult {
    let d = decide(alg, state, now_us, cost).decision;
    let Some(retry_us) = d.retry_after_us else {
        return Ok(());
    };
    prop_assert!(retry_us >= 1);
    let at_retry = decide(alg, state, now_us + retry_us, cost).decision;
    prop_assert!(
        !at_retry.limited,
        "cost {} at {} refused with retry {} µs, but refused again then: {:?}",
        cost,
        now_us,
        retry_us,
        at_retry
    );
    let waited_ms = decide(alg, state, now_us + ceil_ms(retry_us) * US_PER_MS, cost).decision;
    prop_assert!(
        !waited_ms.limited,
        "cost {} at {}: refused after waiting the replied {} ms",
        cost,
        now_us,
        ceil_ms(retry_us)
    );
    let early = decide(alg, state, now_us + retry_us - 1, cost).decision;
    prop_assert!(
        early.limited,
        "cost {} at {} refused with retry {} µs, but allowed 1 µs earlier",
        cost,
        now_us,
        retry_us
    );
    Ok(())
}

/// On a timeline that never steps back, `remaining` is exactly the largest
/// cost that would be allowed: a request is refused iff its cost exceeds the
/// `remaining` reported before it, a refusal reports that same `remaining` and
/// `reset`, and an allowed cost `n` leaves `remaining − n`.
fn check_remaining_is_exact<A: Limiter>(alg: &A, step: &Step<A::State>) -> TestResult {
    let before = decide(alg, step.before, step.now_us, 0).decision;
    prop_assert!(!before.limited, "a read (cost 0) was refused: {:?}", before);
    let d = step.outcome.decision;
    prop_assert_eq!(
        d.limited,
        step.cost > before.remaining,
        "cost {} with {} remaining",
        step.cost,
        before.remaining
    );
    if d.limited {
        prop_assert_eq!(d.remaining, before.remaining);
        prop_assert_eq!(d.reset_after_us, before.reset_after_us);
    } else {
        prop_assert_eq!(d.remaining, before.remaining - step.cost);
    }
    Ok(())
}

/// After an allowed request that wrote a state: the key expires exactly when
/// the limiter is full again. `expire_at − now == reset_after`; at `expire_at`
/// the state reports `remaining == limit` and decides every cost exactly as no
/// key would; 1 µs earlier it is not full yet.
fn check_expiry<A: MaxCost>(alg: &A, step: &Step<A::State>) -> TestResult {
    let Some(update) = step.outcome.update else {
        return Ok(());
    };
    let d = step.outcome.decision;
    prop_assert_eq!(update.expire_at_us - step.now_us, d.reset_after_us);
    let limit = alg.max_cost();
    let state = Some(update.state);
    let at = update.expire_at_us;
    let full = decide(alg, state, at, 0).decision;
    prop_assert_eq!(full.remaining, limit, "not full at expire_at_us {}", at);
    prop_assert_eq!(full.reset_after_us, 0);
    for cost in [0, 1, limit, limit + 1] {
        prop_assert_eq!(
            decide(alg, state, at, cost),
            decide(alg, None, at, cost),
            "at expire_at_us the state differs from no key (cost {})",
            cost
        );
    }
    // Taking tokens makes reset_after ≥ 1 µs, so expire_at − 1 ≥ now.
    let just_before = decide(alg, state, at - 1, 0).decision;
    prop_assert!(
        just_before.remaining < limit,
        "already full 1 µs before expire_at_us {}",
        at
    );
    Ok(())
}

// ---- strategies ----

/// Random requests: a step from the previous instant (0, about one token's
/// time `unit_us`, up to a full refill `span_us` or three, or back by up to
/// `back_us`) and a cost (mostly 1, else `0 ..= limit + 2`).
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
        1 => -back_us..=0,
    ];
    let cost = prop_oneof![3 => Just(1i64), 2 => 0..=limit + 2];
    vec((step, cost, Just(false)), 1..=MAX_STEPS)
}

fn expiry() -> impl Strategy<Value = Expiry> {
    prop_oneof![
        Just(Expiry::Never),
        Just(Expiry::Exact),
        Just(Expiry::Millis)
    ]
}

/// A GCRA with `max_burst 0..=50`, its period, a start instant ≥ 100 periods
/// and requests; with `clock_steps_back` the clock may jump back by up to 10
/// periods.
fn gcra_timeline(clock_steps_back: bool) -> impl Strategy<Value = (Gcra, i64, i64, Requests)> {
    (0i64..=50, rate(), start()).prop_flat_map(move |(max_burst, (period_us, tokens), t0)| {
        let gcra = Gcra::new(max_burst, tokens, period_us).unwrap();
        let back_us = if clock_steps_back { 10 * period_us } else { 0 };
        (
            Just(gcra),
            Just(period_us),
            Just(t0 + 100 * period_us),
            requests(
                gcra.emission_interval_us(),
                gcra.delay_variation_tolerance_us(),
                gcra.limit(),
                back_us,
            ),
        )
    })
}

/// A token bucket with `capacity 1..=51`, its `(refill_period_us,
/// refill_tokens)`, a start instant ≥ 100 periods and requests; with
/// `clock_steps_back` the clock may jump back by up to 10 periods.
fn bucket_timeline(
    clock_steps_back: bool,
) -> impl Strategy<Value = (TokenBucket, (i64, i64), i64, Requests)> {
    (1i64..=51, rate(), start()).prop_flat_map(move |(capacity, (period_us, tokens), t0)| {
        let bucket = TokenBucket::new(capacity, tokens, period_us).unwrap();
        let back_us = if clock_steps_back { 10 * period_us } else { 0 };
        let unit_us = ceil_div(period_us, tokens);
        let span_us = ceil_div(capacity * period_us, tokens);
        (
            Just(bucket),
            Just((period_us, tokens)),
            Just(t0 + 100 * period_us),
            requests(unit_us, span_us, capacity, back_us),
        )
    })
}

/// Any parameters `Gcra::new` accepts, biased to the edges.
fn extreme_gcra() -> impl Strategy<Value = Gcra> {
    (wide_nonneg(), wide_nonneg(), wide_nonneg()).prop_map(|(max_burst, tokens, period_us)| {
        let period_us = period_us.clamp(1, ratelimit_core::time::MAX_PERIOD_US);
        let tokens = tokens.clamp(1, period_us);
        let t = Gcra::new(0, tokens, period_us)
            .unwrap()
            .emission_interval_us();
        // limit = max_burst + 1 ≤ MAX / T keeps τ = T × limit in range.
        let max_burst = max_burst.min(ratelimit_core::time::MAX_PERIOD_US / t - 1);
        Gcra::new(max_burst, tokens, period_us).unwrap()
    })
}

/// Any parameters `TokenBucket::new` accepts, biased to the edges.
fn extreme_bucket() -> impl Strategy<Value = TokenBucket> {
    (wide_nonneg(), wide_nonneg(), wide_nonneg()).prop_map(|(capacity, tokens, period_us)| {
        let period_us = period_us.clamp(1, ratelimit_core::time::MAX_PERIOD_US);
        let tokens = tokens.clamp(1, period_us);
        // ⌈capacity × period / tokens⌉ ≤ MAX ⟺ capacity ≤ MAX × tokens / period.
        let most = (i128::from(ratelimit_core::time::MAX_PERIOD_US) * i128::from(tokens)
            / i128::from(period_us))
        .min(i128::from(i64::MAX)) as i64;
        TokenBucket::new(capacity.clamp(1, most), tokens, period_us).unwrap()
    })
}

/// `decide` at any inputs returns `Ok` (a decision with the usual invariants)
/// or `Err(Overflow)`.
fn check_decide_total<A: MaxCost>(
    alg: &A,
    state: Option<A::State>,
    now_us: i64,
    cost: i64,
) -> TestResult {
    match alg.decide(state, now_us, cost) {
        Ok(outcome) => check_decision(alg, now_us, cost, &outcome),
        Err(Error::Overflow) => Ok(()),
        Err(e) => Err(TestCaseError::fail(format!("unexpected error {e:?}"))),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    // ---- 1. admitted tokens over any window ----

    #[test]
    fn gcra_never_admits_more_than_limit_plus_rate_times_t(
        (gcra, _period, t0, reqs) in gcra_timeline(false),
        expiry in expiry(),
    ) {
        let steps = simulate(&gcra, t0, &reqs, expiry);
        // admitted ≤ limit + (t2 − t1) / T  ⟺  admitted × T ≤ τ + (t2 − t1).
        let t = i128::from(gcra.emission_interval_us());
        let tau = i128::from(gcra.delay_variation_tolerance_us());
        check_every_window(&steps, |admitted, span_us| {
            i128::from(admitted) * t <= tau + i128::from(span_us)
        })?;
    }

    #[test]
    fn token_bucket_never_admits_more_than_capacity_plus_rate_times_t(
        (bucket, (period_us, refill_tokens), t0, reqs) in bucket_timeline(false),
        expiry in expiry(),
    ) {
        let steps = simulate(&bucket, t0, &reqs, expiry);
        // admitted ≤ capacity + R × (t2 − t1) / P, cross-multiplied.
        let p = i128::from(period_us);
        let capacity = i128::from(bucket.capacity());
        let refill_tokens = i128::from(refill_tokens);
        check_every_window(&steps, |admitted, span_us| {
            i128::from(admitted) * p <= capacity * p + refill_tokens * i128::from(span_us)
        })?;
    }

    // ---- 2. retry_after ----

    #[test]
    fn gcra_is_allowed_at_retry_after_and_refused_just_before(
        (gcra, _period, t0, reqs) in gcra_timeline(true),
    ) {
        for step in simulate(&gcra, t0, &reqs, Expiry::Never) {
            // remaining + 1 is refused (with a retry unless above the limit).
            let remaining = decide(&gcra, step.before, step.now_us, 0).decision.remaining;
            for cost in [step.cost, 1, remaining + 1, gcra.limit()] {
                check_retry(&gcra, step.before, step.now_us, cost)?;
            }
        }
    }

    #[test]
    fn token_bucket_is_allowed_at_retry_after_and_refused_just_before(
        (bucket, _period, t0, reqs) in bucket_timeline(true),
    ) {
        for step in simulate(&bucket, t0, &reqs, Expiry::Never) {
            // remaining + 1 is refused (with a retry unless above the limit).
            let remaining = decide(&bucket, step.before, step.now_us, 0).decision.remaining;
            for cost in [step.cost, 1, remaining + 1, bucket.capacity()] {
                check_retry(&bucket, step.before, step.now_us, cost)?;
            }
        }
    }

    // ---- 3. decision invariants; remaining is exact ----

    #[test]
    fn gcra_decisions_are_in_range_and_remaining_is_the_largest_allowed_cost(
        (gcra, _period, t0, reqs) in gcra_timeline(false),
        expiry in expiry(),
    ) {
        for step in simulate(&gcra, t0, &reqs, expiry) {
            check_decision(&gcra, step.now_us, step.cost, &step.outcome)?;
            check_remaining_is_exact(&gcra, &step)?;
            for cost in [0, 1, gcra.limit(), gcra.limit() + 1, i64::MAX] {
                let probe = decide(&gcra, step.before, step.now_us, cost);
                check_decision(&gcra, step.now_us, cost, &probe)?;
            }
        }
    }

    #[test]
    fn token_bucket_decisions_are_in_range_and_remaining_is_the_largest_allowed_cost(
        (bucket, _period, t0, reqs) in bucket_timeline(false),
        expiry in expiry(),
    ) {
        let capacity = bucket.capacity();
        for step in simulate(&bucket, t0, &reqs, expiry) {
            check_decision(&bucket, step.now_us, step.cost, &step.outcome)?;
            check_remaining_is_exact(&bucket, &step)?;
            for cost in [0, 1, capacity, capacity + 1, i64::MAX] {
                let probe = decide(&bucket, step.before, step.now_us, cost);
                check_decision(&bucket, step.now_us, cost, &probe)?;
            }
        }
    }

    // ---- 4. the clock stepping back ----

    #[test]
    fn gcra_reports_no_negative_times_when_the_clock_steps_back(
        (gcra, _period, t0, reqs) in gcra_timeline(true),
        expiry in expiry(),
    ) {
        for step in simulate(&gcra, t0, &reqs, expiry) {
            check_decision(&gcra, step.now_us, step.cost, &step.outcome)?;
            for cost in [0, 1, gcra.limit(), gcra.limit() + 1] {
                let probe = decide(&gcra, step.before, step.now_us, cost);
                check_decision(&gcra, step.now_us, cost, &probe)?;
            }
        }
    }

    #[test]
    fn token_bucket_reports_no_negative_times_when_the_clock_steps_back(
        (bucket, _period, t0, reqs) in bucket_timeline(true),
        expiry in expiry(),
    ) {
        let capacity = bucket.capacity();
        for step in simulate(&bucket, t0, &reqs, expiry) {
            check_decision(&bucket, step.now_us, step.cost, &step.outcome)?;
            for cost in [0, 1, capacity, capacity + 1] {
                let probe = decide(&bucket, step.before, step.now_us, cost);
                check_decision(&bucket, step.now_us, cost, &probe)?;
            }
        }
    }

    // ---- 5. the key expires exactly when the limiter is full again ----

    #[test]
    fn gcra_key_expires_exactly_when_full_again(
        (gcra, _period, t0, reqs) in gcra_timeline(true),
        expiry in expiry(),
    ) {
        for step in simulate(&gcra, t0, &reqs, expiry) {
            check_expiry(&gcra, &step)?;
        }
    }

    #[test]
    fn token_bucket_key_expires_exactly_when_full_again(
        (bucket, _period, t0, reqs) in bucket_timeline(true),
        expiry in expiry(),
    ) {
        for step in simulate(&bucket, t0, &reqs, expiry) {
            check_expiry(&bucket, &step)?;
        }
    }

    // ---- 6. the state codec ----

    #[test]
    fn gcra_state_codec_round_trips_written_states(
        (gcra, _period, t0, reqs) in gcra_timeline(true),
        tat_us in 0..=i64::MAX,
    ) {
        for step in simulate(&gcra, t0, &reqs, Expiry::Never) {
            if let Some(u) = step.outcome.update {
                check_round_trip::<Gcra>(&u.state)?;
            }
        }
        check_round_trip::<Gcra>(&tat_us)?;
    }

    #[test]
    fn token_bucket_state_codec_round_trips_written_states(
        (bucket, _period, t0, reqs) in bucket_timeline(true),
        full_at_us in 0..=i64::MAX,
        remainder in 0..=i64::MAX,
    ) {
        for step in simulate(&bucket, t0, &reqs, Expiry::Never) {
            if let Some(u) = step.outcome.update {
                check_round_trip::<TokenBucket>(&u.state)?;
            }
        }
        check_round_trip::<TokenBucket>(&FullAt { full_at_us, remainder })?;
    }

    #[test]
    fn gcra_decode_never_panics_on_arbitrary_bytes(bytes in state_bytes()) {
        check_decode::<Gcra>(&bytes)?;
    }

    #[test]
    fn token_bucket_decode_never_panics_on_arbitrary_bytes(bytes in state_bytes()) {
        check_decode::<TokenBucket>(&bytes)?;
    }

}

proptest! {
    // Each case is a single call: many cases are cheap, and the overflows
    // need several extreme inputs at once.
    #![proptest_config(ProptestConfig::with_cases(EXTREME_CASES))]

    // ---- totality at extreme values ----

    #[test]
    fn gcra_decide_never_panics_at_extreme_values(
        raw in (wide(), wide(), wide()),
        gcra in extreme_gcra(),
        tat_us in proptest::option::of(wide()),
        now_us in wide(),
        cost in wide_nonneg(),
    ) {
        new_result_is_documented(Gcra::new(raw.0, raw.1, raw.2))?;
        check_decide_total(&gcra, tat_us, now_us, cost)?;
    }

    #[test]
    fn token_bucket_decide_never_panics_at_extreme_values(
        raw in (wide(), wide(), wide()),
        bucket in extreme_bucket(),
        full_at in proptest::option::of((wide(), wide())),
        now_us in wide(),
        cost in wide_nonneg(),
    ) {
        new_result_is_documented(TokenBucket::new(raw.0, raw.1, raw.2))?;
        let state = full_at.map(|(full_at_us, remainder)| FullAt { full_at_us, remainder });
        check_decide_total(&bucket, state, now_us, cost)?;
    }
}
