//! Planning a sliding log over its sorted set: open the log (checked as one
//! the module wrote, [`ZsetLog::open`]), run the one plan, and turn its
//! change into a [`Write`].

#[allow(clippy::wildcard_imports)]
use super::*;

pub(super) fn plan_log<'a>(
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
        ZsetLog::open(ctx, &key, now_us)?
    };
    // As for a string state: every expiry at most the horizon ahead.
    let cap_us = now_us.saturating_add(SlidingLog::EXPIRY_HORIZON_US);
    let blocked_until_us = zset.as_ref().and_then(ZsetLog::blocked_until_us);
    let next_member = zset
        .as_ref()
        .and_then(ZsetLog::newest_member)
        .map_or(0, |m| m.wrapping_add(1));
    let force = at.force;
    let p = plan_change(
        at.options.op,
        force,
        |cost| {
            let outcome = match (&zset, force) {
                (Some(z), false) => log.decide(z, now_us, cost)?,
                (None, false) => log.decide(&[][..], now_us, cost)?,
                (zset, true) => forced_log(log, zset.as_ref(), now_us, cost)?,
            };
            Ok((outcome.decision, outcome.update))
        },
        |tokens| {
            let refunded = match &zset {
                Some(z) => log.refund(z, now_us, tokens)?,
                None => log.refund(&[][..], now_us, tokens)?,
            };
            let removes = refunded.remove_newest > 0;
            let write = (
                refunded.remove_newest,
                refunded.delete,
                refunded.expire_at_us,
            );
            Ok((refunded.decision, removes.then_some(write)))
        },
        zset.is_some(),
        blocked_until_us,
        now_us,
        at.block_us(),
    )?;
    let write = match p.change {
        Change::Nothing => Write::Nothing,
        Change::Take(update) => take(&zset, update, None, next_member, log, at, cap_us)?,
        Change::TakeBlocked {
            take: update,
            until_us,
        } => take(&zset, update, Some(until_us), next_member, log, at, cap_us)?,
        Change::Refund((remove_newest, delete, expire_at_us)) => {
            let in_force = p.block_in_force_until_us;
            Write::LogRefund {
                remove_newest,
                // A block in force keeps the key.
                delete: delete && in_force.is_none(),
                expire_at_us: in_force
                    .map_or(expire_at_us, |until| until.max(expire_at_us))
                    .min(cap_us),
            }
        }
        Change::Block { until_us } => block(&key, until_us, cap_us)?,
    };
    Ok((
        key,
        planned(name, at.modes, at.force, p.decision, p.blocked, write),
    ))
}

/// `FORCE`'s decision on a log, out of the plain path.
#[cold]
#[inline(never)]
fn forced_log(
    log: &SlidingLog,
    zset: Option<&ZsetLog>,
    now_us: i64,
    cost: i64,
) -> Result<crate::algorithm::sliding_log::LogOutcome> {
    match zset {
        Some(z) => log.force(z, now_us, cost),
        None => log.force(&[][..], now_us, cost),
    }
}

/// The write of a take's `update` to the log (`FORCE`: behind a block
/// until `block_until_us`, the key expiring no earlier than its end).
#[inline(always)]
fn take(
    zset: &Option<ZsetLog>,
    mut update: LogUpdate,
    block_until_us: Option<i64>,
    next_member: i64,
    log: &SlidingLog,
    at: &At,
    cap_us: i64,
) -> Result<Write> {
    update.expire_at_us = update
        .expire_at_us
        .max(block_until_us.unwrap_or(i64::MIN))
        .min(cap_us);
    // The entries the write removes, read (and checked) now: an error
    // leaves every key of the call untouched. At most what the call's
    // budget has left; the others stay (never counted) for later calls.
    update.remove_at_most = at.stale_at_most(update.remove_at_most);
    let stale = match zset {
        Some(z) if !at.options.peek => {
            let stale = z.stale_members(update.remove_through_us, update.remove_at_most)?;
            at.spend_stale(stale.len());
            stale
        }
        _ => Vec::new(),
    };
    Ok(Write::LogTake {
        update,
        stale,
        next_member,
        limit: log.limit(),
        block_until_us,
    })
}

/// The write of a block until `until_us` to a sorted set (a log or a lease
/// set): the key expires at its block's end, or later when it expires later
/// already (capped at `cap_us`).
pub(super) fn block(key: &Key, until_us: i64, cap_us: i64) -> Result<Write> {
    let current_ms = key.abs_expire_ms()?.unwrap_or(0).min(ceil_ms(cap_us));
    Ok(Write::LogBlock {
        until_us,
        expire_at_ms: current_ms.max(ceil_ms(until_us)),
    })
}
