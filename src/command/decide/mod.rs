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

use std::cell::Cell;

use smallvec::SmallVec;

use super::answer::Answer;
use super::stats::LimitOutcome;
use super::{propagate, settings};

mod lease;
mod planning;
mod sorted_set;
mod storage;
mod write;

use crate::algorithm::block::{self, BLOCKED_BUF_LEN};
use crate::algorithm::bucket_window::{self, BucketWindow};
pub use crate::algorithm::concurrency::LeaseOp;
use crate::algorithm::plan::{plan as plan_change, Change};
pub use crate::algorithm::plan::{Op, Options};
use crate::algorithm::recognize::is_limiter_state;
use crate::algorithm::recognize::MAX_STATE_BYTES;
use crate::algorithm::sliding_log::{LogUpdate, SlidingLog};
use crate::algorithm::sliding_window::SlidingWindow;
use crate::algorithm::{all, policy};
use crate::algorithm::{Algorithm, Decision, RefundWrite, STATE_BUF_LEN};
use crate::error::{Error, KeyName, Result, NOT_OURS_AHEAD};
pub use crate::limit::{Limit, Modes};
use crate::server::effects::{self, EventClass};
use crate::server::key::{Key, KeyKind};
use crate::server::string::{Arg, OwnedString};
use crate::server::{clock_us, Ctx};
use crate::time::{ceil_ms, STATE_HORIZON_US};
use lease::plan_lease;
use planning::{plan, plan_into, Every, Put, Seen};
use sorted_set::plan_log;
use storage::{plan_string, Buckets, Fixed};
use write::{
    announce, announce_string_write, apply_planned, apply_string_planned, is_string_write, Effect,
    Write,
};

use super::store::sliding_log::{self as log_glue, ZsetLog};

/// The limits of one call, kept inline for up to 8 (no allocation).
pub type Few<T> = SmallVec<[T; 8]>;

/// One limiter of a call, planned (its key, open, is kept apart): what it
/// decided, what it writes; `RL.ALL` reads its decision (`WITHLIMITS`) and
/// its policy's statistics from it.
pub struct Planned<'a> {
    name: Arg<'a>,
    /// The decision as replied (after `SOFT` and `SHADOW`).
    pub decision: Decision,
    /// Refused by a block in force.
    pub blocked: bool,
    /// A `SHADOW` limit (it never refuses, nor binds in `RL.ALL`).
    shadow: bool,
    /// A `SHADOW` limit that would have refused the call.
    pub shadow_limited: bool,
    /// A `SOFT` limit that admits it beyond its nominal limit.
    pub soft_over: bool,
    /// A `FORCE` limit: its cost is recorded whatever the call decides.
    forced: bool,
    /// What the call writes to this key when it is applied: the new state of
    /// an allowed request or a refund, or, when this limit refuses, the
    /// block `BLOCK` asked for (the two never both exist).
    write: Write,
    /// The key holds another algorithm's state, read as no key: a write
    /// replaces it.
    replace: bool,
}

impl Planned<'_> {
    /// What this limit did, for its policy's statistics.
    pub fn outcome(&self) -> LimitOutcome {
        LimitOutcome {
            limited: self.decision.limited,
            blocked: self.blocked,
            shadow_limited: self.shadow_limited,
            soft_over: self.soft_over,
        }
    }
}

/// The lease a call's `CONCURRENCY` limit acquires, renews or releases.
#[derive(Clone, Copy)]
pub struct Lease<'a> {
    pub op: LeaseOp,
    pub id: Arg<'a>,
}

/// One limit of a call: its key, the limit, its policy's modes, and for a
/// `CONCURRENCY` limit its lease.
pub type CallLimit<'a> = (Arg<'a>, Limit, Modes, Option<Lease<'a>>);

/// Decides one limiter: the whole life of a single command's call (as
/// [`all`] with one limit, without its allocations).
pub fn one(ctx: Ctx, name: Arg, limit: &Limit, options: &Options) -> Result<Answer> {
    rule(ctx, name, limit, &Modes::default(), None, options)
}

/// [`one`] for a limit with a policy's [`Modes`] (`RL.LIMIT`).
pub fn rule<'a>(
    ctx: Ctx,
    name: Arg<'a>,
    limit: &Limit,
    modes: &Modes,
    lease: Option<Lease<'a>>,
    options: &Options,
) -> Result<Answer> {
    let stale_left = Cell::new(check_budget(
        [(limit, options.force || modes.force)],
        options.op,
    )?);
    let (mut key, p) = plan(
        ctx,
        name,
        limit,
        modes,
        lease,
        clock_us(),
        options,
        &stale_left,
    )?;
    let mut answer = Answer::new(p.decision, None, p.blocked, options);
    answer.shadow_limited = p.shadow_limited;
    answer.soft_over = p.soft_over && !options.peek;
    if options.peek {
        return Ok(answer);
    }
    let mut propagating = None;
    if is_string_write(&p.write) {
        apply_string_planned(ctx, &mut key, &p)?;
        drop(key); // closes it
        announce_string_write(ctx, name, &p.write, &mut propagating)?;
    } else {
        let effect = apply_planned(ctx, &mut key, &p)?;
        drop(key); // closes it
        announce(ctx, name, &effect, &mut propagating)?;
    }
    Ok(answer)
}

/// Decides every `(key, limit)` at once (the keys are distinct): allowed only
/// if every limit allows; then every key takes the tokens. Returns the
/// binding limit's decision and its 1-based position (`Answer::position`): when limited, the
/// refusing limit with the longest `retry_after` ("never" counts longest);
/// otherwise the one with the fewest `remaining` (the first on ties).
/// Before it answers (not on an error), `finish`, if any, is given the
/// answer and each limit's plan, in order (`RL.ALL`'s `WITHLIMITS` and its
/// policies' statistics): the answer is built once, where the caller
/// returns it.
pub fn all<'a>(
    ctx: Ctx,
    limits: &[CallLimit<'a>],
    options: &Options,
    finish: Option<impl FnOnce(&mut Answer, &[Planned<'a>])>,
) -> Result<Answer> {
    // What the budget leaves is shared by every limit's stale removals, in
    // order (see check_budget).
    let stale_left = Cell::new(check_budget(
        limits
            .iter()
            .map(|(_, limit, modes, _)| (limit, modes.force)),
        options.op,
    )?);
    let now_us = clock_us();
    let mut keys: Few<Key> = Few::new();
    let mut planned: Few<Planned<'a>> = Few::new();
    // Each plan pushed where it is built (a string's; others as their
    // single commands plan them).
    let mut every = Every {
        keys: &mut keys,
        planned: &mut planned,
        seen: Seen::default(),
    };
    for (name, limit, modes, lease) in limits {
        if matches!(
            limit,
            Limit::BucketWindow(_) | Limit::SlidingLog(_) | Limit::Concurrency(_)
        ) {
            // Planned as its single command plans it (see plan_string_key).
            let (key, p) = plan(
                ctx,
                *name,
                limit,
                modes,
                *lease,
                now_us,
                options,
                &stale_left,
            )?;
            every.put(key, p);
        } else {
            plan_into(
                ctx,
                *name,
                limit,
                modes,
                *lease,
                now_us,
                options,
                &stale_left,
                &mut every,
            )?;
        }
    }
    let Seen {
        shadows,
        blocked,
        shadow_limited,
        soft_over,
    } = every.seen;
    // A shadow limit never refuses, nor binds: the binding limit is among
    // the others (among all when every limit is a shadow, or none is).
    // (`all::binding_among`, its decisions compared where they lie.)
    let among_all = shadows == 0 || shadows == planned.len();
    let mut binding: Option<(usize, &Planned)> = None;
    for (i, p) in planned.iter().enumerate() {
        if (among_all || !p.shadow)
            && binding.map_or(true, |(_, b)| all::binds_before(&p.decision, &b.decision))
        {
            binding = Some((i, p));
        }
    }
    let (binding, decision) = binding
        .map(|(i, p)| (i, p.decision))
        .ok_or(Error::LimitCount)?;
    let allowed = !decision.limited;
    let mut answer = Answer::new(decision, Some(binding as i64 + 1), blocked, options);
    answer.shadow_limited = shadow_limited;
    answer.soft_over = allowed && !options.peek && soft_over;
    if options.peek {
        if let Some(finish) = finish {
            finish(&mut answer, &planned);
        }
        return Ok(answer);
    }
    // Allowed: every key takes its tokens. Refused: only the refusing
    // limits write (their BLOCK, when asked for). A forced limit always
    // writes (the cost recorded, past its limit or not); the others take
    // their tokens when none of them refuses (FORCE's overshoot refuses
    // nothing but its own reply). A string's write is announced from the
    // write itself; only a sorted set's effect (what its apply found) is
    // kept until the keys are closed.
    let others_allow = allowed || !planned.iter().any(|p| !p.forced && p.decision.limited);
    let applies = |p: &Planned| p.forced || others_allow || p.decision.limited;
    let mut zset_effects: Option<Few<(usize, Effect)>> = None;
    for (i, (key, p)) in keys.iter_mut().zip(planned.iter()).enumerate() {
        if !applies(p) {
            continue;
        }
        if is_string_write(&p.write) {
            apply_string_planned(ctx, key, p)?;
        } else {
            let effect = apply_planned(ctx, key, p)?;
            zset_effects.get_or_insert_with(Few::new).push((i, effect));
        }
    }
    keys.clear(); // closes every key (in place: no move of the vector)
    let mut propagating = None;
    for (i, p) in planned.iter().enumerate() {
        if !applies(p) {
            continue;
        }
        if is_string_write(&p.write) {
            announce_string_write(ctx, p.name, &p.write, &mut propagating)?;
        } else if let Some((_, effect)) = zset_effects.iter().flatten().find(|(j, _)| *j == i) {
            announce(ctx, p.name, effect, &mut propagating)?;
        }
    }
    if let Some(finish) = finish {
        finish(&mut answer, &planned);
    }
    Ok(answer)
}

/// Refuses a call whose sliding logs (and lease sets) may touch more entries than the module
/// setting `sliding-log-call-budget` ([`SlidingLog::call_entries`], summed),
/// before any key is opened: [`Error::OverBudget`]. Other limits count 0
/// (their work is O(1); `RL.ALL` takes at most 64).
///
/// A forced sliding log counts [`SlidingLog::forced_call_entries`]: a log
/// in debt holds up to twice its limit in its window.
///
/// Returns what the budget leaves: the most stale entries (a log's entries
/// that left the window, a lease set's expired slots) the whole call may
/// remove, shared by its limits in order; each removes at most its own
/// `n + 128` of what is left, the rest stays (never counted) for later calls.
#[inline(always)]
pub fn check_budget<'l>(
    limits: impl IntoIterator<Item = (&'l Limit, bool)>,
    op: Op,
) -> Result<i64> {
    let tokens = match op {
        Op::Take(n) | Op::Refund(n) => n,
    };
    let entries = limits
        .into_iter()
        .map(|(limit, force)| match limit {
            Limit::SlidingLog(log) if force => log.forced_call_entries(tokens),
            Limit::SlidingLog(log) => log.call_entries(tokens),
            // A lease set's walk is bounded as a log's.
            Limit::Concurrency(c) => c.limit() + tokens.clamp(0, c.limit()),
            _ => 0,
        })
        .fold(0i64, i64::saturating_add);
    if entries == 0 {
        return Ok(0); // no sliding log: nothing to remove
    }
    let budget = settings::sliding_log_call_budget();
    if entries > budget {
        return Err(Error::OverBudget { entries, budget });
    }
    Ok(budget - entries)
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
#[inline(always)]
fn planned<'a>(
    name: Arg<'a>,
    modes: &Modes,
    force: bool,
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
            // A forced cost is recorded all the same: the shadow limiter
            // holds what an enforcing one would.
            write: if force { write } else { Write::Nothing },
            replace: false,
            forced: force,
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
        forced: force,
    }
}

/// The instant of a call and how it decides.
pub(super) struct At<'o> {
    now_us: i64,
    options: &'o Options,
    modes: &'o Modes,
    /// Read the key as missing (it holds another algorithm's state).
    fresh: bool,
    /// `FORCE`: the call's option (a single command, `RL.LIMIT`) or this
    /// limit's (`RL.ALL`).
    force: bool,
    /// The stale entries the call may still remove, shared by its limits
    /// in order ([`check_budget`]).
    stale_left: &'o Cell<i64>,
}

impl At<'_> {
    /// The most stale entries this limit removes: its own `at_most`, within
    /// what the call has left.
    fn stale_at_most(&self, at_most: i64) -> i64 {
        at_most.min(self.stale_left.get()).max(0)
    }

    /// Counts `removed` stale entries against the call's budget.
    fn spend_stale(&self, removed: usize) {
        let removed = i64::try_from(removed).unwrap_or(i64::MAX);
        self.stale_left
            .set(self.stale_left.get().saturating_sub(removed));
    }
}

impl At<'_> {
    /// The `BLOCK` asked for: the longer of the call's and its policy's;
    /// none for a `SHADOW` limit, whose refusals write nothing (its reply
    /// is then its limiter's, not one answered as made during a block that
    /// is never written).
    fn block_us(&self) -> Option<i64> {
        if self.modes.shadow {
            return None;
        }
        longer(self.options.block_us, self.modes.block_us)
    }
}
