//! `CL.THROTTLE key max_burst count_per_period period [quantity]`
//!
//! A drop-in for redis-cell 0.5's command: GCRA with `period` in whole seconds
//! and redis-cell's arithmetic ([`crate::algorithm::cell`]: `T` truncated to
//! the ns, replies in seconds rounded up only for a non-zero millisecond
//! part, a limited `retry_after` at least 1). `quantity` (default 1)
//! may be 0 to read the limiter without consuming. Unlike redis-cell, a
//! wrong-type key, a foreign value, non-UTF-8 input, or negative or huge
//! arguments get an error reply, and the effect (not the command) is
//! replicated.
//!
//! The state is the TAT in **nanoseconds**, as redis-cell writes it, so
//! keys move between redis-cell and this module both ways. A stored TAT below
//! 10^17 is in µs (what this command wrote before, or `RL.GCRA`'s format) and
//! is read as such; `CL.THROTTLE` refuses limiters whose full burst takes
//! longer than
//! [`crate::algorithm::cell::MAX_TOLERANCE_US`] to refill, so that holds for centuries.

use crate::server::Ctx;

use super::decide::{self, Limit, Op, Options};
use super::{args::Args, docs, Answer, ReplyUnit, Spec};
pub use crate::algorithm::cell::CellGcra;
use crate::error::Result;

pub const SPEC: Spec = Spec {
    name: c"cl.throttle",
    stat_name: c"cmdstat_cl.throttle",
    min_argc: 5,
    max_argc: Some(6),
    unit: ReplyUnit::Seconds,
    flags: super::O1_FLAGS,
    doc: &docs::CommandDoc {
        summary: c"redis-cell compatible GCRA rate limiting: replies in seconds.",
        complexity: c"O(1)",
        arity: -5,
        acl_categories: "write fast",
        keys: docs::KeySpec::One,
        args: &[
            docs::KEY,
            docs::int(c"max_burst"),
            docs::int(c"count_per_period"),
            docs::int(c"period"),
            docs::ArgDoc {
                name: c"quantity",
                kind: docs::ArgType::Integer,
                token: None,
                optional: true,
                multiple: false,
            },
        ],
    },
    handler,
    stats: &STATS,
};

/// The command's statistics (`INFO ratelimit`).
static STATS: super::stats::CommandStats = super::stats::CommandStats::new();

fn handler(ctx: Ctx, args: &Args) -> Result<Answer> {
    let max_burst = args.integer(2, "max_burst")?;
    let count_per_period = args.integer(3, "count_per_period")?;
    let period_secs = args.integer_at_least(4, "period", 1, ">= 1 and <= 31622400 (366 days)")?;
    let quantity = if args.len() == 6 {
        args.integer_at_least(5, "quantity", 0, ">= 0")?
    } else {
        1
    };
    let cell = CellGcra::new(max_burst, count_per_period, period_secs)?;
    let options = Options {
        op: Op::Take(quantity),
        ..Options::default()
    };
    decide::one(ctx, args.arg(1)?, &Limit::Throttle(cell), &options)
}
