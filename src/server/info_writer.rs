//! The writer of the module's `INFO` section ([`InfoWriter`]): what the
//! module's hook ([`super::hooks::Hooks::write_info`]) is handed, and what
//! [`super::info`] makes in the server's callback.

use std::ffi::CStr;

use redis_module::raw::{self, RedisModuleInfoCtx};

use super::{api_fn, OK};

/// Writes fields into the module's `INFO` section (see [`super::info::register_info`]).
pub struct InfoWriter {
    pub(super) raw: *mut RedisModuleInfoCtx,
}

impl InfoWriter {
    /// Adds `name:field=value,…` (the server prefixes the module's name), the
    /// shape of `INFO commandstats` lines.
    pub fn dict(&mut self, name: &CStr, fields: &[(&CStr, u64)]) {
        let (Some(begin), Some(add), Some(end)) = (
            api_fn!(RedisModule_InfoBeginDictField),
            api_fn!(RedisModule_InfoAddFieldULongLong),
            api_fn!(RedisModule_InfoEndDictField),
        ) else {
            return;
        };
        // SAFETY: the info context of the current callback; the name is a
        // NUL-terminated string.
        if unsafe { begin(self.raw, name.as_ptr()) } != OK {
            return;
        }
        for (field, value) in fields {
            // SAFETY: as above, inside the dict field just begun.
            unsafe { add(self.raw, field.as_ptr(), *value) };
        }
        // SAFETY: ends the dict field begun above.
        unsafe { end(self.raw) };
    }

    /// Adds `name:text` (the server prefixes the module's name).
    pub fn text(&mut self, name: &CStr, text: &CStr) {
        // SAFETY: a plain read of a function pointer set at load.
        if let Some(add) = unsafe { raw::RedisModule_InfoAddFieldCString } {
            // SAFETY: the info context of the current callback; both are
            // NUL-terminated strings, which the server copies.
            unsafe { add(self.raw, name.as_ptr(), text.as_ptr()) };
        }
    }

    /// Adds `name:value` (the server prefixes the module's name).
    pub fn field(&mut self, name: &CStr, value: u64) {
        // SAFETY: a plain read of a function pointer set at load.
        if let Some(add) = unsafe { raw::RedisModule_InfoAddFieldULongLong } {
            // SAFETY: the info context of the current callback.
            unsafe { add(self.raw, name.as_ptr(), value) };
        }
    }
}
