//! Module settings, given as module arguments
//! (`loadmodule <path> [propagate-always] [sliding-log-max-limit <n>]`) or, on
//! servers with module configs, as the configs `ratelimit.propagate-always`
//! and `ratelimit.sliding-log-max-limit` (see `server::config`; a config line
//! wins over a load argument).
//!
//! * `propagate-always`: hand every write's effects to the server even when
//!   nothing consumes them (see [`super::propagate`]).
//! * `sliding-log-max-limit <n>`: the largest `limit` `RL.SLIDINGLOG`
//!   accepts, 1 to [`SlidingLog::MAX_LIMIT`], default
//!   [`SLIDING_LOG_MAX_LIMIT_DEFAULT`]. It bounds the work of one call (see
//!   `command::sliding_log`); larger limits belong to `RL.SLIDINGWINDOW`.
//!
//! * `sliding-log-call-budget <n>`: the most sliding-log entries one call
//!   may touch, summed over its `SLIDINGLOG` limits (`limit + n` each, `n`
//!   being `TOKENS`/`REFUND` up to `limit`), 1 to
//!   [`SLIDING_LOG_CALL_BUDGET_MAX`], default
//!   [`SLIDING_LOG_CALL_BUDGET_DEFAULT`]. Checked before any key is opened
//!   (see `command::decide::check_budget`).
//!
//! * `concurrency-max-limit <n>`: the largest `limit` `RL.CONCURRENCY`
//!   accepts, 1 to [`Concurrency::MAX_LIMIT`], default
//!   [`CONCURRENCY_MAX_LIMIT_DEFAULT`] (it bounds a call's walk of the
//!   leases, as `sliding-log-max-limit` the log's).
//!
//! * `concurrency-max-id-length <n>`: the longest lease id, in bytes, 1 to
//!   [`Concurrency::MAX_ID_LEN`], default
//!   [`CONCURRENCY_MAX_ID_LENGTH_DEFAULT`].
//!
//! * `policies yes|no|unloadable` (default `yes`, see [`PoliciesMode`]):
//!   server-side policies (`RL.POLICY`, `RL.LIMIT`). They are saved in RDB
//!   files as module auxiliary data, which takes a module data type — and the
//!   server refuses `MODULE UNLOAD` for a module with a data type. `no`
//!   registers the type and carries the policies (loads, saves, applies the
//!   replicated changes) without serving them; `unloadable` registers none.
//!
//! Anything else refuses the load, with a log line.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, Ordering};

use crate::algorithm::concurrency::Concurrency;
use crate::algorithm::sliding_log::SlidingLog;
use crate::server::config::{BoolSetting, EnumSetting, NumericSetting, Setting};
use crate::server::string::Arg;

/// The default of `sliding-log-max-limit`: a call that adds or walks this
/// many log entries stays well under a millisecond of server time.
pub const SLIDING_LOG_MAX_LIMIT_DEFAULT: i64 = 1_000;

static SLIDING_LOG_MAX_LIMIT: AtomicI64 = AtomicI64::new(SLIDING_LOG_MAX_LIMIT_DEFAULT);
static PROPAGATE_ALWAYS: AtomicBool = AtomicBool::new(false);
static POLICIES: AtomicU8 = AtomicU8::new(PoliciesMode::Yes as u8);

/// What `policies` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoliciesMode {
    /// Policies are served (`RL.POLICY`, `RL.LIMIT`) and carried.
    Yes = 0,
    /// Policies are carried (RDB, AOF, replication: the module data type is
    /// registered) but not served: clients get `ERR policies are off`.
    No = 1,
    /// No data type: `MODULE UNLOAD` works, and the server exits when it
    /// loads an RDB that carries policies (its own check for module data).
    Unloadable = 2,
}

impl PoliciesMode {
    /// Every mode, in the order of their config values.
    pub const ALL: [PoliciesMode; 3] = [Self::Yes, Self::No, Self::Unloadable];

    /// The word of the module argument and the config value.
    pub fn word(self) -> &'static str {
        match self {
            Self::Yes => "yes",
            Self::No => "no",
            Self::Unloadable => "unloadable",
        }
    }

    fn from_u8(value: u8) -> Self {
        match value {
            1 => Self::No,
            2 => Self::Unloadable,
            _ => Self::Yes,
        }
    }
}

/// The settings of one load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub propagate_always: bool,
    pub sliding_log_max_limit: i64,
    pub policies: PoliciesMode,
    pub sliding_log_call_budget: i64,
    pub concurrency_max_limit: i64,
    pub concurrency_max_id_length: i64,
}

/// Parses the module arguments; an error text (for the log) refuses the load.
pub fn parse(args: &[Arg]) -> Result<Settings, String> {
    let mut settings = Settings {
        propagate_always: false,
        sliding_log_max_limit: SLIDING_LOG_MAX_LIMIT_DEFAULT,
        policies: PoliciesMode::Yes,
        sliding_log_call_budget: SLIDING_LOG_CALL_BUDGET_DEFAULT,
        concurrency_max_limit: CONCURRENCY_MAX_LIMIT_DEFAULT,
        concurrency_max_id_length: CONCURRENCY_MAX_ID_LENGTH_DEFAULT,
    };
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        let name = arg.bytes().unwrap_or_default();
        if name.eq_ignore_ascii_case(b"propagate-always") {
            settings.propagate_always = true;
        } else if name.eq_ignore_ascii_case(b"sliding-log-max-limit") {
            i += 1;
            let value = args.get(i).and_then(|v| v.to_i64().ok().flatten());
            match value {
                Some(n) if (1..=SlidingLog::MAX_LIMIT).contains(&n) => {
                    settings.sliding_log_max_limit = n;
                }
                _ => {
                    return Err(format!(
                        "sliding-log-max-limit needs an integer from 1 to {}",
                        SlidingLog::MAX_LIMIT
                    ))
                }
            }
        } else if name.eq_ignore_ascii_case(b"sliding-log-call-budget") {
            i += 1;
            settings.sliding_log_call_budget = parse_call_budget(args.get(i))?;
        } else if name.eq_ignore_ascii_case(b"concurrency-max-limit") {
            i += 1;
            settings.concurrency_max_limit =
                parse_bounded(args.get(i), "concurrency-max-limit", Concurrency::MAX_LIMIT)?;
        } else if name.eq_ignore_ascii_case(b"concurrency-max-id-length") {
            i += 1;
            settings.concurrency_max_id_length = parse_bounded(
                args.get(i),
                "concurrency-max-id-length",
                Concurrency::MAX_ID_LEN,
            )?;
        } else if name.eq_ignore_ascii_case(b"policies") {
            i += 1;
            let value = args.get(i).map(|v| v.bytes().unwrap_or_default());
            settings.policies = PoliciesMode::ALL
                .into_iter()
                .find(|mode| value.is_some_and(|v| v.eq_ignore_ascii_case(mode.word().as_bytes())))
                .ok_or("policies needs yes, no or unloadable")?;
        } else {
            return Err(format!(
                "unknown module argument '{}' (known: propagate-always, sliding-log-max-limit <n>, sliding-log-call-budget <n>, concurrency-max-limit <n>, concurrency-max-id-length <n>, policies yes|no|unloadable)",
                String::from_utf8_lossy(name)
            ));
        }
        i += 1;
    }
    Ok(settings)
}

/// Makes `settings` the ones in force (at load, before the server's config
/// values for the module, if any, are applied: see `server::config`).
pub fn apply(settings: Settings) {
    SLIDING_LOG_MAX_LIMIT.store(settings.sliding_log_max_limit, Ordering::Relaxed);
    PROPAGATE_ALWAYS.store(settings.propagate_always, Ordering::Relaxed);
    POLICIES.store(settings.policies as u8, Ordering::Relaxed);
    set_sliding_log_call_budget(settings.sliding_log_call_budget);
    set_concurrency_max_limit(settings.concurrency_max_limit);
    set_concurrency_max_id_length(settings.concurrency_max_id_length);
}

/// The largest `limit` `RL.SLIDINGLOG` accepts now.
pub fn sliding_log_max_limit() -> i64 {
    SLIDING_LOG_MAX_LIMIT.load(Ordering::Relaxed)
}

/// Sets the largest `limit` `RL.SLIDINGLOG` accepts (the config
/// `ratelimit.sliding-log-max-limit`, 1 to `SlidingLog::MAX_LIMIT`).
pub fn set_sliding_log_max_limit(limit: i64) {
    SLIDING_LOG_MAX_LIMIT.store(limit.clamp(1, SlidingLog::MAX_LIMIT), Ordering::Relaxed);
}

/// Whether every write hands its effects over (`propagate-always`).
pub fn propagate_always() -> bool {
    PROPAGATE_ALWAYS.load(Ordering::Relaxed)
}

/// Sets `propagate-always` (at load only: the config is immutable).
pub fn set_propagate_always(always: bool) {
    PROPAGATE_ALWAYS.store(always, Ordering::Relaxed);
}

/// Whether server-side policies are served (`policies yes`, the default).
pub fn policies() -> bool {
    policies_mode() == PoliciesMode::Yes
}

/// Whether policies are carried: loaded, saved and changed by replication
/// and AOF replays (`policies yes` or `no`: the data type is registered).
pub fn policies_carried() -> bool {
    policies_mode() != PoliciesMode::Unloadable
}

/// The `policies` setting.
pub fn policies_mode() -> PoliciesMode {
    PoliciesMode::from_u8(POLICIES.load(Ordering::Relaxed))
}

/// Sets `policies` (at load only: the config is immutable).
pub fn set_policies(mode: PoliciesMode) {
    POLICIES.store(mode as u8, Ordering::Relaxed);
}

// ---- sliding-log-call-budget: the work of one call (issue 22) ----

/// The default of `sliding-log-call-budget`, in sliding-log entries: a
/// single `SLIDINGLOG` at the default `sliding-log-max-limit` (1,000) with
/// `TOKENS` up to its limit (2,000) fits twice over, and the worst call
/// within it (16 logs of 125 entries each taking 125, `RL.ALL`) stays near
/// 3 ms of server time on a 2-core machine (`make bench`).
pub const SLIDING_LOG_CALL_BUDGET_DEFAULT: i64 = 4_000;

/// The largest `sliding-log-call-budget`: a single log at
/// [`SlidingLog::MAX_LIMIT`] with as many `TOKENS`.
pub const SLIDING_LOG_CALL_BUDGET_MAX: i64 = 2 * SlidingLog::MAX_LIMIT;

static SLIDING_LOG_CALL_BUDGET: AtomicI64 = AtomicI64::new(SLIDING_LOG_CALL_BUDGET_DEFAULT);

/// Parses the value of the load argument `sliding-log-call-budget`.
fn parse_call_budget(value: Option<&Arg>) -> Result<i64, String> {
    match value.and_then(|v| v.to_i64().ok().flatten()) {
        Some(n) if (1..=SLIDING_LOG_CALL_BUDGET_MAX).contains(&n) => Ok(n),
        _ => Err(format!(
            "sliding-log-call-budget needs an integer from 1 to {SLIDING_LOG_CALL_BUDGET_MAX}"
        )),
    }
}

/// The most sliding-log entries one call may touch now (see
/// `command::decide::check_budget`).
pub fn sliding_log_call_budget() -> i64 {
    SLIDING_LOG_CALL_BUDGET.load(Ordering::Relaxed)
}

/// Sets `sliding-log-call-budget` (the config
/// `ratelimit.sliding-log-call-budget`, 1 to [`SLIDING_LOG_CALL_BUDGET_MAX`]).
pub fn set_sliding_log_call_budget(budget: i64) {
    SLIDING_LOG_CALL_BUDGET.store(
        budget.clamp(1, SLIDING_LOG_CALL_BUDGET_MAX),
        Ordering::Relaxed,
    );
}

// ---- RL.CONCURRENCY's bounds (issue 32) ----

/// The default of `concurrency-max-limit`: as `sliding-log-max-limit`, a
/// call that walks this many slots stays well under a millisecond.
pub const CONCURRENCY_MAX_LIMIT_DEFAULT: i64 = 1_000;

/// The default of `concurrency-max-id-length`, in bytes: a UUID (36) or a
/// request id with a prefix fits with room to spare.
pub const CONCURRENCY_MAX_ID_LENGTH_DEFAULT: i64 = 128;

static CONCURRENCY_MAX_LIMIT: AtomicI64 = AtomicI64::new(CONCURRENCY_MAX_LIMIT_DEFAULT);
static CONCURRENCY_MAX_ID_LENGTH: AtomicI64 = AtomicI64::new(CONCURRENCY_MAX_ID_LENGTH_DEFAULT);

/// Parses a load argument's integer value, 1 to `max`.
fn parse_bounded(value: Option<&Arg>, name: &str, max: i64) -> Result<i64, String> {
    match value.and_then(|v| v.to_i64().ok().flatten()) {
        Some(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("{name} needs an integer from 1 to {max}")),
    }
}

/// The largest `limit` `RL.CONCURRENCY` accepts now.
pub fn concurrency_max_limit() -> i64 {
    CONCURRENCY_MAX_LIMIT.load(Ordering::Relaxed)
}

/// Sets `concurrency-max-limit` (1 to [`Concurrency::MAX_LIMIT`]).
pub fn set_concurrency_max_limit(limit: i64) {
    CONCURRENCY_MAX_LIMIT.store(limit.clamp(1, Concurrency::MAX_LIMIT), Ordering::Relaxed);
}

/// The longest lease id `RL.CONCURRENCY` accepts now, in bytes.
pub fn concurrency_max_id_length() -> i64 {
    CONCURRENCY_MAX_ID_LENGTH.load(Ordering::Relaxed)
}

/// Sets `concurrency-max-id-length` (1 to [`Concurrency::MAX_ID_LEN`]).
pub fn set_concurrency_max_id_length(len: i64) {
    CONCURRENCY_MAX_ID_LENGTH.store(len.clamp(1, Concurrency::MAX_ID_LEN), Ordering::Relaxed);
}

// ---- the module configs ----

/// The module configs, in the order they are registered (`ratelimit.<name>`).
pub static CONFIGS: [Setting; 6] = [
    Setting::Numeric(&NumericSetting {
        name: c"sliding-log-max-limit",
        min: 1,
        max: SlidingLog::MAX_LIMIT,
        get: sliding_log_max_limit,
        set: set_sliding_log_max_limit,
    }),
    // Switching propagation mode while running is not safe (the filter is
    // registered at load only): immutable.
    Setting::Bool(&BoolSetting {
        name: c"propagate-always",
        immutable: true,
        get: propagate_always,
        set: set_propagate_always,
    }),
    // Policies need a data type, registered at load: immutable too. The
    // values are `PoliciesMode::ALL`'s words, in that order.
    Setting::Enum(&EnumSetting {
        name: c"policies",
        immutable: true,
        words: &[c"yes", c"no", c"unloadable"],
        get: || policies_mode() as usize,
        set: |index| match PoliciesMode::ALL.get(index) {
            Some(&mode) => {
                set_policies(mode);
                true
            }
            None => false,
        },
    }),
    // `CONFIG SET` takes effect at the next call.
    Setting::Numeric(&NumericSetting {
        name: c"sliding-log-call-budget",
        min: 1,
        max: SLIDING_LOG_CALL_BUDGET_MAX,
        get: sliding_log_call_budget,
        set: set_sliding_log_call_budget,
    }),
    Setting::Numeric(&NumericSetting {
        name: c"concurrency-max-limit",
        min: 1,
        max: Concurrency::MAX_LIMIT,
        get: concurrency_max_limit,
        set: set_concurrency_max_limit,
    }),
    Setting::Numeric(&NumericSetting {
        name: c"concurrency-max-id-length",
        min: 1,
        max: Concurrency::MAX_ID_LEN,
        get: concurrency_max_id_length,
        set: set_concurrency_max_id_length,
    }),
];
