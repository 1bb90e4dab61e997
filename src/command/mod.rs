//! The Redis glue: one thin handler per command, and what they share.
//!
//! Every command runs the same way (see [`run`]): check arity → parse and
//! validate every argument → open the key → decode its state → read the clock
//! once → decide (pure, in [`crate::algorithm`]) → write the new state with its
//! absolute expiry and propagate that effect → reply with five integers. Any
//! error is replied before anything is written.

pub mod args;
#[cfg(debug_assertions)]
pub mod debug;
pub mod docs;
pub mod fixed_window;
pub mod gcra;
pub mod leaky_bucket;
mod propagate;
pub mod sliding_log;
pub mod sliding_window;
pub mod store;
pub mod throttle;
pub mod token_bucket;

use std::ffi::{c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::raw::{self, RedisModuleCtx, RedisModuleString};

use crate::algorithm::Decision;
use crate::error::{Error, Result};
use crate::time::{ceil_ms, ceil_secs};
use args::Args;

/// Fetches a server API function pointer, or fails with [`Error::Internal`].
/// All the pointers used on the hot path are checked once at load
/// ([`register_all`]), so the error branch is never taken in practice.
macro_rules! api {
    ($name:ident) => {{
        // SAFETY: a plain read of a function pointer that the server set at
        // load and never changes afterwards.
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

/// The unit of the two durations in a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyUnit {
    /// `RL.*` commands: milliseconds, rounded up.
    Millis,
    /// `CL.THROTTLE` (redis-cell compatible): seconds, rounded up.
    Seconds,
}

/// The five integers of a reply: `[limited, limit, remaining, retry_after,
/// reset_after]`, durations rounded up in `unit`, `retry_after` -1 when
/// allowed or when the cost can never be allowed.
pub fn reply_fields(d: &Decision, unit: ReplyUnit) -> [i64; 5] {
    let convert = match unit {
        ReplyUnit::Millis => ceil_ms,
        ReplyUnit::Seconds => ceil_secs,
    };
    [
        i64::from(d.limited),
        d.limit,
        d.remaining,
        d.retry_after_us.map_or(-1, convert),
        convert(d.reset_after_us),
    ]
}

/// A command's static description: what [`run`] needs to call it.
pub struct Spec {
    /// The command name, lower case, as registered.
    pub name: &'static CStr,
    /// Fewest arguments including the command name; fewer get the server's
    /// standard arity error.
    pub min_argc: usize,
    /// Most arguments; more get the server's arity error too (`None`: the
    /// handler reports a syntax error instead).
    pub max_argc: Option<usize>,
    /// Unit of the reply's durations.
    pub unit: ReplyUnit,
    /// Command flags: [`O1_FLAGS`] for O(1) commands.
    pub flags: &'static CStr,
    /// `COMMAND DOCS` and ACL categories, where the server supports them.
    pub doc: &'static docs::CommandDoc,
    /// Parses the arguments, decides and writes; returns the decision.
    pub handler: fn(*mut RedisModuleCtx, &Args) -> Result<Decision>,
}

/// The command boundary, shared by every command: arity, the handler, the
/// reply, and the last line of defence against panics.
///
/// A panic in a module aborts redis-server (unwinding may not cross
/// `extern "C"`). Handlers do not panic by construction (checked arithmetic,
/// no `unwrap` on input or stored values); should one anyway, it is caught
/// here and answered with an `ERR` reply. Handlers reply only after all their
/// work is done, so a caught panic never leaves a half-written reply.
pub fn run(
    ctx: *mut RedisModuleCtx,
    argv: *mut *mut RedisModuleString,
    argc: c_int,
    spec: &Spec,
) -> c_int {
    let argc = usize::try_from(argc).unwrap_or(0);
    if argc < spec.min_argc || spec.max_argc.is_some_and(|max| argc > max) || argv.is_null() {
        // SAFETY: ctx is the live context of this command call.
        return unsafe {
            raw::RedisModule_WrongArity.map_or(raw::REDISMODULE_ERR as c_int, |f| f(ctx))
        };
    }
    // SAFETY: the server passes `argc` valid string pointers in `argv`, alive
    // for the whole call.
    let argv = unsafe {
        std::slice::from_raw_parts(argv.cast_const().cast::<*const RedisModuleString>(), argc)
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| (spec.handler)(ctx, &Args::new(argv))));
    match outcome {
        Ok(Ok(decision)) => reply_decision(ctx, &reply_fields(&decision, spec.unit)),
        Ok(Err(error)) => reply_error(ctx, error),
        Err(_) => reply_error(
            ctx,
            Error::Internal {
                what: "a panic was caught",
            },
        ),
    }
}

fn reply_decision(ctx: *mut RedisModuleCtx, fields: &[i64; 5]) -> c_int {
    // SAFETY: ctx is the live context of this command call; the pointers are
    // checked at load.
    unsafe {
        if let (Some(array), Some(integer)) = (
            raw::RedisModule_ReplyWithArray,
            raw::RedisModule_ReplyWithLongLong,
        ) {
            array(ctx, 5);
            for &v in fields {
                integer(ctx, v);
            }
        }
    }
    raw::REDISMODULE_OK as c_int
}

fn reply_error(ctx: *mut RedisModuleCtx, error: Error) -> c_int {
    // Error texts are static ASCII without NUL bytes.
    let text = std::ffi::CString::new(error.to_string()).unwrap_or_default();
    // SAFETY: as above; the server copies the message.
    unsafe {
        if let Some(f) = raw::RedisModule_ReplyWithError {
            f(ctx, text.as_ptr());
        }
    }
    raw::REDISMODULE_OK as c_int
}

/// Declares the `extern "C"` entry point of a command whose [`Spec`] is `$spec`.
macro_rules! entry_point {
    ($fn_name:ident, $spec:path) => {
        extern "C" fn $fn_name(
            ctx: *mut redis_module::raw::RedisModuleCtx,
            argv: *mut *mut redis_module::raw::RedisModuleString,
            argc: std::ffi::c_int,
        ) -> std::ffi::c_int {
            $crate::command::run(ctx, argv, argc, &$spec)
        }
    };
}

entry_point!(rl_gcra, gcra::SPEC);
entry_point!(rl_tokenbucket, token_bucket::SPEC);
entry_point!(cl_throttle, throttle::SPEC);
entry_point!(rl_fixedwindow, fixed_window::SPEC);
entry_point!(rl_slidingwindow, sliding_window::SPEC);
entry_point!(rl_slidinglog, sliding_log::SPEC);
entry_point!(rl_leakybucket, leaky_bucket::SPEC);
#[cfg(debug_assertions)]
entry_point!(rl_debugpanic, debug::SPEC);

type EntryPoint = extern "C" fn(*mut RedisModuleCtx, *mut *mut RedisModuleString, c_int) -> c_int;

/// Every command: its spec and its entry point.
const COMMANDS: [(&Spec, EntryPoint); 7] = [
    (&gcra::SPEC, rl_gcra),
    (&token_bucket::SPEC, rl_tokenbucket),
    (&throttle::SPEC, cl_throttle),
    (&fixed_window::SPEC, rl_fixedwindow),
    (&sliding_window::SPEC, rl_slidingwindow),
    (&sliding_log::SPEC, rl_slidinglog),
    (&leaky_bucket::SPEC, rl_leakybucket),
];

/// Debug builds also have `RL.DEBUGPANIC` (see [`debug`]); release builds none.
#[cfg(debug_assertions)]
const DEBUG_COMMANDS: [(&Spec, EntryPoint); 1] = [(&debug::SPEC, rl_debugpanic)];
#[cfg(not(debug_assertions))]
const DEBUG_COMMANDS: [(&Spec, EntryPoint); 0] = [];

/// Flags of the O(1) commands: they write, must not grow memory past
/// `maxmemory`, and are fast. Commands whose cost grows with the key's size
/// leave out `fast`.
pub const O1_FLAGS: &CStr = c"write deny-oom fast";

/// Registers every command with the key at position 1 (first key 1, last key 1,
/// step 1), so that Redis Cluster routes by it and ACL key patterns apply;
/// `propagate_always` turns off the skipping of [`propagate`].
///
/// Fails the load, with a log line, when the server lacks an API the hot path
/// needs (none is newer than Redis 6.2.2).
pub fn register_all(ctx: &redis_module::Context, propagate_always: bool) -> redis_module::Status {
    // SAFETY: plain reads of function pointers set by `RedisModule_Init`.
    let required = unsafe {
        [
            ("OpenKey", {
                let f = raw::RedisModule_OpenKey;
                f.is_some()
            }),
            ("CloseKey", {
                let f = raw::RedisModule_CloseKey;
                f.is_some()
            }),
            ("KeyType", {
                let f = raw::RedisModule_KeyType;
                f.is_some()
            }),
            ("StringDMA", {
                let f = raw::RedisModule_StringDMA;
                f.is_some()
            }),
            ("StringTruncate", {
                let f = raw::RedisModule_StringTruncate;
                f.is_some()
            }),
            ("DeleteKey", {
                let f = raw::RedisModule_DeleteKey;
                f.is_some()
            }),
            ("SetAbsExpire", {
                let f = raw::RedisModule_SetAbsExpire;
                f.is_some()
            }),
            ("Replicate", {
                let f = raw::RedisModule_Replicate;
                f.is_some()
            }),
            ("NotifyKeyspaceEvent", {
                let f = raw::RedisModule_NotifyKeyspaceEvent;
                f.is_some()
            }),
            ("StringPtrLen", {
                let f = raw::RedisModule_StringPtrLen;
                f.is_some()
            }),
            ("StringToLongLong", {
                let f = raw::RedisModule_StringToLongLong;
                f.is_some()
            }),
            ("StringToDouble", {
                let f = raw::RedisModule_StringToDouble;
                f.is_some()
            }),
            ("ReplyWithArray", {
                let f = raw::RedisModule_ReplyWithArray;
                f.is_some()
            }),
            ("ReplyWithLongLong", {
                let f = raw::RedisModule_ReplyWithLongLong;
                f.is_some()
            }),
            ("ReplyWithError", {
                let f = raw::RedisModule_ReplyWithError;
                f.is_some()
            }),
            ("WrongArity", {
                let f = raw::RedisModule_WrongArity;
                f.is_some()
            }),
            ("ValueLength", {
                let f = raw::RedisModule_ValueLength;
                f.is_some()
            }),
            ("ZsetAdd", {
                let f = raw::RedisModule_ZsetAdd;
                f.is_some()
            }),
            ("ZsetRem", {
                let f = raw::RedisModule_ZsetRem;
                f.is_some()
            }),
            ("ZsetFirstInScoreRange", {
                let f = raw::RedisModule_ZsetFirstInScoreRange;
                f.is_some()
            }),
            ("ZsetLastInScoreRange", {
                let f = raw::RedisModule_ZsetLastInScoreRange;
                f.is_some()
            }),
            ("ZsetRangeCurrentElement", {
                let f = raw::RedisModule_ZsetRangeCurrentElement;
                f.is_some()
            }),
            ("ZsetRangeNext", {
                let f = raw::RedisModule_ZsetRangeNext;
                f.is_some()
            }),
            ("ZsetRangeEndReached", {
                let f = raw::RedisModule_ZsetRangeEndReached;
                f.is_some()
            }),
            ("ZsetRangeStop", {
                let f = raw::RedisModule_ZsetRangeStop;
                f.is_some()
            }),
            ("CreateStringFromLongLong", {
                let f = raw::RedisModule_CreateStringFromLongLong;
                f.is_some()
            }),
            ("FreeString", {
                let f = raw::RedisModule_FreeString;
                f.is_some()
            }),
            ("CreateString", {
                let f = raw::RedisModule_CreateString;
                f.is_some()
            }),
            ("Call", {
                let f = raw::RedisModule_Call;
                f.is_some()
            }),
            ("FreeCallReply", {
                let f = raw::RedisModule_FreeCallReply;
                f.is_some()
            }),
            ("Milliseconds", {
                let f = raw::RedisModule_Milliseconds;
                f.is_some()
            }),
        ]
    };
    if let Some((missing, _)) = required.iter().find(|(_, present)| !present) {
        ctx.log_warning(&format!(
            "ratelimit: this server lacks RedisModule_{missing}; not loading"
        ));
        return redis_module::Status::Err;
    }
    let Some(create) = (unsafe { raw::RedisModule_CreateCommand }) else {
        return redis_module::Status::Err;
    };
    if !store::create_constants() {
        ctx.log_warning("ratelimit: could not create the module's constant strings; not loading");
        return redis_module::Status::Err;
    }
    // The module's ACL category, on servers that have module categories. On
    // a reload the category already exists (the server keeps it) and adding
    // it fails: the commands still get it.
    // SAFETY: a plain read of a function pointer set at load; ctx is the
    // load context (the only place this call is allowed).
    let module_category = match unsafe { raw::RedisModule_AddACLCategory } {
        Some(add) => {
            unsafe { add(ctx.ctx, docs::MODULE_ACL_CATEGORY.as_ptr()) };
            true
        }
        None => false,
    };
    // Keys are signalled as modified (WATCH, client-side caching) only when a
    // command writes, not whenever a key was opened for writing.
    // SAFETY: as above.
    unsafe {
        if let Some(set_options) = raw::RedisModule_SetModuleOptions {
            set_options(
                ctx.ctx,
                raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as c_int,
            );
        }
    }
    // The effects are propagated as these commands: refuse to load where
    // `rename-command` hid one (replicas and the AOF would silently diverge).
    for command in [c"set", c"zadd", c"zremrangebyscore", c"pexpireat"] {
        if !server_has_command(ctx.ctx, command) {
            ctx.log_warning(&format!(
                "ratelimit: the server has no {} command (renamed?); it is needed to \
                 replicate effects; not loading",
                command.to_string_lossy()
            ));
            return redis_module::Status::Err;
        }
    }
    for &(spec, entry) in COMMANDS.iter().chain(DEBUG_COMMANDS.iter()) {
        // SAFETY: ctx is the load-time context; the strings are static.
        let status = unsafe {
            create(
                ctx.ctx,
                spec.name.as_ptr(),
                Some(entry),
                spec.flags.as_ptr(),
                1,
                1,
                1,
            )
        };
        if status != raw::REDISMODULE_OK as c_int {
            ctx.log_warning(&format!(
                "ratelimit: could not register {}",
                spec.name.to_string_lossy()
            ));
            return redis_module::Status::Err;
        }
        // Documentation and categories are metadata: a server that refuses
        // them gets a warning, not a module that fails to load.
        if let Err(why) = docs::apply(ctx.ctx, spec.name, spec.doc, module_category) {
            ctx.log_warning(&format!("ratelimit: {why}"));
        }
    }
    // Last: it subscribes to server events, and Redis 7.0 does not remove a
    // failed load's subscriptions (the next event would call unloaded code).
    propagate::init(ctx.ctx, propagate_always);
    redis_module::Status::Ok
}

/// Whether the server has `command` under its own name (`COMMAND INFO`
/// answers nil for a renamed or disabled one).
fn server_has_command(ctx: *mut RedisModuleCtx, command: &CStr) -> bool {
    // SAFETY: the load context; the reply is freed.
    unsafe {
        let (Some(call), Some(reply_type), Some(element), Some(free)) = (
            raw::RedisModule_Call,
            raw::RedisModule_CallReplyType,
            raw::RedisModule_CallReplyArrayElement,
            raw::RedisModule_FreeCallReply,
        ) else {
            return false;
        };
        let reply = call(
            ctx,
            c"COMMAND".as_ptr(),
            c"cc".as_ptr(),
            c"INFO".as_ptr(),
            command.as_ptr(),
        );
        if reply.is_null() {
            return false;
        }
        let first = element(reply, 0);
        let present =
            !first.is_null() && reply_type(first) == raw::REDISMODULE_REPLY_ARRAY as c_int;
        free(reply);
        present
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_round_durations_up_and_mark_never_with_minus_one() {
        let d = Decision {
            limited: true,
            limit: 16,
            remaining: 0,
            retry_after_us: Some(1_000_001),
            reset_after_us: 31_999_999,
        };
        assert_eq!(
            reply_fields(&d, ReplyUnit::Millis),
            [1, 16, 0, 1_001, 32_000]
        );
        assert_eq!(reply_fields(&d, ReplyUnit::Seconds), [1, 16, 0, 2, 32]);
        let allowed = Decision {
            limited: false,
            limit: 5,
            remaining: 4,
            retry_after_us: None,
            reset_after_us: 0,
        };
        assert_eq!(reply_fields(&allowed, ReplyUnit::Millis), [0, 5, 4, -1, 0]);
    }
}
