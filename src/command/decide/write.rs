//! Writing a planned limiter: the write to its key through the key API,
//! then, once every key of the call is closed, its effect propagated and
//! its keyspace events raised.

#[allow(clippy::wildcard_imports)]
use super::*;

/// A write planned for one key.
pub(super) enum Write {
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
    /// An allowed sliding-log request's update: `stale` are the members of
    /// the entries it removes, read and checked when planned.
    LogTake {
        update: LogUpdate,
        stale: Vec<OwnedString>,
        next_member: i64,
        limit: i64,
        /// `FORCE` past the limit with a block to write: its end (µs),
        /// whose member is (re)scored after the entries are added.
        block_until_us: Option<i64>,
    },
    /// Block a sliding log until then (µs); the key expires at
    /// `expire_at_ms`.
    LogBlock {
        until_us: i64,
        expire_at_ms: i64,
    },
    /// A concurrency limit's lease written (or the key unlinked when
    /// `expire_at_ms` is `None`).
    Lease {
        members: crate::command::store::lease_set::LeaseMembers,
        expire_at_ms: Option<i64>,
        op: LeaseOp,
        expired_leases: u64,
    },
    /// Remove the newest entries of a sliding log.
    LogRefund {
        remove_newest: i64,
        delete: bool,
        expire_at_us: i64,
    },
}

/// What was written to one key, to propagate and announce once every key
/// is closed.
pub(super) enum Effect<'w> {
    Nothing,
    String {
        value: &'w [u8],
        expire_at_ms: i64,
    },
    Delete,
    /// A sorted set deleted as `UNLINK` does (freed lazily).
    Unlink,
    Zset {
        /// Removed: the stale entries a take planned, then those a refund
        /// found.
        stale: &'w [OwnedString],
        removed: Vec<OwnedString>,
        score: Option<OwnedString>,
        added: Vec<OwnedString>,
        expire_at_ms: i64,
        /// A block written after the entries (`FORCE` with `BLOCK`): its
        /// score and member.
        block: Option<(OwnedString, OwnedString)>,
    },
    /// A lease written: slots removed (expired ones, then the lease's own),
    /// slots added at `score_us` (made a string only to propagate).
    Lease {
        expired: &'w [OwnedString],
        removed: &'w [OwnedString],
        score_us: i64,
        added: &'w [OwnedString],
        expire_at_ms: i64,
    },
}

/// Applies `write` to the open `key`; what to propagate and announce.
/// [`apply`], replacing first a key that holds another algorithm's state.
pub(super) fn apply_planned<'w>(ctx: Ctx, key: &mut Key, p: &'w Planned) -> Result<Effect<'w>> {
    replace_first(ctx, key, p)?;
    apply(ctx, key, &p.write)
}

/// Whether `write` is a string's (or a delete, or none): its effect is
/// derived from the write itself ([`announce_string_write`]), so that it
/// need not be kept until the keys are closed.
#[inline(always)]
pub(super) fn is_string_write(write: &Write) -> bool {
    matches!(
        write,
        Write::Nothing | Write::String { .. } | Write::Bytes { .. } | Write::Delete
    )
}

/// [`apply_planned`] of a string write ([`is_string_write`]), without its
/// effect, which [`announce_string_write`] derives from the write again.
#[inline(always)]
pub(super) fn apply_string_planned(ctx: Ctx, key: &mut Key, p: &Planned) -> Result<()> {
    replace_first(ctx, key, p)?;
    match p.write {
        Write::String {
            ref buf,
            len,
            old_len,
            expire_at_ms,
        } => key.write_string(old_len, buf.get(..len).unwrap_or(buf), expire_at_ms),
        Write::Bytes {
            ref value,
            old_len,
            expire_at_ms,
        } => key.write_string(old_len, value, expire_at_ms),
        Write::Delete => key.delete(),
        _ => Ok(()),
    }
}

/// Replaces first a key that holds another algorithm's state (a policy's
/// limit whose algorithm changed), when the call writes.
#[inline(always)]
fn replace_first(ctx: Ctx, key: &mut Key, p: &Planned) -> Result<()> {
    if p.replace && !matches!(p.write, Write::Nothing) {
        if key.kind()? == KeyKind::SortedSet {
            // A log may hold up to `SlidingLog::MAX_ENTRIES` entries: freed
            // lazily, here and on replicas (a SET would free it at once).
            key.unlink()?;
            effects::replicate_unlink(ctx, p.name)?;
        } else {
            key.delete()?;
            if matches!(
                p.write,
                Write::LogTake { .. } | Write::LogBlock { .. } | Write::Lease { .. }
            ) {
                // Replicas and the AOF hold the string too: their ZADD needs
                // it gone (a SET replaces any type by itself).
                effects::replicate_del(ctx, p.name)?;
            }
        }
    }
    Ok(())
}

pub(super) fn apply<'w>(ctx: Ctx, key: &mut Key, write: &'w Write) -> Result<Effect<'w>> {
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
            ref stale,
            next_member,
            limit,
            block_until_us,
        } => {
            let w = log_glue::write(ctx, key, &update, stale, next_member, limit)?;
            let block = match block_until_us {
                Some(until_us) => Some(log_glue::block(ctx, key, until_us, w.expire_at_ms)?),
                None => None,
            };
            Effect::Zset {
                stale,
                removed: Vec::new(),
                score: Some(w.score),
                added: w.added,
                expire_at_ms: w.expire_at_ms,
                block,
            }
        }
        Write::LogBlock {
            until_us,
            expire_at_ms,
        } => {
            let (score, member) = log_glue::block(ctx, key, until_us, expire_at_ms)?;
            Effect::Zset {
                stale: &[],
                removed: Vec::new(),
                score: Some(score),
                added: vec![member],
                expire_at_ms,
                block: None,
            }
        }
        Write::Lease {
            ref members,
            expire_at_ms,
            op,
            expired_leases,
        } => {
            crate::command::store::lease_set::write(key, members, expire_at_ms)?;
            crate::command::stats::LEASE_STATS.record_write(op, expired_leases);
            match expire_at_ms {
                None => Effect::Unlink,
                Some(expire_at_ms) => Effect::Lease {
                    expired: &members.expired,
                    removed: &members.removed,
                    score_us: members.expires_at_us,
                    added: &members.added,
                    expire_at_ms,
                },
            }
        }
        Write::LogRefund {
            remove_newest,
            delete,
            expire_at_us,
        } => {
            if delete {
                key.unlink()?;
                Effect::Unlink
            } else {
                let removed = log_glue::remove_newest(key, remove_newest)?;
                let expire_at_ms = ceil_ms(expire_at_us);
                key.set_abs_expire(expire_at_ms)?;
                Effect::Zset {
                    stale: &[],
                    removed,
                    score: None,
                    added: Vec::new(),
                    expire_at_ms,
                    block: None,
                }
            }
        }
    })
}

/// Propagates and announces a string write ([`is_string_write`]) once its
/// key is closed, as [`announce`] does the effect [`apply`] answers for it.
#[inline(always)]
pub(super) fn announce_string_write(
    ctx: Ctx,
    name: Arg,
    write: &Write,
    propagating: &mut Option<bool>,
) -> Result<()> {
    match *write {
        Write::String {
            ref buf,
            len,
            expire_at_ms,
            ..
        } => announce_string(
            ctx,
            name,
            buf.get(..len).unwrap_or(buf),
            expire_at_ms,
            propagating,
        ),
        Write::Bytes {
            ref value,
            expire_at_ms,
            ..
        } => announce_string(ctx, name, value, expire_at_ms, propagating),
        Write::Delete => announce_delete(ctx, name, propagating),
        _ => Ok(()),
    }
}

/// [`announce`] of a string written (`SET … PXAT`).
#[inline(always)]
fn announce_string(
    ctx: Ctx,
    name: Arg,
    value: &[u8],
    expire_at_ms: i64,
    propagating: &mut Option<bool>,
) -> Result<()> {
    if propagate::effects_needed(ctx, propagating) {
        effects::replicate_set_pxat(ctx, name, value, expire_at_ms)?;
    } else {
        effects::count_dirty(ctx);
    }
    effects::signal_modified(ctx, name)?;
    effects::notify(ctx, EventClass::String, c"set", name)?;
    effects::notify(ctx, EventClass::Generic, c"expire", name)
}

/// [`announce`] of a string deleted (`DEL`).
#[inline(always)]
fn announce_delete(ctx: Ctx, name: Arg, propagating: &mut Option<bool>) -> Result<()> {
    if propagate::effects_needed(ctx, propagating) {
        effects::replicate_del(ctx, name)?;
    } else {
        effects::count_dirty(ctx);
    }
    effects::signal_modified(ctx, name)?;
    effects::notify(ctx, EventClass::Generic, c"del", name)
}

/// Propagates `effect` and raises its keyspace events (the key is closed).
/// `propagating` caches, across the writes of one call, whether effects
/// are needed (`None` until the first write asks).
pub(super) fn announce(
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
        Effect::Unlink => {
            if propagating {
                effects::replicate_unlink(ctx, name)?;
            }
        }
        Effect::Zset {
            stale,
            removed,
            score,
            added,
            expire_at_ms,
            block,
        } => {
            if propagating {
                if !stale.is_empty() || !removed.is_empty() {
                    effects::replicate_zrem(ctx, name, &[stale, removed])?;
                }
                if let (Some(score), false) = (score, added.is_empty()) {
                    effects::replicate_zadd(ctx, name, score, added)?;
                }
                if let Some((score, member)) = block {
                    effects::replicate_zadd(ctx, name, score, std::slice::from_ref(member))?;
                }
                effects::replicate_pexpireat(ctx, name, *expire_at_ms)?;
            }
        }
        Effect::Lease {
            expired,
            removed,
            score_us,
            added,
            expire_at_ms,
        } => {
            if propagating {
                if !expired.is_empty() || !removed.is_empty() {
                    effects::replicate_zrem(ctx, name, &[expired, removed])?;
                }
                if !added.is_empty() {
                    let score = OwnedString::from_i64(ctx, *score_us)?;
                    effects::replicate_zadd(ctx, name, &score, added)?;
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
        Effect::Delete | Effect::Unlink => {
            effects::notify(ctx, EventClass::Generic, c"del", name)?;
        }
        Effect::Zset {
            stale,
            removed,
            added,
            ..
        } => {
            if !stale.is_empty() || !removed.is_empty() {
                effects::notify(ctx, EventClass::SortedSet, c"zrem", name)?;
            }
            if !added.is_empty() {
                effects::notify(ctx, EventClass::SortedSet, c"zadd", name)?;
            }
            effects::notify(ctx, EventClass::Generic, c"expire", name)?;
        }
        Effect::Lease {
            expired,
            removed,
            added,
            ..
        } => {
            if !expired.is_empty() || !removed.is_empty() {
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
