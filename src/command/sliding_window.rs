//! `RL.SLIDINGWINDOW key limit window [TOKENS n]`
//!
//! The sliding window counter ([`crate::algorithm::sliding_window`]): at most
//! `limit` tokens in the sliding window of `window` seconds (fractional
//! allowed), estimated from two epoch-aligned fixed windows. `TOKENS n`
//! (default 1) is the request's cost.

use crate::server::Ctx;

use super::limiter::{self, Limit};
use super::{args::Args, docs, Answer, ReplyUnit, Spec};
use crate::algorithm::sliding_window::SlidingWindow;
use crate::error::Result;

pub const SPEC: Spec = Spec {
    name: c"rl.slidingwindow",
    stat_name: c"cmdstat_rl.slidingwindow",
    min_argc: 4,
    max_argc: None,
    unit: ReplyUnit::Millis,
    flags: super::O1_FLAGS,
    doc: &docs::CommandDoc {
        summary: c"Rate limits with the sliding window counter: the previous window weighted by its overlap plus the current one.",
        complexity: c"O(1)",
        arity: -4,
        acl_categories: "write fast",
        keys: docs::KeySpec::One,
        args: &[docs::KEY, docs::int(c"limit"), docs::seconds(c"window"), docs::TOKENS, docs::REFUND, docs::PEEK, docs::BLOCK],
    },
    handler,
    stats: &STATS,
};

/// The command's statistics (`INFO ratelimit`).
static STATS: super::stats::CommandStats = super::stats::CommandStats::new();

/// The number of parameters after the key: `limit window`.
pub const PARAMS: usize = 2;

/// Parses and validates the parameters `limit window` starting at argument `at`
/// (also used by `RL.ALL`).
pub fn parse(args: &Args, at: usize) -> Result<Limit> {
    let limit = args.integer(at, "limit")?;
    let window_us = args.seconds_as_us(at + 1, "window")?;
    Ok(Limit::SlidingWindow(SlidingWindow::new(limit, window_us)?))
}

fn handler(ctx: Ctx, args: &Args) -> Result<Answer> {
    let limit = parse(args, 2)?;
    let options = args.options(2 + PARAMS)?;
    limiter::run_one(ctx, args.arg(1)?, &limit, &options)
}
