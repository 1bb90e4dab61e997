//! What the module learns from the server and the callbacks it registers:
//! `INFO replication` fields, the `INFO ratelimit` section, the command
//! filter that watches for `SYNC`/`PSYNC`, server events, and whether a
//! command exists under its own name. Every callback catches panics
//! ([`super::guard`]) and hands over to the module's hooks ([`super::hooks`]).

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw::{
    self, RedisModuleCommandFilter, RedisModuleCommandFilterCtx, RedisModuleCtx, RedisModuleEvent,
    RedisModuleInfoCtx,
};

use super::{api_fn, guard, Ctx, OK};

/// `INFO replication` as far as skipping propagation needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replication {
    pub is_master: bool,
    /// `connected_slaves`, `None` when the field could not be read.
    pub replicas: Option<i64>,
    /// `repl_backlog_active`, `None` when the field could not be read.
    pub backlog_active: Option<i64>,
}

/// Reads `INFO replication`; `None` where the server lacks the API or
/// answered nothing.
pub fn replication(ctx: Ctx) -> Option<Replication> {
    let (info, signed, text, free) = (
        api_fn!(RedisModule_GetServerInfo),
        api_fn!(RedisModule_ServerInfoGetFieldSigned),
        api_fn!(RedisModule_ServerInfoGetFieldC),
        api_fn!(RedisModule_FreeServerInfo),
    );
    let (info, signed, text, free) = (info?, signed?, text?, free?);
    // SAFETY: the context of the current call; the section name is static.
    let data = unsafe { info(ctx.as_ptr(), c"replication".as_ptr()) };
    if data.is_null() {
        return None;
    }
    // SAFETY: `data` is live until freed below; the field name is static.
    let role = unsafe { text(data, c"role".as_ptr()) };
    // SAFETY: a non-null field value is a NUL-terminated string owned by `data`.
    let is_master = !role.is_null() && unsafe { CStr::from_ptr(role) } == c"master";
    let field = |name: &CStr| {
        let mut err: c_int = 0;
        // SAFETY: `data` is live; the name is static; `err` is a valid out-pointer.
        let v = unsafe { signed(data, name.as_ptr(), &mut err) };
        (err == 0).then_some(v)
    };
    let replicas = field(c"connected_slaves");
    let backlog_active = field(c"repl_backlog_active");
    // SAFETY: `data` was returned by GetServerInfo for this context and is
    // freed once, here; nothing read from it is used afterwards.
    unsafe { free(ctx.as_ptr(), data) };
    Some(Replication {
        is_master,
        replicas,
        backlog_active,
    })
}

pub use super::info_writer::InfoWriter;

/// Registers the module's `INFO` section, written by
/// [`super::hooks::Hooks::write_info`] (at load).
pub fn register_info(ctx: Ctx) {
    // SAFETY: a plain read of a function pointer set at load.
    if let Some(register) = unsafe { raw::RedisModule_RegisterInfoFunc } {
        // SAFETY: the load context.
        unsafe { register(ctx.as_ptr(), Some(on_info)) };
    }
}

extern "C" fn on_info(ctx: *mut RedisModuleInfoCtx, _for_crash_report: c_int) {
    guard(
        || {
            // SAFETY: a plain read of a function pointer set at load.
            let Some(section) = (unsafe { raw::RedisModule_InfoAddSection }) else {
                return;
            };
            // SAFETY: the info context the server passed; NULL names the
            // module's own section.
            if unsafe { section(ctx, std::ptr::null_mut()) } != OK {
                return;
            }
            if let Some(hooks) = super::hooks::get() {
                (hooks.write_info)(&mut InfoWriter { raw: ctx });
            }
        },
        || (),
    );
}

/// The registered command filter, null when none is.
static FILTER: AtomicPtr<RedisModuleCommandFilter> = AtomicPtr::new(std::ptr::null_mut());

/// Registers the command filter that tells [`super::hooks::Hooks::on_sync`] about
/// `SYNC`/`PSYNC`; it skips the module's own calls (`NOSELF`). False when the
/// server lacks the API or refused.
pub fn register_sync_filter(ctx: Ctx) -> bool {
    let (register, arg_get, unregister) = (
        api_fn!(RedisModule_RegisterCommandFilter),
        api_fn!(RedisModule_CommandFilterArgGet),
        api_fn!(RedisModule_UnregisterCommandFilter),
    );
    let (Some(register), Some(_), Some(_)) = (register, arg_get, unregister) else {
        return false;
    };
    let flags = raw::REDISMODULE_CMDFILTER_NOSELF as c_int;
    // SAFETY: the load context (its module owns the filter).
    let filter = unsafe { register(ctx.as_ptr(), Some(on_command), flags) };
    FILTER.store(filter, Ordering::Relaxed);
    !filter.is_null()
}

/// Whether the filter is registered.
pub fn sync_filter_registered() -> bool {
    !FILTER.load(Ordering::Relaxed).is_null()
}

/// Unregisters the filter if it is registered.
pub fn unregister_sync_filter(ctx: Ctx) {
    let filter = FILTER.swap(std::ptr::null_mut(), Ordering::Relaxed);
    if filter.is_null() {
        return;
    }
    // SAFETY: a plain read of a function pointer set at load.
    if let Some(unregister) = unsafe { raw::RedisModule_UnregisterCommandFilter } {
        // SAFETY: a context of this module, which registered the filter.
        unsafe { unregister(ctx.as_ptr(), filter) };
    }
}

/// Forgets the filter without unregistering it (the server removes a
/// module's filters when it unloads it).
pub fn forget_sync_filter() {
    FILTER.store(std::ptr::null_mut(), Ordering::Relaxed);
}

extern "C" fn on_command(fctx: *mut RedisModuleCommandFilterCtx) {
    guard(
        || {
            let (arg, ptr_len) = (
                api_fn!(RedisModule_CommandFilterArgGet),
                api_fn!(RedisModule_StringPtrLen),
            );
            let (Some(arg), Some(ptr_len)) = (arg, ptr_len) else {
                return;
            };
            // SAFETY: the filter context the server passed, valid during the call.
            let name = unsafe { arg(fctx, 0) };
            if name.is_null() {
                return;
            }
            let mut len = 0usize;
            // SAFETY: a live argument string; `len` is a valid out-pointer.
            let ptr = unsafe { ptr_len(name, &mut len) };
            if ptr.is_null() || !(len == 4 || len == 5) {
                return;
            }
            // SAFETY: `ptr` points to the argument's `len` bytes, alive during
            // the callback.
            let name = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
            if name.eq_ignore_ascii_case(b"sync") || name.eq_ignore_ascii_case(b"psync") {
                if let Some(hooks) = super::hooks::get() {
                    (hooks.on_sync)();
                }
            }
        },
        || (),
    );
}

/// Subscribes to role changes and dataset loads, reported to
/// [`super::hooks::Hooks::on_role_or_load`]. False when the server lacks the
/// API or refused.
pub fn subscribe_role_and_loading(ctx: Ctx) -> bool {
    // SAFETY: a plain read of a function pointer set at load.
    let Some(subscribe) = (unsafe { raw::RedisModule_SubscribeToServerEvent }) else {
        return false;
    };
    [
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
        raw::REDISMODULE_EVENT_LOADING,
    ]
    .into_iter()
    .all(|id| {
        let event = RedisModuleEvent { id, dataver: 1 };
        // SAFETY: the load context; the callback is a static function.
        unsafe { subscribe(ctx.as_ptr(), event, Some(on_event)) == OK }
    })
}

/// Subscribes to config changes, reported to
/// [`super::hooks::Hooks::on_role_or_load`] (the AOF turns on through
/// `CONFIG SET appendonly`). False when the server lacks the event or refused.
pub fn subscribe_config_changes(ctx: Ctx) -> bool {
    // SAFETY: a plain read of a function pointer set at load.
    let Some(subscribe) = (unsafe { raw::RedisModule_SubscribeToServerEvent }) else {
        return false;
    };
    let event = RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_CONFIG,
        dataver: 1,
    };
    // SAFETY: the load context; the callback is a static function.
    unsafe { subscribe(ctx.as_ptr(), event, Some(on_event)) == OK }
}

/// Subscribes to dataset loads for the policies (see
/// [`super::hooks::Hooks::on_load_start`]). False when the server lacks the API or
/// refused.
pub fn subscribe_loading(ctx: Ctx) -> bool {
    // SAFETY: a plain read of a function pointer set at load.
    let Some(subscribe) = (unsafe { raw::RedisModule_SubscribeToServerEvent }) else {
        return false;
    };
    let event = RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_LOADING,
        dataver: 1,
    };
    // SAFETY: the load context; the callback is a static function (the same
    // one `subscribe_role_and_loading` gives, so either order works).
    unsafe { subscribe(ctx.as_ptr(), event, Some(on_event)) == OK }
}

extern "C" fn on_event(
    ctx: *mut RedisModuleCtx,
    event: RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    guard(
        || {
            let Some(hooks) = super::hooks::get() else {
                return;
            };
            if event.id == raw::REDISMODULE_EVENT_LOADING {
                match subevent {
                    raw::REDISMODULE_SUBEVENT_LOADING_RDB_START
                    | raw::REDISMODULE_SUBEVENT_LOADING_AOF_START
                    | raw::REDISMODULE_SUBEVENT_LOADING_REPL_START => (hooks.on_load_start)(),
                    raw::REDISMODULE_SUBEVENT_LOADING_ENDED => {
                        if let Some(ctx) = Ctx::from_raw(ctx) {
                            (hooks.on_load_ended)(ctx);
                        }
                    }
                    raw::REDISMODULE_SUBEVENT_LOADING_FAILED => (hooks.on_load_failed)(),
                    _ => {}
                }
            }
            (hooks.on_role_or_load)();
        },
        || (),
    );
}

/// Whether the server has `command` under its own name (`COMMAND INFO`
/// answers nil for a renamed or disabled one). False when it cannot tell.
pub fn has_command(ctx: Ctx, command: &CStr) -> bool {
    let (call, reply_type, element, free) = (
        api_fn!(RedisModule_Call),
        api_fn!(RedisModule_CallReplyType),
        api_fn!(RedisModule_CallReplyArrayElement),
        api_fn!(RedisModule_FreeCallReply),
    );
    let (Some(call), Some(reply_type), Some(element), Some(free)) =
        (call, reply_type, element, free)
    else {
        return false;
    };
    // SAFETY: the load context; "cc" with two static C strings.
    let reply = unsafe {
        call(
            ctx.as_ptr(),
            c"COMMAND".as_ptr(),
            c"cc".as_ptr(),
            c"INFO".as_ptr(),
            command.as_ptr(),
        )
    };
    if reply.is_null() {
        return false;
    }
    // SAFETY: `reply` is live until freed below.
    let first = unsafe { element(reply, 0) };
    // SAFETY: `first` is null or an element owned by `reply`.
    let present =
        !first.is_null() && unsafe { reply_type(first) } == raw::REDISMODULE_REPLY_ARRAY as c_int;
    // SAFETY: `reply` came from RedisModule_Call and is freed once, here.
    unsafe { free(reply) };
    present
}
