//! The one home of the server's module API.
//!
//! Everything else in the crate calls the server through the safe functions
//! and types here: [`Ctx`] (the context of one call), [`string::Arg`] (a
//! command argument), [`key::Key`] (an open key: strings and sorted sets),
//! [`effects`] (replication, notifications, modified-key signals),
//! [`reply`], [`info`] (server info, the `INFO ratelimit` section, the
//! command filter, server events), [`registry`] (command registration and
//! documentation) and [`load`] (the module's entry points and allocator).
//!
//! Rules kept here:
//! * every `unsafe` block does one thing and says why it is sound (clippy's
//!   `undocumented_unsafe_blocks` and `multiple_unsafe_ops_per_block`);
//! * function pointers are checked once, at load ([`missing_api`]); the
//!   [`api!`] macro that reads one at a call site turns a missing one into
//!   an `ERR internal error` reply rather than a crash;
//! * every callback the server calls catches panics ([`guard`]).

pub mod aof;
pub mod config;
pub mod effects;
pub mod hooks;
pub mod info;
mod info_writer;
pub mod key;
pub mod load;
pub mod rdb;
pub mod registry;
pub mod reply;
pub mod string;

use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;

use redis_module::raw::{self, RedisModuleCtx};

/// Reads the server API function pointer `RedisModule_$name`, or returns
/// [`crate::error::Error::Internal`] from the enclosing function. Every
/// pointer used after load is in [`missing_api`]'s table, so the error branch
/// is never taken once the module loaded.
macro_rules! api {
    ($name:ident) => {{
        // SAFETY: a plain read of a function pointer that the server sets in
        // `RedisModule_Init` and never changes afterwards.
        #[allow(unused_unsafe)]
        let function = unsafe { redis_module::raw::$name };
        match function {
            Some(f) => f,
            None => {
                return Err($crate::error::Error::Internal {
                    what: concat!(stringify!($name), " is missing"),
                })
            }
        }
    }};
}
pub(crate) use api;

/// The function pointer `RedisModule_$name` (`None` where the server lacks it).
macro_rules! api_fn {
    ($name:ident) => {{
        // SAFETY: as in `api!`.
        #[allow(unused_unsafe)]
        let function = unsafe { redis_module::raw::$name };
        function
    }};
}
pub(crate) use api_fn;

/// Whether the server set the function pointer `RedisModule_$name`.
macro_rules! has_api {
    ($name:ident) => {{
        // SAFETY: as in `api!`.
        #[allow(unused_unsafe)]
        let present = unsafe { redis_module::raw::$name }.is_some();
        present
    }};
}
pub(crate) use has_api;

/// The table of the API functions the module needs after load, checked once
/// there: `Some(name)` names the first one this server lacks (none is newer
/// than Redis 6.2.2).
pub fn missing_api() -> Option<&'static str> {
    macro_rules! first_missing {
        ($($name:ident),* $(,)?) => {
            [$((stringify!($name), has_api!($name))),*]
                .into_iter()
                .find(|(_, present)| !present)
                .map(|(name, _)| name)
        };
    }
    first_missing!(
        RedisModule_OpenKey,
        RedisModule_CloseKey,
        RedisModule_KeyType,
        RedisModule_StringDMA,
        RedisModule_StringTruncate,
        RedisModule_DeleteKey,
        RedisModule_UnlinkKey,
        RedisModule_SetAbsExpire,
        RedisModule_GetAbsExpire,
        RedisModule_Replicate,
        RedisModule_NotifyKeyspaceEvent,
        RedisModule_SignalModifiedKey,
        RedisModule_StringPtrLen,
        RedisModule_StringToLongLong,
        RedisModule_StringToDouble,
        RedisModule_ReplyWithArray,
        RedisModule_ReplyWithLongLong,
        RedisModule_ReplyWithError,
        RedisModule_WrongArity,
        RedisModule_ZsetAdd,
        RedisModule_ValueLength,
        RedisModule_ZsetRem,
        RedisModule_ZsetScore,
        RedisModule_ZsetFirstInScoreRange,
        RedisModule_ZsetLastInScoreRange,
        RedisModule_ZsetRangeCurrentElement,
        RedisModule_ZsetRangeNext,
        RedisModule_ZsetRangePrev,
        RedisModule_ZsetRangeEndReached,
        RedisModule_ZsetRangeStop,
        RedisModule_CreateStringFromLongLong,
        RedisModule_CreateString,
        RedisModule_FreeString,
        RedisModule_Call,
        RedisModule_CallReplyType,
        RedisModule_CallReplyArrayElement,
        RedisModule_FreeCallReply,
        RedisModule_Milliseconds,
        RedisModule_CreateCommand,
        RedisModule_Log,
    )
}

/// The context of one call from the server (a command, the load, an event).
///
/// Built only here, from the pointer the server passed to the current call;
/// it is `Copy` so that handlers can pass it around, and must not outlive
/// that call (no function here stores it).
#[derive(Clone, Copy)]
pub struct Ctx {
    raw: NonNull<RedisModuleCtx>,
}

impl Ctx {
    /// Wraps the context the server passed to the current call; `None` for
    /// null.
    pub(crate) fn from_raw(raw: *mut RedisModuleCtx) -> Option<Self> {
        NonNull::new(raw).map(|raw| Self { raw })
    }

    pub(crate) fn as_ptr(self) -> *mut RedisModuleCtx {
        self.raw.as_ptr()
    }

    /// Logs `message` at level `warning` in the server's log.
    pub fn log_warning(self, message: &str) {
        let Some(log) = (
            // SAFETY: a plain read of a function pointer set at load.
            unsafe { raw::RedisModule_Log }
        ) else {
            return;
        };
        let text = std::ffi::CString::new(message.replace('\0', " ")).unwrap_or_default();
        // SAFETY: the context of the current call; "%s" with one C string.
        unsafe {
            log(
                self.as_ptr(),
                c"warning".as_ptr(),
                c"%s".as_ptr(),
                text.as_ptr(),
            )
        };
    }
}

/// Runs `f` for a callback the server makes (info, command filter, server
/// event, load, unload): a panic unwinding into the server would abort it,
/// so one is caught here and `on_panic()` returned instead.
pub fn guard<T>(f: impl FnOnce() -> T, on_panic: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| on_panic())
}

/// The server's clock as microseconds since the Unix epoch, read once per
/// command.
///
/// On servers that have it (Redis 7.2+, Valkey), this is
/// `RedisModule_CachedMicroseconds`: the time snapshot the server took when the
/// top-level command started, so every call in one `MULTI`/`EXEC` or script
/// sees the same instant, and it agrees with the clock the server uses for key
/// expiry. On Redis 7.0 it is `RedisModule_Milliseconds() × 1000`.
///
/// Debug builds only: while `RL.DEBUGCLOCK` has fixed it ([`fix_clock_us`]),
/// that value.
pub fn clock_us() -> i64 {
    #[cfg(debug_assertions)]
    {
        let fixed_us = FIXED_CLOCK_US.load(std::sync::atomic::Ordering::Relaxed);
        if fixed_us != CLOCK_NOT_FIXED {
            return fixed_us;
        }
    }
    // SAFETY: a plain read of a function pointer set at load.
    if let Some(cached_us) = unsafe { raw::RedisModule_CachedMicroseconds } {
        // SAFETY: callable at any time from the main thread.
        return unsafe { cached_us() };
    }
    // SAFETY: a plain read of a function pointer set at load.
    match unsafe { raw::RedisModule_Milliseconds } {
        // SAFETY: callable at any time.
        Some(ms) => unsafe { ms() }.saturating_mul(crate::time::US_PER_MS),
        None => 0, // unreachable: present since Redis 4; checked at load.
    }
}

/// Debug builds only: the value [`clock_us`] returns, or [`CLOCK_NOT_FIXED`]
/// (the server's clock). Only the main thread sets it.
#[cfg(debug_assertions)]
static FIXED_CLOCK_US: std::sync::atomic::AtomicI64 =
    std::sync::atomic::AtomicI64::new(CLOCK_NOT_FIXED);

/// Debug builds only: [`FIXED_CLOCK_US`]'s "not fixed" (no caller can fix
/// the clock at `i64::MIN` µs: `RL.DEBUGCLOCK` takes times from 0).
#[cfg(debug_assertions)]
const CLOCK_NOT_FIXED: i64 = i64::MIN;

/// Debug builds only (`RL.DEBUGCLOCK`): fixes the value [`clock_us`] returns
/// at `unix_us` (µs since the Unix epoch, at least 0), or, with `None`, gives
/// the server's clock back. Lets the differential suite run the module and
/// the Functions library (`NOW`) at the same instant.
#[cfg(debug_assertions)]
pub fn fix_clock_us(unix_us: Option<i64>) {
    let value = unix_us.filter(|us| *us >= 0).unwrap_or(CLOCK_NOT_FIXED);
    FIXED_CLOCK_US.store(value, std::sync::atomic::Ordering::Relaxed);
}

/// `REDISMODULE_OK` as the server's `int`.
pub(crate) const OK: c_int = raw::REDISMODULE_OK as c_int;
/// `REDISMODULE_ERR` as the server's `int`.
pub(crate) const ERR: c_int = raw::REDISMODULE_ERR as c_int;
