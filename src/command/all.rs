//! `RL.ALL numkeys key [key ...] limit [FORCE] [limit [FORCE] ...] [TOKENS n | REFUND n] [PEEK] [BLOCK duration] [WITHLIMITS]`
//!
//! Several limits in one atomic decision: `numkeys` (1 to 64) keys, then one
//! limit per key, in order —
//! `GCRA max_burst tokens_per_period period`,
//! `TOKENBUCKET capacity refill_tokens refill_period`,
//! `FIXEDWINDOW limit window [TZ zone]`, `SLIDINGWINDOW limit window` or
//! `SLIDINGLOG limit window` or `CONCURRENCY limit lease ACQUIRE id`, each validated as its own command validates it
//! (keywords case-insensitive). The call is allowed only if every limit
//! allows `n` tokens now; then every key takes them, written and propagated
//! as its own command would. Otherwise nothing is written (but the `BLOCK`
//! of each refusing limit). The reply is the binding limit's five integers
//! and its 1-based position (see [`super::decide::all`]); with `WITHLIMITS`,
//! followed by every limit's own five integers, in order.
//!
//! `FORCE` right after a limit (not `CONCURRENCY`'s) records that limit's
//! cost whatever the call decides ([`crate::algorithm::forced`]): past its
//! limit too, in debt. The other limits stay all-or-nothing among
//! themselves: they take their tokens unless one of them refuses. The
//! reply's `limited` is 1 when any limit refused or went past its limit,
//! the binding limit chosen as always. `FORCE` with `PEEK` or `REFUND` is a
//! syntax error.
//!
//! The keys are declared by a `numkeys` key spec, as `EVAL` and `ZUNION`
//! declare theirs: Redis Cluster routes the call and refuses keys of
//! different slots (`CROSSSLOT`), and ACL key patterns apply to every key.

use std::sync::Arc;

use super::decide::{self, Limit};
use super::{
    args::{is_keyword, Args, SettingsBounds},
    docs, policy, Answer, ReplyUnit, Spec,
};
use crate::error::{Error, Result};
use crate::limit::{misplaced_zone, Kind};
use crate::server::Ctx;

/// The most keys one `RL.ALL` takes.
pub const MAX_KEYS: i64 = 64;

pub const SPEC: Spec = Spec {
    name: c"rl.all",
    stat_name: c"cmdstat_rl.all",
    min_argc: 4,
    max_argc: None,
    unit: ReplyUnit::Millis,
    // getkeys-api: Redis Cluster's slot check reads the keys through the
    // command (7.0 derives no legacy key range from a `numkeys` key spec).
    flags: c"write deny-oom getkeys-api",
    doc: &docs::CommandDoc {
        summary: c"Decides several limits at once: allowed only if every limit allows, then every key takes the tokens; replies with the binding limit and its position.",
        complexity: c"O(K) for K keys of O(1) limits (a SLIDINGLOG limit adds its own cost)",
        arity: -4,
        acl_categories: "write",
        keys: docs::KeySpec::NumKeys,
        args: &[
            docs::int(c"numkeys"),
            docs::ArgDoc {
                multiple: true,
                ..docs::KEY
            },
            docs::ArgDoc {
                multiple: true,
                ..docs::string(c"limit")
            },
            docs::TOKENS,
            docs::REFUND,
            docs::PEEK,
            docs::BLOCK,
            docs::WITHLIMITS,
        ],
    },
    handler,
    stats: &STATS,
};

/// The command's statistics (`INFO ratelimit`).
static STATS: super::stats::CommandStats = super::stats::CommandStats::new();

/// Whether `word` starts a limit of `RL.ALL` (a limit type, or `POLICY`).
fn is_limit_keyword(word: &[u8]) -> bool {
    Kind::of(word).is_some() || is_keyword(word, b"POLICY")
}

fn handler(ctx: Ctx, args: &Args) -> Result<Answer> {
    let numkeys = numkeys(args)?;
    if !(1..=MAX_KEYS).contains(&numkeys) {
        return Err(Error::OutOfRange {
            arg: "numkeys",
            bound: ">= 1 and <= 64",
        });
    }
    let numkeys = numkeys as usize; // 1..=64
    if args.len() < 2 + numkeys {
        return Err(Error::LimitCount);
    }
    distinct_keys(args, numkeys)?;
    let mut limits: decide::Few<decide::CallLimit> = decide::Few::new();
    // The policies among the limits, for their statistics (none on most
    // calls: nothing to create or drop then).
    let mut policies: Option<decide::Few<(usize, Arc<policy::Policy>)>> = None;
    let mut at = 2 + numkeys;
    // A CONCURRENCY limit among them (no REFUND then).
    let mut concurrency = false;
    // A FORCE limit among them (no PEEK nor REFUND then).
    let mut forced = false;
    // The word at `at`, read once: a limit's type, then what follows it
    // (`FORCE`, the next limit's type, an option), `None` past the end.
    let mut next = word_at(args, at)?;
    for i in 0..numkeys {
        let Some(word) = next else {
            return Err(Error::LimitCount);
        };
        let key = args.arg(2 + i)?;
        if let Some(kind) = Kind::of(word) {
            if kind == Kind::LeakyBucket {
                return Err(Error::LeakyBucketInAll);
            }
            let (limit, taken) = kind.parse_zoned(args, at + 1, &SettingsBounds)?;
            at += 1 + taken;
            let lease = acquire(args, &limit, &mut at)?;
            concurrency |= lease.is_some();
            next = word_at(args, at)?;
            let force = force(args, &limit, &mut at, &mut next)?;
            forced |= force;
            let modes = decide::Modes {
                force,
                ..decide::Modes::default()
            };
            limits.push((key, limit, modes, lease));
        } else if is_keyword(word, b"POLICY") {
            let (found, rule) = policy::find(args.bytes(at + 1).map_err(|_| Error::LimitCount)?)?;
            if matches!(rule.limit, Limit::LeakyBucket(_)) {
                return Err(Error::LeakyBucketInAll);
            }
            at += 2;
            let lease = acquire(args, &rule.limit, &mut at)?;
            concurrency |= lease.is_some();
            next = word_at(args, at)?;
            let force = force(args, &rule.limit, &mut at, &mut next)?;
            forced |= force;
            let modes = decide::Modes {
                force,
                ..rule.modes
            };
            limits.push((key, rule.limit, modes, lease));
            policies
                .get_or_insert_with(decide::Few::new)
                .push((i, found));
        } else if is_option(word) {
            // An option where a limit should be: too few limits.
            return Err(Error::LimitCount);
        } else {
            // `TZ` after a window in seconds says so.
            return Err(misplaced_zone(word, Error::UnknownLimit));
        }
    }
    if next.is_some_and(is_limit_keyword) {
        return Err(Error::LimitCount);
    }
    let mut with_limits = false;
    let options = args.options_with(at, |word, _| {
        if is_keyword(word, b"WITHLIMITS") && !with_limits {
            with_limits = true;
            return Ok(Some(1));
        }
        Err(misplaced_zone(word, Error::Syntax))
    })?;
    if options.force {
        return Err(Error::ForcePlace {
            why: crate::error::FORCE_IN_ALL,
        });
    }
    if forced && (options.peek || matches!(options.op, decide::Op::Refund(_))) {
        return Err(Error::ForceSyntax);
    }
    if concurrency && matches!(options.op, decide::Op::Refund(_)) {
        return Err(Error::RefundConcurrency);
    }
    // The answer is built where this handler returns it (no move of it);
    // the plans are looked at again only for WITHLIMITS or a policy.
    let finish = (with_limits || policies.is_some()).then_some(
        |answer: &mut Answer, planned: &[decide::Planned]| {
            if with_limits {
                answer.each = planned.iter().map(|p| p.decision).collect();
            }
            if let Some(policies) = &policies {
                let allowed = !answer.decision.limited && !options.peek;
                for (i, found) in policies {
                    if let Some(p) = planned.get(*i) {
                        found.stats.record_limit(p.outcome(), allowed, answer.taken);
                    }
                }
            }
        },
    );
    decide::all(ctx, &limits, &options, finish)
}

/// A `CONCURRENCY` limit's `ACQUIRE id` at `*at` (moved past it); `None`
/// for other limits.
fn acquire<'a>(
    args: &Args<'a>,
    limit: &Limit,
    at: &mut usize,
) -> Result<Option<decide::Lease<'a>>> {
    if !matches!(limit, Limit::Concurrency(_)) {
        return Ok(None);
    }
    let word = args.bytes(*at).map_err(|_| Error::AllLeaseOp)?;
    if decide::LeaseOp::of(word) != Some(decide::LeaseOp::Acquire) {
        return Err(Error::AllLeaseOp);
    }
    let id = args.arg(*at + 1).map_err(|_| Error::AllLeaseOp)?;
    super::concurrency::check_id(id.bytes()?)?;
    *at += 2;
    Ok(Some(decide::Lease {
        op: decide::LeaseOp::Acquire,
        id,
    }))
}

/// `FORCE` as `*next`, the word at `*at` (both moved past it): whether the
/// limit before it is forced. A `CONCURRENCY` limit refuses it.
#[inline(always)]
fn force<'a>(
    args: &Args<'a>,
    limit: &Limit,
    at: &mut usize,
    next: &mut Option<&'a [u8]>,
) -> Result<bool> {
    if !next.is_some_and(|word| is_keyword(word, b"FORCE")) {
        return Ok(false);
    }
    if matches!(limit, Limit::Concurrency(_)) {
        return Err(Error::ForcePlace {
            why: crate::error::FORCE_CONCURRENCY,
        });
    }
    *at += 1;
    *next = word_at(args, *at)?;
    Ok(true)
}

/// The bytes of argument `at`, `None` past the last.
#[inline(always)]
fn word_at<'a>(args: &Args<'a>, at: usize) -> Result<Option<&'a [u8]>> {
    if at < args.len() {
        args.bytes(at).map(Some)
    } else {
        Ok(None)
    }
}

/// [`Error::DuplicateKey`] unless the `numkeys` keys (from argument 2) are
/// distinct. Two keys are compared by the server (`RedisModule_StringCompare`,
/// ~90 instructions: less than reading both keys' bytes and comparing them
/// here); from three, each key's bytes are read once (a call each) and
/// compared here (a server call per pair would cost more). One key has
/// nothing to be compared with.
#[inline(always)]
fn distinct_keys(args: &Args, numkeys: usize) -> Result<()> {
    if numkeys < 2 {
        return Ok(());
    }
    if numkeys == 2 {
        if args.arg(2)?.same_bytes(args.arg(3)?)? {
            return Err(Error::DuplicateKey);
        }
        return Ok(());
    }
    let mut names: decide::Few<&[u8]> = decide::Few::new();
    for i in 0..numkeys {
        let key = args.bytes(2 + i)?;
        if names.contains(&key) {
            return Err(Error::DuplicateKey);
        }
        names.push(key);
    }
    Ok(())
}

/// `numkeys` (argument 1) as an integer ([`Args::integer`]). One digit, as
/// nearly every call sends, is read from the argument's bytes: the server's
/// integer parser reads a lone `0`–`9` as that digit, and the bytes cost
/// the server less than its parse.
#[inline(always)]
fn numkeys(args: &Args) -> Result<i64> {
    if let [digit @ b'0'..=b'9'] = args.bytes(1)? {
        return Ok(i64::from(digit - b'0'));
    }
    args.integer(1, "numkeys")
}

fn is_option(word: &[u8]) -> bool {
    [
        &b"TOKENS"[..],
        b"REFUND",
        b"FORCE",
        b"PEEK",
        b"BLOCK",
        b"WITHLIMITS",
    ]
    .iter()
    .any(|o| is_keyword(word, o))
}
