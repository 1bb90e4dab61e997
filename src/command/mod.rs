//! The Redis glue: one thin handler per command, and what they share.
//!
//! Every command runs the same way (see [`run`]): check arity → parse and
//! validate every argument → open the key → decode its state → read the clock
//! once → decide (pure, in [`crate::algorithm`]) → write the new state with its
//! absolute expiry and propagate that effect → reply with five integers. Any
//! error is replied before anything is written.

pub mod all;
mod answer;
pub mod args;
pub mod concurrency;
#[cfg(debug_assertions)]
pub mod debug;
pub mod decide;
pub mod docs;
pub mod fixed_window;
pub mod gcra;
pub mod leaky_bucket;
pub mod policy;
pub mod policy_aof;
pub mod policy_limit;
pub mod propagate;
pub mod register;
pub mod settings;
pub mod sliding_log;
pub mod sliding_window;
pub mod stats;
mod store;
pub mod throttle;
pub mod token_bucket;

use std::ffi::{c_int, CStr};

use crate::algorithm::cell;
use crate::algorithm::Decision;
use crate::error::Result;
use crate::limit::Kind;
use crate::server::registry::{self, EntryPoint};
use crate::server::string::Arg;
use crate::server::{self, aof, config, effects, info, rdb, reply, Ctx};
use crate::time::ceil_ms;
pub use answer::Answer;
use args::Args;

/// The unit of the two durations in a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyUnit {
    /// `RL.*` commands: milliseconds, rounded up.
    Millis,
    /// `CL.THROTTLE`: redis-cell's seconds ([`cell::reply_secs`]: rounded up
    /// only when the millisecond part is non-zero), a limited `retry_after`
    /// at least 1 ([`cell::retry_after_secs`]).
    Seconds,
}

/// The five integers of a reply: `[limited, limit, remaining, retry_after,
/// reset_after]`, durations in `unit` (see [`ReplyUnit`]), `retry_after` -1 when
/// allowed or when the cost can never be allowed.
pub fn reply_fields(d: &Decision, unit: ReplyUnit) -> [i64; 5] {
    let (retry_after, reset_after) = match unit {
        ReplyUnit::Millis => (
            d.retry_after_us.map_or(-1, ceil_ms),
            ceil_ms(d.reset_after_us),
        ),
        ReplyUnit::Seconds => (
            cell::retry_after_secs(d.limited, d.retry_after_us),
            cell::reply_secs(d.reset_after_us),
        ),
    };
    [
        i64::from(d.limited),
        d.limit,
        d.remaining,
        retry_after,
        reset_after,
    ]
}

/// A command's static description: what [`run`] needs to call it.
pub struct Spec {
    /// The command name, lower case, as registered.
    pub name: &'static CStr,
    /// Its line in `INFO ratelimit` (`cmdstat_rl.gcra`).
    pub stat_name: &'static CStr,
    /// Fewest arguments including the command name; fewer get the server's
    /// standard arity error.
    pub min_argc: usize,
    /// Most arguments; more get the server's arity error too (`None`: the
    /// handler reports a syntax error instead).
    pub max_argc: Option<usize>,
    /// Unit of the reply's durations.
    pub unit: ReplyUnit,
    /// Command flags: [`O1_FLAGS`] for O(1) commands.
    pub flags: &'static CStr,
    /// `COMMAND DOCS` and ACL categories, where the server supports them.
    pub doc: &'static docs::CommandDoc,
    /// Parses the arguments, decides, writes, propagates and notifies;
    /// returns what to reply.
    pub handler: fn(Ctx, &Args) -> Result<Answer>,
    /// Its statistics (`INFO ratelimit`).
    pub stats: &'static stats::CommandStats,
}

/// The handler of a command that is one limit of the grammar followed by
/// the common options (`RL.GCRA`, `RL.TOKENBUCKET`, `RL.LEAKYBUCKET`,
/// `RL.SLIDINGLOG`): `key <kind's parameters> [options]`.
#[inline(always)] // each command its own copy, its kind a constant
pub fn run_kind(ctx: Ctx, args: &Args, kind: Kind) -> Result<Answer> {
    let limit = kind.parse(args, 2, &args::SettingsBounds)?;
    let options = args.options(2 + kind.params())?;
    decide::one(ctx, args.arg(1)?, &limit, &options)
}

/// Every command call, after [`registry::dispatch`] wrapped it: arity, the
/// handler, the reply. Handlers reply nothing themselves, so an error (or a
/// panic caught by `dispatch`) is always the whole reply.
pub fn run(ctx: Ctx, argv: &[Arg], spec: &Spec) -> c_int {
    let argc = argv.len();
    if spec.doc.keys == docs::KeySpec::NumKeys && registry::is_keys_position_request(ctx) {
        // `numkeys key …`: where the keys are (Redis Cluster's slot check).
        let numkeys = argv.get(1).and_then(|a| a.to_i64().ok().flatten());
        let numkeys = usize::try_from(numkeys.unwrap_or(0)).unwrap_or(0);
        for pos in 2..argc.min(numkeys.saturating_add(2)) {
            registry::key_at_pos(ctx, pos);
        }
        return server::OK;
    }
    if argc < spec.min_argc || spec.max_argc.is_some_and(|max| argc > max) {
        return reply::wrong_arity(ctx);
    }
    let answer = (spec.handler)(ctx, &Args::new(argv));
    if let Ok(answer) = &answer {
        spec.stats.record(answer);
    }
    match answer {
        Ok(Answer {
            decision,
            position: None,
            ..
        }) => reply::integers(ctx, &reply_fields(&decision, spec.unit)),
        Ok(Answer {
            decision,
            position: Some(position),
            each,
            ..
        }) => {
            let [a, b, c, d, e] = reply_fields(&decision, spec.unit);
            if each.is_empty() {
                reply::integers(ctx, &[a, b, c, d, e, position])
            } else {
                // Each limit's five integers go straight to the reply (no
                // vector of them all: an allocation per call).
                if let Some(array) = reply::IntegerArray::start(ctx, 6 + 5 * each.len()) {
                    array.push_all(&[a, b, c, d, e, position]);
                    for limit in &each {
                        array.push_all(&reply_fields(limit, spec.unit));
                    }
                }
                server::OK
            }
        }
        Err(error) => reply::error(ctx, &error.to_string()),
    }
}

/// Declares the `extern "C"` entry point `$fn_name` that runs the command
/// described by `$spec` through [`run`], through [`registry::dispatch`] (the boundary every call crosses).
macro_rules! entry_point {
    ($fn_name:ident, $spec:path) => {
        extern "C" fn $fn_name(
            ctx: *mut redis_module::raw::RedisModuleCtx,
            argv: *mut *mut redis_module::raw::RedisModuleString,
            argc: std::ffi::c_int,
        ) -> std::ffi::c_int {
            $crate::server::registry::dispatch(ctx, argv, argc, |ctx, args| {
                $crate::command::run(ctx, args, &$spec)
            })
        }
    };
}

entry_point!(rl_gcra, gcra::SPEC);
entry_point!(rl_tokenbucket, token_bucket::SPEC);
entry_point!(cl_throttle, throttle::SPEC);
entry_point!(rl_fixedwindow, fixed_window::SPEC);
entry_point!(rl_slidingwindow, sliding_window::SPEC);
entry_point!(rl_slidinglog, sliding_log::SPEC);
entry_point!(rl_leakybucket, leaky_bucket::SPEC);
entry_point!(rl_concurrency, concurrency::SPEC);
entry_point!(rl_all, all::SPEC);
entry_point!(rl_limit, policy_limit::SPEC);
entry_point!(rl_policy_off, policy::OFF_SPEC);

/// The entry point of `RL.POLICY`'s subcommand `$i` (in
/// [`policy::SUBCOMMANDS`]).
macro_rules! subcommand_entry_point {
    ($fn_name:ident, $i:expr) => {
        extern "C" fn $fn_name(
            ctx: *mut redis_module::raw::RedisModuleCtx,
            argv: *mut *mut redis_module::raw::RedisModuleString,
            argc: std::ffi::c_int,
        ) -> std::ffi::c_int {
            registry::dispatch(ctx, argv, argc, |ctx, args| {
                run_subcommand(ctx, args, &policy::SUBCOMMANDS[$i])
            })
        }
    };
}
subcommand_entry_point!(rl_policy_set, 0);
subcommand_entry_point!(rl_policy_get, 1);
subcommand_entry_point!(rl_policy_del, 2);
subcommand_entry_point!(rl_policy_list, 3);
subcommand_entry_point!(rl_policy_load, 4);
subcommand_entry_point!(rl_policy_dump, 5);
subcommand_entry_point!(rl_policy_resetstats, 6);
subcommand_entry_point!(rl_policy_stats, 7);
subcommand_entry_point!(rl_policy_help, 8);

/// The entry points of [`policy::SUBCOMMANDS`], in order.
const SUBCOMMAND_ENTRIES: [EntryPoint; 9] = [
    rl_policy_set,
    rl_policy_get,
    rl_policy_del,
    rl_policy_list,
    rl_policy_load,
    rl_policy_dump,
    rl_policy_resetstats,
    rl_policy_stats,
    rl_policy_help,
];

/// A call of an `RL.POLICY` subcommand: arity, the handler, its reply.
fn run_subcommand(ctx: Ctx, argv: &[Arg], sub: &policy::Subcommand) -> c_int {
    let argc = argv.len();
    if argc < sub.min_argc || sub.max_argc.is_some_and(|max| argc > max) {
        return reply::wrong_arity(ctx);
    }
    match (sub.handler)(ctx, &Args::new(argv)) {
        Ok(value) => reply::send(ctx, &value),
        Err(error) => reply::error(ctx, &error.to_string()),
    }
}

/// Zeroes every command's statistics (`RL.POLICY RESETSTATS`).
pub fn reset_command_stats() {
    for (spec, _) in COMMANDS.iter() {
        spec.stats.reset();
    }
    stats::LEASE_STATS.reset();
}
#[cfg(debug_assertions)]
entry_point!(rl_debugpanic, debug::SPEC);

/// `RL.DEBUGCLOCK` replies `OK`, not a decision: its own body, not [`run`].
#[cfg(debug_assertions)]
extern "C" fn rl_debugclock(
    ctx: *mut redis_module::raw::RedisModuleCtx,
    argv: *mut *mut redis_module::raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    registry::dispatch(ctx, argv, argc, debug::clock)
}

/// Every command: its spec and its entry point.
const COMMANDS: [(&Spec, EntryPoint); 10] = [
    (&gcra::SPEC, rl_gcra),
    (&token_bucket::SPEC, rl_tokenbucket),
    (&throttle::SPEC, cl_throttle),
    (&fixed_window::SPEC, rl_fixedwindow),
    (&sliding_window::SPEC, rl_slidingwindow),
    (&sliding_log::SPEC, rl_slidinglog),
    (&leaky_bucket::SPEC, rl_leakybucket),
    (&concurrency::SPEC, rl_concurrency),
    (&all::SPEC, rl_all),
    (&policy_limit::SPEC, rl_limit),
];

/// Debug builds also have `RL.DEBUGPANIC` and `RL.DEBUGCLOCK` (see
/// [`debug`]); release builds none.
#[cfg(debug_assertions)]
const DEBUG_COMMANDS: [(&Spec, EntryPoint); 2] = [
    (&debug::SPEC, rl_debugpanic),
    (&debug::CLOCK_SPEC, rl_debugclock),
];
#[cfg(not(debug_assertions))]
const DEBUG_COMMANDS: [(&Spec, EntryPoint); 0] = [];

/// Flags of the O(1) commands: they write, must not grow memory past
/// `maxmemory`, and are fast. Commands whose cost grows with the key's size
/// leave out `fast`.
pub const O1_FLAGS: &CStr = c"write deny-oom fast";

/// The module's own ACL category (servers with module categories only).
pub const MODULE_ACL_CATEGORY: &CStr = c"ratelimit";

/// The `INFO ratelimit` section: propagation's counters, the settings, and
/// one line per command, `ratelimit_cmdstat_<command>:calls_allowed=…,…`.
pub fn write_info(out: &mut info::InfoWriter) {
    propagate::write_info(out);
    // The tz database the calendar windows' zones come from (`2026f`).
    if let Ok(version) = std::ffi::CString::new(crate::calendar::TZDB_VERSION) {
        out.text(c"tzdb_version", &version);
    }
    let max = settings::sliding_log_max_limit();
    out.field(c"sliding_log_max_limit", u64::try_from(max).unwrap_or(0));
    let budget = settings::sliding_log_call_budget();
    out.field(
        c"sliding_log_call_budget",
        u64::try_from(budget).unwrap_or(0),
    );
    let max = settings::concurrency_max_limit();
    out.field(c"concurrency_max_limit", u64::try_from(max).unwrap_or(0));
    let max = settings::concurrency_max_id_length();
    out.field(
        c"concurrency_max_id_length",
        u64::try_from(max).unwrap_or(0),
    );
    for (spec, _) in COMMANDS.iter() {
        spec.stats.write(out, spec.stat_name);
    }
    stats::LEASE_STATS.write(out);
    policy::write_info(out);
}

#[cfg(test)]
mod tests;
