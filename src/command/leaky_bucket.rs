//! `RL.LEAKYBUCKET key capacity leak_tokens leak_period [TOKENS n]`
//!
//! The leaky bucket as a queue ([`crate::algorithm::leaky_bucket`]): accepted
//! requests join a queue of `capacity` tokens draining at `leak_tokens` per
//! `leak_period` seconds (fractional allowed). For an accepted request, reply
//! element 4 is its delay in ms: wait that long, then do the work.

use crate::server::Ctx;

use super::limiter::{self, Limit};
use super::{args::Args, docs, Answer, ReplyUnit, Spec};
use crate::algorithm::leaky_bucket::LeakyBucket;
use crate::error::Result;

pub const SPEC: Spec = Spec {
    name: c"rl.leakybucket",
    stat_name: c"cmdstat_rl.leakybucket",
    min_argc: 5,
    max_argc: None,
    unit: ReplyUnit::Millis,
    flags: super::O1_FLAGS,
    doc: &docs::CommandDoc {
        summary: c"Shapes traffic with a leaky bucket queue: accepted requests get the delay before they may start.",
        complexity: c"O(1)",
        arity: -5,
        acl_categories: "write fast",
        keys: docs::KeySpec::One,
        args: &[docs::KEY, docs::int(c"capacity"), docs::int(c"leak_tokens"), docs::seconds(c"leak_period"), docs::TOKENS, docs::REFUND, docs::PEEK, docs::BLOCK],
    },
    handler,
    stats: &STATS,
};

/// The command's statistics (`INFO ratelimit`).
static STATS: super::stats::CommandStats = super::stats::CommandStats::new();

/// The number of parameters after the key: `capacity leak_tokens leak_period`.
pub const PARAMS: usize = 3;

/// Parses and validates the parameters `capacity leak_tokens leak_period` starting at argument `at`
/// (also used by `RL.ALL`).
pub fn parse(args: &Args, at: usize) -> Result<Limit> {
    let capacity = args.integer(at, "capacity")?;
    let leak_tokens = args.integer(at + 1, "leak_tokens")?;
    let leak_period_us = args.seconds_as_us(at + 2, "leak_period")?;
    Ok(Limit::LeakyBucket(LeakyBucket::new(
        capacity,
        leak_tokens,
        leak_period_us,
    )?))
}

fn handler(ctx: Ctx, args: &Args) -> Result<Answer> {
    let limit = parse(args, 2)?;
    let options = args.options(2 + PARAMS)?;
    limiter::run_one(ctx, args.arg(1)?, &limit, &options)
}
