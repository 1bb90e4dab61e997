//! `RL.SLIDINGWINDOW key limit window [TOKENS n]`
//!
//! The sliding window counter ([`crate::algorithm::sliding_window`]): at most
//! `limit` tokens in the sliding window of `window` seconds (fractional
//! allowed), estimated from two epoch-aligned fixed windows. `TOKENS n`
//! (default 1) is the request's cost.

use crate::server::Ctx;

use super::{args::Args, docs, store::decide_string, ReplyUnit, Spec};
use crate::algorithm::{sliding_window::SlidingWindow, Decision};
use crate::error::Result;

pub const SPEC: Spec = Spec {
    name: c"rl.slidingwindow",
    min_argc: 4,
    max_argc: None,
    unit: ReplyUnit::Millis,
    flags: super::O1_FLAGS,
    doc: &docs::CommandDoc {
        summary: c"Rate limits with the sliding window counter: the previous window weighted by its overlap plus the current one.",
        complexity: c"O(1)",
        arity: -4,
        acl_categories: "write fast",
        args: &[docs::KEY, docs::int(c"limit"), docs::seconds(c"window"), docs::TOKENS],
    },
    handler,
};

fn handler(ctx: Ctx, args: &Args) -> Result<Decision> {
    let (limit, window_us, cost) = args.limit_window_cost()?;
    let sliding_window = SlidingWindow::new(limit, window_us)?;
    decide_string(ctx, args.arg(1)?, &sliding_window, cost, "RL.SLIDINGWINDOW")
}
