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
//! * AOF and role are read from `RedisModule_GetContextFlags` (the AOF flag
//!   is set whenever the AOF is not off, rewrite included) at every write
//!   until "no consumer" is known; from then on only after a config change
//!   (the AOF turns on only through `CONFIG SET appendonly`; the server
//!   reports config changes to modules from 7.0), a role change or a load.
//!   Where the config event cannot be had, at every write.
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
//! * Skipping needs `SYNC` and `PSYNC` under their own names (checked at
//!   load): a replica syncing through a renamed command would not be seen by
//!   the filter, so with `rename-command SYNC …` every write propagates. The
//!   filter ignores the module's own `RedisModule_Call`s (`NOSELF`).
//!
//! A skipped write still calls `RedisModule_ReplicateVerbatim`, which the
//! server drops just the same but which counts the write in `server.dirty`,
//! so `save` points and `rdb_changes_since_last_save` see it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::server::info::{self, InfoWriter};
use crate::server::{effects, has_api, Ctx};

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
/// The server reports config changes to the module: while `NO_CONSUMER`
/// holds, a write need not read the context flags again.
static CONFIG_WATCHED: AtomicBool = AtomicBool::new(false);

/// Resets what is known (a reloaded module must not trust a previous load's
/// state) and subscribes to the events that invalidate it. Called at load;
/// with `propagate_always` (the module argument), on a server without these
/// APIs, or where `SYNC` or `PSYNC` is renamed, every write propagates.
pub fn init(ctx: Ctx, propagate_always: bool) {
    info::forget_sync_filter();
    NO_CONSUMER.store(false, Ordering::Relaxed);
    CONSUMER_SEEN.store(false, Ordering::Relaxed);
    CONFIG_WATCHED.store(false, Ordering::Relaxed);
    PROPAGATED.store(0, Ordering::Relaxed);
    SKIPPED.store(0, Ordering::Relaxed);
    if propagate_always {
        return;
    }
    let apis = has_api!(RedisModule_GetContextFlags)
        && has_api!(RedisModule_ReplicateVerbatim)
        && has_api!(RedisModule_GetServerInfo)
        && has_api!(RedisModule_ServerInfoGetFieldSigned)
        && has_api!(RedisModule_ServerInfoGetFieldC)
        && has_api!(RedisModule_FreeServerInfo);
    // A replica that syncs through a renamed SYNC/PSYNC would go unseen.
    let sync_visible = info::has_command(ctx, c"sync") && info::has_command(ctx, c"psync");
    if !apis || !sync_visible || !info::subscribe_role_and_loading(ctx) {
        return;
    }
    CONFIG_WATCHED.store(info::subscribe_config_changes(ctx), Ordering::Relaxed);
    // Last: once registered, writes may skip.
    info::register_sync_filter(ctx);
}

/// Whether the effects of the write the current command is about to make
/// must be passed to `RedisModule_Replicate`. When this returns `false`, the
/// command calls [`effects::count_dirty`] once instead. `known` carries the
/// answer from one write of a call to the next (`None` before the first):
/// the server's state is asked once per call, every write is counted.
#[inline(always)]
pub fn effects_needed(ctx: Ctx, known: &mut Option<bool>) -> bool {
    let needed = match *known {
        Some(needed) => needed,
        None => *known.insert(decide(ctx)),
    };
    let counter = if needed { &PROPAGATED } else { &SKIPPED };
    counter.fetch_add(1, Ordering::Relaxed);
    needed
}

/// `INFO ratelimit`: `ratelimit_writes_propagated` counts the writes whose
/// effects went to `RedisModule_Replicate` since load,
/// `ratelimit_writes_unpropagated` those that skipped it because nothing
/// consumed them.
pub fn write_info(out: &mut InfoWriter) {
    out.field(c"writes_propagated", PROPAGATED.load(Ordering::Relaxed));
    out.field(c"writes_unpropagated", SKIPPED.load(Ordering::Relaxed));
}

#[inline(always)]
fn decide(ctx: Ctx) -> bool {
    if CONSUMER_SEEN.load(Ordering::Relaxed) {
        info::unregister_sync_filter(ctx);
        return true;
    }
    if !info::sync_filter_registered() {
        return true;
    }
    // Nothing that could bring a consumer happened since it was known that
    // there is none (every such change resets NO_CONSUMER).
    if NO_CONSUMER.load(Ordering::Relaxed) && CONFIG_WATCHED.load(Ordering::Relaxed) {
        return false;
    }
    let flags = effects::context_flags(ctx);
    let skip = flags & redis_module::raw::REDISMODULE_CTX_FLAGS_AOF == 0
        && flags & redis_module::raw::REDISMODULE_CTX_FLAGS_MASTER != 0
        && (NO_CONSUMER.load(Ordering::Relaxed) || no_backlog_and_no_replica(ctx));
    if skip {
        NO_CONSUMER.store(true, Ordering::Relaxed);
    } else {
        // Something consumes effects: propagate from now on, and stop
        // taxing every command with the filter.
        CONSUMER_SEEN.store(true, Ordering::Relaxed);
        info::unregister_sync_filter(ctx);
    }
    !skip
}

/// `INFO replication` says master, `connected_slaves:0` and
/// `repl_backlog_active:0`.
fn no_backlog_and_no_replica(ctx: Ctx) -> bool {
    info::replication(ctx)
        .is_some_and(|r| r.is_master && r.replicas == Some(0) && r.backlog_active == Some(0))
}

/// The command filter saw a `SYNC` or `PSYNC`: it is about to create the
/// backlog and add a replica, so writes from now on propagate their effects.
pub fn on_sync() {
    CONSUMER_SEEN.store(true, Ordering::Relaxed);
}

/// Role changes and dataset loads can create (or free) a backlog without
/// `SYNC`, and a config change can turn the AOF on: forget what was known;
/// the next write asks again.
pub fn on_role_or_load() {
    NO_CONSUMER.store(false, Ordering::Relaxed);
}
