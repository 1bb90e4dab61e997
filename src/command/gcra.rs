//! `RL.GCRA key max_burst tokens_per_period period [TOKENS n]`
//!
//! The Generic Cell Rate Algorithm ([`crate::algorithm::gcra`]): at most
//! `max_burst + 1` tokens at once, refilled at `tokens_per_period` per `period`
//! seconds (fractional allowed). `TOKENS n` (default 1) is the request's cost.

use crate::server::Ctx;

use super::limiter::{self, Limit};
use super::{args::Args, docs, Answer, ReplyUnit, Spec};
use crate::algorithm::gcra::Gcra;
use crate::error::Result;

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
        args: &[docs::KEY, docs::int(c"max_burst"), docs::int(c"tokens_per_period"), docs::seconds(c"period"), docs::TOKENS, docs::REFUND, docs::PEEK, docs::BLOCK],
    },
    handler,
    stats: &STATS,
};

/// The command's statistics (`INFO ratelimit`).
static STATS: super::stats::CommandStats = super::stats::CommandStats::new();

/// The number of parameters after the key: `max_burst tokens_per_period period`.
pub const PARAMS: usize = 3;

/// Parses and validates the parameters `max_burst tokens_per_period period` starting at argument `at`
/// (also used by `RL.ALL`).
pub fn parse(args: &Args, at: usize) -> Result<Limit> {
    let max_burst = args.integer(at, "max_burst")?;
    let tokens_per_period = args.integer(at + 1, "tokens_per_period")?;
    let period_us = args.seconds_as_us(at + 2, "period")?;
    Ok(Limit::Gcra(Gcra::new(
        max_burst,
        tokens_per_period,
        period_us,
    )?))
}

fn handler(ctx: Ctx, args: &Args) -> Result<Answer> {
    let limit = parse(args, 2)?;
    let options = args.options(2 + PARAMS)?;
    limiter::run_one(ctx, args.arg(1)?, &limit, &options)
}
