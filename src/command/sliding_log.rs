//! `RL.SLIDINGLOG key limit window [TOKENS n]`
//!
//! The sliding window log ([`crate::algorithm::sliding_log`]) kept in a sorted
//! set; its reading, checks and writes are [`super::store::sliding_log`].

use super::args::Args;
use super::{docs, Answer, ReplyUnit, Spec};
use crate::error::Result;
use crate::limit::Kind;
use crate::server::Ctx;

pub const SPEC: Spec = Spec {
    name: c"rl.slidinglog",
    stat_name: c"cmdstat_rl.slidinglog",
    min_argc: 4,
    max_argc: None,
    unit: ReplyUnit::Millis,
    flags: c"write deny-oom",
    doc: &docs::CommandDoc {
        summary: c"Rate limits with a sliding window log kept in a sorted set: exact over any window of window seconds.",
        complexity: c"O(log(N) + limit) with N entries in the log; limit is at most the module's sliding-log-max-limit (default 1000)",
        arity: -4,
        acl_categories: "write",
        keys: docs::KeySpec::One,
        args: &[docs::KEY, docs::int(c"limit"), docs::seconds(c"window"), docs::TOKENS, docs::REFUND, docs::FORCE, docs::PEEK, docs::BLOCK],
    },
    handler,
    stats: &STATS,
};

/// The command's statistics (`INFO ratelimit`).
static STATS: super::stats::CommandStats = super::stats::CommandStats::new();

fn handler(ctx: Ctx, args: &Args) -> Result<Answer> {
    super::run_kind(ctx, args, Kind::SlidingLog)
}
