//! `RL.GCRA key max_burst tokens_per_period period [TOKENS n]`
//!
//! The Generic Cell Rate Algorithm ([`crate::algorithm::gcra`]): at most
//! `max_burst + 1` tokens at once, refilled at `tokens_per_period` per `period`
//! seconds (fractional allowed). `TOKENS n` (default 1) is the request's cost.

use crate::server::Ctx;

use super::{args::Args, docs, store::decide_string, ReplyUnit, Spec};
use crate::algorithm::{gcra::Gcra, Decision};
use crate::error::Result;

pub const SPEC: Spec = Spec {
    name: c"rl.gcra",
    min_argc: 5,
    max_argc: None,
    unit: ReplyUnit::Millis,
    flags: super::O1_FLAGS,
    doc: &docs::CommandDoc {
        summary: c"Rate limits with the Generic Cell Rate Algorithm (GCRA): bursts of max_burst + 1, then tokens_per_period per period seconds.",
        complexity: c"O(1)",
        arity: -5,
        acl_categories: "write fast",
        args: &[docs::KEY, docs::int(c"max_burst"), docs::int(c"tokens_per_period"), docs::seconds(c"period"), docs::TOKENS],
    },
    handler,
};

fn handler(ctx: Ctx, args: &Args) -> Result<Decision> {
    let max_burst = args.integer(2, "max_burst")?;
    let tokens_per_period = args.integer(3, "tokens_per_period")?;
    let period_us = args.seconds_as_us(4, "period")?;
    let cost = args.tokens_option(5)?;
    let gcra = Gcra::new(max_burst, tokens_per_period, period_us)?;
    decide_string(ctx, args.arg(1)?, &gcra, cost, "RL.GCRA")
}
