//! When the effects of a write must be propagated, and what a write costs
//! when nothing can consume them.
//!
//! Every write is propagated as its effect (`SET … PXAT`, `ZADD`, …) through
//! `RedisModule_Replicate`. That call costs ~3.4k instructions (it looks the
//! command up by name and builds an argument vector) even when the server then
//! drops it because nothing consumes the stream: no AOF, and — on a master —
//! no replication backlog and no replica (Redis's `shouldPropagate`). For a
//! standalone limiter that is a third of a call.
//!
//! The module skips that work only when the server would drop the effect
//! anyway, and knows it exactly:
//!
//! * AOF and role are read from `RedisModule_GetContextFlags` on every write
//!   (the AOF flag is set whenever the AOF is not off, rewrite included).
//! * "No backlog and no replica" is read from `INFO replication`
//!   (`repl_backlog_active:0`, `connected_slaves:0`) at the first write, and
//!   kept true by a command filter that watches for `SYNC` / `PSYNC`: on a
//!   master, the backlog and the replica list only come into existence in
//!   those commands, and a filter sees a command before it first runs. The
//!   filter is registered at load, so it sees even a `PSYNC` that a
//!   `CLIENT PAUSE` holds back (Redis 7.2+ and Valkey do not filter a
//!   command again when they process it after the pause).
//! * The first `SYNC` / `PSYNC`, or the first write that finds an AOF, a
//!   backlog, a replica or the replica role, ends the skipping for good
//!   (until the module is loaded again) and removes the filter, so a server
//!   that replicates or persists pays nothing for it. (A held-back `PSYNC`
//!   may create its backlog at any later moment, so once one was seen no
//!   later reading of `INFO` could be trusted anyway.)
//! * Before that, a change of role or a load of the dataset (both can create
//!   a backlog without `SYNC`, e.g. a promoted replica keeps its backlog)
//!   forgets what was read; the next write reads `INFO replication` again.
//!
//! A skipped write still calls `RedisModule_ReplicateVerbatim`, which the
//! server drops just the same but which counts the write in `server.dirty`,
//! so `save` points and `rdb_changes_since_last_save` see it.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

use redis_module::raw::{
    self, RedisModuleCommandFilter, RedisModuleCommandFilterCtx, RedisModuleCtx, RedisModuleEvent,
    RedisModuleInfoCtx,
};

/// `INFO replication` said "no backlog, no replica" and no role change or
/// load happened since; false: the next write reads it again.
static NO_CONSUMER: AtomicBool = AtomicBool::new(false);
/// Writes whose effects went to `RedisModule_Replicate`, and writes that
/// skipped it (`INFO ratelimit`).
static PROPAGATED: AtomicU64 = AtomicU64::new(0);
static SKIPPED: AtomicU64 = AtomicU64::new(0);
/// Set by the first `SYNC` / `PSYNC`, or by the first write that finds
/// something consuming effects: skipping is over until the module is loaded
/// again.
static CONSUMER_SEEN: AtomicBool = AtomicBool::new(false);
/// The registered `SYNC`/`PSYNC` filter, null when none is: writes skip
/// propagation only while it is registered (never with `propagate-always`,
/// on a server without the APIs, or after a consumer was seen).
static FILTER: AtomicPtr<RedisModuleCommandFilter> = AtomicPtr::new(std::ptr::null_mut());

/// Resets what is known (a reloaded module must not trust a previous load's
/// state) and subscribes to the events that invalidate it. Called at load;
/// with `propagate_always` (the module argument), or on a server without
/// these APIs, every write propagates.
pub fn init(ctx: *mut RedisModuleCtx, propagate_always: bool) {
    FILTER.store(std::ptr::null_mut(), Ordering::Relaxed);
    NO_CONSUMER.store(false, Ordering::Relaxed);
    CONSUMER_SEEN.store(false, Ordering::Relaxed);
    PROPAGATED.store(0, Ordering::Relaxed);
    SKIPPED.store(0, Ordering::Relaxed);
    // SAFETY: plain reads of function pointers set at load; ctx is the load
    // context.
    unsafe {
        // Replaces the (empty) info function of the `redis_module!` macro.
        if let Some(register_info) = raw::RedisModule_RegisterInfoFunc {
            register_info(ctx, Some(on_info));
        }
        if propagate_always {
            return;
        }
        let present = [
            {
                let f = raw::RedisModule_GetContextFlags;
                f.is_some()
            },
            {
                let f = raw::RedisModule_ReplicateVerbatim;
                f.is_some()
            },
            {
                let f = raw::RedisModule_GetServerInfo;
                f.is_some()
            },
            {
                let f = raw::RedisModule_ServerInfoGetFieldSigned;
                f.is_some()
            },
            {
                let f = raw::RedisModule_ServerInfoGetFieldC;
                f.is_some()
            },
            {
                let f = raw::RedisModule_FreeServerInfo;
                f.is_some()
            },
            {
                let f = raw::RedisModule_RegisterCommandFilter;
                f.is_some()
            },
            {
                let f = raw::RedisModule_UnregisterCommandFilter;
                f.is_some()
            },
            {
                let f = raw::RedisModule_CommandFilterArgGet;
                f.is_some()
            },
            {
                let f = raw::RedisModule_StringPtrLen;
                f.is_some()
            },
        ];
        if present.contains(&false) {
            return;
        }
        let Some(subscribe) = raw::RedisModule_SubscribeToServerEvent else {
            return;
        };
        for id in [
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
            raw::REDISMODULE_EVENT_LOADING,
        ] {
            let event = RedisModuleEvent { id, dataver: 1 };
            if subscribe(ctx, event, Some(on_event)) != raw::REDISMODULE_OK as c_int {
                return;
            }
        }
        // Last: once registered, writes may skip.
        watch_for_sync(ctx);
    }
}

/// Whether the effects of the write the current command is about to make
/// must be passed to `RedisModule_Replicate`. When this returns `false`, the
/// command calls [`count_write`] once instead.
pub fn effects_needed(ctx: *mut RedisModuleCtx) -> bool {
    let needed = decide(ctx);
    let counter = if needed { &PROPAGATED } else { &SKIPPED };
    counter.fetch_add(1, Ordering::Relaxed);
    needed
}

/// `INFO ratelimit`: `ratelimit_writes_propagated` counts the writes whose
/// effects went to `RedisModule_Replicate` since load,
/// `ratelimit_writes_unpropagated` those that skipped it because nothing
/// consumed them.
unsafe extern "C" fn on_info(ctx: *mut RedisModuleInfoCtx, _for_crash_report: c_int) {
    // SAFETY: ctx is the info context the server passes, valid during the
    // call; the strings are static.
    unsafe {
        let (Some(section), Some(field)) = (
            raw::RedisModule_InfoAddSection,
            raw::RedisModule_InfoAddFieldULongLong,
        ) else {
            return;
        };
        section(ctx, std::ptr::null_mut());
        for (name, counter) in [
            (c"writes_propagated", &PROPAGATED),
            (c"writes_unpropagated", &SKIPPED),
        ] {
            field(ctx, name.as_ptr(), counter.load(Ordering::Relaxed));
        }
    }
}

fn decide(ctx: *mut RedisModuleCtx) -> bool {
    // SAFETY: ctx is the current command's context; the pointers were
    // checked in `init` before it registered the filter.
    unsafe {
        if CONSUMER_SEEN.load(Ordering::Relaxed) {
            drop_filter(ctx);
            return true;
        }
        if FILTER.load(Ordering::Relaxed).is_null() {
            return true;
        }
        let Some(flags) = raw::RedisModule_GetContextFlags else {
            return true;
        };
        let flags = flags(ctx) as u32;
        let skip = flags & raw::REDISMODULE_CTX_FLAGS_AOF == 0
            && flags & raw::REDISMODULE_CTX_FLAGS_MASTER != 0
            && (NO_CONSUMER.load(Ordering::Relaxed) || no_backlog_and_no_replica(ctx));
        if skip {
            NO_CONSUMER.store(true, Ordering::Relaxed);
        } else {
            // Something consumes effects: propagate from now on, and stop
            // taxing every command with the filter.
            CONSUMER_SEEN.store(true, Ordering::Relaxed);
            drop_filter(ctx);
        }
        !skip
    }
}

/// Counts a write whose effects [`effects_needed`] said nothing consumes:
/// `RedisModule_ReplicateVerbatim` increments the server's dirty counter, and
/// the server drops the propagation itself (no AOF, backlog or replica).
pub fn count_write(ctx: *mut RedisModuleCtx) {
    // SAFETY: ctx is the current command's context.
    unsafe {
        if let Some(verbatim) = raw::RedisModule_ReplicateVerbatim {
            verbatim(ctx);
        }
    }
}

/// `INFO replication` says master, `connected_slaves:0` and
/// `repl_backlog_active:0`.
fn no_backlog_and_no_replica(ctx: *mut RedisModuleCtx) -> bool {
    // SAFETY: ctx is the current command's context; the info data is freed once.
    unsafe {
        let (Some(info), Some(signed), Some(text), Some(free)) = (
            raw::RedisModule_GetServerInfo,
            raw::RedisModule_ServerInfoGetFieldSigned,
            raw::RedisModule_ServerInfoGetFieldC,
            raw::RedisModule_FreeServerInfo,
        ) else {
            return false;
        };
        let data = info(ctx, c"replication".as_ptr());
        if data.is_null() {
            return false;
        }
        let role = text(data, c"role".as_ptr());
        let is_master = !role.is_null() && std::ffi::CStr::from_ptr(role) == c"master";
        let mut err: c_int = 0;
        let replicas = signed(data, c"connected_slaves".as_ptr(), &mut err);
        let replicas_known = err == 0;
        let backlog = signed(data, c"repl_backlog_active".as_ptr(), &mut err);
        let backlog_known = err == 0;
        free(ctx, data);
        is_master && replicas_known && replicas == 0 && backlog_known && backlog == 0
    }
}

/// Registers the `SYNC`/`PSYNC` filter (at load); leaves FILTER null if the
/// server refuses it.
fn watch_for_sync(ctx: *mut RedisModuleCtx) {
    // SAFETY: ctx is the load context (its module owns the filter).
    unsafe {
        if let Some(register) = raw::RedisModule_RegisterCommandFilter {
            FILTER.store(register(ctx, Some(on_command), 0), Ordering::Relaxed);
        }
    }
}

/// Unregisters the filter if it is registered.
fn drop_filter(ctx: *mut RedisModuleCtx) {
    // SAFETY: ctx is a context of this module, which registered the filter.
    unsafe {
        let filter = FILTER.load(Ordering::Relaxed);
        if filter.is_null() {
            return;
        }
        if let Some(unregister) = raw::RedisModule_UnregisterCommandFilter {
            unregister(ctx, filter);
        }
        FILTER.store(std::ptr::null_mut(), Ordering::Relaxed);
    }
}

/// The command filter: a `SYNC` or `PSYNC` is about to create the backlog
/// and add a replica, so writes from now on propagate their effects. It
/// changes nothing in the command.
unsafe extern "C" fn on_command(fctx: *mut RedisModuleCommandFilterCtx) {
    // SAFETY: fctx is the filter context the server passes, valid during
    // the call; the argument string is only read.
    unsafe {
        let (Some(arg), Some(ptr_len)) = (
            raw::RedisModule_CommandFilterArgGet,
            raw::RedisModule_StringPtrLen,
        ) else {
            return;
        };
        let name = arg(fctx, 0);
        if name.is_null() {
            return;
        }
        let mut len = 0usize;
        let ptr = ptr_len(name, &mut len);
        if ptr.is_null() || !(len == 4 || len == 5) {
            return;
        }
        let name = std::slice::from_raw_parts(ptr.cast::<u8>(), len);
        if name.eq_ignore_ascii_case(b"sync") || name.eq_ignore_ascii_case(b"psync") {
            CONSUMER_SEEN.store(true, Ordering::Relaxed);
        }
    }
}

/// Role changes and dataset loads can create (or free) a backlog without
/// `SYNC`: forget what was known; the next write asks again.
unsafe extern "C" fn on_event(
    _ctx: *mut RedisModuleCtx,
    _event: RedisModuleEvent,
    _subevent: u64,
    _data: *mut c_void,
) {
    NO_CONSUMER.store(false, Ordering::Relaxed);
}
