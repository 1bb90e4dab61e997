//! Module configs (Redis 7.0+, Valkey): `ratelimit.sliding-log-max-limit`,
//! `ratelimit.sliding-log-call-budget`,
//! `ratelimit.propagate-always` and `ratelimit.policies` show in `CONFIG GET ratelimit.*`, are set by
//! `ratelimit.<name> <value>` lines of the server's config (or
//! `MODULE LOADEX … CONFIG`), change with `CONFIG SET` where that is safe, and
//! persist with `CONFIG REWRITE`. The values live in `command::settings`; the
//! load arguments give the defaults.

use std::ffi::{c_char, c_int, c_longlong, c_uint, c_void};

use redis_module::raw::{self, RedisModuleString};

use super::{api_fn, guard, Ctx, ERR, OK};
use crate::command::settings;

/// Registers the configs with the current settings as defaults, then has the
/// server apply the values its config gave. False (refuse the load) when the
/// server refused one; true, doing nothing, where it has no module configs.
pub fn register(ctx: Ctx) -> bool {
    let (Some(numeric), Some(boolean), Some(enumerated), Some(load)) = (
        api_fn!(RedisModule_RegisterNumericConfig),
        api_fn!(RedisModule_RegisterBoolConfig),
        api_fn!(RedisModule_RegisterEnumConfig),
        api_fn!(RedisModule_LoadConfigs),
    ) else {
        return true;
    };
    let limit = register_numeric(ctx, numeric, &SLIDING_LOG_MAX_LIMIT);
    // Switching propagation mode while running is not safe (the filter is
    // registered at load only): the setting is immutable.
    // SAFETY: as above.
    let always = unsafe {
        boolean(
            ctx.as_ptr(),
            c"propagate-always".as_ptr(),
            c_int::from(settings::propagate_always()),
            raw::REDISMODULE_CONFIG_IMMUTABLE as c_uint,
            Some(get_propagate_always),
            Some(set_propagate_always),
            None,
            std::ptr::null_mut(),
        )
    };
    // Policies need a data type, registered at load: immutable too. The
    // values are `PoliciesMode::ALL`'s words, the integers their index.
    let mut words: [*const c_char; 3] = [c"yes".as_ptr(), c"no".as_ptr(), c"unloadable".as_ptr()];
    let values: [c_int; 3] = [0, 1, 2];
    // SAFETY: as above; the server copies the value names and integers.
    let policies = unsafe {
        enumerated(
            ctx.as_ptr(),
            c"policies".as_ptr(),
            settings::policies_mode() as c_int,
            raw::REDISMODULE_CONFIG_IMMUTABLE as c_uint,
            words.as_mut_ptr(),
            values.as_ptr(),
            3,
            Some(get_policies),
            Some(set_policies),
            None,
            std::ptr::null_mut(),
        )
    };
    let budget = register_numeric(ctx, numeric, &SLIDING_LOG_CALL_BUDGET);
    if limit != OK || always != OK || policies != OK || budget != OK {
        return false;
    }
    // SAFETY: the load context, after registering every config.
    unsafe { load(ctx.as_ptr()) == OK }
}

extern "C" fn get_propagate_always(_name: *const c_char, _data: *mut c_void) -> c_int {
    guard(|| c_int::from(settings::propagate_always()), || 0)
}

extern "C" fn set_propagate_always(
    _name: *const c_char,
    value: c_int,
    _data: *mut c_void,
    _err: *mut *mut RedisModuleString,
) -> c_int {
    guard(
        || {
            settings::set_propagate_always(value != 0);
            OK
        },
        || ERR,
    )
}

extern "C" fn get_policies(_name: *const c_char, _data: *mut c_void) -> c_int {
    guard(|| settings::policies_mode() as c_int, || 0)
}

extern "C" fn set_policies(
    _name: *const c_char,
    value: c_int,
    _data: *mut c_void,
    _err: *mut *mut RedisModuleString,
) -> c_int {
    guard(
        || {
            let mode = usize::try_from(value)
                .ok()
                .and_then(|i| settings::PoliciesMode::ALL.get(i).copied());
            match mode {
                Some(mode) => {
                    settings::set_policies(mode);
                    OK
                }
                None => ERR,
            }
        },
        || ERR,
    )
}

// ---- the numeric settings ----

/// A numeric config: its name, bounds (the server checks them before `set`)
/// and where its value lives. Handed to the server as the config's private
/// data, so one pair of callbacks serves every numeric config.
struct NumericSetting {
    name: &'static std::ffi::CStr,
    min: i64,
    max: i64,
    get: fn() -> i64,
    set: fn(i64),
}

/// `ratelimit.sliding-log-max-limit` (mutable).
static SLIDING_LOG_MAX_LIMIT: NumericSetting = NumericSetting {
    name: c"sliding-log-max-limit",
    min: 1,
    max: crate::algorithm::sliding_log::SlidingLog::MAX_LIMIT,
    get: settings::sliding_log_max_limit,
    set: settings::set_sliding_log_max_limit,
};

/// `ratelimit.sliding-log-call-budget` (mutable: `CONFIG SET` takes effect
/// at the next call).
static SLIDING_LOG_CALL_BUDGET: NumericSetting = NumericSetting {
    name: c"sliding-log-call-budget",
    min: 1,
    max: settings::SLIDING_LOG_CALL_BUDGET_MAX,
    get: settings::sliding_log_call_budget,
    set: settings::set_sliding_log_call_budget,
};

type RegisterNumeric = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    *const c_char,
    c_longlong,
    c_uint,
    c_longlong,
    c_longlong,
    raw::RedisModuleConfigGetNumericFunc,
    raw::RedisModuleConfigSetNumericFunc,
    raw::RedisModuleConfigApplyFunc,
    *mut c_void,
) -> c_int;

/// Registers `setting` (mutable), its current value as the default.
fn register_numeric(ctx: Ctx, numeric: RegisterNumeric, setting: &'static NumericSetting) -> c_int {
    // SAFETY: the load context; the name is static; the callbacks are static
    // functions whose private data is `setting`, which lives for the whole
    // process and is only read.
    unsafe {
        numeric(
            ctx.as_ptr(),
            setting.name.as_ptr(),
            (setting.get)(),
            raw::REDISMODULE_CONFIG_DEFAULT as c_uint,
            setting.min,
            setting.max,
            Some(get_numeric),
            Some(set_numeric),
            None,
            std::ptr::from_ref(setting).cast_mut().cast(),
        )
    }
}

/// The `NumericSetting` a numeric config was registered with.
fn numeric_setting(data: *mut c_void) -> Option<&'static NumericSetting> {
    // SAFETY: `data` is null or the `&'static NumericSetting` given at
    // registration (`register_numeric`).
    unsafe { data.cast::<NumericSetting>().cast_const().as_ref() }
}

extern "C" fn get_numeric(_name: *const c_char, data: *mut c_void) -> c_longlong {
    guard(|| numeric_setting(data).map_or(0, |s| (s.get)()), || 0)
}

extern "C" fn set_numeric(
    _name: *const c_char,
    value: c_longlong,
    data: *mut c_void,
    _err: *mut *mut RedisModuleString,
) -> c_int {
    // The server checked the bounds given at registration.
    guard(
        || match numeric_setting(data) {
            Some(setting) => {
                (setting.set)(value);
                OK
            }
            None => ERR,
        },
        || ERR,
    )
}
