//! What the policies need around AOF rewrites: the fork event, whether the
//! fork just made is an AOF rewrite and whether it writes the RDB preamble,
//! a propagation to the AOF only, and a timer to retry one.
//!
//! An AOF rewrite without the RDB preamble (`aof-use-rdb-preamble no`)
//! writes commands for keys only: module auxiliary data, where the policies
//! live, is left out. On Redis 7.0+ and Valkey (multi-part AOF) the server
//! opens the new incremental file before it forks the rewrite, and fires the
//! `FORK_CHILD_BORN` event in the parent right after the fork: whatever the
//! module propagates from that event lands in the new incremental file,
//! which the server keeps with the new base (see [`super::hooks::Hooks::on_fork_born`]).

use std::ffi::{c_int, c_void};

use redis_module::raw::{self, RedisModuleCtx, RedisModuleEvent};

use super::{api_fn, guard, Ctx, OK};

/// Subscribes to fork events (`RedisModuleEvent_ForkChild`), reported to
/// [`super::hooks::Hooks::on_fork_born`]. False when the server lacks the API
/// or refused.
pub fn subscribe_fork(ctx: Ctx) -> bool {
    let Some(subscribe) = api_fn!(RedisModule_SubscribeToServerEvent) else {
        return false;
    };
    let event = RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_FORK_CHILD,
        dataver: 1,
    };
    // SAFETY: the load context; the callback is a static function.
    unsafe { subscribe(ctx.as_ptr(), event, Some(on_fork)) == OK }
}

extern "C" fn on_fork(
    ctx: *mut RedisModuleCtx,
    _event: RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    guard(
        || {
            if subevent == raw::REDISMODULE_SUBEVENT_FORK_CHILD_BORN {
                if let Some(ctx) = Ctx::from_raw(ctx) {
                    if let Some(hooks) = super::hooks::get() {
                        (hooks.on_fork_born)(ctx);
                    }
                }
            }
        },
        || (),
    );
}

/// `aof_rewrite_in_progress` of `INFO persistence`: whether the server's
/// child process is an AOF rewrite. `None` where it cannot be read.
pub fn aof_rewrite_in_progress(ctx: Ctx) -> Option<bool> {
    let (info, signed, free) = (
        api_fn!(RedisModule_GetServerInfo)?,
        api_fn!(RedisModule_ServerInfoGetFieldSigned)?,
        api_fn!(RedisModule_FreeServerInfo)?,
    );
    // SAFETY: the context of the current callback; the section name is static.
    let data = unsafe { info(ctx.as_ptr(), c"persistence".as_ptr()) };
    if data.is_null() {
        return None;
    }
    let mut err: c_int = 0;
    // SAFETY: `data` is live until freed below; the name is static; `err`
    // is a valid out-pointer.
    let value = unsafe { signed(data, c"aof_rewrite_in_progress".as_ptr(), &mut err) };
    // SAFETY: `data` came from GetServerInfo for this context, freed once.
    unsafe { free(ctx.as_ptr(), data) };
    (err == 0).then_some(value != 0)
}

/// The server's `aof-use-rdb-preamble` (`CONFIG GET`); `None` where it
/// cannot be read (`CONFIG` renamed, say).
pub fn rdb_preamble(ctx: Ctx) -> Option<bool> {
    let (call, element, string, free) = (
        api_fn!(RedisModule_Call)?,
        api_fn!(RedisModule_CallReplyArrayElement)?,
        api_fn!(RedisModule_CallReplyStringPtr)?,
        api_fn!(RedisModule_FreeCallReply)?,
    );
    // SAFETY: the context of the current callback; "cc" with two static C
    // strings.
    let reply = unsafe {
        call(
            ctx.as_ptr(),
            c"CONFIG".as_ptr(),
            c"cc".as_ptr(),
            c"GET".as_ptr(),
            c"aof-use-rdb-preamble".as_ptr(),
        )
    };
    if reply.is_null() {
        return None;
    }
    // SAFETY: `reply` is live until freed below.
    let value = unsafe { element(reply, 1) };
    let mut len = 0usize;
    let text = if value.is_null() {
        None
    } else {
        // SAFETY: `value` is an element owned by `reply`; `len` is a valid
        // out-pointer.
        let ptr = unsafe { string(value, &mut len) };
        // SAFETY: the server returned `len` bytes at `ptr`, owned by `reply`.
        (!ptr.is_null())
            .then(|| unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }.to_vec())
    };
    // SAFETY: `reply` came from RedisModule_Call and is freed once, here;
    // nothing read from it is used afterwards.
    unsafe { free(reply) };
    match text?.as_slice() {
        b"yes" => Some(true),
        b"no" => Some(false),
        _ => None,
    }
}

/// Whether the server paused writes (`CLIENT PAUSE WRITE`, a failover, a
/// shutdown waiting for replicas): propagating then would trip the server's
/// own assertion that the dataset does not change during a pause.
pub fn writes_paused() -> bool {
    match api_fn!(RedisModule_AvoidReplicaTraffic) {
        // SAFETY: callable at any time from the main thread.
        Some(paused) => (unsafe { paused() }) != 0,
        None => false,
    }
}

/// Propagates `RL.POLICY LOAD REPLACE text` to the AOF only (the `R` flag:
/// not to replicas, which have the same policies from their primary). False
/// when the server refused.
pub fn replicate_policy_load_to_aof(ctx: Ctx, text: &[u8]) -> bool {
    let Some(replicate) = api_fn!(RedisModule_Replicate) else {
        return false;
    };
    // SAFETY: the context of the current callback; "ccbR": two C strings,
    // a buffer (pointer, length) the server copies, and a flag.
    let done = unsafe {
        replicate(
            ctx.as_ptr(),
            c"rl.policy".as_ptr(),
            c"ccbR".as_ptr(),
            c"LOAD".as_ptr(),
            c"REPLACE".as_ptr(),
            text.as_ptr(),
            text.len(),
        )
    };
    done == OK
}

/// Calls [`super::hooks::Hooks::on_aof_timer`] in `period_ms` milliseconds, from
/// the server's event loop. False when the server lacks timers.
pub fn retry_in(ctx: Ctx, period_ms: i64) -> bool {
    let Some(create) = api_fn!(RedisModule_CreateTimer) else {
        return false;
    };
    // SAFETY: the context of the current call; a static callback, no data.
    unsafe {
        create(
            ctx.as_ptr(),
            period_ms,
            Some(on_timer),
            std::ptr::null_mut(),
        )
    };
    true
}

extern "C" fn on_timer(ctx: *mut RedisModuleCtx, _data: *mut c_void) {
    guard(
        || {
            if let Some(ctx) = Ctx::from_raw(ctx) {
                if let Some(hooks) = super::hooks::get() {
                    (hooks.on_aof_timer)(ctx);
                }
            }
        },
        || (),
    );
}
