//! `RL.SLIDINGLOG key limit window [TOKENS n]`
//!
//! The sliding window log ([`crate::algorithm::sliding_log`]) kept in a sorted
//! set: one entry per accepted token, scored by its timestamp in µs. Members
//! are small integers below `max(2 × limit, 128)`, unique within the set
//! (`ZADD NX` skips any in use), so the set stays in Redis's compact listpack
//! encoding up to `zset-max-listpack-entries` entries: about 12 bytes per
//! logged token at limit 100 (a 64-bit score and a two-byte member). A sorted
//! set whose newest entry is not of that shape (a leaderboard, say) gets an
//! `ERR … not RL.SLIDINGLOG state` reply and is left alone.
//!
//! An allowed request removes the entries that have left the window, adds
//! its `n` entries and sets the key's absolute expiry; it propagates exactly
//! those effects: `ZREMRANGEBYSCORE key -inf <cutoff_us>` (when anything was
//! removed), `ZADD key <t_us> <member> …`, `PEXPIREAT key <ms>`. Complexity:
//! O(log N + M) for N entries in the set and M entries removed or added (a
//! limited request walks the expired entries and, to compute its retry, the
//! oldest entries that must leave).

use std::ffi::{c_int, c_longlong};

use redis_module::raw::{self, RedisModuleCtx, RedisModuleString};

use super::{api, args::Args, docs, propagate, store::Key, ReplyUnit, Spec};
use crate::algorithm::sliding_log::{LogUpdate, SlidingLog, TimestampLog};
use crate::algorithm::Decision;
use crate::error::{Error, Result};
use crate::time::{ceil_ms, server_now_us};

pub const SPEC: Spec = Spec {
    name: c"rl.slidinglog",
    min_argc: 4,
    max_argc: None,
    unit: ReplyUnit::Millis,
    flags: c"write deny-oom",
    doc: &docs::CommandDoc {
        summary: c"Rate limits with a sliding window log kept in a sorted set: exact over any window of window seconds.",
        complexity: c"O(log(N) + M) with N entries in the log and M entries removed or added",
        arity: -4,
        acl_categories: "write",
        args: &[docs::KEY, docs::int(c"limit"), docs::seconds(c"window"), docs::TOKENS],
    },
    handler,
};

fn handler(ctx: *mut RedisModuleCtx, args: &Args) -> Result<Decision> {
    let (limit, window_us, cost) = args.limit_window_cost()?;
    let log = SlidingLog::new(limit, window_us)?;
    let mut key = Key::open(ctx, args.raw(1)?)?;
    let zset = match key.key_type()? as isize {
        raw::REDISMODULE_KEYTYPE_EMPTY => None,
        raw::REDISMODULE_KEYTYPE_ZSET => Some(ZsetLog::read(&key)?),
        _ => return Err(Error::WrongType),
    };
    let outcome = match &zset {
        Some(z) => log.decide(z, server_now_us(), cost)?,
        None => log.decide(&[][..], server_now_us(), cost)?,
    };
    if let Some(update) = outcome.update {
        let next_member = zset
            .as_ref()
            .and_then(|z| z.newest)
            .map_or(0, |(_, m)| m.wrapping_add(1));
        apply(&mut key, &update, next_member, limit)?;
    }
    Ok(outcome.decision)
}

/// A sorted set read as a log: scores are timestamps in µs.
struct ZsetLog<'k> {
    key: &'k Key,
    len: i64,
    /// The newest entry: its score and its member read as an integer (0 when
    /// it is not one).
    newest: Option<(i64, i64)>,
}

/// A score as µs (scores the module writes are integers below 2^53; any
/// other score saturates instead of failing).
fn score_us(score: f64) -> i64 {
    score as i64
}

impl<'k> ZsetLog<'k> {
    fn read(key: &'k Key) -> Result<Self> {
        let len = api!(RedisModule_ValueLength);
        let last = api!(RedisModule_ZsetLastInScoreRange);
        let current = api!(RedisModule_ZsetRangeCurrentElement);
        let stop = api!(RedisModule_ZsetRangeStop);
        // SAFETY: key is an open sorted set; the element string is freed.
        unsafe {
            let len = i64::try_from(len(key.key)).unwrap_or(i64::MAX);
            let mut newest = None;
            if last(key.key, f64::NEG_INFINITY, f64::INFINITY, 0, 0) == raw::REDISMODULE_OK as c_int
            {
                let mut score = 0.0;
                let member = current(key.key, &mut score);
                if !member.is_null() {
                    let id = member_id(member);
                    free_string(key.ctx, member);
                    if !is_log_entry(score, id) {
                        stop(key.key);
                        return Err(Error::InvalidState {
                            command: "RL.SLIDINGLOG",
                        });
                    }
                    newest = Some((score_us(score), id.unwrap_or(0)));
                }
            }
            stop(key.key);
            Ok(Self { key, len, newest })
        }
    }

    /// Calls `f` with each entry with a score in `[min, max]` (`min_exclusive`
    /// makes it `(min, max]`), in ascending order, until `f` returns false.
    fn walk(
        &self,
        min: f64,
        min_exclusive: bool,
        max: f64,
        mut f: impl FnMut(f64) -> bool,
    ) -> Result<()> {
        let first = api!(RedisModule_ZsetFirstInScoreRange);
        let current = api!(RedisModule_ZsetRangeCurrentElement);
        let next = api!(RedisModule_ZsetRangeNext);
        let end = api!(RedisModule_ZsetRangeEndReached);
        let stop = api!(RedisModule_ZsetRangeStop);
        // SAFETY: self.key is an open sorted set; element strings are freed.
        unsafe {
            if first(self.key.key, min, max, c_int::from(min_exclusive), 0)
                == raw::REDISMODULE_OK as c_int
            {
                while end(self.key.key) == 0 {
                    let mut score = 0.0;
                    let member = current(self.key.key, &mut score);
                    if !member.is_null() {
                        free_string(self.key.ctx, member);
                    }
                    if !f(score) || next(self.key.key) == 0 {
                        break;
                    }
                }
            }
            stop(self.key.key);
        }
        Ok(())
    }
}

impl TimestampLog for ZsetLog<'_> {
    fn newest_us(&self) -> Result<Option<i64>> {
        Ok(self.newest.map(|(score, _)| score))
    }

    fn count_after(&self, after_us: i64) -> Result<i64> {
        // Walk the (usually few) entries at or before the cutoff.
        let mut outside = 0i64;
        self.walk(f64::NEG_INFINITY, false, after_us as f64, |_| {
            outside += 1;
            true
        })?;
        Ok((self.len - outside).max(0))
    }

    fn nth_after(&self, after_us: i64, k: i64) -> Result<Option<i64>> {
        let mut seen = 0i64;
        let mut found = None;
        self.walk(after_us as f64, true, f64::INFINITY, |score| {
            if seen == k {
                found = Some(score_us(score));
                return false;
            }
            seen += 1;
            true
        })?;
        Ok(found)
    }
}

/// The integer value of a member, if it is one.
fn member_id(member: *mut RedisModuleString) -> Option<i64> {
    let mut v: c_longlong = 0;
    // SAFETY: member is a live string.
    let ok = unsafe { raw::RedisModule_StringToLongLong.map(|f| f(member, &mut v)) };
    (ok == Some(raw::REDISMODULE_OK as c_int)).then_some(v)
}

/// Timestamps before this (March 1973, in µs) are not ones the module wrote.
const MIN_TIMESTAMP_US: f64 = 1e14;

/// Whether `(score, member)` can be an entry the module wrote: a whole
/// number of µs since 1973 and a member below the largest member bound.
/// Checked on the newest entry, so that a sorted set kept for something else
/// (a leaderboard, a queue) is refused instead of trimmed.
fn is_log_entry(score: f64, member: Option<i64>) -> bool {
    let member_bound = SlidingLog::MAX_LIMIT * 2;
    score.is_finite()
        && score.fract() == 0.0
        && score >= MIN_TIMESTAMP_US
        && member.is_some_and(|m| (0..member_bound).contains(&m))
}

/// # Safety
/// `s` must be a live string owned by the caller, freed exactly once.
unsafe fn free_string(ctx: *mut RedisModuleCtx, s: *mut RedisModuleString) {
    if let Some(free) = unsafe { raw::RedisModule_FreeString } {
        unsafe { free(ctx, s) };
    }
}

/// Expired entries removed one `ZsetRem` at a time; more go in one range.
const REMOVE_ONE_BY_ONE: usize = 32;

/// Removes every entry scored `≤ cutoff_us` with one `ZREMRANGEBYSCORE`, run
/// through `RedisModule_Call` without replication (the caller propagates the
/// same effect). The key is closed around the call, which may delete it, and
/// opened again. The command raises its own `zremrangebyscore` event.
fn remove_range(key: &mut Key, cutoff_us: i64) -> Result<()> {
    let call = api!(RedisModule_Call);
    let free_reply = api!(RedisModule_FreeCallReply);
    let close = api!(RedisModule_CloseKey);
    // SAFETY: the key handle is closed before the call and reopened after it;
    // ctx and name live for the whole command call; the reply is freed.
    unsafe {
        close(key.key);
        key.key = std::ptr::null_mut();
        let reply = call(
            key.ctx,
            c"ZREMRANGEBYSCORE".as_ptr(),
            c"scl".as_ptr(),
            key.name,
            c"-inf".as_ptr(),
            cutoff_us as c_longlong,
        );
        if !reply.is_null() {
            free_reply(reply);
        }
    }
    key.reopen()
}

/// Owned server strings, freed on drop.
struct Strings {
    ctx: *mut RedisModuleCtx,
    items: Vec<*mut RedisModuleString>,
}

impl Drop for Strings {
    fn drop(&mut self) {
        for &s in &self.items {
            // SAFETY: each item was created by this module and is freed once.
            unsafe { free_string(self.ctx, s) };
        }
    }
}

/// Applies an allowed request's update to the sorted set and propagates it.
///
/// Members cycle through `0 .. max(2 × limit, 128)` starting after the newest
/// entry's; at most `limit` entries are in the window after this request, so
/// free members always exist, and `ZADD NX` skips any still in use.
fn apply(key: &mut Key, update: &LogUpdate, mut next_member: i64, limit: i64) -> Result<()> {
    let first = api!(RedisModule_ZsetFirstInScoreRange);
    let current = api!(RedisModule_ZsetRangeCurrentElement);
    let next = api!(RedisModule_ZsetRangeNext);
    let end = api!(RedisModule_ZsetRangeEndReached);
    let stop = api!(RedisModule_ZsetRangeStop);
    let rem = api!(RedisModule_ZsetRem);
    let add = api!(RedisModule_ZsetAdd);
    let from_ll = api!(RedisModule_CreateStringFromLongLong);
    let set_abs_expire = api!(RedisModule_SetAbsExpire);
    let replicate = api!(RedisModule_Replicate);
    let notify = api!(RedisModule_NotifyKeyspaceEvent);
    let ok = raw::REDISMODULE_OK as c_int;
    let (ctx, name) = (key.ctx, key.name);
    let cutoff = update.remove_through_us;
    let propagating = propagate::effects_needed(ctx);
    // SAFETY: key.key is open for writing; every created string is owned by
    // a `Strings` guard and freed once; the server copies what it keeps.
    unsafe {
        // 1. Remove the entries that left the window. The key API has no
        //    range removal: up to REMOVE_ONE_BY_ONE entries are collected (the
        //    set may not change during iteration) and removed one by one;
        //    beyond that one ZREMRANGEBYSCORE does it in O(log N + M).
        let k = key.key;
        let mut expired = Strings {
            ctx,
            items: Vec::new(),
        };
        let mut many = false;
        if first(k, f64::NEG_INFINITY, cutoff as f64, 0, 0) == ok {
            while end(k) == 0 {
                if expired.items.len() == REMOVE_ONE_BY_ONE {
                    many = true;
                    break;
                }
                let member = current(k, std::ptr::null_mut());
                if !member.is_null() {
                    expired.items.push(member);
                }
                if next(k) == 0 {
                    break;
                }
            }
        }
        stop(k);
        if many {
            remove_range(key, cutoff)?;
        } else if !expired.items.is_empty() {
            for &member in &expired.items {
                rem(k, member, std::ptr::null_mut());
            }
            notify(
                ctx,
                raw::REDISMODULE_NOTIFY_ZSET as c_int,
                c"zremrangebyscore".as_ptr(),
                name,
            );
        }
        if propagating && (many || !expired.items.is_empty()) {
            replicate(
                ctx,
                c"ZREMRANGEBYSCORE".as_ptr(),
                c"scl".as_ptr(),
                name,
                c"-inf".as_ptr(),
                cutoff as c_longlong,
            );
        }
        let k = key.key;

        // 2. Add the new entries.
        let count = usize::try_from(update.add_count).unwrap_or(0);
        let modulus = limit.saturating_mul(2).max(128);
        let score = Strings {
            ctx,
            items: vec![from_ll(ctx, update.add_at_us as c_longlong)],
        };
        let mut members = Strings {
            ctx,
            items: Vec::with_capacity(count),
        };
        let mut attempts = 0i64;
        while members.items.len() < count {
            if attempts > modulus.saturating_add(update.add_count) {
                return Err(Error::Internal {
                    what: "no free sorted-set member",
                });
            }
            attempts += 1;
            let member = from_ll(ctx, next_member.rem_euclid(modulus) as c_longlong);
            next_member = next_member.wrapping_add(1);
            let mut flags = raw::REDISMODULE_ZADD_NX as c_int;
            let status = add(k, update.add_at_us as f64, member, &mut flags);
            if status == ok && flags & raw::REDISMODULE_ZADD_ADDED as c_int != 0 {
                members.items.push(member);
            } else {
                free_string(ctx, member); // in use: try the next member
            }
        }
        if propagating {
            // ZADD key score member score member …
            let mut argv = Vec::with_capacity(1 + 2 * count);
            argv.push(name);
            for &member in &members.items {
                argv.push(score.items[0]);
                argv.push(member);
            }
            replicate(
                ctx,
                c"ZADD".as_ptr(),
                c"v".as_ptr(),
                argv.as_ptr(),
                argv.len(),
            );
        }
        notify(
            ctx,
            raw::REDISMODULE_NOTIFY_ZSET as c_int,
            c"zadd".as_ptr(),
            name,
        );

        // Only now is the key changed for WATCH (see `command::register_all`).
        api!(RedisModule_SignalModifiedKey)(ctx, name);

        // 3. Expire when the newest entry leaves the window.
        let expire_at_ms = ceil_ms(update.expire_at_us);
        if set_abs_expire(k, expire_at_ms) != ok {
            return Err(Error::Internal {
                what: "could not set the expiry",
            });
        }
        if propagating {
            replicate(
                ctx,
                c"PEXPIREAT".as_ptr(),
                c"sl".as_ptr(),
                name,
                expire_at_ms as c_longlong,
            );
        } else {
            propagate::count_write(ctx);
        }
        notify(
            ctx,
            raw::REDISMODULE_NOTIFY_GENERIC as c_int,
            c"expire".as_ptr(),
            name,
        );
    }
    Ok(())
}
