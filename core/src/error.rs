//! Every error a command can reply with, in one place.
//!
//! Inside the crate errors are typed values; the command boundary
//! (`command::run`) turns them into a Redis error reply exactly once, using the
//! `Display` text below. Each text starts with the standard Redis error code
//! (`ERR` or `WRONGTYPE`) so clients map them as they map the server's own.
//! Wrong arity is not here: it is answered with the server's own arity error
//! (`RedisModule_WrongArity`).

/// Why a command was refused. Nothing is written when a command returns one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// An integer argument that Redis itself would not parse as a signed
    /// 64-bit integer (`string2ll` rules: no spaces, no `+`, no fraction).
    #[error("ERR {arg} is not an integer or out of range")]
    NotAnInteger { arg: &'static str },

    /// A seconds argument that Redis would not parse as a float.
    #[error("ERR {arg} is not a valid float")]
    NotAFloat { arg: &'static str },

    /// An integer argument outside its documented bounds; `bound` reads like
    /// `">= 1"`.
    #[error("ERR {arg} must be {bound}")]
    OutOfRange {
        arg: &'static str,
        bound: &'static str,
    },

    /// An `RL.SLIDINGLOG` limit above the module setting `sliding-log-max-limit`
    /// (or, where the setting does not apply, above its own maximum, 100000):
    /// every too-large limit is refused with this one text.
    #[error("ERR limit must be <= {max} (the module's sliding-log-max-limit); for larger limits use RL.SLIDINGWINDOW")]
    LimitAboveSetting { max: i64 },

    /// An `RL.CONCURRENCY` limit above the module setting `concurrency-max-limit`.
    #[error("ERR limit must be <= {max} (the module's concurrency-max-limit)")]
    ConcurrencyAboveSetting { max: i64 },

    /// `RL.CONCURRENCY` without `ACQUIRE id`, `RENEW id` or `RELEASE id`
    /// after its parameters.
    #[error("ERR expected ACQUIRE id, RENEW id or RELEASE id after the parameters")]
    LeaseOpMissing,

    /// A lease id that is empty or longer than `concurrency-max-id-length`.
    #[error("ERR lease id must be 1 to {max} bytes (the module's concurrency-max-id-length)")]
    LeaseIdLength { max: i64 },

    /// `RL.CONCURRENCY` options that do not fit its operation.
    #[error("ERR syntax error: expected [TOKENS n] [PEEK] [BLOCK duration] after ACQUIRE id, [PEEK] after RENEW id or RELEASE id")]
    LeaseSyntax,

    /// A `CONCURRENCY` limit of `RL.ALL` not followed by `ACQUIRE id`.
    #[error("ERR a CONCURRENCY limit of RL.ALL takes ACQUIRE id after its parameters (RENEW and RELEASE: RL.CONCURRENCY)")]
    AllLeaseOp,

    /// `RL.ALL … REFUND n` with a `CONCURRENCY` limit.
    #[error("ERR REFUND does not apply to a CONCURRENCY limit: give its slots back with RL.CONCURRENCY key limit lease RELEASE id")]
    RefundConcurrency,

    /// A call whose `SLIDINGLOG` limits may touch more sorted-set entries
    /// (`limit + n` each, `n` being `TOKENS` or `REFUND` up to `limit`) than
    /// the module setting `sliding-log-call-budget`.
    #[error("ERR this call may touch {entries} sliding-log entries (limit + TOKENS of each SLIDINGLOG), more than the module's sliding-log-call-budget of {budget}; use fewer or smaller SLIDINGLOG limits, or RL.SLIDINGWINDOW")]
    OverBudget { entries: i64, budget: i64 },

    /// A period / window that is not finite, not > 0, rounds to less than 1 µs,
    /// or does not fit the microsecond clock.
    #[error("ERR {arg} must be a finite number of seconds, at least 0.000001 and at most 31622400 (366 days)")]
    BadPeriod { arg: &'static str },

    /// A rate limiter that takes longer than 366 days to refill from empty
    /// (GCRA's `(max_burst + 1) × T`, a bucket's `capacity × period /
    /// tokens`): its key would outlive the bound every key keeps.
    #[error("ERR the time to refill from empty (limit × period / tokens per period) must be <= 31622400 seconds (366 days)")]
    RefillTooLong,

    /// More than one token per microsecond: below the clock's resolution.
    #[error(
        "ERR rate too high: at most one token per microsecond ({arg} too large for its period)"
    )]
    RateTooHigh { arg: &'static str },

    /// A combination of parameters (or a stored state far in the future) whose
    /// arithmetic would overflow 64-bit microseconds.
    #[error("ERR parameters too large: the limiter's arithmetic would overflow")]
    Overflow,

    /// Trailing arguments that are not valid options.
    #[error("ERR syntax error: expected [TOKENS n | REFUND n] [PEEK] [BLOCK duration] after the parameters")]
    Syntax,

    /// `RL.FIXEDWINDOW` / `RL.SLIDINGWINDOW` trailing arguments that are not
    /// valid options.
    #[error("ERR syntax error: expected [TOKENS n | REFUND n] [PEEK] [BLOCK duration] {own} after the parameters")]
    WindowSyntax { own: &'static str },

    /// `FORCE` with `PEEK` or `REFUND`: it records a cost, which neither
    /// does.
    #[error("ERR syntax error: FORCE records TOKENS n whatever the limit says; it does not go with PEEK or REFUND")]
    ForceSyntax,

    /// `FORCE` where it has no meaning: `RL.CONCURRENCY` (a slot is not a
    /// cost), or among `RL.ALL`'s options (it belongs to a limit).
    #[error("ERR FORCE {why}")]
    ForcePlace { why: &'static str },

    /// A `FORCE` that would put the limiter further in debt than its state
    /// can hold (`why` says which bound); nothing is recorded.
    #[error("ERR FORCE cannot record this cost: {why}; nothing was recorded")]
    ForceTooMuch { why: &'static str },

    /// `TZ zone` after a window in seconds (a zone applies to a calendar
    /// window only).
    #[error("ERR syntax error: TZ takes a calendar window (DAY, WEEK, MONTH or YEAR), not one in seconds")]
    ZoneWithoutCalendar,

    /// A `TZ` zone that is neither `UTC`, `+hh:mm` / `-hh:mm`, nor a zone of
    /// the tz database the module carries.
    #[error("ERR unknown time zone '{zone}': expected an IANA zone name (Europe/Paris), UTC, or an offset +hh:mm / -hh:mm")]
    UnknownZone { zone: ZoneName },

    /// `ALIGN FIRST` with a calendar window (whose windows start at its
    /// boundaries).
    #[error(
        "ERR ALIGN FIRST takes a window in seconds: a calendar window starts at its boundaries"
    )]
    AlignFirstCalendar,

    /// `RL.ALL` with the same key twice.
    #[error("ERR RL.ALL names the same key twice")]
    DuplicateKey,

    /// `RL.ALL` with fewer or more limits than keys.
    #[error("ERR RL.ALL needs exactly numkeys limits, one per key")]
    LimitCount,

    /// `RL.ALL` with a limit type it does not know.
    #[error("ERR unknown limit type: expected GCRA, TOKENBUCKET, FIXEDWINDOW, SLIDINGWINDOW, SLIDINGLOG, CONCURRENCY or POLICY name")]
    UnknownLimit,

    /// `RL.POLICY SET` with a limit type it does not know.
    #[error("ERR unknown limit type: expected GCRA, TOKENBUCKET, LEAKYBUCKET, FIXEDWINDOW, SLIDINGWINDOW, SLIDINGLOG or CONCURRENCY")]
    UnknownPolicyLimit,

    /// A policy name outside 1–64 characters of `A-Z a-z 0-9 _ . : -`.
    #[error("ERR policy names are 1 to 64 characters of A-Z a-z 0-9 _ . : -")]
    PolicyName,

    /// `RL.LIMIT` or `RL.ALL … POLICY name` naming no policy.
    #[error("ERR unknown policy '{name}'")]
    UnknownPolicy { name: PolicyName },

    /// A policy definition that is not `limit [SHADOW] [SOFT percent] [BLOCK duration]`.
    #[error("ERR syntax error: expected a limit (its type and parameters), then [SHADOW] [SOFT percent] [BLOCK duration] [RESET], each at most once")]
    PolicySyntax,

    /// `RL.POLICY LOAD` with words other than `[REPLACE] [RESET]` before the text.
    #[error("ERR syntax error: expected RL.POLICY LOAD [REPLACE] [RESET] text")]
    LoadSyntax,

    /// A client's `RL.POLICY SET` / `LOAD` that would change the algorithm
    /// (or its variant) of an existing policy, without `RESET`.
    #[error("ERR policy '{name}' is {from}; redefining it as {to} makes its limiters start over: add RESET to do so")]
    PolicyAlgorithmChange {
        name: PolicyName,
        from: &'static str,
        to: &'static str,
    },

    /// `RL.LIMIT` or `RL.ALL … POLICY name` naming a policy that was
    /// accepted where it was defined (an RDB, an AOF, the primary) but that
    /// this module cannot use (its log says why when it was loaded).
    #[error("ERR policy '{name}' was defined where it is valid but this module cannot use it (see the server log); redefine it with RL.POLICY SET")]
    PolicyUnusable { name: PolicyName },

    /// `RL.LIMIT` options other than `[TOKENS n | REFUND n] [PEEK]`.
    #[error("ERR syntax error: expected [TOKENS n | REFUND n] [PEEK] after the policy (BLOCK belongs to the policy: RL.POLICY SET … BLOCK duration)")]
    LimitSyntax,

    /// The module was loaded with `policies no` or `unloadable`.
    #[error("ERR policies are off: the module was loaded with policies no or unloadable (ratelimit.policies)")]
    PoliciesOff,

    /// `RL.ALL` with a leaky bucket.
    #[error("ERR LEAKYBUCKET cannot be part of RL.ALL: its 'allowed after a delay' has no all-or-nothing meaning")]
    LeakyBucketInAll,

    /// `RL.FIXEDWINDOW` with the other `ALIGN` than the key's state was
    /// written with (`stored` names that one).
    #[error("ERR this key's window was started with ALIGN {stored}: call it with ALIGN {stored}, or DEL the key first")]
    AlignMismatch { stored: &'static str },

    /// `RL.SLIDINGWINDOW` with or without `BUCKETS` on a key written the other way.
    #[error(
        "ERR this key holds a sliding window {stored}: call it the same way, or DEL the key first"
    )]
    BucketsMismatch { stored: &'static str },

    /// The key exists and is not of the type this command keeps its state in.
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,

    /// The key holds a string that this command did not write (e.g. `SET k foo`).
    #[error("ERR the value at this key is not {command} state (it was written by something else)")]
    InvalidState { command: &'static str },

    /// A key holds a value of the limiter's type that no call of the module
    /// could have written, found by a check that bounds the call's work
    /// (docs/DESIGN.md, "Bounded work per call"); `why` is one of the
    /// `NOT_OURS_*` texts. Nothing is written.
    #[error("ERR the value at key '{key}' is not {command} state ({why})")]
    ForeignState {
        key: KeyName,
        command: &'static str,
        why: &'static str,
    },

    /// An internal failure of the module, caught at the command boundary
    /// instead of aborting the server.
    #[error("ERR internal error in the ratelimit module ({what}); nothing was written")]
    Internal { what: &'static str },
}

/// [`Error::ForceTooMuch`]: the debt would outlast the bound every key keeps
/// ([`crate::time::MAX_PERIOD_US`]).
pub const FORCE_PAST_HORIZON: &str = "the debt would take more than 366 days to repay";
/// [`Error::ForceTooMuch`]: a sliding log holds at most twice its limit in
/// its window (its members' range and its call budget).
pub const FORCE_LOG_FULL: &str = "the log would hold more than twice its limit in its window";
/// [`Error::ForceTooMuch`]: a bucketed sliding window's sub-window counts are
/// 32-bit.
pub const FORCE_SUB_WINDOW: &str = "a sub-window would count more than 4294967295 tokens";
/// [`Error::ForcePlace`] of `RL.CONCURRENCY`.
pub const FORCE_CONCURRENCY: &str =
    "does not apply to RL.CONCURRENCY: a slot is held and released, not a cost";
/// [`Error::ForcePlace`] among `RL.ALL`'s options.
pub const FORCE_IN_ALL: &str =
    "belongs to a limit of RL.ALL: write it right after that limit's parameters";
/// [`Error::ForeignState`]: a time in the state lies beyond the horizon of
/// every time the module writes ([`crate::time::STATE_HORIZON_US`]).
pub const NOT_OURS_AHEAD: &str = "a time more than 366 days after the server clock";
/// [`Error::ForeignState`]: a sorted set longer than any sliding log
/// ([`crate::algorithm::sliding_log::SlidingLog::MAX_ENTRIES`]) or lease set
/// ([`crate::algorithm::concurrency::Concurrency::MAX_ENTRIES`], the same).
pub const NOT_OURS_TOO_LONG: &str = "more than 200001 entries";
/// [`Error::ForeignState`]: a sorted-set entry the call touched whose member
/// is not one its command writes: in a sliding log an integer below 200000
/// or `B`, in a lease set `<k>:<id>` (`k` 1 to 100000, `id` 1 to 1024
/// bytes) or `B`.
pub const NOT_OURS_MEMBER: &str = "a member the module did not write";

/// A key's name as an error shows it: as [`PolicyName`] (the first 64
/// bytes, `?` for bytes that are not printable ASCII, `...` when cut).
pub type KeyName = PolicyName;

/// A time zone's name as an error shows it: as [`PolicyName`].
pub type ZoneName = PolicyName;

/// A policy name in an error message: its first 64 bytes, kept inline so
/// that [`Error`] stays `Copy`; shown with anything but printable ASCII as
/// `?`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyName {
    bytes: [u8; 64],
    len: u8,
    cut: bool,
}

impl PolicyName {
    pub fn new(name: &[u8]) -> Self {
        let mut bytes = [0u8; 64];
        let len = name.len().min(64);
        bytes[..len].copy_from_slice(&name[..len]);
        Self {
            bytes,
            len: len as u8,
            cut: name.len() > 64,
        }
    }
}

impl std::fmt::Display for PolicyName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for &b in &self.bytes[..usize::from(self.len)] {
            let c = if b.is_ascii_graphic() { b as char } else { '?' };
            write!(f, "{c}")?;
        }
        if self.cut {
            write!(f, "...")?;
        }
        Ok(())
    }
}

/// Result type of the module's fallible functions.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Whether the stored value is not a state the called algorithm (or
    /// variant) reads: `WRONGTYPE`, "not … state", the other `ALIGN` or
    /// `BUCKETS`.
    pub fn is_state_mismatch(&self) -> bool {
        matches!(
            self,
            Error::WrongType
                | Error::InvalidState { .. }
                | Error::AlignMismatch { .. }
                | Error::BucketsMismatch { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_the_standard_prefixes() {
        assert_eq!(
            Error::WrongType.to_string(),
            "WRONGTYPE Operation against a key holding the wrong kind of value"
        );
        let all = [
            Error::NotAnInteger { arg: "max_burst" },
            Error::NotAFloat { arg: "period" },
            Error::OutOfRange {
                arg: "TOKENS",
                bound: ">= 1",
            },
            Error::BadPeriod { arg: "period" },
            Error::RateTooHigh {
                arg: "tokens_per_period",
            },
            Error::Overflow,
            Error::RefillTooLong,
            Error::LimitAboveSetting { max: 1000 },
            Error::OverBudget {
                entries: 4001,
                budget: 4000,
            },
            Error::Syntax,
            Error::DuplicateKey,
            Error::LimitCount,
            Error::UnknownLimit,
            Error::LeakyBucketInAll,
            Error::InvalidState { command: "RL.GCRA" },
            Error::ForeignState {
                key: KeyName::new(b"k"),
                command: "RL.GCRA",
                why: NOT_OURS_AHEAD,
            },
            Error::Internal { what: "panic" },
        ];
        for e in all {
            assert!(e.to_string().starts_with("ERR "), "{e}");
        }
        assert_eq!(
            Error::OutOfRange {
                arg: "TOKENS",
                bound: ">= 1"
            }
            .to_string(),
            "ERR TOKENS must be >= 1"
        );
    }

    #[test]
    fn a_foreign_state_names_the_key_and_why() {
        let e = Error::ForeignState {
            key: KeyName::new(b"user:\n1"),
            command: "RL.SLIDINGLOG",
            why: NOT_OURS_TOO_LONG,
        };
        assert_eq!(
            e.to_string(),
            "ERR the value at key 'user:?1' is not RL.SLIDINGLOG state (more than 200001 entries)"
        );
        assert!(!e.is_state_mismatch());
        let long = [b'k'; 70];
        let e = Error::ForeignState {
            key: KeyName::new(&long),
            command: "RL.GCRA",
            why: NOT_OURS_MEMBER,
        };
        assert_eq!(
            e.to_string(),
            format!(
                "ERR the value at key '{}...' is not RL.GCRA state (a member the module did not write)",
                "k".repeat(64)
            )
        );
    }
}
