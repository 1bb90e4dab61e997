//! The local over-limit cache (`LOCAL_CACHE_SIZE_IN_BYTES`, as envoy's
//! service has it): a limit that refused a request is answered `OVER_LIMIT`
//! from memory until the module's `retry_after` is over, so that a flood on
//! an exhausted limit costs Redis one call per retry period. A refused
//! request takes nothing, so nothing is owed to Redis meanwhile.
//!
//! Bounded by [`moka`]: entries weigh their key's bytes plus an estimate of
//! the cache's own cost per entry ([`ENTRY_OVERHEAD`], measured), and each
//! ends at its own retry time, never later.

use std::time::{Duration, Instant};

use moka::sync::Cache;
use moka::Expiry;

/// One limit's refusal.
#[derive(Debug, Clone, Copy)]
pub struct Refusal {
    /// When the limit admits `hits` again: the decision's start (taken
    /// before Redis read its clock) plus the module's `retry_after`, so the
    /// entry never outlives the refusal.
    pub until: Instant,
    /// The hits refused: a request for as many or more is refused; fewer
    /// may fit sooner, and go to Redis.
    pub hits: u64,
    /// The limit's own `limit` integer (for the status).
    pub limit: i64,
}

/// Each entry expires at its `until`.
struct UntilRetry;

impl Expiry<String, Refusal> for UntilRetry {
    fn expire_after_create(
        &self,
        _: &String,
        v: &Refusal,
        created_at: Instant,
    ) -> Option<Duration> {
        Some(v.until.saturating_duration_since(created_at))
    }

    fn expire_after_update(
        &self,
        _: &String,
        v: &Refusal,
        updated_at: Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        Some(v.until.saturating_duration_since(updated_at))
    }
}

/// What one entry costs besides its key's bytes: the key's `String` and the
/// value, and moka's node, its access-order and timer-wheel entries and its
/// hash table slot. Measured: 100,000 entries of 40-byte keys in a cache
/// without bound grow the process by 453 bytes an entry, 413 beyond the
/// key's bytes (`tests/local_cache_memory.rs`, `measure_overhead`); 480
/// leaves room for what a bounded cache adds (its frequency sketch, the
/// churn of evictions): the test holds the process's growth to the size.
pub const ENTRY_OVERHEAD: u32 = 480;

/// The cache; `None` in [`LocalCache::new`] when the size is 0 (off).
pub struct LocalCache {
    cache: Cache<String, Refusal>,
}

impl LocalCache {
    /// A cache of at most `size_in_bytes`, or `None` for 0 (off, the default).
    pub fn new(size_in_bytes: u64) -> Option<LocalCache> {
        (size_in_bytes > 0).then(|| LocalCache {
            cache: Cache::builder()
                .max_capacity(size_in_bytes)
                .weigher(|key: &String, _: &Refusal| {
                    u32::try_from(key.len())
                        .unwrap_or(u32::MAX)
                        .saturating_add(ENTRY_OVERHEAD)
                })
                .expire_after(UntilRetry)
                .build(),
        })
    }

    /// The refusal that still holds for `hits` on `key` at `now` (a check
    /// only, 0 hits, needs one).
    pub fn refused(&self, key: &str, hits: u64, now: Instant) -> Option<Refusal> {
        let r = self.cache.get(key)?;
        (r.until > now && hits.max(1) >= r.hits).then_some(r)
    }

    /// Records a refusal of `hits` on `key` until `until`.
    pub fn insert(&self, key: &str, refusal: Refusal) {
        self.cache.insert(key.to_string(), refusal);
    }

    /// Forgets everything (a new configuration may change a limit).
    pub fn clear(&self) {
        self.cache.invalidate_all();
    }

    /// The entries' total weight in bytes, once moka's pending work is done.
    pub fn weighted_size(&self) -> u64 {
        self.cache.run_pending_tasks();
        self.cache.weighted_size()
    }

    /// The number of entries, once moka's pending work is done.
    pub fn entry_count(&self) -> u64 {
        self.cache.run_pending_tasks();
        self.cache.entry_count()
    }
}
