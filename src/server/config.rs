//! Module configs (Redis 7.0+, Valkey): each shows in `CONFIG GET
//! ratelimit.*`, is set by a `ratelimit.<name> <value>` line of the server's
//! config (or `MODULE LOADEX … CONFIG`), changes with `CONFIG SET` unless it
//! is immutable, and persists with `CONFIG REWRITE`. Which configs exist and
//! where their values live is the module's business (`command::settings`
//! hands them in as [`Setting`]s); this file registers them with the server.
//! Each setting is handed to the server as its config's private data, so one
//! pair of callbacks serves every config of a kind.

use std::ffi::{c_char, c_int, c_longlong, c_uint, c_void, CStr};

use redis_module::raw::{self, RedisModuleString};

use super::{api_fn, guard, Ctx, ERR, OK};

/// One module config.
pub enum Setting {
    Numeric(&'static NumericSetting),
    Bool(&'static BoolSetting),
    Enum(&'static EnumSetting),
}

/// A numeric config (mutable): its name, bounds (the server checks them
/// before `set`) and where its value lives.
pub struct NumericSetting {
    pub name: &'static CStr,
    pub min: i64,
    pub max: i64,
    pub get: fn() -> i64,
    pub set: fn(i64),
}

/// A yes/no config.
pub struct BoolSetting {
    pub name: &'static CStr,
    /// Set only at load (the server refuses `CONFIG SET`).
    pub immutable: bool,
    pub get: fn() -> bool,
    pub set: fn(bool),
}

/// A config whose value is one of `words`, read and set as its index.
pub struct EnumSetting {
    pub name: &'static CStr,
    /// Set only at load (the server refuses `CONFIG SET`).
    pub immutable: bool,
    pub words: &'static [&'static CStr],
    pub get: fn() -> usize,
    /// False when the index is not one of `words`.
    pub set: fn(usize) -> bool,
}

/// The most words an [`EnumSetting`] may have.
const MAX_WORDS: usize = 8;

/// Registers `settings`, in order, with the current values as defaults, then
/// has the server apply the values its config gave. False (refuse the load)
/// when the server refused one; true, doing nothing, where it has no module
/// configs.
pub fn register(ctx: Ctx, settings: &'static [Setting]) -> bool {
    let (Some(numeric), Some(boolean), Some(enumerated), Some(load)) = (
        api_fn!(RedisModule_RegisterNumericConfig),
        api_fn!(RedisModule_RegisterBoolConfig),
        api_fn!(RedisModule_RegisterEnumConfig),
        api_fn!(RedisModule_LoadConfigs),
    ) else {
        return true;
    };
    let mut all_ok = true;
    for setting in settings {
        let registered = match setting {
            Setting::Numeric(s) => register_numeric(ctx, numeric, s),
            Setting::Bool(s) => register_bool(ctx, boolean, s),
            Setting::Enum(s) => register_enum(ctx, enumerated, s),
        };
        all_ok &= registered == OK;
    }
    if !all_ok {
        return false;
    }
    // SAFETY: the load context, after registering every config.
    unsafe { load(ctx.as_ptr()) == OK }
}

/// The server's flags for a config.
fn flags(immutable: bool) -> c_uint {
    if immutable {
        raw::REDISMODULE_CONFIG_IMMUTABLE as c_uint
    } else {
        raw::REDISMODULE_CONFIG_DEFAULT as c_uint
    }
}

/// The `&'static T` a config was registered with as its private data.
fn setting<T>(data: *mut c_void) -> Option<&'static T> {
    // SAFETY: `data` is null or the `&'static T` given at registration (the
    // callbacks of a kind are registered with that kind's settings only).
    unsafe { data.cast::<T>().cast_const().as_ref() }
}

/// `setting` as a config's private data.
fn private_data<T>(setting: &'static T) -> *mut c_void {
    std::ptr::from_ref(setting).cast_mut().cast()
}

// ---- yes/no ----

type RegisterBool = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    *const c_char,
    c_int,
    c_uint,
    raw::RedisModuleConfigGetBoolFunc,
    raw::RedisModuleConfigSetBoolFunc,
    raw::RedisModuleConfigApplyFunc,
    *mut c_void,
) -> c_int;

fn register_bool(ctx: Ctx, boolean: RegisterBool, setting: &'static BoolSetting) -> c_int {
    // SAFETY: the load context; the name is static; the callbacks are static
    // functions whose private data is `setting`, which lives for the whole
    // process and is only read.
    unsafe {
        boolean(
            ctx.as_ptr(),
            setting.name.as_ptr(),
            c_int::from((setting.get)()),
            flags(setting.immutable),
            Some(get_bool),
            Some(set_bool),
            None,
            private_data(setting),
        )
    }
}

extern "C" fn get_bool(_name: *const c_char, data: *mut c_void) -> c_int {
    guard(
        || setting::<BoolSetting>(data).map_or(0, |s| c_int::from((s.get)())),
        || 0,
    )
}

extern "C" fn set_bool(
    _name: *const c_char,
    value: c_int,
    data: *mut c_void,
    _err: *mut *mut RedisModuleString,
) -> c_int {
    guard(
        || match setting::<BoolSetting>(data) {
            Some(s) => {
                (s.set)(value != 0);
                OK
            }
            None => ERR,
        },
        || ERR,
    )
}

// ---- one of several words ----

type RegisterEnum = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    *const c_char,
    c_int,
    c_uint,
    *mut *const c_char,
    *const c_int,
    c_int,
    raw::RedisModuleConfigGetEnumFunc,
    raw::RedisModuleConfigSetEnumFunc,
    raw::RedisModuleConfigApplyFunc,
    *mut c_void,
) -> c_int;

fn register_enum(ctx: Ctx, enumerated: RegisterEnum, setting: &'static EnumSetting) -> c_int {
    let count = setting.words.len();
    if count == 0 || count > MAX_WORDS {
        return ERR;
    }
    let mut words: [*const c_char; MAX_WORDS] = [std::ptr::null(); MAX_WORDS];
    let mut values: [c_int; MAX_WORDS] = [0; MAX_WORDS];
    for (i, word) in setting.words.iter().enumerate() {
        words[i] = word.as_ptr();
        values[i] = i as c_int;
    }
    let default = c_int::try_from((setting.get)()).unwrap_or(0);
    // SAFETY: as for `register_bool`; the server copies the `count` value
    // names and integers.
    unsafe {
        enumerated(
            ctx.as_ptr(),
            setting.name.as_ptr(),
            default,
            flags(setting.immutable),
            words.as_mut_ptr(),
            values.as_ptr(),
            count as c_int,
            Some(get_enum),
            Some(set_enum),
            None,
            private_data(setting),
        )
    }
}

extern "C" fn get_enum(_name: *const c_char, data: *mut c_void) -> c_int {
    guard(
        || {
            setting::<EnumSetting>(data)
                .and_then(|s| c_int::try_from((s.get)()).ok())
                .unwrap_or(0)
        },
        || 0,
    )
}

extern "C" fn set_enum(
    _name: *const c_char,
    value: c_int,
    data: *mut c_void,
    _err: *mut *mut RedisModuleString,
) -> c_int {
    guard(
        || match (setting::<EnumSetting>(data), usize::try_from(value)) {
            (Some(s), Ok(index)) if (s.set)(index) => OK,
            _ => ERR,
        },
        || ERR,
    )
}

// ---- numbers ----

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
            private_data(setting),
        )
    }
}

extern "C" fn get_numeric(_name: *const c_char, data: *mut c_void) -> c_longlong {
    guard(
        || setting::<NumericSetting>(data).map_or(0, |s| (s.get)()),
        || 0,
    )
}

extern "C" fn set_numeric(
    _name: *const c_char,
    value: c_longlong,
    data: *mut c_void,
    _err: *mut *mut RedisModuleString,
) -> c_int {
    // The server checked the bounds given at registration.
    guard(
        || match setting::<NumericSetting>(data) {
            Some(setting) => {
                (setting.set)(value);
                OK
            }
            None => ERR,
        },
        || ERR,
    )
}
