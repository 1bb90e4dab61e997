//! The storage of `RL.SLIDINGLOG` (the handler is `command::sliding_log`):
//! the sliding window log ([`crate::algorithm::sliding_log`]) kept in a sorted
//! set: one entry per accepted token, scored by its timestamp in µs. Members
//! are small integers below `max(2 × limit, 128)`, unique within the set, so
//! the set stays in Redis's compact listpack encoding up to
//! `zset-max-listpack-entries` entries: about 12 bytes per logged token at
//! limit 100 (a 64-bit score and a two-byte member). A sorted set whose newest
//! entry is not of that shape (a leaderboard, say) gets an
//! `ERR … not RL.SLIDINGLOG state` reply and is left alone; so does one
//! longer than any log ([`SlidingLog::MAX_ENTRIES`]), one whose newest entry
//! or block lies beyond the horizon, and one where any entry a call walks has
//! a member the module did not write ([`Error::ForeignState`]).
//!
//! **Bounded work.** `limit` is at most the module setting
//! `sliding-log-max-limit` (default 1,000; see [`crate::command::settings`]). A call
//! reads the newest entry and walks at most `limit + 1` entries from the
//! newest down; an allowed call also removes at most `n + 128` of the oldest
//! entries that left the window (and no more than the call budget leaves,
//! shared by an `RL.ALL`'s limits: `decide::check_budget`) and adds `n` ≤
//! `limit`. Entries left over
//! stay until later calls remove them or the key expires (when its newest
//! entry leaves the window); decisions count only entries inside the window,
//! so they stay exact. Complexity: O(log N + limit) for N entries in the set.
//!
//! An allowed request propagates exactly its effects: `ZREM key <member> …`
//! (when it removed any), `ZADD key <t_us> <member> …`,
//! `PEXPIREAT key <ms>`, and raises `zrem`, `zadd` and `expire` after closing
//! the key. A limited request writes nothing. A refund that empties the log
//! unlinks the key (lazy free) and propagates `UNLINK`.

use super::checked_zset::{self, is_block, score_us, Checks, BLOCK_MEMBER, MIN_TIMESTAMP_US};
use crate::algorithm::sliding_log::{LogUpdate, SlidingLog, TimestampLog};
use crate::error::{Error, Result, NOT_OURS_AHEAD, NOT_OURS_TOO_LONG};
use crate::server::key::{Key, KeyKind};
use crate::server::string::OwnedString;
use crate::server::Ctx;
use crate::time::{ceil_ms, STATE_HORIZON_US};

/// A sorted set read as a log: scores are timestamps in µs.
pub struct ZsetLog<'k, 'a> {
    key: &'k Key<'a>,
    len: i64,
    /// The newest entry: its score and its member read as an integer (0 when
    /// it is not one).
    newest: Option<(i64, i64)>,
    /// The end of a block, µs (the block member's score).
    blocked_until_us: Option<i64>,
}

/// A log's checks: its members ([`is_log_member`]), its error.
struct LogChecks;
const CHECKS: LogChecks = LogChecks;

impl Checks for LogChecks {
    fn is_member(member: &OwnedString) -> bool {
        is_log_member(member)
    }
    const COMMAND: &'static str = "RL.SLIDINGLOG";
}

impl<'k, 'a> ZsetLog<'k, 'a> {
    /// Reads the log at `key` at `now_us`: `None` when the key does not
    /// exist. Reads its length, its newest entry and its block: O(log N).
    ///
    /// Errors: [`Error::WrongType`]; [`Error::InvalidState`] when the newest
    /// entry is not one the module wrote; [`Error::ForeignState`] for a set
    /// longer than any log ([`SlidingLog::MAX_ENTRIES`]) or whose newest
    /// entry or block lies beyond [`STATE_HORIZON_US`] after `now_us`.
    pub fn open(ctx: Ctx, key: &'k Key<'a>, now_us: i64) -> Result<Option<Self>> {
        match key.kind()? {
            KeyKind::Empty => return Ok(None),
            KeyKind::SortedSet => {}
            _ => return Err(Error::WrongType),
        }
        let len = key.zset_len()?;
        if len > SlidingLog::MAX_ENTRIES {
            return Err(foreign(key, NOT_OURS_TOO_LONG));
        }
        let mut newest = None;
        let mut foreign_newest = false;
        let mut blocks = 0;
        key.zset_walk(f64::NEG_INFINITY, false, f64::INFINITY, true, |entry| {
            if is_block(&entry.member) {
                blocks += 1;
                return blocks < 2;
            }
            let id = entry.member.to_i64();
            foreign_newest = !is_log_entry(entry.score, id);
            newest = Some((score_us(entry.score), id.unwrap_or(0)));
            false
        })?;
        if foreign_newest {
            return Err(Error::InvalidState {
                command: "RL.SLIDINGLOG",
            });
        }
        let block_member = OwnedString::from_bytes(ctx, BLOCK_MEMBER)?;
        let blocked_until_us = key.zset_score(&block_member)?.map(score_us);
        let horizon_us = now_us.saturating_add(STATE_HORIZON_US);
        let latest_us = newest.map(|(score, _)| score).max(blocked_until_us);
        if latest_us.is_some_and(|t| t > horizon_us) {
            return Err(foreign(key, NOT_OURS_AHEAD));
        }
        Ok(Some(Self {
            key,
            len,
            newest,
            blocked_until_us,
        }))
    }

    /// The members of the oldest entries scored `≤ through_us`, at most
    /// `at_most` of them (what an allowed call removes), each checked as
    /// one the module wrote.
    ///
    /// Errors: [`Error::ForeignState`] for a member the module did not write.
    pub fn stale_members(&self, through_us: i64, at_most: i64) -> Result<Vec<OwnedString>> {
        checked_zset::oldest_through(self.key, CHECKS, through_us, at_most)
    }

    /// The end of the block stored in the log, if any (in force or not).
    pub fn blocked_until_us(&self) -> Option<i64> {
        self.blocked_until_us
    }

    /// The newest entry's member as an integer.
    pub fn newest_member(&self) -> Option<i64> {
        self.newest.map(|(_, member)| member)
    }
}

impl TimestampLog for ZsetLog<'_, '_> {
    fn newest_us(&self) -> Result<Option<i64>> {
        Ok(self.newest.map(|(score, _)| score))
    }

    fn count_after(&self, after_us: i64, at_most: i64) -> Result<i64> {
        // Every entry walked is checked as one the module wrote.
        let (count, _) = checked_zset::count_after(
            self.key,
            CHECKS,
            self.len,
            self.blocked_until_us,
            after_us,
            at_most,
        )?;
        Ok(count)
    }

    fn nth_newest(&self, k: i64) -> Result<Option<i64>> {
        checked_zset::nth_newest(self.key, CHECKS, k, |_| false)
    }
}

/// [`Error::ForeignState`] for the log at `key`.
fn foreign(key: &Key, why: &'static str) -> Error {
    checked_zset::foreign(key, LogChecks::COMMAND, why)
}

/// Whether `member` can be one the module wrote: an integer below
/// [`SlidingLog::MEMBER_BOUND`] (in the server's canonical form, so at most
/// six bytes) or the block's `B`. Checked on every entry a call walks, so a
/// call never carries more than one foreign member (one copy of it).
fn is_log_member(member: &OwnedString) -> bool {
    is_block(member)
        || member
            .to_i64()
            .is_some_and(|m| (0..SlidingLog::MEMBER_BOUND).contains(&m))
}

/// Whether `(score, member)` can be an entry the module wrote: a whole
/// number of µs since 1973 and a member below the largest member bound.
/// Checked on the newest entry, so that a sorted set kept for something else
/// (a leaderboard, a queue) is refused instead of trimmed.
fn is_log_entry(score: f64, member: Option<i64>) -> bool {
    let member_bound = SlidingLog::MEMBER_BOUND;
    score.is_finite()
        && score.fract() == 0.0
        && score >= MIN_TIMESTAMP_US
        && member.is_some_and(|m| (0..member_bound).contains(&m))
}

/// What [`write`] changed, to propagate and announce once the key is closed
/// (with the stale members it removed, which the caller holds).
pub struct Written {
    pub score: OwnedString,
    pub added: Vec<OwnedString>,
    pub expire_at_ms: i64,
}

/// Applies an allowed request's update to the sorted set:
/// 1. removes `stale`, the oldest entries that left the window
///    ([`ZsetLog::stale_members`], read and checked when the call was
///    planned);
/// 2. adds `update.add_count` entries at `update.add_at_us`. Members cycle
///    through `0 .. max(2 × limit, 128)` starting after the newest entry's;
///    a member in use inside the window is skipped, one in use by an entry
///    that left the window is moved to the new score (the same effect as
///    removing it and adding it). At most `limit − add_count` entries are in
///    the window, so a free member comes within `limit + add_count` tries;
/// 3. sets the key's expiry to `update.expire_at_us` (when the newest entry
///    leaves the window, capped by the caller).
pub fn write(
    ctx: Ctx,
    key: &mut Key,
    update: &LogUpdate,
    stale: &[OwnedString],
    mut next_member: i64,
    limit: i64,
) -> Result<Written> {
    let cutoff = update.remove_through_us as f64;
    for member in stale {
        key.zset_rem(member)?;
    }

    let count = usize::try_from(update.add_count).unwrap_or(0);
    let modulus = limit.saturating_mul(2).max(128);
    let at = update.add_at_us as f64;
    let mut added = Vec::with_capacity(count);
    let mut tries = 0i64;
    while added.len() < count {
        if tries > modulus.saturating_add(update.add_count) {
            return Err(Error::Internal {
                what: "no free sorted-set member",
            });
        }
        tries += 1;
        let member = OwnedString::from_i64(ctx, next_member.rem_euclid(modulus))?;
        next_member = next_member.wrapping_add(1);
        // Usually the member is free; one in use by an entry that left the
        // window is moved to the new score.
        let free = key.zset_add(at, &member, true)?
            || (key.zset_score(&member)?.is_some_and(|s| s <= cutoff)
                && key.zset_add(at, &member, false)?);
        if free {
            added.push(member);
        }
    }
    let expire_at_ms = ceil_ms(update.expire_at_us);
    key.set_abs_expire(expire_at_ms)?;
    Ok(Written {
        score: OwnedString::from_i64(ctx, update.add_at_us)?,
        added,
        expire_at_ms,
    })
}

/// Blocks the log at `key` until `until_us`: the block member scored by
/// the block's end, the key to expire at `expire_at_ms` (no earlier than
/// the block's end). Returns the score and member written (to propagate as
/// `ZADD`).
pub fn block(
    ctx: Ctx,
    key: &mut Key,
    until_us: i64,
    expire_at_ms: i64,
) -> Result<(OwnedString, OwnedString)> {
    let member = OwnedString::from_bytes(ctx, BLOCK_MEMBER)?;
    key.zset_add(until_us as f64, &member, false)?;
    key.set_abs_expire(expire_at_ms)?;
    Ok((OwnedString::from_i64(ctx, until_us)?, member))
}

/// Removes the `n` newest entries of the log (never the block member);
/// returns them, to propagate as `ZREM`.
pub fn remove_newest(key: &mut Key, n: i64) -> Result<Vec<OwnedString>> {
    let n = usize::try_from(n).unwrap_or(0);
    let mut removed = Vec::with_capacity(n);
    if n > 0 {
        key.zset_walk(f64::NEG_INFINITY, false, f64::INFINITY, true, |entry| {
            if !is_block(&entry.member) {
                removed.push(entry.member);
            }
            removed.len() < n
        })?;
    }
    for member in &removed {
        key.zset_rem(member)?;
    }
    Ok(removed)
}
