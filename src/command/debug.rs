//! Debug builds only (release builds do not have these commands):
//!
//! * `RL.DEBUGPANIC` — a command whose handler panics, so that tests can show
//!   the command boundary ([`super::run`]) turns a panic into an `ERR` reply
//!   instead of aborting the server;
//! * `RL.DEBUGCLOCK <unix_us> | OFF` — fixes the clock every command reads
//!   ([`crate::server::clock_us`]) at `unix_us` µs since the Unix epoch, or
//!   gives the server's clock back; replies `OK`. The differential suite
//!   (`tests/differential.rs`) runs the module and the Functions library
//!   (`NOW <unix_us>`) at the same instant with it.

use std::ffi::c_int;

use crate::server::reply::{self, Reply};
use crate::server::string::Arg;
use crate::server::{self, Ctx};

use super::{args::Args, docs, Answer, ReplyUnit, Spec};
use crate::error::{Error, Result};

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

/// `RL.DEBUGCLOCK`'s registration and documentation. It replies `OK`, not a
/// decision, so its entry point calls [`clock`], never `handler`.
pub const CLOCK_SPEC: Spec = Spec {
    name: c"rl.debugclock",
    stat_name: c"cmdstat_rl.debugclock",
    min_argc: 2,
    max_argc: Some(2),
    unit: ReplyUnit::Millis,
    flags: c"fast",
    doc: &docs::CommandDoc {
        summary: c"Debug builds only: fixes the module's clock at unix_us (µs), or OFF.",
        complexity: c"O(1)",
        arity: 2,
        acl_categories: "fast",
        keys: docs::KeySpec::None,
        args: &[],
    },
    handler: |_, _| {
        Err(Error::Internal {
            what: "RL.DEBUGCLOCK has its own entry point",
        })
    },
    stats: &CLOCK_STATS,
};

/// Never counted: `RL.DEBUGCLOCK` decides nothing.
static CLOCK_STATS: super::stats::CommandStats = super::stats::CommandStats::new();

/// The error for an argument that is neither `OFF` nor a time.
const CLOCK_ARG_ERROR: &str =
    "ERR unix_us must be an integer >= 0 (µs since the Unix epoch) or OFF";

/// `RL.DEBUGCLOCK <unix_us> | OFF`: fixes (or frees) the clock; `OK`.
pub fn clock(ctx: Ctx, argv: &[Arg]) -> c_int {
    let [_, arg] = argv else {
        return reply::wrong_arity(ctx);
    };
    if arg.bytes().is_ok_and(|b| b.eq_ignore_ascii_case(b"OFF")) {
        server::fix_clock_us(None);
        return reply::send(ctx, &Reply::Ok);
    }
    match arg.to_i64() {
        Ok(Some(unix_us)) if unix_us >= 0 => {
            server::fix_clock_us(Some(unix_us));
            reply::send(ctx, &Reply::Ok)
        }
        _ => reply::error(ctx, CLOCK_ARG_ERROR),
    }
}
