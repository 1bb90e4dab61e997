//! A request's limits as `RL.ALL` calls: normally one; more for shadow
//! rules, other Redis Cluster slots, other hits, a key named twice, or more
//! than 64 keys (one call's bound: each call is atomic by itself). The
//! enforced calls are sent at once (one round trip however many slots);
//! when one refuses, those that took are refunded (at once, too). Shadow
//! rules are decided after them: they take hits only from admitted requests.

use futures_util::future::try_join_all;

use super::Shared;
use crate::backend::{BackendError, LimitReply, Op, MAX_TOKENS};
use crate::config::Match;

/// One descriptor's matched, enforced or shadow limit.
pub(super) struct Active {
    /// The descriptor's index in the request.
    pub index: usize,
    pub m: Match,
    pub key: String,
    pub hits: u64,
    pub slot: u16,
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

/// The most keys one `RL.ALL` takes (the module's and the library's
/// `numkeys` bound): a request with more is decided in several calls, as
/// one across slots is.
pub(super) const MAX_KEYS: usize = 64;

/// The calls one request needs.
pub(super) fn plan(active: &[Active]) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for (i, a) in active.iter().enumerate() {
        if a.m.rule.module_args.is_none() {
            continue;
        }
        let g = (a.m.rule.shadow_mode, a.slot, a.hits);
        // A key named twice (the same descriptor twice, or values sharing a
        // wildcard's threshold) takes its hits twice: in another call, as
        // `RL.ALL` names each key once. A call holds at most 64 keys.
        match groups.iter_mut().find(|(k, members)| {
            *k == g && members.len() < MAX_KEYS && members.iter().all(|&m| active[m].key != a.key)
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

/// `RL.ALL` over one group's limits.
async fn call(
    shared: &Shared,
    active: &[Active],
    group: &Group,
    op: Op,
) -> Result<(bool, Vec<LimitReply>), BackendError> {
    let ((_, slot, _), members) = group;
    let limits: Vec<(&str, &[String])> = members
        .iter()
        .map(|&m| {
            let a = &active[m];
            (
                a.key.as_str(),
                a.m.rule.module_args.as_deref().unwrap_or(&[]),
            )
        })
        .collect();
    shared.backend.rl_all(&limits, op, *slot).await
}

/// Sends `groups` at once, each with its op; records each limit's outcome.
/// Returns per group whether it refused.
async fn decide_groups(
    shared: &Shared,
    active: &[Active],
    groups: &[(&Group, Op)],
    outcomes: &mut [Option<Outcome>],
) -> Result<Vec<bool>, BackendError> {
    let replies = try_join_all(
        groups
            .iter()
            .map(|(group, op)| call(shared, active, group, *op)),
    )
    .await?;
    let mut refused = Vec::with_capacity(groups.len());
    for ((group, op), (was_refused, each)) in groups.iter().zip(replies) {
        let untaken = match *op {
            Op::Take(n) if was_refused => n,
            Op::Take(_) | Op::Refund(_) => 0,
            Op::Peek => 1,
        };
        for (&m, reply) in group.1.iter().zip(each) {
            outcomes[active[m].index] = Some(Outcome {
                reply,
                untaken,
                cached: false,
            });
        }
        refused.push(was_refused);
    }
    Ok(refused)
}

/// Decides the active limits, filling `outcomes`; returns whether the
/// request is refused. All or nothing across calls: when one refuses, the
/// calls that took are refunded.
pub(super) async fn run(
    shared: &Shared,
    active: &[Active],
    outcomes: &mut [Option<Outcome>],
) -> Result<bool, BackendError> {
    // A rule of 0 requests per unit refuses without asking Redis.
    let mut denied = false;
    for a in active {
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
    let groups = plan(active);
    // Once refused, a call only looks (PEEK) for its statuses.
    let op = |hits: u64, denied: bool| if denied { Op::Peek } else { op_for(hits) };
    let enforced: Vec<(&Group, Op)> = groups
        .iter()
        .filter(|((shadow, _, _), _)| !shadow)
        .map(|g| (g, op(g.0 .2, denied)))
        .collect();
    if !enforced.is_empty() {
        let refused = decide_groups(shared, active, &enforced, outcomes).await?;
        if refused.iter().any(|&r| r) && !denied {
            denied = true;
            // Give back what the others took.
            let took: Vec<(&Group, Op)> = enforced
                .iter()
                .zip(&refused)
                .filter_map(|(&(g, op), &r)| match op {
                    Op::Take(n) if !r => Some((g, Op::Refund(n))),
                    _ => None,
                })
                .collect();
            try_join_all(took.iter().map(|(g, op)| call(shared, active, g, *op))).await?;
            for (g, op) in &took {
                let Op::Refund(n) = op else { continue };
                for &m in &g.1 {
                    if let Some(o) = outcomes[active[m].index].as_mut() {
                        o.untaken = *n;
                    }
                }
            }
        }
    }
    let shadow: Vec<(&Group, Op)> = groups
        .iter()
        .filter(|((shadow, _, _), _)| *shadow)
        .map(|g| (g, op(g.0 .2, denied)))
        .collect();
    if !shadow.is_empty() {
        decide_groups(shared, active, &shadow, outcomes).await?;
    }
    Ok(denied)
}
