//! `RL.TOKENBUCKET key capacity refill_tokens refill_period [TOKENS n]`
//!
//! A token bucket ([`crate::algorithm::token_bucket`]) of `capacity` tokens
//! that starts full and refills continuously at `refill_tokens` per
//! `refill_period` seconds (fractional allowed). `TOKENS n` (default 1) is the
//! request's cost.

use crate::server::Ctx;

use super::{args::Args, docs, store::decide_string, ReplyUnit, Spec};
use crate::algorithm::{token_bucket::TokenBucket, Decision};
use crate::error::Result;

pub const SPEC: Spec = Spec {
    name: c"rl.tokenbucket",
    min_argc: 5,
    max_argc: None,
    unit: ReplyUnit::Millis,
    flags: super::O1_FLAGS,
    doc: &docs::CommandDoc {
        summary: c"Rate limits with a token bucket of capacity tokens refilled continuously at refill_tokens per refill_period seconds.",
        complexity: c"O(1)",
        arity: -5,
        acl_categories: "write fast",
        args: &[docs::KEY, docs::int(c"capacity"), docs::int(c"refill_tokens"), docs::seconds(c"refill_period"), docs::TOKENS],
    },
    handler,
};

fn handler(ctx: Ctx, args: &Args) -> Result<Decision> {
    let capacity = args.integer(2, "capacity")?;
    let refill_tokens = args.integer(3, "refill_tokens")?;
    let refill_period_us = args.seconds_as_us(4, "refill_period")?;
    let cost = args.tokens_option(5)?;
    let bucket = TokenBucket::new(capacity, refill_tokens, refill_period_us)?;
    decide_string(ctx, args.arg(1)?, &bucket, cost, "RL.TOKENBUCKET")
}
