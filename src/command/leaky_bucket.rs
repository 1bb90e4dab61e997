//! `RL.LEAKYBUCKET key capacity leak_tokens leak_period [TOKENS n]`
//!
//! The leaky bucket as a queue ([`crate::algorithm::leaky_bucket`]): accepted
//! requests join a queue of `capacity` tokens draining at `leak_tokens` per
//! `leak_period` seconds (fractional allowed). For an accepted request, reply
//! element 4 is its delay in ms: wait that long, then do the work.

use crate::server::Ctx;

use super::{args::Args, docs, Answer, ReplyUnit, Spec};
use crate::error::Result;
use crate::limit::Kind;

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
        args: &[docs::KEY, docs::int(c"capacity"), docs::int(c"leak_tokens"), docs::seconds(c"leak_period"), docs::TOKENS, docs::REFUND, docs::FORCE, docs::PEEK, docs::BLOCK],
    },
    handler,
    stats: &STATS,
};

/// The command's statistics (`INFO ratelimit`).
static STATS: super::stats::CommandStats = super::stats::CommandStats::new();

fn handler(ctx: Ctx, args: &Args) -> Result<Answer> {
    super::run_kind(ctx, args, Kind::LeakyBucket)
}
