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

use super::args::{is_keyword, Args, SettingsBounds};
use super::checked_zset::BLOCK_MEMBER;
use super::decide::{self, Lease, Modes, Op, Options};
use super::{docs, settings, Answer, ReplyUnit, Spec};
use crate::algorithm::concurrency::{Concurrency, LeaseOp};
use crate::error::{Error, Result};
use crate::limit::Kind;
use crate::server::key::Key;
use crate::server::string::OwnedString;
use crate::server::Ctx;

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

pub(super) const COMMAND: &str = "RL.CONCURRENCY";

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
        if options.force {
            return Err(Error::ForcePlace {
                why: crate::error::FORCE_CONCURRENCY,
            });
        }
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
pub(super) fn is_lease_member(member: &[u8]) -> bool {
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
pub(super) fn foreign(key: &Key, why: &'static str) -> Error {
    super::checked_zset::foreign(key, COMMAND, why)
}

pub use super::lease_set::{holds_leases, LeaseZset};

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
