//! Server strings: the arguments of a call ([`Arg`]) and strings the module
//! creates and owns ([`OwnedString`]).
//!
//! Integers and floats are parsed by the server's own parsers
//! (`RedisModule_StringToLongLong`, `RedisModule_StringToDouble`), so they
//! accept exactly what Redis's own commands accept.

use std::ffi::{c_longlong, CStr};
use std::marker::PhantomData;
use std::ptr::NonNull;

use redis_module::raw::RedisModuleString;

use super::{api, Ctx, OK};
use crate::error::{Error, Result};

/// A string the server passed to the current call (a command argument): alive
/// and unchanged for `'a`, the call. `repr(transparent)` over a non-null
/// pointer, so the server's `argv` can be read as `&[Arg]` ([`args_of`]).
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct Arg<'a> {
    raw: NonNull<RedisModuleString>,
    _call: PhantomData<&'a RedisModuleString>,
}

impl<'a> Arg<'a> {
    /// Wraps an argument pointer of the current call; `None` for null.
    pub(crate) fn from_raw(raw: *const RedisModuleString) -> Option<Self> {
        NonNull::new(raw.cast_mut()).map(|raw| Self {
            raw,
            _call: PhantomData,
        })
    }

    pub(crate) fn as_ptr(self) -> *mut RedisModuleString {
        self.raw.as_ptr()
    }

    /// The argument's bytes.
    pub fn bytes(self) -> Result<&'a [u8]> {
        string_bytes(self.as_ptr())
    }

    /// Whether this argument's bytes equal `other`'s, compared by the server
    /// (`RedisModule_StringCompare`: one call, neither string's bytes
    /// handed to the module).
    pub fn same_bytes(self, other: Arg) -> Result<bool> {
        let compare = api!(RedisModule_StringCompare);
        // SAFETY: two live argument strings of the current call.
        Ok(unsafe { compare(self.as_ptr(), other.as_ptr()) } == 0)
    }

    /// The argument as a signed 64-bit integer, as Redis parses its own;
    /// `None` when it is not one.
    pub fn to_i64(self) -> Result<Option<i64>> {
        let to_ll = api!(RedisModule_StringToLongLong);
        let mut v: c_longlong = 0;
        // SAFETY: a live argument string; `v` is a valid out-pointer.
        let status = unsafe { to_ll(self.as_ptr(), &mut v) };
        Ok((status == OK).then_some(v))
    }

    /// The argument as a double, as Redis parses its floats; `None` when it
    /// is not one.
    pub fn to_f64(self) -> Result<Option<f64>> {
        let to_double = api!(RedisModule_StringToDouble);
        let mut v = 0.0f64;
        // SAFETY: a live argument string; `v` is a valid out-pointer.
        let status = unsafe { to_double(self.as_ptr(), &mut v) };
        Ok((status == OK).then_some(v))
    }
}

/// The `argc` arguments of a command call as `Arg`s; `None` when `argv` is
/// null or holds a null pointer.
///
/// # Safety
/// `argv` must be the argument vector the server passed to the current
/// command call, with `argc` entries, alive for `'a`.
pub(crate) unsafe fn args_of<'a>(
    argv: *mut *mut RedisModuleString,
    argc: usize,
) -> Option<&'a [Arg<'a>]> {
    if argv.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees `argc` valid entries alive for `'a`.
    let raw: &'a [*mut RedisModuleString] = unsafe { std::slice::from_raw_parts(argv, argc) };
    if raw.iter().any(|p| p.is_null()) {
        return None;
    }
    // SAFETY: `Arg` is `repr(transparent)` over `NonNull<RedisModuleString>`
    // (plus a zero-sized marker), which has the layout of a pointer, and no
    // entry is null.
    Some(unsafe { std::slice::from_raw_parts(raw.as_ptr().cast::<Arg<'a>>(), argc) })
}

/// The bytes of a live server string (valid while the string is unchanged).
fn string_bytes<'a>(s: *mut RedisModuleString) -> Result<&'a [u8]> {
    let ptr_len = api!(RedisModule_StringPtrLen);
    let mut len = 0usize;
    // SAFETY: `s` is a live string; the server returns a pointer to its
    // `len` bytes.
    let ptr = unsafe { ptr_len(s, &mut len) };
    if ptr.is_null() || len == 0 {
        return Ok(&[]);
    }
    // SAFETY: `ptr` points to `len` initialised bytes that live as long as
    // the string, which the caller's lifetime covers.
    Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
}

/// A string the module created; freed on drop.
pub struct OwnedString {
    ctx: Option<Ctx>,
    raw: NonNull<RedisModuleString>,
}

impl OwnedString {
    /// Takes ownership of a string the server created for this module (with
    /// `ctx`, or with no context when `None`); `None` for null.
    pub(crate) fn from_raw(ctx: Option<Ctx>, raw: *mut RedisModuleString) -> Option<Self> {
        NonNull::new(raw).map(|raw| Self { ctx, raw })
    }

    /// A new string holding the decimal `value`.
    pub fn from_i64(ctx: Ctx, value: i64) -> Result<Self> {
        let create = api!(RedisModule_CreateStringFromLongLong);
        // SAFETY: the context of the current call.
        let raw = unsafe { create(ctx.as_ptr(), value) };
        Self::from_raw(Some(ctx), raw).ok_or(Error::Internal {
            what: "could not create a string",
        })
    }

    /// A new string holding `bytes`.
    pub fn from_bytes(ctx: Ctx, bytes: &[u8]) -> Result<Self> {
        let create = api!(RedisModule_CreateString);
        // SAFETY: the context of the current call; the server copies the bytes.
        let raw = unsafe { create(ctx.as_ptr(), bytes.as_ptr().cast(), bytes.len()) };
        Self::from_raw(Some(ctx), raw).ok_or(Error::Internal {
            what: "could not create a string",
        })
    }

    /// The string's bytes.
    pub fn bytes(&self) -> &[u8] {
        string_bytes(self.as_ptr()).unwrap_or_default()
    }

    /// A string with no context holding `bytes` (freed on drop).
    pub fn detached_bytes(bytes: &[u8]) -> Result<Self> {
        let create = api!(RedisModule_CreateString);
        // SAFETY: a NULL context is allowed; the server copies the bytes.
        let raw = unsafe { create(std::ptr::null_mut(), bytes.as_ptr().cast(), bytes.len()) };
        Self::from_raw(None, raw).ok_or(Error::Internal {
            what: "could not create a string",
        })
    }

    /// This string as an argument (to parse it as a command argument).
    pub fn as_arg(&self) -> Arg<'_> {
        Arg {
            raw: self.raw,
            _call: PhantomData,
        }
    }

    /// A string with no context (it outlives every call: the module frees it
    /// at unload), holding `text`.
    pub fn detached(text: &'static CStr) -> Result<Self> {
        let create = api!(RedisModule_CreateString);
        let bytes = text.to_bytes();
        // SAFETY: a NULL context is allowed; the server copies the bytes.
        let raw = unsafe { create(std::ptr::null_mut(), text.as_ptr(), bytes.len()) };
        Self::from_raw(None, raw).ok_or(Error::Internal {
            what: "could not create a string",
        })
    }

    pub(crate) fn as_ptr(&self) -> *mut RedisModuleString {
        self.raw.as_ptr()
    }

    /// The string as a signed 64-bit integer, if it is one.
    pub fn to_i64(&self) -> Option<i64> {
        Arg::from_raw(self.as_ptr()).and_then(|arg| arg.to_i64().ok().flatten())
    }
}

impl Drop for OwnedString {
    fn drop(&mut self) {
        let ctx = self.ctx.map_or(std::ptr::null_mut(), Ctx::as_ptr);
        // SAFETY: a plain read of a function pointer set at load.
        if let Some(free) = unsafe { redis_module::raw::RedisModule_FreeString } {
            // SAFETY: this module created the string with this context (or
            // none) and frees it exactly once, here.
            unsafe { free(ctx, self.as_ptr()) };
        }
    }
}
