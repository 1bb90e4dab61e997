//! Planning a concurrency limit over its sorted set of leases: open it
//! (checked as one the module wrote, [`LeaseZset::open`]), run the one plan
//! (`ACQUIRE` a take, `RELEASE` a refund, `RENEW` a take that no block
//! refuses), and turn its change into a [`Write`].

#[allow(clippy::wildcard_imports)]
use super::*;

use super::sorted_set::block;
use crate::algorithm::concurrency::{Concurrency, LeaseOp, LeaseOutcome, LeaseUpdate, Slots};
use crate::command::stats::LEASE_STATS;
use crate::command::store::lease_set::{slot_member, LeaseMembers, LeaseZset};

pub(super) fn plan_lease<'a>(
    ctx: Ctx,
    key: Key<'a>,
    name: Arg<'a>,
    limiter: &Concurrency,
    lease: Lease<'a>,
    at: &At,
) -> Result<(Key<'a>, Planned<'a>)> {
    let now_us = at.now_us;
    let id = lease.id.bytes()?;
    let set = if at.fresh {
        None
    } else {
        LeaseZset::open(ctx, &key, id, now_us)?
    };
    let cap_us = now_us.saturating_add(crate::time::MAX_PERIOD_US);
    let stored_block = set.as_ref().and_then(LeaseZset::blocked_until_us);
    let decide = |op: LeaseOp, n: i64| -> Result<LeaseOutcome> {
        match &set {
            Some(s) => limiter.decide(s, now_us, op, n),
            None => limiter.decide(&Slots { slots: &[], id: "" }, now_us, op, n),
        }
    };
    // A block refuses ACQUIRE only: RENEW and RELEASE go on.
    let (op, blocked_until_us, block_us) = match lease.op {
        LeaseOp::Acquire => (at.options.op, stored_block, at.block_us()),
        LeaseOp::Renew => (Op::Take(1), None, None),
        LeaseOp::Release => (Op::Refund(1), stored_block, None),
    };
    // A block in force refuses an ACQUIRE it would allow: that refusal's
    // reset is the leases held now (or the block's end), not the lease it
    // does not take.
    let blocked = blocked_until_us.is_some_and(|until| until > now_us);
    let p = plan_change(
        op,
        false, // RL.CONCURRENCY has no FORCE (refused when parsed)
        |cost| {
            let out = decide(lease.op, cost)?;
            let mut decision = out.decision;
            if blocked && !decision.limited {
                decision.reset_after_us = out.reset_held_us;
            }
            Ok((decision, out.update))
        },
        |_| {
            let out = decide(LeaseOp::Release, 0)?;
            Ok((out.decision, out.update))
        },
        set.is_some(),
        blocked_until_us,
        now_us,
        block_us,
    )?;
    if p.decision.limited && !at.options.peek {
        LEASE_STATS.record_refused();
    }
    let probed = set.as_ref().map_or(0, LeaseZset::probed);
    let members = |u: &LeaseUpdate| -> Result<(LeaseMembers, u64)> {
        let (expired, leases) = match &set {
            Some(s) if !at.options.peek => {
                // Within what the call's budget has left (as a log's).
                let at_most = at.stale_at_most(u.remove_expired_at_most);
                let (expired, leases) = s.expired_members(u.expired_through_us, at_most)?;
                at.spend_stale(expired.len());
                (expired, leases)
            }
            _ => (Vec::new(), 0),
        };
        let mut added = Vec::with_capacity(usize::try_from(u.slots).unwrap_or(0));
        let mut removed = Vec::new();
        if !at.options.peek {
            for k in 1..=u.slots {
                let first = (k == 1).then(|| set.as_ref().and_then(LeaseZset::take_first_slot));
                added.push(match first.flatten() {
                    Some(member) => member,
                    None => slot_member(ctx, k, id)?,
                });
            }
            for k in u.slots.max(0) + 1..=probed {
                let first = (k == 1).then(|| set.as_ref().and_then(LeaseZset::take_first_slot));
                removed.push(match first.flatten() {
                    Some(member) => member,
                    None => slot_member(ctx, k, id)?,
                });
            }
        }
        let members = LeaseMembers {
            expired,
            removed,
            added,
            expires_at_us: u.expires_at_us,
        };
        Ok((members, leases))
    };
    let write = match p.change {
        Change::Nothing => Write::Nothing,
        Change::Take(u) | Change::Refund(u) => {
            let (members, expired_leases) = members(&u)?;
            // A block in force keeps the key, at least to its end: after a
            // RENEW too, which no block refuses (the plan knows no block
            // for it).
            let block_in_force = stored_block.filter(|&until| until > now_us);
            let latest = match block_in_force {
                Some(until) => Some(u.expire_at_us.map_or(until, |t| t.max(until))),
                None => u.expire_at_us,
            };
            Write::Lease {
                members,
                expire_at_ms: latest.map(|t| ceil_ms(t.min(cap_us))),
                op: lease.op,
                expired_leases,
            }
        }
        Change::Block { until_us } => block(&key, until_us, cap_us)?,
        Change::TakeBlocked { .. } => {
            return Err(Error::Internal {
                what: "FORCE on a lease set",
            })
        }
    };
    Ok((
        key,
        planned(name, at.modes, at.force, p.decision, p.blocked, write),
    ))
}
