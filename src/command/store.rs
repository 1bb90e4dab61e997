//! Key I/O through the low-level key API, and the propagation of effects.
//!
//! A limiter's state lives in one Redis string. Writes go through
//! `RedisModule_StringTruncate` + `RedisModule_StringDMA` (the value stays a
//! raw string that later reads access in place, without allocating), get an
//! absolute expiry, and are propagated to replicas and the AOF as the effect
//! `SET key value PXAT ms` — never as the command, so that no replica or AOF
//! replay recomputes with its own clock (skipped when nothing consumes it:
//! see [`super::propagate`]). They raise the `set` and `expire` keyspace
//! events, as that `SET` would.

use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw::{self, RedisModuleCtx, RedisModuleKey, RedisModuleString};

use super::{api, propagate};
use crate::algorithm::{Algorithm, Decision, STATE_BUF_LEN};
use crate::error::{Error, Result};
use crate::time::{ceil_ms, server_now_us};

/// The `PXAT` argument of the propagated `SET`, created once at load so that
/// propagating does not allocate it on every call (null until then).
static PXAT: AtomicPtr<RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());

/// Creates the constant strings used when propagating effects. Called once,
/// at load; false (refuse the load) if the server could not create them.
pub fn create_constants() -> bool {
    // SAFETY: a NULL context makes a string that lives until freed (never).
    unsafe {
        if let Some(create) = raw::RedisModule_CreateString {
            PXAT.store(
                create(std::ptr::null_mut(), c"PXAT".as_ptr(), 4),
                Ordering::Relaxed,
            );
        }
    }
    !PXAT.load(Ordering::Relaxed).is_null()
}

/// An open key, closed on drop.
pub struct Key {
    pub(crate) ctx: *mut RedisModuleCtx,
    pub(crate) name: *mut RedisModuleString,
    pub(crate) key: *mut RedisModuleKey,
}

impl Key {
    /// Opens `name` for reading and writing.
    pub fn open(ctx: *mut RedisModuleCtx, name: *mut RedisModuleString) -> Result<Self> {
        let open = api!(RedisModule_OpenKey);
        let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
        // SAFETY: ctx and name are live for this command call.
        let key = unsafe { open(ctx, name, mode) }.cast::<RedisModuleKey>();
        if key.is_null() {
            return Err(Error::Internal {
                what: "could not open the key",
            });
        }
        Ok(Self { ctx, name, key })
    }

    /// Closes the key (unless already closed, null) and opens it again:
    /// needed around a command run through `RedisModule_Call`, which may
    /// change or delete it.
    pub fn reopen(&mut self) -> Result<()> {
        let open = api!(RedisModule_OpenKey);
        let close = api!(RedisModule_CloseKey);
        let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
        // SAFETY: self.key is open and closed once here; ctx and name live
        // for the whole command call.
        unsafe {
            if !self.key.is_null() {
                close(self.key);
            }
            self.key = open(self.ctx, self.name, mode).cast::<RedisModuleKey>();
        }
        if self.key.is_null() {
            return Err(Error::Internal {
                what: "could not open the key",
            });
        }
        Ok(())
    }

    /// The key's type, one of `REDISMODULE_KEYTYPE_*`.
    pub fn key_type(&self) -> Result<u32> {
        let key_type = api!(RedisModule_KeyType);
        // SAFETY: self.key is open.
        Ok(unsafe { key_type(self.key) } as u32)
    }

    /// The key's string value; `None` when the key does not exist.
    ///
    /// Errors: [`Error::WrongType`] when the key holds another type.
    pub fn string(&self) -> Result<Option<&[u8]>> {
        match self.key_type()? as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => Ok(None),
            raw::REDISMODULE_KEYTYPE_STRING => {
                let dma = api!(RedisModule_StringDMA);
                let mut len = 0usize;
                // SAFETY: a string key; the pointer stays valid until the key
                // is modified or closed, both of which need `&mut self`.
                let ptr = unsafe { dma(self.key, &mut len, raw::REDISMODULE_READ as c_int) };
                if ptr.is_null() {
                    return Err(Error::WrongType);
                }
                Ok(Some(unsafe {
                    std::slice::from_raw_parts(ptr.cast::<u8>(), len)
                }))
            }
            _ => Err(Error::WrongType),
        }
    }

    /// Replaces the value (of `old_len` bytes, `None` for a new key) with
    /// `value`, expiring at `expire_at_ms` (ms since the epoch), and
    /// propagates `SET key value PXAT expire_at_ms`.
    pub fn set_string(
        &mut self,
        old_len: Option<usize>,
        value: &[u8],
        expire_at_ms: i64,
    ) -> Result<()> {
        let truncate = api!(RedisModule_StringTruncate);
        let dma = api!(RedisModule_StringDMA);
        let set_abs_expire = api!(RedisModule_SetAbsExpire);
        let replicate = api!(RedisModule_Replicate);
        let notify = api!(RedisModule_NotifyKeyspaceEvent);
        let ok = raw::REDISMODULE_OK as c_int;
        // SAFETY: self.key is open for writing; the server copies `value`.
        unsafe {
            let resized = old_len.is_some_and(|old| old != value.len());
            // Start from an exactly sized string rather than growing one, but
            // keep the key's LFU counter (where the eviction policy keeps one):
            // a fresh counter would make the hottest limiters look cold to
            // allkeys-lfu eviction, and evicting a limiter resets its limit.
            let mut lfu_freq: std::ffi::c_longlong = 0;
            let keep_lfu = resized
                && raw::RedisModule_GetLFU.is_some_and(|get| get(self.key, &mut lfu_freq) == ok);
            if resized {
                api!(RedisModule_DeleteKey)(self.key);
            }
            if truncate(self.key, value.len()) != ok {
                return Err(Error::Internal {
                    what: "could not size the string",
                });
            }
            if keep_lfu {
                if let Some(set_lfu) = raw::RedisModule_SetLFU {
                    set_lfu(self.key, lfu_freq);
                }
            }
            let mut len = 0usize;
            let ptr = dma(self.key, &mut len, raw::REDISMODULE_WRITE as c_int);
            if ptr.is_null() || len != value.len() {
                return Err(Error::Internal {
                    what: "could not write the string",
                });
            }
            std::ptr::copy_nonoverlapping(value.as_ptr(), ptr.cast::<u8>(), len);
            if set_abs_expire(self.key, expire_at_ms) != ok {
                return Err(Error::Internal {
                    what: "could not set the expiry",
                });
            }
            if propagate::effects_needed(self.ctx) {
                // SET key value PXAT ms (PXAT created at load, never null).
                replicate(
                    self.ctx,
                    c"SET".as_ptr(),
                    c"sbsl".as_ptr(),
                    self.name,
                    value.as_ptr().cast::<c_char>(),
                    value.len(),
                    PXAT.load(Ordering::Relaxed),
                    expire_at_ms as std::ffi::c_longlong,
                );
            } else {
                propagate::count_write(self.ctx);
            }
            // The module signals modified keys itself, only when it writes
            // (see `command::register_all`): a limited call leaves WATCH alone.
            api!(RedisModule_SignalModifiedKey)(self.ctx, self.name);
            notify(
                self.ctx,
                raw::REDISMODULE_NOTIFY_STRING as c_int,
                c"set".as_ptr(),
                self.name,
            );
            notify(
                self.ctx,
                raw::REDISMODULE_NOTIFY_GENERIC as c_int,
                c"expire".as_ptr(),
                self.name,
            );
        }
        Ok(())
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        // SAFETY: self.key is open (or null after a failed reopen) and closed
        // exactly once, here.
        unsafe {
            if let Some(close) = raw::RedisModule_CloseKey {
                if !self.key.is_null() {
                    close(self.key);
                }
            }
        }
    }
}

/// The whole life of a request against a string-backed algorithm: load the
/// state of `key_name`, decide `cost` tokens with the server clock, store and
/// propagate the new state (allowed requests only), return the decision.
///
/// Errors: [`Error::WrongType`]; [`Error::InvalidState`] (naming `command`)
/// when the string was not written by this algorithm; [`Error::Overflow`].
/// Nothing is written when an error is returned.
pub fn decide_string<A: Algorithm>(
    ctx: *mut RedisModuleCtx,
    key_name: *mut RedisModuleString,
    algorithm: &A,
    cost: i64,
    command: &'static str,
) -> Result<Decision> {
    let mut key = Key::open(ctx, key_name)?;
    let stored = key.string()?;
    let old_len = stored.map(<[u8]>::len);
    let state = match stored {
        None => None,
        Some(bytes) => Some(A::decode(bytes).ok_or(Error::InvalidState { command })?),
    };
    let outcome = algorithm.decide(state, server_now_us(), cost)?;
    if let Some(update) = outcome.update {
        let mut buf = [0u8; STATE_BUF_LEN];
        let len = A::encode(&update.state, &mut buf);
        key.set_string(old_len, &buf[..len], ceil_ms(update.expire_at_us))?;
    }
    Ok(outcome.decision)
}
