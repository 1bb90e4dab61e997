//! Strategies and helpers shared by the property tests (`properties.rs`,
//! `window_properties.rs`).

use std::fmt::Debug;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use ratelimit_core::algorithm::{Algorithm, Outcome, STATE_BUF_LEN};

/// Cases of the single-call tests at extreme values.
pub const EXTREME_CASES: u32 = 1024;
/// Longest simulated timeline.
pub const MAX_STEPS: usize = 60;
/// A realistic clock value (µs since the epoch, late 2025).
pub const EPOCH_2025_US: i64 = 1_763_700_000_000_000;

pub type TestResult = Result<(), TestCaseError>;

/// `alg.decide(…)`, which must not fail on the inputs of a simulation.
pub fn decide<A: Algorithm<State: Debug + PartialEq> + Debug>(
    alg: &A,
    state: Option<A::State>,
    now_us: i64,
    cost: i64,
) -> Outcome<A::State> {
    match alg.decide(state, now_us, cost) {
        Ok(outcome) => outcome,
        Err(e) => panic!("{alg:?}.decide({state:?}, {now_us}, {cost}) failed: {e:?}"),
    }
}

/// `decode(encode(state)) == Some(state)`.
pub fn check_round_trip<A: Algorithm<State: Debug + PartialEq>>(state: &A::State) -> TestResult {
    let mut buf = [0u8; STATE_BUF_LEN];
    let n = A::encode(state, &mut buf);
    prop_assert_eq!(
        A::decode(&buf[..n]),
        Some(*state),
        "encoded as {:?}",
        &buf[..n]
    );
    Ok(())
}

/// A rate: `(period_us, tokens)` with at most one token per µs.
pub fn rate() -> impl Strategy<Value = (i64, i64)> {
    prop_oneof![1i64..=1_000, 1i64..=10_000_000]
        .prop_flat_map(|period_us| (Just(period_us), 1..=period_us.min(1_000)))
}

/// A start instant: 0, anything up to late 2025, or late 2025.
pub fn start() -> impl Strategy<Value = i64> {
    prop_oneof![Just(0i64), 0i64..=EPOCH_2025_US, Just(EPOCH_2025_US)]
}

/// Non-negative `i64`s biased to the edges (overflows need several inputs
/// near `i64::MAX` at once, so that edge is the most likely).
pub fn wide_nonneg() -> impl Strategy<Value = i64> {
    prop_oneof![
        2 => 0..=i64::MAX,
        1 => 0i64..=3,
        6 => (i64::MAX - 3)..=i64::MAX,
        1 => 0i64..=1 << 20,
        1 => (1i64 << 30)..=(1i64 << 34),
        1 => (i64::MAX / 4)..=(i64::MAX / 2 + 1),
        1 => Just(EPOCH_2025_US),
    ]
}

/// Any `i64`, biased to the edges.
pub fn wide() -> impl Strategy<Value = i64> {
    prop_oneof![
        any::<i64>(),
        wide_nonneg(),
        wide_nonneg().prop_map(|v| -v),
        i64::MIN..=(i64::MIN + 3),
    ]
}
