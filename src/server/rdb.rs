//! Module auxiliary data in RDB files: a module data type that holds no keys
//! and only saves and loads "aux" records (as Redis Functions ride in the
//! RDB). The server calls [`AuxHooks::save`] while writing an RDB (in the
//! fork child for `BGSAVE`, a full sync or an AOF rewrite with the RDB
//! preamble) and [`AuxHooks::load`] while reading one.
//!
//! Where the server has `aux_save2` (Redis 7.2+, Valkey), a save that writes
//! nothing leaves no record, so such an RDB loads on a server without the
//! module. Redis 7.0 only has `aux_save`, which always writes a record: every
//! RDB it saves while the type exists names the module.
//!
//! A server refuses `MODULE UNLOAD` for a module that registered a data type.

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw::{self, RedisModuleIO, RedisModuleType, RedisModuleTypeMethods};

use super::{api_fn, guard, Ctx, ERR, OK};

/// What the module saves and loads.
pub struct AuxHooks {
    /// Writes the module's records. With `may_skip` (`aux_save2`) writing
    /// nothing leaves no record; without it (7.0's `aux_save`) the record
    /// exists anyway and `load` will be called: write at least a header.
    pub save: fn(&mut AuxWriter, bool),
    /// Reads what `save` wrote with encoding version `encver`; an error
    /// (for the log) fails the whole RDB load.
    pub load: fn(&mut AuxReader, i32) -> Result<(), String>,
}

/// The hooks of the registered type (set once at load).
static HOOKS: AtomicPtr<AuxHooks> = AtomicPtr::new(std::ptr::null_mut());
/// The registered type, `null` when none.
static TYPE: AtomicPtr<RedisModuleType> = AtomicPtr::new(std::ptr::null_mut());

/// Registers the aux-only data type `name` (9 characters, see
/// `RedisModule_CreateDataType`) at encoding version `encver`, saved before
/// the keyspace. `hooks` must live for the whole process. False when the
/// server refused it.
pub fn register_aux_type(ctx: Ctx, name: &CStr, encver: c_int, hooks: &'static AuxHooks) -> bool {
    let Some(create) = api_fn!(RedisModule_CreateDataType) else {
        return false;
    };
    HOOKS.store(std::ptr::from_ref(hooks).cast_mut(), Ordering::Relaxed);
    // SAFETY: an all-zero `RedisModuleTypeMethods` is valid (every callback
    // is an `Option` of a function pointer, the rest integers).
    let mut methods: RedisModuleTypeMethods = unsafe { std::mem::zeroed() };
    methods.version = u64::from(raw::REDISMODULE_TYPE_METHOD_VERSION);
    methods.rdb_load = Some(no_key_load);
    methods.rdb_save = Some(no_key_save);
    methods.free = Some(no_key_free);
    methods.aux_load = Some(aux_load);
    // 7.0 reads `aux_save`; 7.2+ prefers `aux_save2` (fields of a version it
    // does not know are ignored by an older server).
    methods.aux_save = Some(aux_save);
    methods.aux_save2 = Some(aux_save2);
    methods.aux_save_triggers = raw::REDISMODULE_AUX_BEFORE_RDB as c_int;
    // SAFETY: the load context; the server copies the methods.
    let created = unsafe { create(ctx.as_ptr(), name.as_ptr(), encver, &mut methods) };
    TYPE.store(created, Ordering::Relaxed);
    !created.is_null()
}

/// Forgets the registered type (the server frees it with the module).
pub fn forget_aux_type() {
    TYPE.store(std::ptr::null_mut(), Ordering::Relaxed);
    HOOKS.store(std::ptr::null_mut(), Ordering::Relaxed);
}

fn hooks() -> Option<&'static AuxHooks> {
    let p = HOOKS.load(Ordering::Relaxed);
    // SAFETY: `p` is null or came from a `&'static AuxHooks`.
    unsafe { p.as_ref() }
}

/// Writes aux records.
pub struct AuxWriter {
    io: *mut RedisModuleIO,
}

impl AuxWriter {
    /// Writes an unsigned integer.
    pub fn unsigned(&mut self, value: u64) {
        if let Some(save) = api_fn!(RedisModule_SaveUnsigned) {
            // SAFETY: the IO of the current aux_save call.
            unsafe { save(self.io, value) };
        }
    }

    /// Writes a byte string.
    pub fn bytes(&mut self, value: &[u8]) {
        if let Some(save) = api_fn!(RedisModule_SaveStringBuffer) {
            // SAFETY: as above; the server copies `value.len()` bytes.
            unsafe { save(self.io, value.as_ptr().cast(), value.len()) };
        }
    }
}

/// Reads aux records.
pub struct AuxReader {
    io: *mut RedisModuleIO,
}

impl AuxReader {
    fn failed(&self) -> bool {
        match api_fn!(RedisModule_IsIOError) {
            // SAFETY: the IO of the current aux_load call.
            Some(is_error) => (unsafe { is_error(self.io) }) != 0,
            None => false,
        }
    }

    /// Reads an unsigned integer.
    pub fn unsigned(&mut self) -> Result<u64, String> {
        let load = api_fn!(RedisModule_LoadUnsigned).ok_or("no RedisModule_LoadUnsigned")?;
        // SAFETY: the IO of the current aux_load call.
        let value = unsafe { load(self.io) };
        if self.failed() {
            return Err("truncated or unreadable RDB record".into());
        }
        Ok(value)
    }

    /// Reads a byte string.
    pub fn bytes(&mut self) -> Result<Vec<u8>, String> {
        let (Some(load), Some(free)) = (
            api_fn!(RedisModule_LoadStringBuffer),
            api_fn!(RedisModule_Free),
        ) else {
            return Err("no RedisModule_LoadStringBuffer".into());
        };
        let mut len = 0usize;
        // SAFETY: the IO of the current aux_load call; `len` is a valid
        // out-pointer.
        let ptr = unsafe { load(self.io, &mut len) };
        if ptr.is_null() || self.failed() {
            return Err("truncated or unreadable RDB record".into());
        }
        // SAFETY: the server returned `len` bytes at `ptr`, allocated for us.
        let value = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }.to_vec();
        // SAFETY: the buffer came from the server's allocator for this module.
        unsafe { free(ptr.cast()) };
        Ok(value)
    }

    /// Logs `message` as a warning of this load.
    pub fn log_warning(&self, message: &str) {
        let Some(log) = api_fn!(RedisModule_LogIOError) else {
            return;
        };
        let text = std::ffi::CString::new(message.replace('\0', " ")).unwrap_or_default();
        // SAFETY: the IO of the current call; "%s" with one C string.
        unsafe { log(self.io, c"warning".as_ptr(), c"%s".as_ptr(), text.as_ptr()) };
    }
}

extern "C" fn aux_save(io: *mut RedisModuleIO, _when: c_int) {
    save(io, false);
}

extern "C" fn aux_save2(io: *mut RedisModuleIO, _when: c_int) {
    save(io, true);
}

fn save(io: *mut RedisModuleIO, may_skip: bool) {
    guard(
        || {
            if let Some(hooks) = hooks() {
                (hooks.save)(&mut AuxWriter { io }, may_skip);
            }
        },
        || (),
    );
}

extern "C" fn aux_load(io: *mut RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    guard(
        || {
            let Some(hooks) = hooks() else {
                return ERR;
            };
            let mut reader = AuxReader { io };
            match (hooks.load)(&mut reader, encver) {
                Ok(()) => OK,
                Err(why) => {
                    reader.log_warning(&format!("ratelimit: cannot load policies: {why}"));
                    ERR
                }
            }
        },
        || ERR,
    )
}

/// The type holds no keys: a key of it cannot be loaded.
extern "C" fn no_key_load(_io: *mut RedisModuleIO, _encver: c_int) -> *mut c_void {
    std::ptr::null_mut()
}

extern "C" fn no_key_save(_io: *mut RedisModuleIO, _value: *mut c_void) {}

extern "C" fn no_key_free(_value: *mut c_void) {}
