//! The storage of `RL.CONCURRENCY` (the handler is `command::concurrency`):
//! the leases of one concurrency limit as the algorithm reads them
//! ([`LeaseSet`]), a sorted set opened for one lease id, checked as one the
//! module wrote, every walk bounded; and their writes.
//!
//! **Bounded work.** `limit` is at most the setting `concurrency-max-limit`
//! (default 1,000) and an id at most `concurrency-max-id-length` bytes
//! (default 128). A call reads the newest entry, looks up its own lease's
//! slots (`1:id`, `2:id`, … while present: one more than the lease holds,
//! at most `concurrency-max-limit`), walks at most about
//! `2 × (limit + m + 1)` entries to count the slots held (`m` the slots its
//! lease holds), removes at most `n + 128` expired slots and the `m − n` it
//! no longer holds, and adds `n`. O(log N + limit).
//!
//! An allowed call propagates exactly its effects: `ZREM` (expired slots,
//! slots its lease no longer holds), `ZADD` (its lease's slots), and
//! `PEXPIREAT` of the latest lease's expiry — or `UNLINK` when a release
//! leaves no lease. A refused call writes nothing (but its `BLOCK`).

use std::cell::Cell;

use super::checked_zset::{self, score_us, Checks, BLOCK_MEMBER, MIN_TIMESTAMP_US};
use crate::algorithm::concurrency::{Concurrency, Held, LeaseSet};
use crate::command::settings;
use crate::error::{Error, Result, NOT_OURS_AHEAD, NOT_OURS_MEMBER, NOT_OURS_TOO_LONG};
use crate::server::key::{Key, KeyKind};
use crate::server::string::OwnedString;
use crate::server::Ctx;
use crate::time::STATE_HORIZON_US;

const COMMAND: &str = "RL.CONCURRENCY";

/// Splits a slot's member `<k>:<id>` into `k` (1 to
/// [`Concurrency::MAX_LIMIT`], canonical decimal) and `id` (1 to
/// [`Concurrency::MAX_ID_LEN`] bytes); `None` for any other member.
pub fn split_member(member: &[u8]) -> Option<(i64, &[u8])> {
    let colon = member.iter().take(7).position(|&b| b == b':')?;
    let (digits, id) = (&member[..colon], &member[colon + 1..]);
    if digits.first() == Some(&b'0') || id.is_empty() || id.len() as i64 > Concurrency::MAX_ID_LEN {
        return None;
    }
    let mut k = 0i64;
    for &d in digits {
        let d = d.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        k = k * 10 + i64::from(d);
    }
    (1..=Concurrency::MAX_LIMIT).contains(&k).then_some((k, id))
}

/// Whether `member` can be one the module wrote in a lease set.
fn is_lease_member(member: &[u8]) -> bool {
    member == BLOCK_MEMBER || split_member(member).is_some()
}

/// The member of slot `k` of the lease `id`: `<k>:<id>`.
pub fn slot_member(ctx: Ctx, k: i64, id: &[u8]) -> Result<OwnedString> {
    let mut bytes = Vec::with_capacity(id.len() + 8);
    bytes.extend_from_slice(itoa::Buffer::new().format(k).as_bytes());
    bytes.push(b':');
    bytes.extend_from_slice(id);
    OwnedString::from_bytes(ctx, &bytes)
}

/// [`Error::ForeignState`] for the set at `key`.
fn foreign(key: &Key, why: &'static str) -> Error {
    checked_zset::foreign(key, COMMAND, why)
}

/// A lease set's checks: its members ([`is_lease_member`]), its error.
struct LeaseChecks;
const CHECKS: LeaseChecks = LeaseChecks;

impl Checks for LeaseChecks {
    fn is_member(member: &OwnedString) -> bool {
        is_lease_member(member.bytes())
    }
    const COMMAND: &'static str = COMMAND;
    // A member the module did not write, scored as a live slot, is refused
    // by every operation (it was counted as a held slot).
    const CHECK_COUNTED: bool = true;
}

/// A sorted set read as the leases of one limiter, for the lease `id`.
pub struct LeaseZset<'k, 'a, 'i> {
    key: &'k Key<'a>,
    id: &'i [u8],
    len: i64,
    blocked_until_us: Option<i64>,
    held: Option<Held>,
    /// Slots `1:id …` present (expired or not, whatever their scores).
    probed: i64,
    /// `nth_newest_other(0)`, found when opened (or why it is foreign).
    newest_other: std::result::Result<Option<i64>, &'static str>,
    /// An instant through which a count found no entry: nothing expired to
    /// remove then (no second walk).
    expired_none_through: Cell<Option<i64>>,
    /// The member `1:id`, made for the lookup: the write takes it.
    first_slot: Cell<Option<OwnedString>>,
}

impl<'k, 'a, 'i> LeaseZset<'k, 'a, 'i> {
    /// Reads the leases at `key` at `now_us` for the lease `id`: `None` when
    /// the key does not exist. Reads its length, its newest entry, its block
    /// and the lease's slots.
    ///
    /// Errors: [`Error::WrongType`]; [`Error::InvalidState`] when the newest
    /// entry is not one the module wrote; [`Error::ForeignState`] for a set
    /// longer than [`Concurrency::MAX_ENTRIES`] or whose newest entry or
    /// block lies beyond [`STATE_HORIZON_US`] after `now_us`.
    pub fn open(ctx: Ctx, key: &'k Key<'a>, id: &'i [u8], now_us: i64) -> Result<Option<Self>> {
        match key.kind()? {
            KeyKind::Empty => return Ok(None),
            KeyKind::SortedSet => {}
            _ => return Err(Error::WrongType),
        }
        let len = key.zset_len()?;
        if len > Concurrency::MAX_ENTRIES {
            return Err(foreign(key, NOT_OURS_TOO_LONG));
        }
        // The lease's slots: 1:id, 2:id, … while present; those sharing the
        // first one's score are the lease (a leftover of an expired lease
        // may follow, removed with it). At most `concurrency-max-limit`
        // lookups: slots of a lease beyond count as other leases' (never
        // fewer held than stored).
        let mut held: Option<Held> = None;
        let mut probed = 0i64;
        let mut same = true;
        let mut first_slot = None;
        while probed < settings::concurrency_max_limit() {
            let member = slot_member(ctx, probed + 1, id)?;
            let score = key.zset_score(&member)?;
            if probed == 0 {
                first_slot = Some(member);
            }
            let Some(score) = score else {
                break;
            };
            probed += 1;
            let score = score_us(score);
            match held.as_mut() {
                None => {
                    held = Some(Held {
                        expires_at_us: score,
                        slots: 1,
                    })
                }
                Some(h) if same && h.expires_at_us == score => h.slots += 1,
                Some(_) => same = false,
            }
        }
        // From the newest down: the block (if it comes first), the newest
        // slot (checked as one the module wrote), the lease's own slots,
        // and the newest slot of another lease (`nth_newest_other(0)`,
        // checked when asked for): at most `probed + 3` steps.
        let mut newest = None;
        let mut foreign_newest = false;
        let mut blocked_until_us = None;
        let (mut own, mut newest_other) = (0i64, Ok(None));
        key.zset_walk(f64::NEG_INFINITY, false, f64::INFINITY, true, |entry| {
            let member = entry.member.bytes();
            if member == BLOCK_MEMBER {
                blocked_until_us = Some(score_us(entry.score));
                return true;
            }
            if newest.is_none() {
                let score_ok = entry.score.is_finite()
                    && entry.score.fract() == 0.0
                    && entry.score >= MIN_TIMESTAMP_US;
                foreign_newest = !score_ok || split_member(member).is_none();
                newest = Some(score_us(entry.score));
                if foreign_newest {
                    return false;
                }
            }
            if own < probed && split_member(member).is_some_and(|(_, m)| m == id) {
                own += 1;
                return true;
            }
            newest_other = if is_lease_member(member) {
                Ok(Some(score_us(entry.score)))
            } else {
                Err(NOT_OURS_MEMBER)
            };
            false
        })?;
        if foreign_newest {
            return Err(Error::InvalidState { command: COMMAND });
        }
        if blocked_until_us.is_none() {
            let block = OwnedString::from_bytes(ctx, BLOCK_MEMBER)?;
            blocked_until_us = key.zset_score(&block)?.map(score_us);
        }
        let horizon_us = now_us.saturating_add(STATE_HORIZON_US);
        if newest.max(blocked_until_us).is_some_and(|t| t > horizon_us) {
            return Err(foreign(key, NOT_OURS_AHEAD));
        }
        Ok(Some(Self {
            key,
            id,
            len,
            blocked_until_us,
            held,
            probed,
            newest_other,
            expired_none_through: Cell::new(None),
            first_slot: Cell::new(first_slot),
        }))
    }

    /// The end of the block stored in the set, if any (in force or not).
    pub fn blocked_until_us(&self) -> Option<i64> {
        self.blocked_until_us
    }

    /// The member `1:id` (once; then `None`).
    pub fn take_first_slot(&self) -> Option<OwnedString> {
        self.first_slot.take()
    }

    /// How many slots `1:id …` are present.
    pub fn probed(&self) -> i64 {
        self.probed
    }

    /// The members of the oldest entries scored `≤ through_us`, at most
    /// `at_most` of them (expired slots, or an ended block: what an allowed
    /// call removes), each checked as one the module wrote; and how many of
    /// them were leases' first slots (leases that expired).
    ///
    /// Errors: [`Error::ForeignState`] for a member the module did not write.
    pub fn expired_members(
        &self,
        through_us: i64,
        at_most: i64,
    ) -> Result<(Vec<OwnedString>, u64)> {
        if self.expired_none_through.get() == Some(through_us) {
            return Ok((Vec::new(), 0));
        }
        let members = checked_zset::oldest_through(self.key, CHECKS, through_us, at_most)?;
        let leases = members
            .iter()
            .filter(|m| split_member(m.bytes()).is_some_and(|(k, _)| k == 1))
            .count();
        Ok((members, leases as u64))
    }

    fn is_own(&self, member: &[u8]) -> bool {
        split_member(member).is_some_and(|(_, id)| id == self.id)
    }
}

impl LeaseSet for LeaseZset<'_, '_, '_> {
    fn count_after(&self, after_us: i64, at_most: i64) -> Result<i64> {
        // As a sliding log counts: ≤ 2 × at_most steps, every member checked.
        let (count, none_expired) = checked_zset::count_after(
            self.key,
            CHECKS,
            self.len,
            self.blocked_until_us,
            after_us,
            at_most,
        )?;
        if none_expired {
            self.expired_none_through.set(Some(after_us));
        }
        Ok(count)
    }

    fn nth_newest_other(&self, k: i64) -> Result<Option<i64>> {
        if k == 0 {
            return self.newest_other.map_err(|why| foreign(self.key, why));
        }
        // The lease's own slots are skipped, `probed` at most: any more of
        // its id count as others' (a walk of at most `k + 2 + probed`).
        let mut own = 0i64;
        checked_zset::nth_newest(self.key, CHECKS, k, |member| {
            let skip = own < self.probed && self.is_own(member.bytes());
            own += i64::from(skip);
            skip
        })
    }

    fn held(&self) -> Option<Held> {
        self.held
    }
}

/// Whether `key` (a sorted set) reads as leases the module wrote (its
/// newest entry is a slot or a block).
pub fn holds_leases(ctx: Ctx, key: &Key, now_us: i64) -> bool {
    LeaseZset::open(ctx, key, b"?", now_us).is_ok_and(|set| set.is_some())
}

/// A lease's members to write and remove, made when planned.
pub struct LeaseMembers {
    /// Expired slots (or an ended block) removed.
    pub expired: Vec<OwnedString>,
    /// Slots of the call's lease it no longer holds.
    pub removed: Vec<OwnedString>,
    /// The lease's slots, written at `expires_at_us`.
    pub added: Vec<OwnedString>,
    pub expires_at_us: i64,
}

/// Writes `members` to the set at `key` (the key to expire at
/// `expire_at_ms`, or to be unlinked when `None`).
pub fn write(key: &mut Key, members: &LeaseMembers, expire_at_ms: Option<i64>) -> Result<()> {
    let Some(expire_at_ms) = expire_at_ms else {
        return key.unlink();
    };
    for member in members.expired.iter().chain(&members.removed) {
        key.zset_rem(member)?;
    }
    let score = members.expires_at_us as f64;
    for member in &members.added {
        key.zset_add(score, member, false)?;
    }
    key.set_abs_expire(expire_at_ms)
}
