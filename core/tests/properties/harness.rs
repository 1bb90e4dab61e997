//! The property tests' shared harness: one limiter bound, one expiry model,
//! one step type and one simulator for string-backed algorithms, the sliding
//! log's simulator, and the checks every algorithm shares. Used by
//! `properties.rs`, `window_properties.rs` and the algorithms' own tests.

use std::fmt::Debug;

use proptest::collection::vec;
use proptest::prelude::*;

use crate::strategies::{check_round_trip, decide, TestResult};
use ratelimit_core::algorithm::sliding_log::{LogOutcome, LogUpdate, SlidingLog};
use ratelimit_core::algorithm::{Algorithm, Decision, Outcome};
use ratelimit_core::error::{Error, Result};
use ratelimit_core::time::{ceil_ms, US_PER_MS};

/// A string-backed algorithm whose states can be compared and printed.
pub(crate) trait Limiter: Algorithm<State: Debug + PartialEq> + Debug {}

impl<A: Algorithm<State: Debug + PartialEq> + Debug> Limiter for A {}

/// When the simulated server drops a key that expires at `expire_at_us`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Expiry {
    /// Never (the state is always fed back).
    Never,
    /// As soon as `now ≥ expire_at_us`.
    Exact,
    /// As soon as `now ≥` the expiry the command layer sets (rounded up to ms).
    Millis,
    /// Only once the clock has passed that millisecond (the latest possible).
    Late,
    /// At a random request from `expire_at_us` on, at the latest as `Late`.
    Anytime,
}

impl Expiry {
    /// Whether the key is gone at `now_us`; for `Anytime`, `coin` says whether
    /// it is dropped while the server could still keep it.
    pub(crate) fn gone(self, now_us: i64, expire_at_us: i64, coin: bool) -> bool {
        let expiry_ms_us = ceil_ms(expire_at_us) * US_PER_MS;
        let passed = now_us >= expiry_ms_us + US_PER_MS;
        match self {
            Expiry::Never => false,
            Expiry::Exact => now_us >= expire_at_us,
            Expiry::Millis => now_us >= expiry_ms_us,
            Expiry::Late => passed,
            Expiry::Anytime => passed || (coin && now_us >= expire_at_us),
        }
    }
}

/// Requests of a timeline: (step from the previous instant in µs, cost, coin
/// for [`Expiry::Anytime`]).
pub(crate) type Requests = Vec<(i64, i64, bool)>;

/// One simulated request of a string-backed algorithm.
#[derive(Debug)]
pub(crate) struct Step<S> {
    pub(crate) now_us: i64,
    pub(crate) cost: i64,
    /// The state the request was decided against.
    pub(crate) before: Option<S>,
    pub(crate) outcome: Outcome<S>,
    /// How many times the key had expired before this request.
    pub(crate) lifetime: usize,
}

/// One simulated request of the sliding log.
#[derive(Debug)]
pub(crate) struct LogStep {
    pub(crate) now_us: i64,
    pub(crate) cost: i64,
    /// The log the request was decided against.
    pub(crate) before: Vec<i64>,
    pub(crate) outcome: LogOutcome,
    /// How many times the key had expired before this request.
    pub(crate) lifetime: usize,
}

/// [`SlidingLog::decide`], which must succeed in the simulations.
pub(crate) fn decide_log(sl: &SlidingLog, log: &[i64], now_us: i64, cost: i64) -> LogOutcome {
    match sl.decide(log, now_us, cost) {
        Ok(outcome) => outcome,
        Err(e) => panic!("{sl:?}.decide({log:?}, {now_us}, {cost}) failed: {e:?}"),
    }
}

/// Applies an update to a log the way the command layer does to the sorted set.
pub(crate) fn apply_log(log: &mut Vec<i64>, u: &LogUpdate) {
    u.apply_to(log);
}

/// The tokens a decision admitted.
pub(crate) fn admitted(d: &Decision, cost: i64) -> i64 {
    if d.limited {
        0
    } else {
        cost.max(0)
    }
}

/// Runs `requests` from `start_us`, storing each update as the command layer
/// does and dropping the key as `expiry` says. The clock is kept ≥ 0.
pub(crate) fn simulate<A: Limiter>(
    alg: &A,
    start_us: i64,
    requests: &[(i64, i64, bool)],
    expiry: Expiry,
) -> Vec<Step<A::State>> {
    let mut now_us = start_us;
    let mut stored: Option<(A::State, i64)> = None;
    let mut lifetime = 0;
    let mut steps = Vec::with_capacity(requests.len());
    for &(step_us, cost, coin) in requests {
        now_us = (now_us + step_us).max(0);
        if let Some((_, expire_at_us)) = stored {
            if expiry.gone(now_us, expire_at_us, coin) {
                stored = None;
                lifetime += 1;
            }
        }
        let before = stored.map(|(s, _)| s);
        let outcome = decide(alg, before, now_us, cost);
        if let Some(u) = outcome.update {
            stored = Some((u.state, u.expire_at_us));
        }
        steps.push(Step {
            now_us,
            cost,
            before,
            outcome,
            lifetime,
        });
    }
    steps
}

/// [`simulate`] for the sliding log: a sorted set that exists while it holds
/// entries, expiring at the last update's `expire_at_us`.
pub(crate) fn simulate_log(
    sl: &SlidingLog,
    start_us: i64,
    requests: &[(i64, i64, bool)],
    expiry: Expiry,
) -> Vec<LogStep> {
    let mut now_us = start_us;
    let mut log: Vec<i64> = Vec::new();
    let mut expire_at_us = 0;
    let mut lifetime = 0;
    let mut steps = Vec::with_capacity(requests.len());
    for &(step_us, cost, coin) in requests {
        now_us = (now_us + step_us).max(0);
        if !log.is_empty() && expiry.gone(now_us, expire_at_us, coin) {
            log.clear();
            lifetime += 1;
        }
        let outcome = decide_log(sl, &log, now_us, cost);
        let before = log.clone();
        if let Some(u) = outcome.update {
            apply_log(&mut log, &u);
            expire_at_us = u.expire_at_us;
        }
        steps.push(LogStep {
            now_us,
            cost,
            before,
            outcome,
            lifetime,
        });
    }
    steps
}

/// Decoding never panics; whatever decodes re-encodes to an equal state.
pub(crate) fn check_decode<A: Limiter>(bytes: &[u8]) -> TestResult {
    if let Some(state) = A::decode(bytes) {
        check_round_trip::<A>(&state)?;
    }
    Ok(())
}

/// The result of `new` for raw parameters is a value or a documented error.
pub(crate) fn new_result_is_documented<T>(result: Result<T>) -> TestResult {
    prop_assert!(
        matches!(
            result,
            Ok(_)
                | Err(Error::OutOfRange { .. }
                    | Error::BadPeriod { .. }
                    | Error::RateTooHigh { .. }
                    | Error::RefillTooLong
                    | Error::LimitAboveSetting { .. }
                    | Error::Overflow)
        ),
        "unexpected error {:?}",
        result.err()
    );
    Ok(())
}

/// Bytes that look like states (digits and colons) or anything at all.
pub(crate) fn state_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 0..40),
        "[0-9:]{0,64}".prop_map(String::into_bytes),
        "[0-9]{1,20}(:[0-9]{1,20}){0,3}".prop_map(String::into_bytes),
    ]
}
