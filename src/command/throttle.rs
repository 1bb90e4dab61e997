//! `CL.THROTTLE key max_burst count_per_period period [quantity]`
//!
//! A drop-in for redis-cell 0.5's command: GCRA with `period` in whole seconds
//! and the reply's durations in seconds (rounded up). `quantity` (default 1)
//! may be 0 to read the limiter without consuming. Unlike redis-cell, a
//! wrong-type key, a foreign value, non-UTF-8 input, or negative or huge
//! arguments get an error reply, and the effect (not the command) is
//! replicated.
//!
//! The state is the TAT string of `RL.GCRA` (µs). Keys that redis-cell wrote
//! hold the TAT in **nanoseconds**; they are read as such, so switching a
//! running system from redis-cell to this module keeps every limiter's state.
//! A stored TAT of 10^17 or more can only be nanoseconds (in µs it would lie
//! past the year 5000), because `CL.THROTTLE` refuses limiters whose full
//! burst takes longer than [`MAX_TOLERANCE_US`] to refill.

use crate::server::Ctx;

use super::limiter::{self, Limit, Op, Options};
use super::{args::Args, docs, Answer, ReplyUnit, Spec};
use crate::algorithm::gcra::Gcra;
use crate::algorithm::{Algorithm, Outcome, Refunded, STATE_BUF_LEN};
use crate::error::{Error, Result};
use crate::time::US_PER_SEC;

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

/// Stored TATs at or above this are redis-cell's nanoseconds.
const NANOSECOND_TAT_FLOOR: i64 = 100_000_000_000_000_000;

/// The longest delay variation tolerance (time for a full burst to refill)
/// `CL.THROTTLE` accepts: about 2,850 years, so that its TATs stay below
/// [`NANOSECOND_TAT_FLOOR`] for centuries. (redis-cell itself overflows its
/// nanosecond clock past 292 years.)
pub const MAX_TOLERANCE_US: i64 = 90_000_000_000_000_000;

/// The GCRA of `RL.GCRA`, reading redis-cell's nanosecond TATs too.
#[derive(Debug, Clone, Copy)]
pub struct CellGcra(Gcra);

impl Algorithm for CellGcra {
    type State = i64;

    fn decode(bytes: &[u8]) -> Option<i64> {
        Gcra::decode(bytes).map(|tat| {
            if tat >= NANOSECOND_TAT_FLOOR {
                crate::time::ceil_div(tat, 1_000) // ns → µs, never earlier
            } else {
                tat
            }
        })
    }

    fn encode(tat_us: &i64, buf: &mut [u8; STATE_BUF_LEN]) -> usize {
        Gcra::encode(tat_us, buf)
    }

    fn decide(&self, tat_us: Option<i64>, now_us: i64, cost: i64) -> Result<Outcome<i64>> {
        self.0.decide(tat_us, now_us, cost)
    }

    fn refund(&self, tat_us: Option<i64>, now_us: i64, tokens: i64) -> Result<Refunded<i64>> {
        self.0.refund(tat_us, now_us, tokens)
    }
}

fn handler(ctx: Ctx, args: &Args) -> Result<Answer> {
    let max_burst = args.integer(2, "max_burst")?;
    let count_per_period = args.integer(3, "count_per_period")?;
    let period_secs = args.integer_at_least(4, "period", 1, ">= 1")?;
    let quantity = if args.len() == 6 {
        args.integer_at_least(5, "quantity", 0, ">= 0")?
    } else {
        1
    };
    let period_us = period_secs.checked_mul(US_PER_SEC).ok_or(Error::Overflow)?;
    let names = ["max_burst", "count_per_period"];
    let gcra = Gcra::with_names(max_burst, count_per_period, period_us, names)?;
    if gcra.delay_variation_tolerance_us() > MAX_TOLERANCE_US {
        return Err(Error::Overflow);
    }
    let options = Options {
        op: Op::Take(quantity),
        ..Options::default()
    };
    limiter::run_one(
        ctx,
        args.arg(1)?,
        &Limit::Throttle(CellGcra(gcra)),
        &options,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_redis_cells_nanosecond_tats() {
        assert_eq!(
            CellGcra::decode(b"1795297437157000"),
            Some(1_795_297_437_157_000)
        );
        assert_eq!(
            CellGcra::decode(b"1795297437157000001"),
            Some(1_795_297_437_157_001)
        );
        assert_eq!(
            CellGcra::decode(b"99999999999999999"),
            Some(99_999_999_999_999_999)
        );
        assert_eq!(
            CellGcra::decode(b"100000000000000000"),
            Some(100_000_000_000_000)
        );
        assert_eq!(CellGcra::decode(b"foo"), None);
    }
}
