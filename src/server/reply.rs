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

/// A reply array of integers being written: [`IntegerArray::start`]
/// announces its length, the caller then pushes exactly that many.
pub struct IntegerArray {
    ctx: Ctx,
    integer: unsafe extern "C" fn(*mut raw::RedisModuleCtx, std::ffi::c_longlong) -> c_int,
}

impl IntegerArray {
    /// Starts an array of `len` integers; `None` (nothing replied) where
    /// the server lacks the reply functions.
    pub fn start(ctx: Ctx, len: usize) -> Option<Self> {
        let array = api_fn!(RedisModule_ReplyWithArray)?;
        let integer = api_fn!(RedisModule_ReplyWithLongLong)?;
        // SAFETY: the context of the current command.
        unsafe { array(ctx.as_ptr(), len as std::ffi::c_long) };
        Some(Self { ctx, integer })
    }

    /// Adds `values` to the array.
    pub fn push_all(&self, values: &[i64]) {
        for &v in values {
            // SAFETY: the context of the current command, whose reply array
            // was announced by `start`.
            unsafe { (self.integer)(self.ctx.as_ptr(), v) };
        }
    }
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

/// A reply of an administrative command (`RL.POLICY …`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`.
    Ok,
    Integer(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// The null reply.
    Null,
    Array(Vec<Reply>),
    /// An error reply; the text starts with its code (`ERR …`).
    Error(String),
}

/// Sends `value` as the reply of the current command.
pub fn send(ctx: Ctx, value: &Reply) -> c_int {
    match value {
        Reply::Ok => {
            if let Some(simple) = api_fn!(RedisModule_ReplyWithSimpleString) {
                // SAFETY: the context of the current command; a static C string.
                unsafe { simple(ctx.as_ptr(), c"OK".as_ptr()) };
            }
        }
        Reply::Integer(v) => {
            if let Some(integer) = api_fn!(RedisModule_ReplyWithLongLong) {
                // SAFETY: the context of the current command.
                unsafe { integer(ctx.as_ptr(), *v) };
            }
        }
        Reply::Bulk(bytes) => {
            if let Some(buffer) = api_fn!(RedisModule_ReplyWithStringBuffer) {
                // SAFETY: as above; the server copies `bytes.len()` bytes.
                unsafe { buffer(ctx.as_ptr(), bytes.as_ptr().cast(), bytes.len()) };
            }
        }
        Reply::Null => {
            if let Some(null) = api_fn!(RedisModule_ReplyWithNull) {
                // SAFETY: the context of the current command.
                unsafe { null(ctx.as_ptr()) };
            }
        }
        Reply::Array(items) => {
            if let Some(array) = api_fn!(RedisModule_ReplyWithArray) {
                // SAFETY: as above; exactly `items.len()` replies follow.
                unsafe { array(ctx.as_ptr(), items.len() as std::ffi::c_long) };
                for item in items {
                    send(ctx, item);
                }
            }
        }
        Reply::Error(text) => {
            error(ctx, text);
        }
    }
    OK
}
