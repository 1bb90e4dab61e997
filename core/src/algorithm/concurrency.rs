//! The concurrency limit with leases: at most `limit` slots held at once.
//!
//! Source: the counting semaphore with expiring permits (Redisson's
//! `RPermitExpirableSemaphore`; Stripe's "concurrent requests limiter"; the
//! sorted-set semaphore of *Redis in Action* §6.3, scored by time). A caller
//! takes `n` slots under a **lease** id it chooses; the lease lasts
//! `lease_us` from its last `ACQUIRE` or `RENEW`, unless released first. A
//! lease whose expiry is at or before `now` holds nothing: a crashed holder
//! frees its slots by itself.
//!
//! The leases are read through [`LeaseSet`] and never changed here: the
//! decision says what to remove and write ([`LeaseUpdate`]), and the command
//! layer applies it to a sorted set (one entry per slot, scored by its
//! lease's expiry in µs) and propagates it.

use super::{sub, Decision};
use crate::error::{Error, Result};

/// What a call does with its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseOp {
    /// `ACQUIRE id [TOKENS n]`: take `n` slots (renews a held lease).
    Acquire,
    /// `RENEW id`: extend a held lease, keeping its slots.
    Renew,
    /// `RELEASE id`: give the lease's slots back.
    Release,
}

impl LeaseOp {
    /// The keyword (any case) of an operation; `None` for anything else.
    pub fn of(word: &[u8]) -> Option<Self> {
        use crate::keyword::is_keyword;
        if is_keyword(word, b"ACQUIRE") {
            Some(Self::Acquire)
        } else if is_keyword(word, b"RENEW") {
            Some(Self::Renew)
        } else if is_keyword(word, b"RELEASE") {
            Some(Self::Release)
        } else {
            None
        }
    }
}

/// The call's own lease, as stored (expired or not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// The lease's expiry, µs since the epoch.
    pub expires_at_us: i64,
    /// Its slots (entries `1:id … slots:id`).
    pub slots: i64,
}

/// Read access to the leases of one limiter: one entry per slot, scored by
/// its lease's expiry (µs), read for one lease id (the call's).
///
/// Every method is bounded by its arguments, not by the set's length: a set
/// may hold any number of expired slots that later calls remove a few at a
/// time.
pub trait LeaseSet {
    /// How many slots (of every lease) expire after `after_us`, counting at
    /// most `at_most`.
    fn count_after(&self, after_us: i64, at_most: i64) -> Result<i64>;
    /// The expiry of the `k`-th (0-based) newest slot of another lease than
    /// the call's (expired or not).
    fn nth_newest_other(&self, k: i64) -> Result<Option<i64>>;
    /// The call's own lease, if the set holds it.
    fn held(&self) -> Option<Held>;
}

/// Slots as `(expiry_us, lease id)`, in any order, read for the lease `id`
/// (used by tests and tools).
pub struct Slots<'s> {
    pub slots: &'s [(i64, &'s str)],
    pub id: &'s str,
}

impl LeaseSet for Slots<'_> {
    fn count_after(&self, after_us: i64, at_most: i64) -> Result<i64> {
        let live = self.slots.iter().filter(|(t, _)| *t > after_us).count() as i64;
        Ok(live.min(at_most))
    }
    fn nth_newest_other(&self, k: i64) -> Result<Option<i64>> {
        let mut others: Vec<i64> = self
            .slots
            .iter()
            .filter(|(_, id)| *id != self.id)
            .map(|(t, _)| *t)
            .collect();
        others.sort_unstable_by(|a, b| b.cmp(a));
        Ok(usize::try_from(k).ok().and_then(|k| others.get(k).copied()))
    }
    fn held(&self) -> Option<Held> {
        let mine: Vec<i64> = self
            .slots
            .iter()
            .filter(|(_, id)| *id == self.id)
            .map(|(t, _)| *t)
            .collect();
        mine.first().map(|&t| Held {
            expires_at_us: t,
            slots: mine.len() as i64,
        })
    }
}

/// The change a call makes to the leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseUpdate {
    /// Remove slots of other leases that expired at or before
    /// `expired_through_us`, the oldest first, at most
    /// `remove_expired_at_most` of them: the rest stays for later calls
    /// (decisions count only slots that have not expired) or goes with the
    /// key's expiry.
    pub expired_through_us: i64,
    pub remove_expired_at_most: i64,
    /// The call's lease after the call: `slots` slots (0: released)
    /// expiring at `expires_at_us`.
    pub slots: i64,
    pub expires_at_us: i64,
    /// The slots it held before (those beyond `slots` go).
    pub held_slots: i64,
    /// When the latest lease expires: the key expires then. `None`: no lease
    /// is left that has not expired (delete the key).
    pub expire_at_us: Option<i64>,
}

/// A decision and, when the call changes the leases, the change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseOutcome {
    pub decision: Decision,
    pub update: Option<LeaseUpdate>,
    /// The time until every lease held now has expired (0: none is held):
    /// the `reset_after` of a refusal. A refusal by a block reports it
    /// (or the block's end, when later), not the lease the refused call
    /// did not take.
    pub reset_held_us: i64,
}

/// Concurrency limit parameters, validated. Build with [`Concurrency::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    limit: i64,
    lease_us: i64,
}

impl Concurrency {
    /// The largest `limit` any setting can allow (the module's own bound,
    /// `concurrency-max-limit`, is lower by default).
    pub const MAX_LIMIT: i64 = 100_000;

    /// The longest lease id any setting can allow, in bytes.
    pub const MAX_ID_LEN: i64 = 1024;

    /// Expired slots an allowed call removes beyond its own slots: the set
    /// sheds expired slots faster than calls add them, without one call
    /// doing unbounded work.
    pub const EXPIRED_REMOVED_PER_CALL: i64 = 128;

    /// The most entries a lease set can hold (as a sliding log's bound): a
    /// longer sorted set is not one (and freeing it could block the server).
    pub const MAX_ENTRIES: i64 = 2 * Self::MAX_LIMIT + 1;

    /// Validates `limit lease`: `1 ≤ limit ≤ MAX_LIMIT` slots, a lease of
    /// `lease_us` ≥ 1 µs and at most 366 days.
    pub fn new(limit: i64, lease_us: i64) -> Result<Self> {
        if !(1..=Self::MAX_LIMIT).contains(&limit) {
            return Err(Error::OutOfRange {
                arg: "limit",
                bound: ">= 1 and <= 100000",
            });
        }
        if !(1..=crate::time::MAX_PERIOD_US).contains(&lease_us) {
            return Err(Error::BadPeriod { arg: "lease" });
        }
        Ok(Self { limit, lease_us })
    }

    /// [`Concurrency::new`], and `limit` at most `max_limit` when given
    /// (the setting `concurrency-max-limit`, for a client's definition):
    /// [`Error::ConcurrencyAboveSetting`] otherwise.
    pub fn within(limit: i64, lease_us: i64, max_limit: Option<i64>) -> Result<Self> {
        let c = Self::new(limit, lease_us)?;
        match max_limit {
            Some(max) if limit > max => Err(Error::ConcurrencyAboveSetting { max }),
            _ => Ok(c),
        }
    }

    /// The most slots held at once.
    #[inline]
    pub fn limit(&self) -> i64 {
        self.limit
    }

    /// A lease's length, µs.
    #[inline]
    pub fn lease_us(&self) -> i64 {
        self.lease_us
    }

    /// Decides `op` of the call's lease at `now_us`; `slots` is `TOKENS n`
    /// (`ACQUIRE` only).
    ///
    /// * `ACQUIRE`: allowed when the slots other leases hold plus `slots`
    ///   are at most `limit`; the lease (held or not) then holds `slots`
    ///   slots until `now + lease`.
    /// * `RENEW`: allowed when the lease is held (not expired): it holds its
    ///   slots until `now + lease`. Otherwise refused, `retry_after` none.
    /// * `RELEASE`: always allowed; a stored lease is removed.
    ///
    /// Errors: those of `set`; [`Error::Overflow`] at the clock's extremes.
    ///
    /// ```
    /// use ratelimit_core::algorithm::concurrency::{Concurrency, LeaseOp, Slots};
    /// let c = Concurrency::new(2, 30_000_000).unwrap();
    /// let now = 1_000_000_000;
    /// // Two leases hold the two slots until now + 10 s and now + 20 s.
    /// let set = Slots { slots: &[(now + 10_000_000, "a"), (now + 20_000_000, "b")], id: "c" };
    /// let d = c.decide(&set, now, LeaseOp::Acquire, 1).unwrap().decision;
    /// assert_eq!((d.limited, d.remaining, d.retry_after_us), (true, 0, Some(10_000_000)));
    /// // "a" acquiring again renews its own lease.
    /// let set = Slots { id: "a", ..set };
    /// let d = c.decide(&set, now, LeaseOp::Acquire, 1).unwrap().decision;
    /// assert_eq!((d.limited, d.remaining, d.reset_after_us), (false, 0, 30_000_000));
    /// ```
    pub fn decide<L: LeaseSet + ?Sized>(
        &self,
        set: &L,
        now_us: i64,
        op: LeaseOp,
        slots: i64,
    ) -> Result<LeaseOutcome> {
        let held = set.held();
        let own_live = held
            .filter(|h| h.expires_at_us > now_us)
            .map_or(0, |h| h.slots.max(0));
        let held_slots = held.map_or(0, |h| h.slots.max(0));
        // Counting one past the limit is enough to decide exactly.
        let live = set.count_after(
            now_us,
            self.limit.saturating_add(own_live).saturating_add(1),
        )?;
        let others = live.saturating_sub(own_live).max(0);
        let newest_other = set.nth_newest_other(0)?.filter(|&t| t > now_us);
        let own_expiry = held.map(|h| h.expires_at_us).filter(|&t| t > now_us);
        let until = |t: i64| sub(t, now_us);
        let reset_now = match newest_other.max(own_expiry) {
            Some(t) => until(t)?,
            None => 0,
        };
        let refuse = |retry_after_us| LeaseOutcome {
            decision: Decision {
                limited: true,
                limit: self.limit,
                remaining: (self.limit - live).max(0),
                retry_after_us,
                reset_after_us: reset_now,
            },
            update: None,
            reset_held_us: reset_now,
        };
        let expired = |own: i64| LeaseUpdate {
            expired_through_us: now_us,
            remove_expired_at_most: own.saturating_add(Self::EXPIRED_REMOVED_PER_CALL),
            slots: 0,
            expires_at_us: now_us,
            held_slots,
            expire_at_us: None,
        };
        let take = |n: i64| -> Result<LeaseOutcome> {
            let expires_at_us = now_us.checked_add(self.lease_us).ok_or(Error::Overflow)?;
            let latest = newest_other.map_or(expires_at_us, |t| t.max(expires_at_us));
            Ok(LeaseOutcome {
                decision: Decision {
                    limited: false,
                    limit: self.limit,
                    remaining: (self.limit - others - n).max(0),
                    retry_after_us: None,
                    reset_after_us: until(latest)?,
                },
                update: Some(LeaseUpdate {
                    slots: n,
                    expires_at_us,
                    expire_at_us: Some(latest),
                    ..expired(n)
                }),
                reset_held_us: reset_now,
            })
        };
        match op {
            LeaseOp::Acquire => {
                let n = slots.max(1);
                if n > self.limit {
                    return Ok(refuse(None));
                }
                if others.saturating_add(n) > self.limit {
                    // Allowed once at most `limit − n` other slots are held:
                    // when the (limit − n)-th newest (0-based) expires.
                    let retry = match set.nth_newest_other(self.limit - n)? {
                        Some(t) => until(t)?,
                        None => reset_now, // unreachable: others > limit − n
                    };
                    return Ok(refuse(Some(retry.max(1))));
                }
                take(n)
            }
            LeaseOp::Renew => match held {
                Some(h) if own_live > 0 => take(h.slots.max(1)),
                _ => Ok(refuse(None)),
            },
            LeaseOp::Release => {
                let decision = Decision {
                    limited: false,
                    limit: self.limit,
                    remaining: (self.limit - others).max(0),
                    retry_after_us: None,
                    reset_after_us: match newest_other {
                        Some(t) => until(t)?,
                        None => 0,
                    },
                };
                let update = held.is_some().then(|| LeaseUpdate {
                    expire_at_us: newest_other,
                    ..expired(0)
                });
                Ok(LeaseOutcome {
                    decision,
                    update,
                    reset_held_us: reset_now,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests;
