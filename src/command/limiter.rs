//! Deciding one limiter, or several at once (`RL.ALL`), in one call: the
//! shared path of every command.
//!
//! 1. **Plan** ([`plan`]): open each key, decode its state (and its block,
//!    see [`crate::algorithm::block`]), decide with the one `now` of the call,
//!    and work out two writes: the one if the call goes through (`commit`)
//!    and the one if it is refused with `BLOCK` (`block`).
//! 2. **Write**: unless `PEEK`, either every `commit` (all limits allowed, or
//!    a refund) or the `block` of each refusing limit — never part of a
//!    decision. Writes go through the key API.
//! 3. **Close** every key, then **propagate** each write as its effect
//!    (`SET … PXAT`, `DEL`, `ZREM`/`ZADD`/`PEXPIREAT`) and **notify**
//!    (modified-key signal, keyspace events): a keyspace-event subscriber may
//!    change the keys from its callback.

use smallvec::SmallVec;

use super::{propagate, settings, throttle::CellGcra, Answer};
use crate::algorithm::block::{self, BLOCKED_BUF_LEN};
use crate::algorithm::bucket_window::{self, BucketWindow};
use crate::algorithm::fixed_window::FixedWindow;
use crate::algorithm::gcra::Gcra;
use crate::algorithm::leaky_bucket::LeakyBucket;
use crate::algorithm::plan::{plan as plan_change, Change};
pub use crate::algorithm::plan::{Op, Options};
use crate::algorithm::recognize::is_limiter_state;
use crate::algorithm::sliding_log::{LogUpdate, SlidingLog};
use crate::algorithm::sliding_window::SlidingWindow;
use crate::algorithm::token_bucket::TokenBucket;
use crate::algorithm::{all, policy};
use crate::algorithm::{Algorithm, Decision, RefundWrite, STATE_BUF_LEN};
use crate::error::{Error, Result};
use crate::server::effects::{self, EventClass};
use crate::server::key::{Key, KeyKind};
use crate::server::string::{Arg, OwnedString};
use crate::server::{clock_us, Ctx};
use crate::time::ceil_ms;

use super::sliding_log::{self as log_glue, ZsetLog};

/// The limits of one call, kept inline for up to 4 (no allocation).
pub type Few<T> = SmallVec<[T; 4]>;

/// One limit: an algorithm with its validated parameters.
#[derive(Debug, Clone, Copy)]
pub enum Limit {
    Gcra(Gcra),
    TokenBucket(TokenBucket),
    LeakyBucket(LeakyBucket),
    FixedWindow(FixedWindow),
    SlidingWindow(SlidingWindow),
    /// `RL.SLIDINGWINDOW … BUCKETS k`.
    BucketWindow(BucketWindow),
    SlidingLog(SlidingLog),
    /// `CL.THROTTLE`: GCRA reading redis-cell's nanosecond states too.
    Throttle(CellGcra),
}

/// What a policy adds to its limit (`RL.POLICY SET … [SHADOW] [SOFT percent]
/// [BLOCK duration]`); all off for the limits of the `RL.*` commands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Modes {
    /// `SHADOW`: decide as usual, write nothing on a refusal, answer allowed.
    pub shadow: bool,
    /// `SOFT`: the limit given decides (scaled up); replies speak of this
    /// nominal limit (see [`crate::algorithm::policy::soft_reply`]).
    pub nominal_limit: Option<i64>,
    /// The policy's `BLOCK`, µs; with the call's `BLOCK` too, the longer one.
    pub block_us: Option<i64>,
    /// A policy's limit: a key holding another algorithm's state (the
    /// policy's algorithm changed, `RL.POLICY SET … RESET`) reads as no key,
    /// and a write replaces it (see [`plan`]).
    pub policy: bool,
}

/// What one limit did in a call: its policy's statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// This limit refused the call.
    pub limited: bool,
    /// … because of a block in force.
    pub blocked: bool,
    /// A `SHADOW` limit would have refused it.
    pub shadow_limited: bool,
    /// A `SOFT` limit admitted it beyond the nominal limit.
    pub soft_over: bool,
    /// This limit's own decision (as replied: after `SOFT` and `SHADOW`).
    pub decision: Option<Decision>,
}

/// A write planned for one key.
enum Write {
    Nothing,
    /// Replace the string value (of `old_len` bytes, `None` for a new key).
    String {
        buf: [u8; BLOCKED_BUF_LEN],
        len: usize,
        old_len: Option<usize>,
        expire_at_ms: i64,
    },
    Delete,
    /// Replace the string value with a longer one than `String` holds (a
    /// bucketed sliding window's counts).
    Bytes {
        value: Vec<u8>,
        old_len: Option<usize>,
        expire_at_ms: i64,
    },
    /// An allowed sliding-log request's update.
    LogTake {
        update: LogUpdate,
        next_member: i64,
        limit: i64,
    },
    /// Block a sliding log until then (µs).
    LogBlock {
        until_us: i64,
    },
    /// Remove the newest entries of a sliding log.
    LogRefund {
        remove_newest: i64,
        delete: bool,
        expire_at_us: i64,
    },
}

/// One limiter of a call, planned (its key, open, is kept apart).
struct Planned<'a> {
    name: Arg<'a>,
    /// The decision as replied (after `SOFT` and `SHADOW`).
    decision: Decision,
    /// Refused by a block in force.
    blocked: bool,
    /// A `SHADOW` limit (it never refuses, nor binds in `RL.ALL`).
    shadow: bool,
    shadow_limited: bool,
    soft_over: bool,
    /// What the call writes to this key when it is applied: the new state of
    /// an allowed request or a refund, or, when this limit refuses, the
    /// block `BLOCK` asked for (the two never both exist).
    write: Write,
    /// The key holds another algorithm's state, read as no key: a write
    /// replaces it.
    replace: bool,
}

/// What was written to one key, to propagate and announce once every key
/// is closed.
enum Effect<'w> {
    Nothing,
    String {
        value: &'w [u8],
        expire_at_ms: i64,
    },
    Delete,
    Zset {
        removed: Vec<OwnedString>,
        score: Option<OwnedString>,
        added: Vec<OwnedString>,
        expire_at_ms: i64,
    },
}

/// Decides one limiter: the whole life of a single command's call (as
/// [`run`] with one limit, without its allocations).
pub fn run_one(ctx: Ctx, name: Arg, limit: &Limit, options: &Options) -> Result<Answer> {
    run_rule(ctx, name, limit, &Modes::default(), options)
}

/// [`run_one`] for a limit with a policy's [`Modes`] (`RL.LIMIT`).
pub fn run_rule(
    ctx: Ctx,
    name: Arg,
    limit: &Limit,
    modes: &Modes,
    options: &Options,
) -> Result<Answer> {
    check_budget([limit], options.op)?;
    let (mut key, p) = plan(ctx, name, limit, modes, clock_us(), options)?;
    let mut answer = Answer::new(p.decision, None, p.blocked, options);
    answer.shadow_limited = p.shadow_limited;
    answer.soft_over = p.soft_over && !options.peek;
    if options.peek {
        return Ok(answer);
    }
    let effect = apply_planned(ctx, &mut key, &p)?;
    drop(key); // closes it
    let mut propagating = None;
    announce(ctx, name, &effect, &mut propagating)?;
    Ok(answer)
}

/// Decides every `(key, limit)` at once (the keys are distinct): allowed only
/// if every limit allows; then every key takes the tokens. Returns the
/// binding limit's decision and its 0-based position: when limited, the
/// refusing limit with the longest `retry_after` ("never" counts longest);
/// otherwise the one with the fewest `remaining` (the first on ties).
pub fn run(
    ctx: Ctx,
    limits: &[(Arg, Limit, Modes)],
    options: &Options,
    tallies: &mut Few<Tally>,
) -> Result<Answer> {
    check_budget(limits.iter().map(|(_, limit, _)| limit), options.op)?;
    let now_us = clock_us();
    let mut keys: Few<Key> = Few::with_capacity(limits.len());
    let mut planned: Few<Planned> = Few::with_capacity(limits.len());
    for (name, limit, modes) in limits {
        let (key, p) = plan(ctx, *name, limit, modes, now_us, options)?;
        keys.push(key);
        planned.push(p);
    }
    // A shadow limit never refuses, nor binds: the binding limit is among
    // the others (among all when every limit is a shadow).
    let all_shadow = planned.iter().all(|p| p.shadow);
    let positions: Few<usize> = (0..planned.len())
        .filter(|&i| all_shadow || planned.get(i).is_some_and(|p| !p.shadow))
        .collect();
    let (at, decision, allowed) = all::binding(
        positions
            .iter()
            .filter_map(|&i| planned.get(i).map(|p| p.decision)),
    )
    .ok_or(Error::LimitCount)?;
    let binding = positions.get(at).copied().ok_or(Error::LimitCount)?;
    let blocked = planned.iter().any(|p| p.blocked);
    let mut answer = Answer::new(decision, Some(binding as i64 + 1), blocked, options);
    answer.shadow_limited = planned.iter().any(|p| p.shadow_limited);
    answer.soft_over = allowed && !options.peek && planned.iter().any(|p| p.soft_over);
    tallies.clear();
    tallies.extend(planned.iter().map(|p| Tally {
        limited: p.decision.limited,
        blocked: p.blocked,
        shadow_limited: p.shadow_limited,
        soft_over: allowed && !options.peek && p.soft_over,
        decision: Some(p.decision),
    }));
    if options.peek {
        return Ok(answer);
    }
    // Allowed: every key takes its tokens. Refused: only the refusing
    // limits write (their BLOCK, when asked for).
    let mut effects: Few<Effect> = Few::with_capacity(planned.len());
    for (key, p) in keys.iter_mut().zip(&planned) {
        effects.push(if allowed || p.decision.limited {
            apply_planned(ctx, key, p)?
        } else {
            Effect::Nothing
        });
    }
    drop(keys); // closes every key
    let mut propagating = None;
    for (p, effect) in planned.iter().zip(&effects) {
        announce(ctx, p.name, effect, &mut propagating)?;
    }
    Ok(answer)
}

/// Refuses a call whose sliding logs may touch more entries than the module
/// setting `sliding-log-call-budget` ([`SlidingLog::call_entries`], summed),
/// before any key is opened: [`Error::OverBudget`]. Other limits count 0
/// (their work is O(1); `RL.ALL` takes at most 64).
pub fn check_budget<'l>(limits: impl IntoIterator<Item = &'l Limit>, op: Op) -> Result<()> {
    let tokens = match op {
        Op::Take(n) | Op::Refund(n) => n,
    };
    let entries = limits
        .into_iter()
        .map(|limit| match limit {
            Limit::SlidingLog(log) => log.call_entries(tokens),
            _ => 0,
        })
        .fold(0i64, i64::saturating_add);
    let budget = settings::sliding_log_call_budget();
    if entries > budget {
        return Err(Error::OverBudget { entries, budget });
    }
    Ok(())
}

/// The longer of two optional durations.
fn longer(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// A planned limit with its policy's modes applied: the replied decision
/// (`SOFT`: the nominal limit; `SHADOW`: allowed), and no write for a
/// refusal a shadow limit only records.
fn planned<'a>(
    name: Arg<'a>,
    modes: &Modes,
    decision: Decision,
    blocked: bool,
    write: Write,
) -> Planned<'a> {
    let (decision, soft_over) = match modes.nominal_limit {
        Some(nominal) => policy::soft_reply(decision, nominal),
        None => (decision, false),
    };
    if modes.shadow && decision.limited {
        let (decision, _) = policy::shadow_reply(decision);
        return Planned {
            name,
            decision,
            blocked: false,
            shadow: true,
            shadow_limited: true,
            soft_over: false,
            write: Write::Nothing,
            replace: false,
        };
    }
    Planned {
        name,
        decision,
        blocked: blocked && decision.limited,
        shadow: modes.shadow,
        shadow_limited: false,
        soft_over,
        write,
        replace: false,
    }
}

fn plan<'a>(
    ctx: Ctx,
    name: Arg<'a>,
    limit: &Limit,
    modes: &Modes,
    now_us: i64,
    options: &Options,
) -> Result<(Key<'a>, Planned<'a>)> {
    let key = Key::open(ctx, name)?;
    let mut at = At {
        now_us,
        options,
        modes,
        fresh: false,
    };
    match plan_key(ctx, key, name, limit, &at) {
        // Under a policy, another algorithm's state (or variant's) reads as
        // no key; anything the module did not write keeps its error.
        Err(e) if modes.policy && e.is_state_mismatch() => {
            let key = Key::open(ctx, name)?;
            if !holds_limiter_state(ctx, &key)? {
                return Err(e);
            }
            at.fresh = true;
            let (key, mut p) = plan_key(ctx, key, name, limit, &at)?;
            p.replace = true;
            Ok((key, p))
        }
        planned => planned,
    }
}

/// Whether `key` holds a state some command of the module wrote: a string
/// state of any algorithm, or a sliding log.
fn holds_limiter_state(ctx: Ctx, key: &Key) -> Result<bool> {
    Ok(match key.kind()? {
        KeyKind::String => key.string()?.is_some_and(is_limiter_state),
        KeyKind::SortedSet => ZsetLog::open(ctx, key).is_ok_and(|log| log.is_some()),
        _ => false,
    })
}

fn plan_key<'a>(
    ctx: Ctx,
    key: Key<'a>,
    name: Arg<'a>,
    limit: &Limit,
    at: &At,
) -> Result<(Key<'a>, Planned<'a>)> {
    match limit {
        Limit::Gcra(a) => plan_string(key, name, a, "RL.GCRA", at),
        Limit::TokenBucket(a) => plan_string(key, name, a, "RL.TOKENBUCKET", at),
        Limit::LeakyBucket(a) => plan_string(key, name, a, "RL.LEAKYBUCKET", at),
        Limit::FixedWindow(a) => plan_string(key, name, a, "RL.FIXEDWINDOW", at),
        Limit::SlidingWindow(a) => plan_string(key, name, a, "RL.SLIDINGWINDOW", at),
        Limit::Throttle(a) => plan_string(key, name, a, "CL.THROTTLE", at),
        Limit::BucketWindow(a) => plan_buckets(key, name, a, at),
        Limit::SlidingLog(a) => plan_log(ctx, key, name, a, at),
    }
}

/// The instant of a call and how it decides.
struct At<'o> {
    now_us: i64,
    options: &'o Options,
    modes: &'o Modes,
    /// Read the key as missing (it holds another algorithm's state).
    fresh: bool,
}

impl At<'_> {
    /// The `BLOCK` asked for: the longer of the call's and its policy's.
    fn block_us(&self) -> Option<i64> {
        longer(self.options.block_us, self.modes.block_us)
    }
}

/// A string write of `inner` (an algorithm's encoding), behind a block
/// until `block_until_us` when one is given.
fn string_write(
    block_until_us: Option<i64>,
    inner: &[u8],
    old_len: Option<usize>,
    expire_at_us: i64,
) -> Write {
    let mut buf = [0u8; BLOCKED_BUF_LEN];
    let (len, expire_at_us) = match block_until_us {
        Some(until) => (
            block::encode(until, inner, &mut buf),
            expire_at_us.max(until),
        ),
        None => {
            let len = inner.len().min(STATE_BUF_LEN);
            buf[..len].copy_from_slice(&inner[..len]);
            (len, expire_at_us)
        }
    };
    Write::String {
        buf,
        len,
        old_len,
        expire_at_ms: ceil_ms(expire_at_us),
    }
}

fn plan_string<'a, A: Algorithm>(
    key: Key<'a>,
    name: Arg<'a>,
    algorithm: &A,
    command: &'static str,
    at: &At,
) -> Result<(Key<'a>, Planned<'a>)> {
    let now_us = at.now_us;
    let invalid = Error::InvalidState { command };
    let stored = if at.fresh { None } else { key.string()? };
    let old_len = stored.map(<[u8]>::len);
    let (blocked_until_us, inner_bytes) = match stored {
        None => (None, &[][..]),
        Some(bytes) => block::split(bytes).ok_or(invalid)?,
    };
    let state = if stored.is_none() || (blocked_until_us.is_some() && inner_bytes.is_empty()) {
        None
    } else {
        Some(A::decode(inner_bytes).ok_or_else(|| A::mismatch(inner_bytes).unwrap_or(invalid))?)
    };
    let p = plan_change(
        at.options.op,
        |cost| {
            let outcome = algorithm.decide(state, now_us, cost)?;
            Ok((outcome.decision, outcome.update))
        },
        |tokens| {
            let refunded = algorithm.refund(state, now_us, tokens)?;
            Ok((refunded.decision, refund_write(refunded.write)))
        },
        stored.is_some(),
        blocked_until_us,
        now_us,
        at.block_us(),
    )?;
    let encode = |s: &A::State| {
        let mut buf = [0u8; STATE_BUF_LEN];
        let len = A::encode(s, &mut buf);
        (buf, len)
    };
    let write = match p.change {
        Change::Nothing => Write::Nothing,
        Change::Take(u) => {
            let (buf, len) = encode(&u.state);
            string_write(None, &buf[..len], old_len, u.expire_at_us)
        }
        Change::Refund(RefundWrite::Set(u)) => {
            let (buf, len) = encode(&u.state);
            string_write(
                p.block_in_force_until_us,
                &buf[..len],
                old_len,
                u.expire_at_us,
            )
        }
        Change::Refund(_) => match p.block_in_force_until_us {
            None => Write::Delete,
            Some(until) => string_write(Some(until), b"", old_len, until),
        },
        Change::Block { until_us } => {
            let current_us = key
                .abs_expire_ms()?
                .map_or(0, |ms| ms.saturating_mul(1_000));
            string_write(Some(until_us), inner_bytes, old_len, current_us)
        }
    };
    Ok((key, planned(name, at.modes, p.decision, p.blocked, write)))
}

/// A refund's write, `None` when it changes nothing.
fn refund_write<S>(write: RefundWrite<S>) -> Option<RefundWrite<S>> {
    match write {
        RefundWrite::Nothing => None,
        w => Some(w),
    }
}

/// A bucketed sliding window's value behind a block until `block_until_us`
/// when one is given.
fn bytes_write(
    block_until_us: Option<i64>,
    inner: &[u8],
    old_len: Option<usize>,
    expire_at_us: i64,
) -> Write {
    let mut value = Vec::with_capacity(inner.len() + 24);
    let expire_at_us = match block_until_us {
        Some(until) => {
            value.push(block::PREFIX);
            value.extend_from_slice(until.to_string().as_bytes());
            value.push(b';');
            expire_at_us.max(until)
        }
        None => expire_at_us,
    };
    value.extend_from_slice(inner);
    Write::Bytes {
        value,
        old_len,
        expire_at_ms: ceil_ms(expire_at_us),
    }
}

/// [`plan_string`] for `RL.SLIDINGWINDOW … BUCKETS k`, whose state is longer
/// than a string state's buffer.
fn plan_buckets<'a>(
    key: Key<'a>,
    name: Arg<'a>,
    window: &BucketWindow,
    at: &At,
) -> Result<(Key<'a>, Planned<'a>)> {
    let now_us = at.now_us;
    let invalid = Error::InvalidState {
        command: "RL.SLIDINGWINDOW",
    };
    let stored = if at.fresh { None } else { key.string()? };
    let old_len = stored.map(<[u8]>::len);
    let (blocked_until_us, inner_bytes) = match stored {
        None => (None, &[][..]),
        Some(bytes) => block::split(bytes).ok_or(invalid)?,
    };
    let state = if stored.is_none() || (blocked_until_us.is_some() && inner_bytes.is_empty()) {
        None
    } else if bucket_window::is_bucket_state(inner_bytes) {
        Some(bucket_window::decode(inner_bytes).ok_or(invalid)?)
    } else if SlidingWindow::decode(inner_bytes).is_some() {
        return Err(Error::BucketsMismatch {
            stored: "without BUCKETS",
        });
    } else {
        return Err(invalid);
    };
    let p = plan_change(
        at.options.op,
        |cost| {
            let outcome = window.decide(state.as_ref(), now_us, cost)?;
            Ok((outcome.decision, outcome.update))
        },
        |tokens| {
            let refunded = window.refund(state.as_ref(), now_us, tokens)?;
            Ok((refunded.decision, refund_write(refunded.write)))
        },
        stored.is_some(),
        blocked_until_us,
        now_us,
        at.block_us(),
    )?;
    let encode = |s: &bucket_window::BucketCounts| {
        let mut bytes = Vec::with_capacity(bucket_window::MAX_STATE_LEN);
        bucket_window::encode(s, &mut bytes);
        bytes
    };
    let write = match p.change {
        Change::Nothing => Write::Nothing,
        Change::Take(u) => bytes_write(None, &encode(&u.state), old_len, u.expire_at_us),
        Change::Refund(RefundWrite::Set(u)) => bytes_write(
            p.block_in_force_until_us,
            &encode(&u.state),
            old_len,
            u.expire_at_us,
        ),
        Change::Refund(_) => match p.block_in_force_until_us {
            None => Write::Delete,
            Some(until) => bytes_write(Some(until), b"", old_len, until),
        },
        Change::Block { until_us } => {
            let current_us = key
                .abs_expire_ms()?
                .map_or(0, |ms| ms.saturating_mul(1_000));
            bytes_write(Some(until_us), inner_bytes, old_len, current_us)
        }
    };
    Ok((key, planned(name, at.modes, p.decision, p.blocked, write)))
}

fn plan_log<'a>(
    ctx: Ctx,
    key: Key<'a>,
    name: Arg<'a>,
    log: &SlidingLog,
    at: &At,
) -> Result<(Key<'a>, Planned<'a>)> {
    let now_us = at.now_us;
    let zset = if at.fresh {
        None
    } else {
        ZsetLog::open(ctx, &key)?
    };
    let blocked_until_us = zset.as_ref().and_then(ZsetLog::blocked_until_us);
    let next_member = zset
        .as_ref()
        .and_then(ZsetLog::newest_member)
        .map_or(0, |m| m.wrapping_add(1));
    let p = plan_change(
        at.options.op,
        |cost| {
            let outcome = match &zset {
                Some(z) => log.decide(z, now_us, cost)?,
                None => log.decide(&[][..], now_us, cost)?,
            };
            Ok((outcome.decision, outcome.update))
        },
        |tokens| {
            let refunded = match &zset {
                Some(z) => log.refund(z, now_us, tokens)?,
                None => log.refund(&[][..], now_us, tokens)?,
            };
            let removes = refunded.remove_newest > 0;
            Ok((refunded.decision, removes.then_some(refunded)))
        },
        zset.is_some(),
        blocked_until_us,
        now_us,
        at.block_us(),
    )?;
    let write = match p.change {
        Change::Nothing => Write::Nothing,
        Change::Take(update) => Write::LogTake {
            update,
            next_member,
            limit: log.limit(),
        },
        Change::Refund(refunded) => {
            let in_force = p.block_in_force_until_us;
            Write::LogRefund {
                remove_newest: refunded.remove_newest,
                // A block in force keeps the key.
                delete: refunded.delete && in_force.is_none(),
                expire_at_us: in_force.map_or(refunded.expire_at_us, |until| {
                    until.max(refunded.expire_at_us)
                }),
            }
        }
        Change::Block { until_us } => Write::LogBlock { until_us },
    };
    Ok((key, planned(name, at.modes, p.decision, p.blocked, write)))
}

/// Applies `write` to the open `key`; what to propagate and announce.
/// [`apply`], replacing first a key that holds another algorithm's state.
fn apply_planned<'w>(ctx: Ctx, key: &mut Key, p: &'w Planned) -> Result<Effect<'w>> {
    if p.replace && !matches!(p.write, Write::Nothing) {
        key.delete()?;
        if matches!(p.write, Write::LogTake { .. } | Write::LogBlock { .. }) {
            // Replicas and the AOF hold the string too: their ZADD needs it
            // gone (a SET replaces any type by itself).
            effects::replicate_del(ctx, p.name)?;
        }
    }
    apply(ctx, key, &p.write)
}

fn apply<'w>(ctx: Ctx, key: &mut Key, write: &'w Write) -> Result<Effect<'w>> {
    Ok(match *write {
        Write::Nothing => Effect::Nothing,
        Write::String {
            ref buf,
            len,
            old_len,
            expire_at_ms,
        } => {
            let value = &buf[..len];
            key.write_string(old_len, value, expire_at_ms)?;
            Effect::String {
                value,
                expire_at_ms,
            }
        }
        Write::Delete => {
            key.delete()?;
            Effect::Delete
        }
        Write::Bytes {
            ref value,
            old_len,
            expire_at_ms,
        } => {
            key.write_string(old_len, value, expire_at_ms)?;
            Effect::String {
                value,
                expire_at_ms,
            }
        }
        Write::LogTake {
            update,
            next_member,
            limit,
        } => {
            let w = log_glue::write(ctx, key, &update, next_member, limit)?;
            Effect::Zset {
                removed: w.removed,
                score: Some(w.score),
                added: w.added,
                expire_at_ms: w.expire_at_ms,
            }
        }
        Write::LogBlock { until_us } => {
            let (score, member, expire_at_ms) = log_glue::block(ctx, key, until_us)?;
            Effect::Zset {
                removed: Vec::new(),
                score: Some(score),
                added: vec![member],
                expire_at_ms,
            }
        }
        Write::LogRefund {
            remove_newest,
            delete,
            expire_at_us,
        } => {
            if delete {
                key.delete()?;
                Effect::Delete
            } else {
                let removed = log_glue::remove_newest(key, remove_newest)?;
                let expire_at_ms = ceil_ms(expire_at_us);
                key.set_abs_expire(expire_at_ms)?;
                Effect::Zset {
                    removed,
                    score: None,
                    added: Vec::new(),
                    expire_at_ms,
                }
            }
        }
    })
}

/// Propagates `effect` and raises its keyspace events (the key is closed).
/// `propagating` caches, across the writes of one call, whether effects
/// are needed (`None` until the first write asks).
fn announce(
    ctx: Ctx,
    name: Arg,
    effect: &Effect<'_>,
    propagating: &mut Option<bool>,
) -> Result<()> {
    if matches!(effect, Effect::Nothing) {
        return Ok(());
    }
    let propagating = propagate::effects_needed(ctx, propagating);
    match effect {
        Effect::Nothing => {}
        Effect::String {
            value,
            expire_at_ms,
        } => {
            if propagating {
                effects::replicate_set_pxat(ctx, name, value, *expire_at_ms)?;
            }
        }
        Effect::Delete => {
            if propagating {
                effects::replicate_del(ctx, name)?;
            }
        }
        Effect::Zset {
            removed,
            score,
            added,
            expire_at_ms,
        } => {
            if propagating {
                if !removed.is_empty() {
                    effects::replicate_zrem(ctx, name, removed)?;
                }
                if let (Some(score), false) = (score, added.is_empty()) {
                    effects::replicate_zadd(ctx, name, score, added)?;
                }
                effects::replicate_pexpireat(ctx, name, *expire_at_ms)?;
            }
        }
    }
    if !propagating {
        effects::count_dirty(ctx);
    }
    // The module signals modified keys itself, only when it writes (see
    // `command::load`): a limited call leaves WATCH alone.
    effects::signal_modified(ctx, name)?;
    match effect {
        Effect::Nothing => {}
        Effect::String { .. } => {
            effects::notify(ctx, EventClass::String, c"set", name)?;
            effects::notify(ctx, EventClass::Generic, c"expire", name)?;
        }
        Effect::Delete => effects::notify(ctx, EventClass::Generic, c"del", name)?,
        Effect::Zset { removed, added, .. } => {
            if !removed.is_empty() {
                effects::notify(ctx, EventClass::SortedSet, c"zrem", name)?;
            }
            if !added.is_empty() {
                effects::notify(ctx, EventClass::SortedSet, c"zadd", name)?;
            }
            effects::notify(ctx, EventClass::Generic, c"expire", name)?;
        }
    }
    Ok(())
}
