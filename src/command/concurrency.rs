//! `RL.CONCURRENCY key limit lease ACQUIRE id [TOKENS n] [PEEK] [BLOCK duration]`,
//! `… RENEW id [PEEK]`, `… RELEASE id [PEEK]`
//!
//! A concurrency limit with leases ([`crate::algorithm::concurrency`]) in a
//! sorted set: one entry per slot held, scored by its lease's expiry in µs;
//! slot `k` of the lease `id` is the member `<k>:<id>`, a block the member
//! `B`. Another sorted set (a leaderboard, a sliding log) is refused and left
//! alone; so is one longer than
//! [`crate::algorithm::concurrency::Concurrency::MAX_ENTRIES`] or whose latest
//! time lies beyond the horizon ([`Error::ForeignState`]).
//!
//! Its reading, checks and writes are [`super::store::lease_set`].

use super::args::{is_keyword, Args, SettingsBounds};
use super::decide::{self, Lease, Modes, Op, Options};
use super::{docs, settings, Answer, ReplyUnit, Spec};
use crate::algorithm::concurrency::LeaseOp;
use crate::error::{Error, Result};
use crate::limit::Kind;
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
