//! A request's limits as `RL.ALL` calls: normally one; more for shadow
//! rules, other Redis Cluster slots, other hits, a key named twice, or more
//! than 64 keys (one call's bound: each call is atomic by itself). The
//! enforced calls are sent at once (one round trip however many slots);
//! when one refuses, those that took are refunded (at once, too). Shadow
//! rules are decided after them: they take hits only from admitted requests.
//!
//! A limit of a `charge: always` rule is *forced*: its hits go with `FORCE`
//! (per limit, in the same `RL.ALL` as the others), recorded whatever the
//! other limits say, past its limit too (a debt), and never refunded. Its
//! overshoot refuses the request like a refusal: the `admitted` limits that
//! took are refunded. A charge the limit cannot hold as a debt (the
//! module's bounds: 366 days of debt, a sliding log at twice its limit)
//! takes what is left of the limit instead ([`again`]).

mod again;

use futures_util::future::{join_all, try_join_all};

use super::Shared;
use crate::backend::{BackendError, LimitReply, Op, MAX_TOKENS};
use crate::config::{Algorithm, Match};
use again::decide_all;

/// One descriptor's matched, enforced or shadow limit.
pub(super) struct Active {
    /// The descriptor's index in the request.
    pub index: usize,
    pub m: Match,
    pub key: String,
    pub hits: u64,
    pub slot: u16,
    /// Its hits are recorded with `FORCE`: a `charge: always` rule, hits
    /// above 0 (a check only is never forced).
    pub forced: bool,
}

/// Per descriptor: its outcome, once known.
#[derive(Clone, Copy)]
pub(super) struct Outcome {
    pub reply: LimitReply,
    /// The tokens the reply counts as taken that are not (a `PEEK`, a
    /// refused or refunded call): added back to `remaining` when allowed.
    pub untaken: u64,
    /// Answered by the local over-limit cache, not by Redis.
    pub cached: bool,
}

/// One call: `(shadow, slot, hits)` and its limits (indexes into `active`).
type Group = ((bool, u16, u64), Vec<usize>);

/// One `RL.ALL` to send: its limits (indexes into `active`), its op, and
/// whether the forced limits among them get `FORCE` (with a take only).
struct Call {
    slot: u16,
    members: Vec<usize>,
    op: Op,
    force: bool,
}

/// The most keys one `RL.ALL` takes (the module's and the library's
/// `numkeys` bound): a request with more is decided in several calls, as
/// one across slots is.
pub(super) const MAX_KEYS: usize = 64;

/// The most sliding-log entries one call may touch: the module's default
/// `sliding-log-call-budget` and the library's. The server refuses a call
/// over it with an error, so a request's sliding logs are split into calls
/// that fit, as its keys are by 64 ([`log_entries`]).
const SLIDING_LOG_CALL_BUDGET: u64 = 4_000;

/// The entries a limit counts against [`SLIDING_LOG_CALL_BUDGET`] as the
/// server counts them, `limit + min(n, limit)` for a `SLIDINGLOG` (`n`: the
/// hits taken, checked or refunded; at least 1, as a check counts one), 0
/// for the others.
fn log_entries(a: &Active) -> u64 {
    match a.m.rule.algorithm {
        Algorithm::SlidingLog => {
            let limit = u64::from(a.m.rule.requests_per_unit);
            limit.saturating_add(a.hits.clamp(1, limit.max(1)))
        }
        _ => 0,
    }
}

/// The calls one request needs, for the limits `include` keeps: at most
/// [`MAX_KEYS`] keys and [`SLIDING_LOG_CALL_BUDGET`] log entries each (a
/// single limit over the budget goes alone: the server's settings decide).
pub(super) fn plan(active: &[Active], include: impl Fn(&Active) -> bool) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for (i, a) in active.iter().enumerate() {
        if a.m.rule.module_args.is_none() || !include(a) {
            continue;
        }
        let g = (a.m.rule.shadow_mode, a.slot, a.hits);
        let n = log_entries(a);
        let fits = |members: &[usize]| {
            n == 0
                || members
                    .iter()
                    .map(|&m| log_entries(&active[m]))
                    .fold(n, u64::saturating_add)
                    <= SLIDING_LOG_CALL_BUDGET
        };
        // A key named twice (the same descriptor twice, or values sharing a
        // wildcard's threshold) takes its hits twice: in another call, as
        // `RL.ALL` names each key once. A call holds at most 64 keys.
        match groups.iter_mut().find(|(k, members)| {
            *k == g
                && members.len() < MAX_KEYS
                && fits(members)
                && members.iter().all(|&m| active[m].key != a.key)
        }) {
            Some((_, members)) => members.push(i),
            None => groups.push((g, vec![i])),
        }
    }
    groups
}

/// The operation for a descriptor's hits: 0 checks only; more than the
/// module's `TOKENS` takes (2^63 − 1, more than any limit) is sent as that,
/// which every limit refuses: a hit count too large is over the limit,
/// never an error.
fn op_for(hits: u64) -> Op {
    if hits == 0 {
        Op::Peek
    } else {
        Op::Take(hits.min(MAX_TOKENS))
    }
}

/// A group's calls: one, or, once the request is refused, the `admitted`
/// limits looking (`PEEK`, for their statuses) and the forced ones
/// recording their hits all the same.
fn calls_for(active: &[Active], group: &Group, denied: bool) -> Vec<Call> {
    let ((_, slot, hits), members) = group;
    let call = |members: Vec<usize>, op| Call {
        slot: *slot,
        members,
        op,
        force: true,
    };
    if !denied {
        return vec![call(members.clone(), op_for(*hits))];
    }
    let (forced, admitted): (Vec<usize>, Vec<usize>) =
        members.iter().partition(|&&m| active[m].forced);
    let mut calls = Vec::with_capacity(2);
    if !admitted.is_empty() {
        calls.push(call(admitted, Op::Peek));
    }
    if !forced.is_empty() {
        calls.push(call(forced, op_for(*hits)));
    }
    calls
}

/// Whether `m` goes with `FORCE` in `c`.
fn forced_in(active: &[Active], c: &Call, m: usize) -> bool {
    c.force && active[m].forced && matches!(c.op, Op::Take(_))
}

/// `RL.ALL` over one call's limits.
async fn send(
    shared: &Shared,
    active: &[Active],
    c: &Call,
) -> Result<(bool, Vec<LimitReply>), BackendError> {
    let limits: Vec<(&str, &[String])> = c
        .members
        .iter()
        .map(|&m| {
            let a = &active[m];
            let args = if forced_in(active, c, m) {
                a.m.rule.force_args.as_deref()
            } else {
                a.m.rule.module_args.as_deref()
            };
            (a.key.as_str(), args.unwrap_or(&[]))
        })
        .collect();
    shared.backend.rl_all(&limits, c.op, c.slot).await
}

/// What a round of calls decided.
#[derive(Default)]
struct Decided {
    /// A limit refused, or a forced one went past its limit.
    refused: bool,
    /// The `admitted` limits that took, per call: what a refusal gives back.
    took: Vec<Call>,
    /// Calls refused whole because a forced limit cannot hold its charge
    /// (nothing was written): decided again, limit by limit.
    unrecordable: Vec<Call>,
    /// Calls refused whole because their sliding logs pass the server's
    /// `sliding-log-call-budget`, set below the default [`plan`] counts by
    /// (nothing was written): decided again, limit by limit; a limit that
    /// alone passes it is refused ([`again`]).
    over_budget: Vec<Call>,
}

/// Records one call's replies in `outcomes`.
fn settle(
    active: &[Active],
    c: Call,
    (refused, each): (bool, Vec<LimitReply>),
    outcomes: &mut [Option<Outcome>],
    decided: &mut Decided,
) {
    let is_forced = |m: usize| forced_in(active, &c, m);
    // The `admitted` limits of one call take all or nothing.
    let admitted_refused = c
        .members
        .iter()
        .zip(&each)
        .any(|(&m, r)| !is_forced(m) && r.limited);
    for (&m, reply) in c.members.iter().zip(&each) {
        let untaken = match c.op {
            Op::Take(_) if is_forced(m) => 0,
            Op::Take(n) if admitted_refused => n,
            Op::Take(_) | Op::Refund(_) => 0,
            Op::Peek => 1,
        };
        outcomes[active[m].index] = Some(Outcome {
            reply: *reply,
            untaken,
            cached: false,
        });
    }
    decided.refused |= refused || each.iter().any(|r| r.limited);
    if let Op::Take(n) = c.op {
        let admitted: Vec<usize> = c
            .members
            .iter()
            .copied()
            .filter(|&m| !is_forced(m))
            .collect();
        if !admitted_refused && !admitted.is_empty() {
            decided.took.push(Call {
                slot: c.slot,
                members: admitted,
                op: Op::Refund(n),
                force: false,
            });
        }
    }
}

/// Sends `calls` at once; records each limit's outcome.
async fn decide_calls(
    shared: &Shared,
    active: &[Active],
    calls: Vec<Call>,
    outcomes: &mut [Option<Outcome>],
) -> Result<Decided, BackendError> {
    let replies = join_all(calls.iter().map(|c| send(shared, active, c))).await;
    let mut decided = Decided::default();
    let mut failed = None;
    for (c, reply) in calls.into_iter().zip(replies) {
        match reply {
            Ok(reply) => settle(active, c, reply, outcomes, &mut decided),
            Err(e)
                if e.is_unrecordable_charge()
                    && c.members.iter().any(|&m| forced_in(active, &c, m)) =>
            {
                decided.unrecordable.push(c);
            }
            Err(e) if e.is_over_log_budget() => decided.over_budget.push(c),
            Err(e) => failed = Some(e),
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(decided),
    }
}

/// Decides the active limits `include` keeps, filling `outcomes`; returns
/// whether the request is refused. All or nothing across calls: when one
/// refuses, the calls that took are refunded (but the forced limits).
/// `denied`: the request is refused already (by the local cache): only the
/// forced limits record their hits then.
pub(super) async fn run(
    shared: &Shared,
    active: &[Active],
    outcomes: &mut [Option<Outcome>],
    mut denied: bool,
    include: impl Fn(&Active) -> bool,
) -> Result<bool, BackendError> {
    // A rule of 0 requests per unit refuses without asking Redis.
    for a in active.iter().filter(|a| include(a)) {
        if a.m.rule.module_args.is_none() {
            outcomes[a.index] = Some(Outcome {
                reply: LimitReply {
                    limited: true,
                    limit: 0,
                    remaining: 0,
                    retry_after_ms: -1,
                    reset_after_ms: 0,
                },
                untaken: 0,
                cached: false,
            });
            denied |= !a.m.rule.shadow_mode;
        }
    }
    let groups = plan(active, include);
    let calls = |shadow: bool, denied: bool| -> Vec<Call> {
        groups
            .iter()
            .filter(|((s, _, _), _)| *s == shadow)
            .flat_map(|g| calls_for(active, g, denied))
            .collect()
    };
    let enforced = calls(false, denied);
    if !enforced.is_empty() {
        let decided = decide_all(shared, active, enforced, outcomes).await?;
        if decided.refused && !denied {
            // Give back what the `admitted` limits took.
            try_join_all(decided.took.iter().map(|c| send(shared, active, c))).await?;
            for c in &decided.took {
                let Op::Refund(n) = c.op else { continue };
                for &m in &c.members {
                    if let Some(o) = outcomes[active[m].index].as_mut() {
                        o.untaken = n;
                    }
                }
            }
        }
        denied |= decided.refused;
    }
    let shadow = calls(true, denied);
    if !shadow.is_empty() {
        decide_all(shared, active, shadow, outcomes).await?;
    }
    Ok(denied)
}
