//! An open key, through the low-level key API: string values read and
//! written in place, sorted sets read by score range and changed entry by
//! entry, absolute expiry. Nothing here propagates or raises keyspace
//! events: callers do that ([`super::effects`]) after closing the key, since
//! a keyspace-event subscriber may delete or rewrite the key from its
//! callback.

use std::ffi::{c_int, c_longlong};
use std::ptr::NonNull;

use redis_module::raw::{self, RedisModuleKey};

use super::string::{Arg, OwnedString};
use super::{api, Ctx, OK};
use crate::error::{Error, Result};

/// What a key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Empty,
    String,
    SortedSet,
    Other,
}

/// A key open for reading and writing; closed on drop (or by [`Key::close`]).
pub struct Key<'a> {
    ctx: Ctx,
    raw: NonNull<RedisModuleKey>,
    name: Arg<'a>,
}

/// A zset entry: its score and member.
pub struct Entry {
    pub score: f64,
    pub member: OwnedString,
}

impl<'a> Key<'a> {
    /// Opens `name` for reading and writing.
    pub fn open(ctx: Ctx, name: Arg<'a>) -> Result<Self> {
        let open = api!(RedisModule_OpenKey);
        let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
        // SAFETY: the context and the key name of the current call.
        let key = unsafe { open(ctx.as_ptr(), name.as_ptr(), mode) };
        let raw = NonNull::new(key.cast::<RedisModuleKey>()).ok_or(Error::Internal {
            what: "could not open the key",
        })?;
        Ok(Self { ctx, raw, name })
    }

    /// The key's name.
    pub fn name(&self) -> Arg<'a> {
        self.name
    }

    fn ptr(&self) -> *mut RedisModuleKey {
        self.raw.as_ptr()
    }

    /// What the key holds.
    pub fn kind(&self) -> Result<KeyKind> {
        let key_type = api!(RedisModule_KeyType);
        // SAFETY: the key is open.
        let kind = unsafe { key_type(self.ptr()) } as isize;
        Ok(match kind {
            raw::REDISMODULE_KEYTYPE_EMPTY => KeyKind::Empty,
            raw::REDISMODULE_KEYTYPE_STRING => KeyKind::String,
            raw::REDISMODULE_KEYTYPE_ZSET => KeyKind::SortedSet,
            _ => KeyKind::Other,
        })
    }

    /// The key's string value; `None` when the key does not exist.
    ///
    /// Errors: [`Error::WrongType`] when the key holds another type.
    pub fn string(&self) -> Result<Option<&[u8]>> {
        match self.kind()? {
            KeyKind::Empty => Ok(None),
            KeyKind::String => {
                let dma = api!(RedisModule_StringDMA);
                let mut len = 0usize;
                // SAFETY: an open string key; `len` is a valid out-pointer.
                let ptr = unsafe { dma(self.ptr(), &mut len, raw::REDISMODULE_READ as c_int) };
                if ptr.is_null() {
                    return Err(Error::WrongType);
                }
                if len == 0 {
                    return Ok(Some(&[]));
                }
                // SAFETY: `ptr` points to the value's `len` bytes, valid until
                // the key is modified or closed, both of which need `&mut self`
                // or `self`, so not while the returned borrow lives.
                Ok(Some(unsafe {
                    std::slice::from_raw_parts(ptr.cast::<u8>(), len)
                }))
            }
            _ => Err(Error::WrongType),
        }
    }

    /// Replaces the string value (of `old_len` bytes, `None` for a new key)
    /// with `value` and sets the key to expire at `expire_at_ms` (ms since
    /// the epoch). A value of another length starts from an exactly sized
    /// string, keeping the key's LFU counter where the server has one.
    pub fn write_string(
        &mut self,
        old_len: Option<usize>,
        value: &[u8],
        expire_at_ms: i64,
    ) -> Result<()> {
        let truncate = api!(RedisModule_StringTruncate);
        let dma = api!(RedisModule_StringDMA);
        let resized = old_len.is_some_and(|old| old != value.len());
        // A fresh string would also get a fresh LFU counter: the hottest
        // limiters would look cold to allkeys-lfu eviction, and evicting a
        // limiter resets its limit.
        let lfu = if resized { self.lfu() } else { None };
        if resized {
            let delete = api!(RedisModule_DeleteKey);
            // SAFETY: the key is open for writing.
            unsafe { delete(self.ptr()) };
        }
        // A string of the right length is written in place: DMA in write
        // mode unshares it and makes it raw.
        let sized = old_len == Some(value.len());
        // SAFETY: the key is open for writing (empty or a string).
        if !sized && unsafe { truncate(self.ptr(), value.len()) } != OK {
            return Err(Error::Internal {
                what: "could not size the string",
            });
        }
        if let Some(freq) = lfu {
            self.set_lfu(freq);
        }
        let mut len = 0usize;
        // SAFETY: the key is open for writing and holds a string.
        let ptr = unsafe { dma(self.ptr(), &mut len, raw::REDISMODULE_WRITE as c_int) };
        if ptr.is_null() || len != value.len() {
            return Err(Error::Internal {
                what: "could not write the string",
            });
        }
        // SAFETY: `ptr` points to `len` writable bytes of the value, which do
        // not overlap `value`.
        unsafe { std::ptr::copy_nonoverlapping(value.as_ptr(), ptr.cast::<u8>(), len) };
        self.set_abs_expire(expire_at_ms)
    }

    /// The key's LFU counter, where the eviction policy keeps one.
    fn lfu(&self) -> Option<c_longlong> {
        // SAFETY: a plain read of a function pointer set at load.
        let get = unsafe { raw::RedisModule_GetLFU }?;
        let mut freq: c_longlong = 0;
        // SAFETY: the key is open; `freq` is a valid out-pointer.
        (unsafe { get(self.ptr(), &mut freq) } == OK).then_some(freq)
    }

    fn set_lfu(&mut self, freq: c_longlong) {
        // SAFETY: a plain read of a function pointer set at load.
        if let Some(set) = unsafe { raw::RedisModule_SetLFU } {
            // SAFETY: the key is open for writing.
            unsafe { set(self.ptr(), freq) };
        }
    }

    /// The key's absolute expiry in ms since the epoch; `None` when it has
    /// none (or does not exist).
    pub fn abs_expire_ms(&self) -> Result<Option<i64>> {
        let get = api!(RedisModule_GetAbsExpire);
        // SAFETY: the key is open.
        let at = unsafe { get(self.ptr()) };
        Ok((at >= 0).then_some(at))
    }

    /// Deletes the key.
    pub fn delete(&mut self) -> Result<()> {
        let delete = api!(RedisModule_DeleteKey);
        // SAFETY: the key is open for writing.
        if unsafe { delete(self.ptr()) } != OK {
            return Err(Error::Internal {
                what: "could not delete the key",
            });
        }
        Ok(())
    }

    /// Deletes the key the way `UNLINK` does: a large value is freed by
    /// the server's lazy-free thread instead of inside the call (a sorted
    /// set of up to [`crate::algorithm::sliding_log::SlidingLog::MAX_ENTRIES`]
    /// entries takes milliseconds to free).
    pub fn unlink(&mut self) -> Result<()> {
        let unlink = api!(RedisModule_UnlinkKey);
        // SAFETY: the key is open for writing.
        if unsafe { unlink(self.ptr()) } != OK {
            return Err(Error::Internal {
                what: "could not unlink the key",
            });
        }
        Ok(())
    }

    /// Sets the key to expire at `expire_at_ms` (ms since the epoch).
    pub fn set_abs_expire(&mut self, expire_at_ms: i64) -> Result<()> {
        let set_abs_expire = api!(RedisModule_SetAbsExpire);
        // SAFETY: the key is open for writing and exists.
        if unsafe { set_abs_expire(self.ptr(), expire_at_ms) } != OK {
            return Err(Error::Internal {
                what: "could not set the expiry",
            });
        }
        Ok(())
    }

    /// Calls `f` with each entry of the sorted set whose score is in the
    /// range, newest (highest score) first when `descending`, until `f`
    /// returns false. `min_exclusive` makes the range `(min, max]`.
    pub fn zset_walk(
        &self,
        min: f64,
        min_exclusive: bool,
        max: f64,
        descending: bool,
        mut f: impl FnMut(Entry) -> bool,
    ) -> Result<()> {
        let first = if descending {
            api!(RedisModule_ZsetLastInScoreRange)
        } else {
            api!(RedisModule_ZsetFirstInScoreRange)
        };
        let step = if descending {
            api!(RedisModule_ZsetRangePrev)
        } else {
            api!(RedisModule_ZsetRangeNext)
        };
        let current = api!(RedisModule_ZsetRangeCurrentElement);
        let end = api!(RedisModule_ZsetRangeEndReached);
        let stop = api!(RedisModule_ZsetRangeStop);
        // SAFETY: the key is open and holds a sorted set.
        let started = unsafe { first(self.ptr(), min, max, c_int::from(min_exclusive), 0) } == OK;
        if started {
            loop {
                // SAFETY: a range is active on the key.
                if unsafe { end(self.ptr()) } != 0 {
                    break;
                }
                let mut score = 0.0f64;
                // SAFETY: a range is active and not at its end; `score` is a
                // valid out-pointer; the returned string is ours to free.
                let member = unsafe { current(self.ptr(), &mut score) };
                let keep_going = match OwnedString::from_raw(Some(self.ctx), member) {
                    Some(member) => f(Entry { score, member }),
                    None => true,
                };
                // SAFETY: a range is active on the key.
                if !keep_going || unsafe { step(self.ptr()) } == 0 {
                    break;
                }
            }
        }
        // SAFETY: the key is open; stopping without an active range is allowed.
        unsafe { stop(self.ptr()) };
        Ok(())
    }

    /// The score of `member` in the sorted set, if it is there.
    pub fn zset_score(&self, member: &OwnedString) -> Result<Option<f64>> {
        let score_of = api!(RedisModule_ZsetScore);
        let mut score = 0.0f64;
        // SAFETY: the key is open and holds a sorted set; `member` is live.
        let status = unsafe { score_of(self.ptr(), member.as_ptr(), &mut score) };
        Ok((status == OK).then_some(score))
    }

    /// Adds `member` with `score` if it is not there (`only_new`), or adds
    /// it or moves it to `score` (otherwise); true when the set changed.
    pub fn zset_add(&mut self, score: f64, member: &OwnedString, only_new: bool) -> Result<bool> {
        let add = api!(RedisModule_ZsetAdd);
        let mut flags: c_int = if only_new {
            raw::REDISMODULE_ZADD_NX as c_int
        } else {
            0
        };
        // SAFETY: the key is open for writing (empty or a sorted set);
        // `member` is live and copied by the server.
        if unsafe { add(self.ptr(), score, member.as_ptr(), &mut flags) } != OK {
            return Err(Error::Internal {
                what: "could not add to the sorted set",
            });
        }
        let changed = (raw::REDISMODULE_ZADD_ADDED | raw::REDISMODULE_ZADD_UPDATED) as c_int;
        Ok(flags & changed != 0)
    }

    /// The number of entries of a sorted set.
    pub fn zset_len(&self) -> Result<i64> {
        let len = api!(RedisModule_ValueLength);
        // SAFETY: the key is open.
        let n = unsafe { len(self.ptr()) };
        Ok(i64::try_from(n).unwrap_or(i64::MAX))
    }

    /// Removes `member` from the sorted set.
    pub fn zset_rem(&mut self, member: &OwnedString) -> Result<()> {
        let rem = api!(RedisModule_ZsetRem);
        // SAFETY: the key is open for writing and holds a sorted set.
        if unsafe { rem(self.ptr(), member.as_ptr(), std::ptr::null_mut()) } != OK {
            return Err(Error::Internal {
                what: "could not remove from the sorted set",
            });
        }
        Ok(())
    }
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        // SAFETY: a plain read of a function pointer set at load.
        if let Some(close) = unsafe { raw::RedisModule_CloseKey } {
            // SAFETY: the key is open and closed exactly once, here.
            unsafe { close(self.ptr()) };
        }
    }
}
