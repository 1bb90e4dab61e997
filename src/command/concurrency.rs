//! `RL.CONCURRENCY key limit lease ACQUIRE id [TOKENS n] [PEEK] [BLOCK duration]`,
//! `… RENEW id [PEEK]`, `… RELEASE id [PEEK]`
//!
//! A concurrency limit with leases ([`crate::algorithm::concurrency`]) in a
//! sorted set: one entry per slot held, scored by its lease's expiry in µs;
//! slot `k` of the lease `id` is the member `<k>:<id>`, a block the member
//! `B`. Another sorted set (a leaderboard, a sliding log) is refused and left
//! alone; so is one longer than [`Concurrency::MAX_ENTRIES`] or whose latest
//! time lies beyond the horizon ([`Error::ForeignState`]).
//!
//! **Bounded work.** `limit` is at most the setting `concurrency-max-limit`
//! (default 1,000) and an id at most `concurrency-max-id-length` bytes
//! (default 128). A call reads the newest entry, looks up its own lease's
//! slots (`1:id`, `2:id`, … while present: at most its `n + 1`), walks at
//! most about `2 × (limit + 1)` entries to count the slots held, removes at
//! most `n + 128` expired slots and adds `n`. O(log N + limit).
//!
//! An allowed call propagates exactly its effects: `ZREM` (expired slots,
//! slots its lease no longer holds), `ZADD` (its lease's slots), and
//! `PEXPIREAT` of the latest lease's expiry — or `UNLINK` when a release
//! leaves no lease. A refused call writes nothing (but its `BLOCK`).

use super::args::{is_keyword, Args, SettingsBounds};
use super::decide::{self, Lease, Modes, Op, Options};
use super::{docs, settings, Answer, ReplyUnit, Spec};
use crate::algorithm::concurrency::{Concurrency, Held, LeaseOp, LeaseSet};
use crate::error::{Error, KeyName, Result, NOT_OURS_AHEAD, NOT_OURS_MEMBER, NOT_OURS_TOO_LONG};
use crate::limit::Kind;
use crate::server::key::{Key, KeyKind};
use crate::server::string::OwnedString;
use crate::server::Ctx;
use crate::time::STATE_HORIZON_US;

pub const SPEC: Spec = Spec {
    name: c"rl.concurrency",
    stat_name: c"cmdstat_rl.concurrency",
    min_argc: 6,
    max_argc: None,
    unit: ReplyUnit::Millis,
    flags: c"write deny-oom",
    doc: &docs::CommandDoc {
        summary: c"Limits how many at once: ACQUIRE a slot under a lease id, RENEW it, RELEASE it; a lease not renewed frees itself after lease seconds.",
        complexity: c"O(log(N) + limit) with N entries in the set; limit is at most the module's concurrency-max-limit (default 1000)",
        arity: -6,
        acl_categories: "write",
        keys: docs::KeySpec::One,
        args: &[
            docs::KEY,
            docs::int(c"limit"),
            docs::seconds(c"lease"),
            docs::string(c"operation"),
            docs::string(c"id"),
            docs::TOKENS,
            docs::PEEK,
            docs::BLOCK,
        ],
    },
    handler,
    stats: &STATS,
};

/// The command's statistics (`INFO ratelimit`).
static STATS: super::stats::CommandStats = super::stats::CommandStats::new();

const COMMAND: &str = "RL.CONCURRENCY";

fn handler(ctx: Ctx, args: &Args) -> Result<Answer> {
    let limit = Kind::Concurrency.parse(args, 2, &SettingsBounds)?;
    let (lease, options) = parse_lease(args, 2 + Kind::Concurrency.params(), true)?;
    let answer = decide::rule(
        ctx,
        args.arg(1)?,
        &limit,
        &Modes::default(),
        Some(lease),
        &options,
    )?;
    Ok(count_slots(answer, lease.op))
}

/// The answer with `taken` the slots a new lease took: none for `RENEW`
/// and `RELEASE` (the statistics' `tokens_allowed`).
pub fn count_slots(mut answer: Answer, op: LeaseOp) -> Answer {
    if op != LeaseOp::Acquire {
        answer.taken = 0;
    }
    answer
}

/// Parses `ACQUIRE id [TOKENS n] [PEEK] [BLOCK duration]`, `RENEW id [PEEK]`
/// or `RELEASE id [PEEK]` at `at` (`BLOCK` only where `block` allows it:
/// not in `RL.LIMIT`, whose policy holds it).
///
/// Errors: [`Error::LeaseOpMissing`], [`Error::LeaseIdLength`],
/// [`Error::LeaseSyntax`], and those of the options' values.
pub fn parse_lease<'a>(args: &Args<'a>, at: usize, block: bool) -> Result<(Lease<'a>, Options)> {
    let op = args
        .bytes(at)
        .ok()
        .and_then(LeaseOp::of)
        .ok_or(Error::LeaseOpMissing)?;
    let id = args.arg(at + 1).map_err(|_| Error::LeaseOpMissing)?;
    check_id(id.bytes()?)?;
    let options = if op == LeaseOp::Acquire {
        let options = args.options(at + 2).map_err(|e| match e {
            Error::Syntax => Error::LeaseSyntax,
            e => e,
        })?;
        if matches!(options.op, Op::Refund(_)) || (!block && options.block_us.is_some()) {
            return Err(Error::LeaseSyntax);
        }
        options
    } else {
        // Only PEEK, at most once.
        let rest = args.len().saturating_sub(at + 2);
        let peek = rest == 1 && is_keyword(args.bytes(at + 2)?, b"PEEK");
        if rest > 0 && !peek {
            return Err(Error::LeaseSyntax);
        }
        Options {
            peek,
            ..Options::default()
        }
    };
    Ok((Lease { op, id }, options))
}

/// A lease id's bounds: 1 to `concurrency-max-id-length` bytes.
pub fn check_id(id: &[u8]) -> Result<()> {
    let max = settings::concurrency_max_id_length();
    if id.is_empty() || i64::try_from(id.len()).map_or(true, |len| len > max) {
        return Err(Error::LeaseIdLength { max });
    }
    Ok(())
}

/// The member that holds a block (`BLOCK duration`), scored by its end.
const BLOCK_MEMBER: &[u8] = b"B";

/// Timestamps before this (March 1973, in µs) are not ones the module wrote.
const MIN_TIMESTAMP_US: f64 = 1e14;

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

/// A score as µs (scores the module writes are integers below 2^53).
fn score_us(score: f64) -> i64 {
    score as i64
}

/// [`Error::ForeignState`] for the set at `key`.
fn foreign(key: &Key, why: &'static str) -> Error {
    Error::ForeignState {
        key: KeyName::new(key.name().bytes().unwrap_or(b"?")),
        command: COMMAND,
        why,
    }
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
        let mut newest = None;
        let mut foreign_newest = false;
        let mut blocked_until_us = None;
        key.zset_walk(f64::NEG_INFINITY, false, f64::INFINITY, true, |entry| {
            // The block, if it comes first, then the newest slot: two steps.
            let member = entry.member.bytes();
            if member == BLOCK_MEMBER {
                blocked_until_us = Some(score_us(entry.score));
                return true;
            }
            let score_ok = entry.score.is_finite()
                && entry.score.fract() == 0.0
                && entry.score >= MIN_TIMESTAMP_US;
            foreign_newest = !score_ok || split_member(member).is_none();
            newest = Some(score_us(entry.score));
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
        // The lease's slots: 1:id, 2:id, … while present; those sharing the
        // first one's score are the lease (a leftover of an expired lease
        // may follow, removed with it).
        // At most `concurrency-max-limit` lookups: slots of a lease beyond
        // count as other leases' (never fewer held than stored).
        let mut held: Option<Held> = None;
        let mut probed = 0i64;
        let mut same = true;
        while probed < settings::concurrency_max_limit() {
            let member = slot_member(ctx, probed + 1, id)?;
            let Some(score) = key.zset_score(&member)? else {
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
        Ok(Some(Self {
            key,
            id,
            len,
            blocked_until_us,
            held,
            probed,
        }))
    }

    /// The end of the block stored in the set, if any (in force or not).
    pub fn blocked_until_us(&self) -> Option<i64> {
        self.blocked_until_us
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
        let at_most = usize::try_from(at_most).unwrap_or(0);
        let mut members = Vec::with_capacity(at_most.min(16));
        let mut foreign_member = false;
        let mut leases = 0u64;
        if at_most > 0 {
            self.key.zset_walk(
                f64::NEG_INFINITY,
                false,
                through_us as f64,
                false,
                |entry| {
                    let bytes = entry.member.bytes();
                    if !is_lease_member(bytes) {
                        foreign_member = true;
                        return false;
                    }
                    leases += u64::from(split_member(bytes).is_some_and(|(k, _)| k == 1));
                    members.push(entry.member);
                    members.len() < at_most
                },
            )?;
        }
        if foreign_member {
            return Err(foreign(self.key, NOT_OURS_MEMBER));
        }
        Ok((members, leases))
    }

    fn is_own(&self, member: &[u8]) -> bool {
        split_member(member).is_some_and(|(_, id)| id == self.id)
    }
}

impl LeaseSet for LeaseZset<'_, '_, '_> {
    fn count_after(&self, after_us: i64, at_most: i64) -> Result<i64> {
        // As a sliding log counts: the expired entries (at most `at_most`)
        // subtracted from the length, or else the live ones from the newest
        // down. Either way ≤ 2 × at_most steps, every member checked.
        let at_most = at_most.max(0);
        let mut expired = 0i64;
        let mut foreign_member = false;
        self.key
            .zset_walk(f64::NEG_INFINITY, false, after_us as f64, false, |entry| {
                if !is_lease_member(entry.member.bytes()) {
                    foreign_member = true;
                    return false;
                }
                expired += 1;
                expired <= at_most
            })?;
        if foreign_member {
            return Err(foreign(self.key, NOT_OURS_MEMBER));
        }
        if expired <= at_most {
            let block_after = i64::from(self.blocked_until_us.is_some_and(|u| u > after_us));
            return Ok((self.len - expired - block_after).clamp(0, at_most));
        }
        let mut live = 0i64;
        if at_most > 0 {
            self.key
                .zset_walk(after_us as f64, true, f64::INFINITY, true, |entry| {
                    let member = entry.member.bytes();
                    if member == BLOCK_MEMBER {
                        return true;
                    }
                    if !is_lease_member(member) {
                        foreign_member = true;
                        return false;
                    }
                    live += 1;
                    live < at_most
                })?;
        }
        if foreign_member {
            return Err(foreign(self.key, NOT_OURS_MEMBER));
        }
        Ok(live)
    }

    fn nth_newest_other(&self, k: i64) -> Result<Option<i64>> {
        // The lease's own slots are skipped, `probed` at most: any more of
        // its id count as others' (a walk of at most `k + 1 + probed`).
        let mut own = 0i64;
        let mut seen = 0i64;
        let mut found = None;
        let mut foreign_member = false;
        self.key
            .zset_walk(f64::NEG_INFINITY, false, f64::INFINITY, true, |entry| {
                let member = entry.member.bytes();
                if member == BLOCK_MEMBER {
                    return true;
                }
                if !is_lease_member(member) {
                    foreign_member = true;
                    return false;
                }
                if own < self.probed && self.is_own(member) {
                    own += 1;
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
            return Err(foreign(self.key, NOT_OURS_MEMBER));
        }
        Ok(found)
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
