//! `RL.ALL numkeys key [key ...] limit [limit ...] [TOKENS n | REFUND n] [PEEK] [BLOCK duration]`
//!
//! Several limits in one atomic decision: `numkeys` (1 to 64) keys, then one
//! limit per key, in order —
//! `GCRA max_burst tokens_per_period period`,
//! `TOKENBUCKET capacity refill_tokens refill_period`,
//! `FIXEDWINDOW limit window`, `SLIDINGWINDOW limit window` or
//! `SLIDINGLOG limit window`, each validated as its own command validates it
//! (keywords case-insensitive). The call is allowed only if every limit
//! allows `n` tokens now; then every key takes them, written and propagated
//! as its own command would. Otherwise nothing is written (but the `BLOCK`
//! of each refusing limit). The reply is the binding limit's five integers
//! and its 1-based position (see [`super::limiter::run`]).
//!
//! The keys are declared by a `numkeys` key spec, as `EVAL` and `ZUNION`
//! declare theirs: Redis Cluster routes the call and refuses keys of
//! different slots (`CROSSSLOT`), and ACL key patterns apply to every key.

use super::limiter::{self, Limit};
use super::{
    args::{is_keyword, Args},
    docs, fixed_window, gcra, sliding_log, sliding_window, token_bucket, Answer, ReplyUnit, Spec,
};
use crate::error::{Error, Result};
use crate::server::string::Arg;
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
        ],
    },
    handler,
    stats: &STATS,
};

/// The command's statistics (`INFO ratelimit`).
static STATS: super::stats::CommandStats = super::stats::CommandStats::new();

/// Parses a limit's parameters starting at an argument index.
type Parse = fn(&Args, usize) -> Result<Limit>;

/// Which limit a keyword names and how many parameters follow it.
fn limit_kind(word: &[u8]) -> Result<(Parse, usize)> {
    // By length first: one case-insensitive comparison per call.
    let (name, parse, params): (&[u8], Parse, usize) = match word.len() {
        4 => (b"GCRA", gcra::parse, gcra::PARAMS),
        10 => (b"SLIDINGLOG", sliding_log::parse, sliding_log::PARAMS),
        11 if word[0] | 0x20 == b't' => (b"TOKENBUCKET", token_bucket::parse, token_bucket::PARAMS),
        11 if word[0] | 0x20 == b'f' => (b"FIXEDWINDOW", fixed_window::parse, fixed_window::PARAMS),
        11 if is_keyword(word, b"LEAKYBUCKET") => return Err(Error::LeakyBucketInAll),
        13 => (
            b"SLIDINGWINDOW",
            sliding_window::parse,
            sliding_window::PARAMS,
        ),
        _ => return Err(Error::UnknownLimit),
    };
    if is_keyword(word, name) {
        Ok((parse, params))
    } else {
        Err(Error::UnknownLimit)
    }
}

fn is_limit_keyword(word: &[u8]) -> bool {
    !matches!(limit_kind(word), Err(Error::UnknownLimit))
}

fn handler(ctx: Ctx, args: &Args) -> Result<Answer> {
    let numkeys = args.integer(1, "numkeys")?;
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
    for i in 0..numkeys {
        let key = args.bytes(2 + i)?;
        for j in 0..i {
            if args.bytes(2 + j)? == key {
                return Err(Error::DuplicateKey);
            }
        }
    }
    let mut limits: limiter::Few<(Arg, Limit)> = limiter::Few::with_capacity(numkeys);
    let mut at = 2 + numkeys;
    for i in 0..numkeys {
        if at >= args.len() {
            return Err(Error::LimitCount);
        }
        let word = args.bytes(at)?;
        let (parse, params) = match limit_kind(word) {
            Ok(kind) => kind,
            // An option where a limit should be: too few limits.
            Err(Error::UnknownLimit) if is_option(word) => return Err(Error::LimitCount),
            Err(e) => return Err(e),
        };
        limits.push((args.arg(2 + i)?, parse(args, at + 1)?));
        at += 1 + params;
    }
    if at < args.len() && is_limit_keyword(args.bytes(at)?) {
        return Err(Error::LimitCount);
    }
    let options = args.options(at)?;
    limiter::run(ctx, &limits, &options)
}

fn is_option(word: &[u8]) -> bool {
    [&b"TOKENS"[..], b"REFUND", b"PEEK", b"BLOCK"]
        .iter()
        .any(|o| is_keyword(word, o))
}
