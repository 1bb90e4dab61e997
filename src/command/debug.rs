//! `RL.DEBUGPANIC` — debug builds only: a command whose handler panics, so
//! that tests can show the command boundary ([`super::run`]) turns a panic into
//! an `ERR` reply instead of aborting the server. Release builds do not have it.

use crate::server::Ctx;

use super::{args::Args, docs, Answer, ReplyUnit, Spec};
use crate::error::Result;

pub const SPEC: Spec = Spec {
    name: c"rl.debugpanic",
    stat_name: c"cmdstat_rl.debugpanic",
    min_argc: 1,
    max_argc: None,
    unit: ReplyUnit::Millis,
    flags: c"write",
    doc: &docs::CommandDoc {
        summary: c"Debug builds only: panics inside the handler to test panic containment.",
        complexity: c"O(1)",
        arity: -1,
        acl_categories: "write",
        keys: docs::KeySpec::One,
        args: &[],
    },
    handler,
    stats: &STATS,
};

/// The command's statistics (`INFO ratelimit`).
static STATS: super::stats::CommandStats = super::stats::CommandStats::new();

fn handler(_ctx: Ctx, args: &Args) -> Result<Answer> {
    panic!("RL.DEBUGPANIC called with {} arguments", args.len());
}
