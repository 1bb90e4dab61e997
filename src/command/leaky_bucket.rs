//! `RL.LEAKYBUCKET key capacity leak_tokens leak_period [TOKENS n]`
//!
//! The leaky bucket as a queue ([`crate::algorithm::leaky_bucket`]): accepted
//! requests join a queue of `capacity` tokens draining at `leak_tokens` per
//! `leak_period` seconds (fractional allowed). For an accepted request, reply
//! element 4 is its delay in ms: wait that long, then do the work.

use crate::server::Ctx;

use super::{args::Args, docs, store::decide_string, ReplyUnit, Spec};
use crate::algorithm::{leaky_bucket::LeakyBucket, Decision};
use crate::error::Result;

pub const SPEC: Spec = Spec {
    name: c"rl.leakybucket",
    min_argc: 5,
    max_argc: None,
    unit: ReplyUnit::Millis,
    flags: super::O1_FLAGS,
    doc: &docs::CommandDoc {
        summary: c"Shapes traffic with a leaky bucket queue: accepted requests get the delay before they may start.",
        complexity: c"O(1)",
        arity: -5,
        acl_categories: "write fast",
        args: &[docs::KEY, docs::int(c"capacity"), docs::int(c"leak_tokens"), docs::seconds(c"leak_period"), docs::TOKENS],
    },
    handler,
};

fn handler(ctx: Ctx, args: &Args) -> Result<Decision> {
    let capacity = args.integer(2, "capacity")?;
    let leak_tokens = args.integer(3, "leak_tokens")?;
    let leak_period_us = args.seconds_as_us(4, "leak_period")?;
    let cost = args.tokens_option(5)?;
    let leaky_bucket = LeakyBucket::new(capacity, leak_tokens, leak_period_us)?;
    decide_string(ctx, args.arg(1)?, &leaky_bucket, cost, "RL.LEAKYBUCKET")
}
