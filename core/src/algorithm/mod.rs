//! The rate-limiting algorithms, as pure state transitions.
//!
//! Nothing in this module (or below it) touches Redis: each algorithm is a
//! function `(previous state, now, parameters, cost) → (decision, new state)`.
//! The command layer reads the state from the key, calls [`Algorithm::decide`]
//! with the server clock, writes the new state (if any) with its absolute
//! expiry, propagates that effect, and replies with the [`Decision`].
//!
//! All instants are `i64` microseconds since the Unix epoch and all durations
//! are `i64` microseconds (names end in `_us`). Arithmetic is checked: a
//! combination that would overflow is an [`Error::Overflow`], never a wrap.

#![forbid(unsafe_code)]

pub mod all;
pub mod block;
pub mod bucket_window;
pub mod cell;
pub mod concurrency;
pub mod fixed_window;
pub mod gcra;
pub mod leaky_bucket;
pub mod plan;
pub mod policy;
pub mod recognize;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;

#[cfg(test)]
pub(crate) mod table;

use crate::error::{Error, Result, FORCE_PAST_HORIZON};

/// The answer to one request: the five fields of every `RL.*` reply, in µs.
///
/// The command layer converts the durations to milliseconds (or seconds for
/// `CL.THROTTLE`), rounding up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// `true` when the request was refused (reply element 1: `1`).
    pub limited: bool,
    /// The most tokens that can ever be taken at once.
    pub limit: i64,
    /// Tokens available right after this call (`0 ..= limit`).
    pub remaining: i64,
    /// `None` when allowed, or when the cost can never be allowed (cost >
    /// limit); otherwise the µs until a request of this cost would be allowed.
    pub retry_after_us: Option<i64>,
    /// µs until the limiter is back at full capacity (`≥ 0`).
    pub reset_after_us: i64,
}

/// What to store after a decision: the new state and the instant (µs since
/// the epoch) at which it becomes equal to "no key", where the key expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Update<S> {
    pub state: S,
    pub expire_at_us: i64,
}

/// A decision and, when the request changed the limiter, the state to write.
/// `update` is `None` for every limited request: those write nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome<S> {
    pub decision: Decision,
    pub update: Option<Update<S>>,
}

/// What a refund writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundWrite<S> {
    /// Nothing changes (a missing key, or nothing to give back).
    Nothing,
    /// Store this state, expiring at `expire_at_us`.
    Set(Update<S>),
    /// The limiter is full again: delete the key.
    Delete,
}

/// The answer to a refund: the limiter after it (`limited` false,
/// `retry_after_us` None) and what to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refunded<S> {
    pub decision: Decision,
    pub write: RefundWrite<S>,
}

/// Room for any encoded state of a string-backed algorithm.
pub const STATE_BUF_LEN: usize = 64;

/// 2^53: a window's count recorded by `FORCE` stays below it, the largest
/// integer range the Functions library (Lua's doubles) computes exactly, so
/// that both engines refuse the same forced cost.
pub const EXACT_LIMIT: i64 = 1 << 53;

/// A rate-limiting algorithm whose state is one Redis string.
pub trait Algorithm {
    /// The per-key state, decoded from the key's string value.
    type State: Copy;

    /// Decodes a stored value; `None` when it is not a state this algorithm
    /// wrote (the command replies [`Error::InvalidState`]).
    fn decode(bytes: &[u8]) -> Option<Self::State>;

    /// Encodes a state into `buf`, returning the number of bytes written.
    fn encode(state: &Self::State, buf: &mut [u8; STATE_BUF_LEN]) -> usize;

    /// The latest instant `state` records (a TAT, when a bucket is full, a
    /// window's start), µs since the epoch. A stored state whose instant
    /// lies more than [`crate::time::STATE_HORIZON_US`] after the clock is
    /// not one the module wrote ([`Error::ForeignState`]).
    fn latest_us(state: &Self::State) -> i64;

    /// The furthest ahead of the call a write of this algorithm sets the
    /// key's expiry (every duration is at most
    /// [`crate::time::MAX_PERIOD_US`]; a sliding window keeps two windows).
    /// The command layer caps each expiry it writes there: a cap that only
    /// binds on a state the clock stepped back behind.
    const EXPIRY_HORIZON_US: i64 = crate::time::MAX_PERIOD_US;

    /// Decides a request of `cost` tokens at `now_us` against `state` (`None`
    /// when the key does not exist).
    ///
    /// Errors: [`Error::Overflow`] when the arithmetic would overflow (only
    /// possible with extreme parameters or a stored state far in the future).
    fn decide(
        &self,
        state: Option<Self::State>,
        now_us: i64,
        cost: i64,
    ) -> Result<Outcome<Self::State>>;

    /// The error for stored bytes this algorithm cannot decode but another
    /// variant of the same command wrote (so the reply says which); `None`
    /// for anything else (the command then answers
    /// [`Error::InvalidState`]).
    fn mismatch(_bytes: &[u8]) -> Option<Error> {
        None
    }

    /// Gives `tokens` (≥ 1) back at `now_us`, never beyond full: the
    /// limiter after the refund (`limited` false, `retry_after_us` None) and
    /// what to write. A missing key changes nothing; a limiter that becomes
    /// full is deleted.
    ///
    /// Errors: [`Error::Overflow`] at the clock's extremes.
    fn refund(
        &self,
        state: Option<Self::State>,
        now_us: i64,
        tokens: i64,
    ) -> Result<Refunded<Self::State>>;

    /// Takes `cost` (≥ 1) tokens at `now_us` whatever the limit says: the
    /// state with the cost recorded, past the limit when it does not fit
    /// (debt), and when the key expires (the limiter full again). Only
    /// [`forced`] calls it, for a cost [`Algorithm::decide`] refused.
    ///
    /// Errors: [`Error::Overflow`]; [`Error::ForceTooMuch`] for a debt the
    /// state cannot hold; an algorithm without `FORCE` (`CL.THROTTLE`'s)
    /// answers [`Error::Internal`].
    fn charge(
        &self,
        _state: Option<Self::State>,
        _now_us: i64,
        _cost: i64,
    ) -> Result<Update<Self::State>> {
        Err(Error::Internal {
            what: "FORCE on an algorithm without it",
        })
    }
}

/// `FORCE`: decides `cost` tokens at `now_us` and records them whatever the
/// limit says.
///
/// * When the cost fits, the ordinary admission ([`Algorithm::decide`]).
/// * Otherwise the state goes past the limit ([`Algorithm::charge`]: debt)
///   and the reply is `limited`, `remaining` 0, `retry_after_us` exactly the
///   time until one more token (`TOKENS 1`) is admitted — the debt repaid
///   first — and `reset_after_us` until the limiter is full again, when the
///   key expires. A cost that can never be allowed (above the limit) is
///   recorded the same way.
///
/// Errors: [`Error::ForceTooMuch`] ([`FORCE_PAST_HORIZON`]) when the new
/// state would lie, or expire, beyond the bound every key keeps (366 days;
/// two windows for a sliding window): nothing is written then; those of
/// `decide` and `charge`.
///
/// ```
/// use ratelimit_core::algorithm::{forced, gcra::Gcra};
/// // 2 at once, 1 per second: 5 forced tokens leave a debt of 3 s.
/// let gcra = Gcra::new(1, 1, 1_000_000).unwrap();
/// let out = forced(&gcra, None, 0, 5).unwrap();
/// let d = out.decision;
/// assert_eq!((d.limited, d.remaining), (true, 0));
/// // The TAT is 5 s ahead; one token is admitted once it is 2 s ahead.
/// assert_eq!((d.retry_after_us, d.reset_after_us), (Some(4_000_000), 5_000_000));
/// assert_eq!(out.update.unwrap().expire_at_us, 5_000_000);
/// ```
pub fn forced<A: Algorithm>(
    algorithm: &A,
    state: Option<A::State>,
    now_us: i64,
    cost: i64,
) -> Result<Outcome<A::State>> {
    let outcome = algorithm.decide(state, now_us, cost)?;
    if !outcome.decision.limited {
        return Ok(outcome);
    }
    forced_past_limit(algorithm, state, now_us, cost)
}

/// [`forced`]'s second half, for a caller that has already decided `cost`
/// against `state` and been refused: records the cost as debt
/// ([`Algorithm::charge`]) and answers the overshoot. A caller that runs the
/// ordinary [`Algorithm::decide`] first and calls this only when it refuses
/// gets exactly [`forced`]'s outcome, with a `FORCE` that fits costing what
/// a plain call costs.
///
/// Errors: as [`forced`].
pub fn forced_past_limit<A: Algorithm>(
    algorithm: &A,
    state: Option<A::State>,
    now_us: i64,
    cost: i64,
) -> Result<Outcome<A::State>> {
    let update = algorithm.charge(state, now_us, cost)?;
    let expires_in_us = sub(update.expire_at_us, now_us)?;
    let latest_in_us = sub(A::latest_us(&update.state), now_us)?;
    if expires_in_us > A::EXPIRY_HORIZON_US || latest_in_us > crate::time::STATE_HORIZON_US {
        return Err(Error::ForceTooMuch {
            why: FORCE_PAST_HORIZON,
        });
    }
    let after = algorithm.decide(Some(update.state), now_us, 1)?.decision;
    Ok(Outcome {
        decision: overshoot(after)?,
        update: Some(update),
    })
}

/// The reply of a forced overshoot, from `after`, the decision of one more
/// token against the state in debt: limited, nothing remaining, its retry
/// and reset.
///
/// Errors: [`Error::Internal`] if `after` admits the token (a state past
/// the limit never does).
pub fn overshoot(after: Decision) -> Result<Decision> {
    let retry_after_us = after
        .retry_after_us
        .filter(|_| after.limited)
        .ok_or(Error::Internal {
            what: "a forced overshoot that admits the next token",
        })?;
    Ok(Decision {
        limited: true,
        limit: after.limit,
        remaining: 0,
        retry_after_us: Some(retry_after_us),
        reset_after_us: after.reset_after_us,
    })
}

/// A refund's answer: the limiter as `algorithm` reads `state` at `now_us`
/// (what a zero-cost request would report), and `write`.
pub(crate) fn refunded<A: Algorithm>(
    algorithm: &A,
    state: Option<A::State>,
    now_us: i64,
    write: RefundWrite<A::State>,
) -> Result<Refunded<A::State>> {
    let mut decision = algorithm.decide(state, now_us, 0)?.decision;
    decision.limited = false;
    decision.retry_after_us = None;
    Ok(Refunded { decision, write })
}

/// Parses a non-negative decimal integer made only of ASCII digits that fits
/// in an `i64` (the form the module writes its integers in).
pub(crate) fn parse_decimal(bytes: &[u8]) -> Option<i64> {
    if bytes.is_empty() || bytes.len() > 19 {
        return None;
    }
    let mut value: i64 = 0;
    for &b in bytes {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(i64::from(digit))?;
    }
    Some(value)
}

/// Writes `value` in decimal at `buf[at..]`, returning the new end.
pub(crate) fn write_decimal(value: i64, buf: &mut [u8; STATE_BUF_LEN], at: usize) -> usize {
    let mut fmt = itoa::Buffer::new();
    let digits = fmt.format(value).as_bytes();
    let end = at + digits.len();
    buf[at..end].copy_from_slice(digits);
    end
}

/// Converts an `i128` intermediate back to `i64`, or [`Error::Overflow`].
#[inline]
pub(crate) fn to_i64(v: i128) -> Result<i64> {
    i64::try_from(v).map_err(|_| Error::Overflow)
}

/// Validates the `limit window` pair of the window algorithms: `limit` ≥ 1
/// tokens, `window_us` ≥ 1 µs.
#[inline]
pub(crate) fn check_limit_and_window(limit: i64, window_us: i64) -> Result<()> {
    if limit < 1 {
        return Err(Error::OutOfRange {
            arg: "limit",
            bound: ">= 1",
        });
    }
    if !(1..=crate::time::MAX_PERIOD_US).contains(&window_us) {
        return Err(Error::BadPeriod { arg: "window" });
    }
    Ok(())
}

/// `a − b`, or [`Error::Overflow`].
#[inline]
pub(crate) fn sub(a: i64, b: i64) -> Result<i64> {
    a.checked_sub(b).ok_or(Error::Overflow)
}

/// The start of the epoch-aligned window of `window_us` that holds `t_us`:
/// `⌊t / window⌋ × window`, or [`Error::Overflow`] below `i64::MIN`.
#[inline]
pub(crate) fn window_start(t_us: i64, window_us: i64) -> Result<i64> {
    sub(t_us, t_us.rem_euclid(window_us))
}

/// `⌈a / b⌉` for `a ≥ 0`, `b > 0`.
#[inline]
pub(crate) fn ceil_div_i128(a: i128, b: i128) -> i128 {
    a / b + i128::from(a % b != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_round_trips_and_rejects_foreign_bytes() {
        let mut buf = [0u8; STATE_BUF_LEN];
        for v in [0, 1, 9, 10, 1_763_761_234_567_890, i64::MAX] {
            let end = write_decimal(v, &mut buf, 0);
            assert_eq!(parse_decimal(&buf[..end]), Some(v));
        }
        for bad in [
            &b""[..],
            b"-1",
            b"+1",
            b" 1",
            b"1 ",
            b"abc",
            b"1.5",
            b"9223372036854775808",
            b"\xff",
        ] {
            assert_eq!(parse_decimal(bad), None, "{bad:?}");
        }
    }
}
