//! `RL.TOKENBUCKET key capacity refill_tokens refill_period [TOKENS n]`
//!
//! A token bucket ([`crate::algorithm::token_bucket`]) of `capacity` tokens
//! that starts full and refills continuously at `refill_tokens` per
//! `refill_period` seconds (fractional allowed). `TOKENS n` (default 1) is the
//! request's cost.

use crate::server::Ctx;

use super::limiter::{self, Limit};
use super::{args::Args, docs, Answer, ReplyUnit, Spec};
use crate::algorithm::token_bucket::TokenBucket;
use crate::error::Result;

pub const SPEC: Spec = Spec {
    name: c"rl.tokenbucket",
    stat_name: c"cmdstat_rl.tokenbucket",
    min_argc: 5,
    max_argc: None,
    unit: ReplyUnit::Millis,
    flags: super::O1_FLAGS,
    doc: &docs::CommandDoc {
        summary: c"Rate limits with a token bucket of capacity tokens refilled continuously at refill_tokens per refill_period seconds.",
        complexity: c"O(1)",
        arity: -5,
        acl_categories: "write fast",
        keys: docs::KeySpec::One,
        args: &[docs::KEY, docs::int(c"capacity"), docs::int(c"refill_tokens"), docs::seconds(c"refill_period"), docs::TOKENS, docs::REFUND, docs::PEEK, docs::BLOCK],
    },
    handler,
    stats: &STATS,
};

/// The command's statistics (`INFO ratelimit`).
static STATS: super::stats::CommandStats = super::stats::CommandStats::new();

/// The number of parameters after the key: `capacity refill_tokens refill_period`.
pub const PARAMS: usize = 3;

/// Parses and validates the parameters `capacity refill_tokens refill_period` starting at argument `at`
/// (also used by `RL.ALL`).
pub fn parse(args: &Args, at: usize) -> Result<Limit> {
    let capacity = args.integer(at, "capacity")?;
    let refill_tokens = args.integer(at + 1, "refill_tokens")?;
    let refill_period_us = args.seconds_as_us(at + 2, "refill_period")?;
    Ok(Limit::TokenBucket(TokenBucket::new(
        capacity,
        refill_tokens,
        refill_period_us,
    )?))
}

fn handler(ctx: Ctx, args: &Args) -> Result<Answer> {
    let limit = parse(args, 2)?;
    let options = args.options(2 + PARAMS)?;
    limiter::run_one(ctx, args.arg(1)?, &limit, &options)
}
