//! Argument parsing, shared by every command.
//!
//! Integers and floats are parsed by the server's own parsers
//! (`RedisModule_StringToLongLong`, `RedisModule_StringToDouble`), so they
//! accept exactly what Redis's own commands accept: signed 64-bit integers
//! without spaces, `+` or fractions; floats as `strtod` reads them, whole.

use std::ffi::c_char;

use redis_module::raw::{self, RedisModuleString};

use super::api;
use crate::error::{Error, Result};
use crate::time::seconds_to_us;

/// The arguments of one call, `argv[0]` being the command name.
pub struct Args<'a> {
    argv: &'a [*const RedisModuleString],
}

impl<'a> Args<'a> {
    pub(crate) fn new(argv: &'a [*const RedisModuleString]) -> Self {
        Self { argv }
    }

    /// Number of arguments, including the command name.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.argv.len()
    }

    /// The raw server string at `i` (`i` < `len()`; checked by the caller's
    /// arity). Used for the key name.
    pub fn raw(&self, i: usize) -> Result<*mut RedisModuleString> {
        self.argv.get(i).map(|p| p.cast_mut()).ok_or(Error::Syntax)
    }

    /// The bytes of argument `i`.
    pub fn bytes(&self, i: usize) -> Result<&'a [u8]> {
        let s = *self.argv.get(i).ok_or(Error::Syntax)?;
        let ptr_len = api!(RedisModule_StringPtrLen);
        let mut len = 0usize;
        // SAFETY: `s` is a live argument string; the server returns a pointer
        // to its `len` bytes, valid for the whole call.
        let ptr: *const c_char = unsafe { ptr_len(s, &mut len) };
        if ptr.is_null() {
            return Ok(&[]);
        }
        Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
    }

    /// Argument `i` as a signed 64-bit integer, parsed as Redis parses its own.
    pub fn integer(&self, i: usize, name: &'static str) -> Result<i64> {
        let s = *self.argv.get(i).ok_or(Error::Syntax)?;
        let to_ll = api!(RedisModule_StringToLongLong);
        let mut v: std::ffi::c_longlong = 0;
        // SAFETY: `s` is a live argument string.
        if unsafe { to_ll(s, &mut v) } != raw::REDISMODULE_OK as i32 {
            return Err(Error::NotAnInteger { arg: name });
        }
        Ok(v)
    }

    /// Argument `i` as an integer ≥ `min`.
    pub fn integer_at_least(
        &self,
        i: usize,
        name: &'static str,
        min: i64,
        bound: &'static str,
    ) -> Result<i64> {
        let v = self.integer(i, name)?;
        if v < min {
            return Err(Error::OutOfRange { arg: name, bound });
        }
        Ok(v)
    }

    /// Argument `i`, a duration in seconds (fractional allowed, parsed as
    /// Redis parses floats), as whole microseconds.
    pub fn seconds_as_us(&self, i: usize, name: &'static str) -> Result<i64> {
        let s = *self.argv.get(i).ok_or(Error::Syntax)?;
        // Fast path: whole seconds, as most periods are. Any string the
        // integer parser accepts, the float parser reads as the same value
        // (exactly, within the accepted range), so the result is identical.
        let to_ll = api!(RedisModule_StringToLongLong);
        let mut whole: std::ffi::c_longlong = 0;
        // SAFETY: `s` is a live argument string.
        if unsafe { to_ll(s, &mut whole) } == raw::REDISMODULE_OK as i32 {
            return seconds_to_us(whole as f64).ok_or(Error::BadPeriod { arg: name });
        }
        let to_double = api!(RedisModule_StringToDouble);
        let mut secs = 0.0f64;
        // SAFETY: `s` is a live argument string.
        if unsafe { to_double(s, &mut secs) } != raw::REDISMODULE_OK as i32 {
            return Err(Error::NotAFloat { arg: name });
        }
        seconds_to_us(secs).ok_or(Error::BadPeriod { arg: name })
    }

    /// `key limit window [TOKENS n]`: `(limit, window in µs, cost)`.
    pub fn limit_window_cost(&self) -> Result<(i64, i64, i64)> {
        Ok((
            self.integer(2, "limit")?,
            self.seconds_as_us(3, "window")?,
            self.tokens_option(4)?,
        ))
    }

    /// The optional `[TOKENS n]` that may follow the parameters at `from`:
    /// the cost of this request, an integer ≥ 1, default 1. Anything else
    /// after the parameters is a syntax error.
    pub fn tokens_option(&self, from: usize) -> Result<i64> {
        match self.len().checked_sub(from) {
            Some(0) => Ok(1),
            Some(2) if self.bytes(from)?.eq_ignore_ascii_case(b"TOKENS") => {
                self.integer_at_least(from + 1, "TOKENS", 1, ">= 1")
            }
            _ => Err(Error::Syntax),
        }
    }
}
