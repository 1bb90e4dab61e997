//! `RL.FIXEDWINDOW key limit window [TOKENS n]`
//!
//! The fixed window counter ([`crate::algorithm::fixed_window`]): at most
//! `limit` tokens per window of `window` seconds (fractional allowed), windows
//! aligned to the Unix epoch. `TOKENS n` (default 1) is the request's cost.

use crate::server::Ctx;

use super::{args::Args, docs, store::decide_string, ReplyUnit, Spec};
use crate::algorithm::{fixed_window::FixedWindow, Decision};
use crate::error::Result;

pub const SPEC: Spec = Spec {
    name: c"rl.fixedwindow",
    min_argc: 4,
    max_argc: None,
    unit: ReplyUnit::Millis,
    flags: super::O1_FLAGS,
    doc: &docs::CommandDoc {
        summary: c"Rate limits with a fixed window counter: at most limit tokens per epoch-aligned window of window seconds.",
        complexity: c"O(1)",
        arity: -4,
        acl_categories: "write fast",
        args: &[docs::KEY, docs::int(c"limit"), docs::seconds(c"window"), docs::TOKENS],
    },
    handler,
};

fn handler(ctx: Ctx, args: &Args) -> Result<Decision> {
    let (limit, window_us, cost) = args.limit_window_cost()?;
    let fixed_window = FixedWindow::new(limit, window_us)?;
    decide_string(ctx, args.arg(1)?, &fixed_window, cost, "RL.FIXEDWINDOW")
}
