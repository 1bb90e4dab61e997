//! The walks a sliding log ([`super::sliding_log`]) and a concurrency
//! limit's lease set ([`super::lease_set`]) share: sorted sets scored in µs
//! with an optional block member `B`, where every member a walk meets is
//! checked as one the module wrote (`is_member`) and a foreign one stops the
//! walk with [`Error::ForeignState`] ([`NOT_OURS_MEMBER`]).
//! Every walk is bounded by its `at_most` or `k`, not by the set's length.

use crate::error::{Error, KeyName, Result, NOT_OURS_MEMBER};
use crate::server::key::Key;
use crate::server::string::OwnedString;

/// The member that holds a block (`BLOCK duration`), scored by the block's
/// end in µs. Every count skips it.
pub(super) const BLOCK_MEMBER: &[u8] = b"B";

/// Timestamps before this (March 1973, in µs) are not ones the module wrote.
pub(super) const MIN_TIMESTAMP_US: f64 = 1e14;

/// A score as µs (scores the module writes are integers below 2^53; any
/// other score saturates instead of failing).
pub(super) fn score_us(score: f64) -> i64 {
    score as i64
}

/// Whether `member` is the block's.
pub(super) fn is_block(member: &OwnedString) -> bool {
    member.bytes() == BLOCK_MEMBER
}

/// The checks of one kind of set: which members the module writes there,
/// and the command its errors name (a type per kind: each walk is compiled
/// with its own check inline).
pub(super) trait Checks {
    /// Whether `member` can be one the module wrote in this kind of set.
    fn is_member(member: &OwnedString) -> bool;
    /// The command named in its errors.
    const COMMAND: &'static str;
    /// Whether [`count_after`] walks (and checks) the entries it counts
    /// even when it can count them from the set's length: a lease set's
    /// (its live slots, at most the limit and the call's own, for every
    /// operation alike), not a log's.
    const CHECK_COUNTED: bool = false;
}

/// [`Error::ForeignState`] for the set at `key`, as `command`'s state.
pub(super) fn foreign(key: &Key, command: &'static str, why: &'static str) -> Error {
    Error::ForeignState {
        key: KeyName::new(key.name().bytes().unwrap_or(b"?")),
        command,
        why,
    }
}

/// How many entries but the block are scored after `after_us` in the set at
/// `key` (`len` entries, its block ending at `blocked_until_us`), counting
/// at most `at_most`; and whether none is scored at or before `after_us`.
///
/// Usually few entries are that old: those are counted (at most `at_most`)
/// and subtracted from `len`; when there are more (or the kind checks what
/// it counts, [`Checks::CHECK_COUNTED`]), the newer ones are counted from
/// the newest down instead. Either way ≤ 2 × `at_most` + 2 steps.
pub(super) fn count_after<C: Checks>(
    key: &Key,
    _checks: C,
    len: i64,
    blocked_until_us: Option<i64>,
    after_us: i64,
    at_most: i64,
) -> Result<(i64, bool)> {
    let at_most = at_most.max(0);
    let mut older = 0i64;
    let mut foreign_member = false;
    key.zset_walk(f64::NEG_INFINITY, false, after_us as f64, false, |entry| {
        if !C::is_member(&entry.member) {
            foreign_member = true;
            return false;
        }
        older += 1;
        older <= at_most
    })?;
    if foreign_member {
        return Err(foreign(key, C::COMMAND, NOT_OURS_MEMBER));
    }
    if older <= at_most && !C::CHECK_COUNTED {
        // The block member counts in `len`, and in `older` when its score
        // is at or before `after_us`.
        let block_after = i64::from(blocked_until_us.is_some_and(|u| u > after_us));
        return Ok(((len - older - block_after).clamp(0, at_most), older == 0));
    }
    let mut newer = 0i64;
    if at_most > 0 {
        key.zset_walk(after_us as f64, true, f64::INFINITY, true, |entry| {
            if is_block(&entry.member) {
                return true;
            }
            if !C::is_member(&entry.member) {
                foreign_member = true;
                return false;
            }
            newer += 1;
            newer < at_most
        })?;
    }
    if foreign_member {
        return Err(foreign(key, C::COMMAND, NOT_OURS_MEMBER));
    }
    Ok((newer, older == 0))
}

/// The members of the oldest entries scored `≤ through_us` (the block's
/// among them when it ended by then), at most `at_most` of them: what an
/// allowed call removes.
pub(super) fn oldest_through<C: Checks>(
    key: &Key,
    _checks: C,
    through_us: i64,
    at_most: i64,
) -> Result<Vec<OwnedString>> {
    let at_most = usize::try_from(at_most).unwrap_or(0);
    let mut members = Vec::with_capacity(at_most.min(256));
    let mut foreign_member = false;
    if at_most > 0 {
        key.zset_walk(
            f64::NEG_INFINITY,
            false,
            through_us as f64,
            false,
            |entry| {
                if !C::is_member(&entry.member) {
                    foreign_member = true;
                    return false;
                }
                members.push(entry.member);
                members.len() < at_most
            },
        )?;
    }
    if foreign_member {
        return Err(foreign(key, C::COMMAND, NOT_OURS_MEMBER));
    }
    Ok(members)
}

/// The score (µs) of the `k`-th (0-based) newest entry but the block and
/// those `skip` passes over (`skip` is asked only of members that pass
/// the check): a walk of at most `k + 2` entries beyond those skipped.
pub(super) fn nth_newest<C: Checks>(
    key: &Key,
    _checks: C,
    k: i64,
    mut skip: impl FnMut(&OwnedString) -> bool,
) -> Result<Option<i64>> {
    let mut seen = 0i64;
    let mut found = None;
    let mut foreign_member = false;
    key.zset_walk(f64::NEG_INFINITY, false, f64::INFINITY, true, |entry| {
        if is_block(&entry.member) {
            return true;
        }
        if !C::is_member(&entry.member) {
            foreign_member = true;
            return false;
        }
        if skip(&entry.member) {
            return true;
        }
        if seen == k {
            found = Some(score_us(entry.score));
            return false;
        }
        seen += 1;
        true
    })?;
    if foreign_member {
        return Err(foreign(key, C::COMMAND, NOT_OURS_MEMBER));
    }
    Ok(found)
}
