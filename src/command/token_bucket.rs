//! `RL.TOKENBUCKET key capacity refill_tokens refill_period [TOKENS n]`
//!
//! A token bucket ([`crate::algorithm::token_bucket`]) of `capacity` tokens
//! that starts full and refills continuously at `refill_tokens` per
//! `refill_period` seconds (fractional allowed). `TOKENS n` (default 1) is the
//! request's cost.

use crate::server::Ctx;

use super::{args::Args, docs, Answer, ReplyUnit, Spec};
use crate::error::Result;
use crate::limit::Kind;

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
        args: &[docs::KEY, docs::int(c"capacity"), docs::int(c"refill_tokens"), docs::seconds(c"refill_period"), docs::TOKENS, docs::REFUND, docs::FORCE, docs::PEEK, docs::BLOCK],
    },
    handler,
    stats: &STATS,
};

/// The command's statistics (`INFO ratelimit`).
static STATS: super::stats::CommandStats = super::stats::CommandStats::new();

fn handler(ctx: Ctx, args: &Args) -> Result<Answer> {
    super::run_kind(ctx, args, Kind::TokenBucket)
}
