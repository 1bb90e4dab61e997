//! What a write tells the rest of the server: the effects handed to
//! replication and the AOF (`RedisModule_Replicate`), the dirty counter
//! (`RedisModule_ReplicateVerbatim`), modified-key signals (`WATCH`,
//! client-side caching) and keyspace events.
//!
//! Callers close the key before any of these: a keyspace-event subscriber may
//! delete or rewrite the key from its callback.

use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw::{self, RedisModuleString};

use super::string::{Arg, OwnedString};
use super::{api, Ctx};
use crate::error::Result;

/// The `PXAT` argument of the propagated `SET`, created at load so that
/// propagating does not create it on every call, and freed at unload.
static PXAT: AtomicPtr<RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());

/// Creates the constant strings (at load); false when the server could not.
pub fn create_constants() -> bool {
    let Ok(pxat) = OwnedString::detached(c"PXAT") else {
        return false;
    };
    let raw = pxat.as_ptr();
    std::mem::forget(pxat); // freed by `free_constants`
    PXAT.store(raw, Ordering::Relaxed);
    true
}

/// Frees the constant strings (at unload, or after a failed load).
pub fn free_constants() {
    let raw = PXAT.swap(std::ptr::null_mut(), Ordering::Relaxed);
    // Dropping the owner frees it once.
    drop(OwnedString::from_raw(None, raw));
}

/// The context flags (`REDISMODULE_CTX_FLAGS_*`) of the current call; 0
/// where the server lacks the API.
pub fn context_flags(ctx: Ctx) -> u32 {
    // SAFETY: a plain read of a function pointer set at load.
    match unsafe { raw::RedisModule_GetContextFlags } {
        // SAFETY: the context of the current call.
        Some(flags) => (unsafe { flags(ctx.as_ptr()) }) as u32,
        None => 0,
    }
}

/// Propagates `SET name value PXAT expire_at_ms`.
///
/// The time goes as a buffer (`b`) of its decimal digits rather than a
/// `long long` (`l`): the server turns an `l` into an sds string through
/// `sdsfromlonglong`, ~450 instructions where the buffer costs ~100.
pub fn replicate_set_pxat(ctx: Ctx, name: Arg, value: &[u8], expire_at_ms: i64) -> Result<()> {
    let replicate = api!(RedisModule_Replicate);
    let pxat = PXAT.load(Ordering::Relaxed);
    let mut digits = itoa::Buffer::new();
    let at = digits.format(expire_at_ms);
    // SAFETY: the context and key name of the current call; `value` and
    // `at` live through the call, which copies them; PXAT was created at
    // load (checked non-null then) and is freed only at unload.
    unsafe {
        replicate(
            ctx.as_ptr(),
            c"SET".as_ptr(),
            c"sbsb".as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast::<c_char>(),
            value.len(),
            pxat,
            at.as_ptr().cast::<c_char>(),
            at.len(),
        )
    };
    Ok(())
}

/// Propagates `DEL name`.
pub fn replicate_del(ctx: Ctx, name: Arg) -> Result<()> {
    let replicate = api!(RedisModule_Replicate);
    // SAFETY: the context and key name of the current call.
    unsafe { replicate(ctx.as_ptr(), c"DEL".as_ptr(), c"s".as_ptr(), name.as_ptr()) };
    Ok(())
}

/// Propagates `UNLINK name` (replicas free the value as the module did:
/// lazily).
pub fn replicate_unlink(ctx: Ctx, name: Arg) -> Result<()> {
    let replicate = api!(RedisModule_Replicate);
    // SAFETY: the context and key name of the current call.
    unsafe {
        replicate(
            ctx.as_ptr(),
            c"UNLINK".as_ptr(),
            c"s".as_ptr(),
            name.as_ptr(),
        )
    };
    Ok(())
}

/// Propagates `PEXPIREAT name expire_at_ms` (the time as a buffer, as in
/// [`replicate_set_pxat`]).
pub fn replicate_pexpireat(ctx: Ctx, name: Arg, expire_at_ms: i64) -> Result<()> {
    let replicate = api!(RedisModule_Replicate);
    let mut digits = itoa::Buffer::new();
    let at = digits.format(expire_at_ms);
    // SAFETY: the context and key name of the current call; `at` lives
    // through the call, which copies it.
    unsafe {
        replicate(
            ctx.as_ptr(),
            c"PEXPIREAT".as_ptr(),
            c"sb".as_ptr(),
            name.as_ptr(),
            at.as_ptr().cast::<c_char>(),
            at.len(),
        )
    };
    Ok(())
}

/// Propagates `ZREM name member …`, the members of every part in order.
pub fn replicate_zrem(ctx: Ctx, name: Arg, parts: &[&[OwnedString]]) -> Result<()> {
    let count: usize = parts.iter().map(|part| part.len()).sum();
    let mut argv = Vec::with_capacity(1 + count);
    argv.push(name.as_ptr());
    argv.extend(
        parts
            .iter()
            .flat_map(|part| part.iter().map(OwnedString::as_ptr)),
    );
    replicate_vector(ctx, c"ZREM", &argv)
}

/// Propagates `ZADD name score member score member …`, every member at the
/// same `score`.
pub fn replicate_zadd(
    ctx: Ctx,
    name: Arg,
    score: &OwnedString,
    members: &[OwnedString],
) -> Result<()> {
    let mut argv = Vec::with_capacity(1 + 2 * members.len());
    argv.push(name.as_ptr());
    for member in members {
        argv.push(score.as_ptr());
        argv.push(member.as_ptr());
    }
    replicate_vector(ctx, c"ZADD", &argv)
}

fn replicate_vector(ctx: Ctx, command: &CStr, argv: &[*mut RedisModuleString]) -> Result<()> {
    let replicate = api!(RedisModule_Replicate);
    // SAFETY: the context of the current call; every string in `argv` is
    // live for the call, which copies what it keeps.
    unsafe {
        replicate(
            ctx.as_ptr(),
            command.as_ptr(),
            c"v".as_ptr(),
            argv.as_ptr(),
            argv.len(),
        )
    };
    Ok(())
}

/// Counts a write in the server's dirty counter without propagating
/// anything the server would keep: `RedisModule_ReplicateVerbatim`, which
/// the server drops when nothing consumes effects (see
/// `command::propagate`).
pub fn count_dirty(ctx: Ctx) {
    // SAFETY: a plain read of a function pointer set at load.
    if let Some(verbatim) = unsafe { raw::RedisModule_ReplicateVerbatim } {
        // SAFETY: the context of the current command.
        unsafe { verbatim(ctx.as_ptr()) };
    }
}

/// Propagates the current command as the client sent it (to replicas and
/// the AOF): for commands whose result does not depend on the clock or the
/// keyspace (`RL.POLICY SET`, …).
pub fn replicate_verbatim(ctx: Ctx) {
    count_dirty(ctx);
}

/// Signals `name` as modified (`WATCH`, client-side caching).
pub fn signal_modified(ctx: Ctx, name: Arg) -> Result<()> {
    let signal = api!(RedisModule_SignalModifiedKey);
    // SAFETY: the context and key name of the current call.
    unsafe { signal(ctx.as_ptr(), name.as_ptr()) };
    Ok(())
}

/// The class of a keyspace event.
#[derive(Debug, Clone, Copy)]
pub enum EventClass {
    Generic,
    String,
    SortedSet,
}

/// Raises the keyspace event `event` for `name`. Subscribers may change or
/// delete the key from their callback: the key must be closed.
pub fn notify(ctx: Ctx, class: EventClass, event: &'static CStr, name: Arg) -> Result<()> {
    let notify = api!(RedisModule_NotifyKeyspaceEvent);
    let class = match class {
        EventClass::Generic => raw::REDISMODULE_NOTIFY_GENERIC,
        EventClass::String => raw::REDISMODULE_NOTIFY_STRING,
        EventClass::SortedSet => raw::REDISMODULE_NOTIFY_ZSET,
    } as c_int;
    // SAFETY: the context and key name of the current call; the event name
    // is static.
    unsafe { notify(ctx.as_ptr(), class, event.as_ptr(), name.as_ptr()) };
    Ok(())
}

/// Whether the current command comes from the primary (`REPLICATED`) or an
/// AOF replay (`LOADING`) rather than from a client.
pub fn is_replicated_or_loading(ctx: Ctx) -> bool {
    let flags = context_flags(ctx);
    flags & (raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING) != 0
}
