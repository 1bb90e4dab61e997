//! The calls decided again, limit by limit, after the server refused them
//! whole (nothing written): a charge a limit cannot hold as a debt, or
//! sliding logs past the server's `sliding-log-call-budget`.

use super::{decide_calls, forced_in, send, Active, Call, Decided, Outcome, Shared};
use crate::backend::{BackendError, LimitReply, Op};

/// Decides `calls`, and again, limit by limit:
///
/// * those whose sliding logs passed the server's budget (each limit alone
///   then; one that alone passes it is refused, [`over_budget`]);
/// * those a charge too large for its limit refused whole: the request is
///   then refused; the `admitted` limits look, each forced limit records
///   its charge alone, and one that still cannot is saturated.
pub(super) async fn decide_all(
    shared: &Shared,
    active: &[Active],
    calls: Vec<Call>,
    outcomes: &mut [Option<Outcome>],
) -> Result<Decided, BackendError> {
    let mut decided = decide_calls(shared, active, calls, outcomes).await?;
    let (alone, several): (Vec<Call>, Vec<Call>) = std::mem::take(&mut decided.over_budget)
        .into_iter()
        .partition(|c| c.members.len() == 1);
    let mut alone_over = alone;
    if !several.is_empty() {
        let singles: Vec<Call> = several
            .into_iter()
            .flat_map(|c| {
                c.members.into_iter().map(move |m| Call {
                    slot: c.slot,
                    members: vec![m],
                    op: c.op,
                    force: c.force,
                })
            })
            .collect();
        let more = decide_calls(shared, active, singles, outcomes).await?;
        decided.refused |= more.refused;
        decided.took.extend(more.took);
        decided.unrecordable.extend(more.unrecordable);
        alone_over.extend(more.over_budget);
    }
    for c in alone_over {
        over_budget(shared, active, &c, outcomes).await?;
        decided.refused = true;
    }
    if decided.unrecordable.is_empty() {
        return Ok(decided);
    }
    decided.refused = true;
    let mut again = Vec::new();
    let mut full = Vec::new();
    for c in std::mem::take(&mut decided.unrecordable) {
        let (forced, admitted): (Vec<usize>, Vec<usize>) =
            c.members.iter().partition(|&&m| forced_in(active, &c, m));
        if !admitted.is_empty() {
            again.push(Call {
                members: admitted,
                op: Op::Peek,
                ..c
            });
        }
        if let [only] = forced[..] {
            full.push((only, c.slot, c.op));
        } else {
            again.extend(forced.into_iter().map(|m| Call {
                members: vec![m],
                ..c
            }));
        }
    }
    let second = decide_calls(shared, active, again, outcomes).await?;
    for c in second.unrecordable {
        full.extend(c.members.iter().map(|&m| (m, c.slot, c.op)));
    }
    for (m, slot, op) in full {
        saturate(shared, active, m, slot, op, outcomes).await?;
    }
    Ok(decided)
}

/// A limit whose hits the server can never decide in one call (its
/// sliding log's `limit + hits` passes the server's
/// `sliding-log-call-budget`): refused, as a hit count above any limit is,
/// never an error a client's hit count can provoke. Its status is read
/// with a check (`PEEK`, which touches `limit + 1` entries: a server whose
/// budget is below a rule's limit answers every request of that rule with
/// its error). Nothing is taken or recorded.
async fn over_budget(
    shared: &Shared,
    active: &[Active],
    c: &Call,
    outcomes: &mut [Option<Outcome>],
) -> Result<(), BackendError> {
    let peek = Call {
        slot: c.slot,
        members: c.members.clone(),
        op: Op::Peek,
        force: false,
    };
    let (_, each) = send(shared, active, &peek).await?;
    if each.len() != c.members.len() {
        return Err(BackendError::Reply(
            "RL.ALL answered another number of limits".into(),
        ));
    }
    for (&m, reply) in c.members.iter().zip(&each) {
        outcomes[active[m].index] = Some(Outcome {
            reply: exhausted(*reply),
            untaken: 0,
            cached: false,
        });
    }
    Ok(())
}

/// `reply` as a limit that refuses with nothing left and no retry time
/// (`retry_after` -1: not by waiting).
fn exhausted(reply: LimitReply) -> LimitReply {
    LimitReply {
        limited: true,
        remaining: 0,
        retry_after_ms: -1,
        ..reply
    }
}

/// A forced limit that cannot hold its charge as a debt: it takes what is
/// left of it instead (the charge, refused, says how much is left; then
/// that much), so it is exhausted, and its status is `OVER_LIMIT`.
async fn saturate(
    shared: &Shared,
    active: &[Active],
    m: usize,
    slot: u16,
    op: Op,
    outcomes: &mut [Option<Outcome>],
) -> Result<(), BackendError> {
    let ordinary = |op| Call {
        slot,
        members: vec![m],
        op,
        force: false,
    };
    let (_, each) = send(shared, active, &ordinary(op)).await?;
    let mut reply = each
        .first()
        .copied()
        .ok_or_else(|| BackendError::Reply("RL.ALL answered no limit".into()))?;
    if reply.limited {
        if let Ok(left @ 1..) = u64::try_from(reply.remaining) {
            let (_, each) = send(shared, active, &ordinary(Op::Take(left))).await?;
            reply = each.first().copied().unwrap_or(reply);
        }
        reply = exhausted(reply);
    }
    outcomes[active[m].index] = Some(Outcome {
        reply,
        untaken: 0,
        cached: false,
    });
    Ok(())
}
