//! Replies to the current command.

use std::ffi::c_int;

use redis_module::raw;

use super::{api_fn, Ctx, OK};

/// Replies with an array of integers.
pub fn integers(ctx: Ctx, values: &[i64]) -> c_int {
    let (array, integer) = (
        api_fn!(RedisModule_ReplyWithArray),
        api_fn!(RedisModule_ReplyWithLongLong),
    );
    if let (Some(array), Some(integer)) = (array, integer) {
        // SAFETY: the context of the current command.
        unsafe { array(ctx.as_ptr(), values.len() as std::ffi::c_long) };
        for &v in values {
            // SAFETY: as above; the array announced `values.len()` elements.
            unsafe { integer(ctx.as_ptr(), v) };
        }
    }
    OK
}

/// Replies with the error `text` (it starts with its code, e.g. `ERR`).
pub fn error(ctx: Ctx, text: &str) -> c_int {
    let text = std::ffi::CString::new(text.replace('\0', " ")).unwrap_or_default();
    // SAFETY: a plain read of a function pointer set at load.
    if let Some(reply) = unsafe { raw::RedisModule_ReplyWithError } {
        // SAFETY: the context of the current command; the server copies the text.
        unsafe { reply(ctx.as_ptr(), text.as_ptr()) };
    }
    OK
}

/// Replies with the server's own wrong-number-of-arguments error.
pub fn wrong_arity(ctx: Ctx) -> c_int {
    // SAFETY: a plain read of a function pointer set at load.
    match unsafe { raw::RedisModule_WrongArity } {
        // SAFETY: the context of the current command.
        Some(f) => unsafe { f(ctx.as_ptr()) },
        None => OK,
    }
}
