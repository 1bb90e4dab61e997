//! `CL.THROTTLE key max_burst count_per_period period [quantity]`
//!
//! A drop-in for redis-cell 0.5's command: GCRA with `period` in whole seconds
//! and the reply's durations in seconds (rounded up). `quantity` (default 1)
//! may be 0 to read the limiter without consuming. Unlike redis-cell, a
//! wrong-type key, a foreign value, non-UTF-8 input, or negative or huge
//! arguments get an error reply, and the effect (not the command) is
//! replicated. The state is the same TAT string as `RL.GCRA`'s.

use redis_module::raw::RedisModuleCtx;

use super::{args::Args, store::decide_string, ReplyUnit, Spec};
use crate::algorithm::{gcra::Gcra, Decision};
use crate::error::{Error, Result};
use crate::time::US_PER_SEC;

pub const SPEC: Spec = Spec {
    name: c"cl.throttle",
    min_argc: 5,
    max_argc: Some(6),
    unit: ReplyUnit::Seconds,
    flags: super::O1_FLAGS,
    handler,
};

fn handler(ctx: *mut RedisModuleCtx, args: &Args) -> Result<Decision> {
    let max_burst = args.integer(2, "max_burst")?;
    let count_per_period = args.integer(3, "count_per_period")?;
    let period_secs = args.integer_at_least(4, "period", 1, ">= 1")?;
    let period_us = period_secs
        .checked_mul(US_PER_SEC)
        .ok_or(Error::BadPeriod { arg: "period" })?;
    let quantity = if args.len() == 6 {
        args.integer_at_least(5, "quantity", 0, ">= 0")?
    } else {
        1
    };
    let gcra = Gcra::with_names(
        max_burst,
        count_per_period,
        period_us,
        ["max_burst", "count_per_period"],
    )?;
    decide_string(ctx, args.raw(1)?, &gcra, quantity, "CL.THROTTLE")
}
