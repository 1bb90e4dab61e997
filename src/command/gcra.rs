//! `RL.GCRA key max_burst tokens_per_period period [TOKENS n]`
//!
//! The Generic Cell Rate Algorithm ([`crate::algorithm::gcra`]): at most
//! `max_burst + 1` tokens at once, refilled at `tokens_per_period` per `period`
//! seconds (fractional allowed). `TOKENS n` (default 1) is the request's cost.

use crate::server::Ctx;

use super::{args::Args, docs, Answer, ReplyUnit, Spec};
use crate::error::Result;
use crate::limit::Kind;

pub const SPEC: Spec = Spec {
    name: c"rl.gcra",
    stat_name: c"cmdstat_rl.gcra",
    min_argc: 5,
    max_argc: None,
    unit: ReplyUnit::Millis,
    flags: super::O1_FLAGS,
    doc: &docs::CommandDoc {
        summary: c"Rate limits with the Generic Cell Rate Algorithm (GCRA): bursts of max_burst + 1, then tokens_per_period per period seconds.",
        complexity: c"O(1)",
        arity: -5,
        acl_categories: "write fast",
        keys: docs::KeySpec::One,
        args: &[docs::KEY, docs::int(c"max_burst"), docs::int(c"tokens_per_period"), docs::seconds(c"period"), docs::TOKENS, docs::REFUND, docs::FORCE, docs::PEEK, docs::BLOCK],
    },
    handler,
    stats: &STATS,
};

/// The command's statistics (`INFO ratelimit`).
static STATS: super::stats::CommandStats = super::stats::CommandStats::new();

fn handler(ctx: Ctx, args: &Args) -> Result<Answer> {
    super::run_kind(ctx, args, Kind::Gcra)
}
