//! The limit grammar: how the commands, `RL.ALL` and policies spell a limit
//! and its options, and their parse.
//!
//! ```text
//! GCRA          max_burst tokens_per_period period
//! TOKENBUCKET   capacity refill_tokens refill_period
//! LEAKYBUCKET   capacity leak_tokens leak_period
//! FIXEDWINDOW   limit window         (window: seconds, or DAY | WEEK | MONTH | YEAR [TZ zone])
//! SLIDINGWINDOW limit window
//! SLIDINGLOG    limit window
//! CONCURRENCY   limit lease            (then ACQUIRE id | RENEW id | RELEASE id)
//! options:      [TOKENS n | REFUND n] [FORCE] [PEEK] [BLOCK duration]
//! ```
//!
//! Periods and windows are seconds (fractional allowed), converted to whole
//! µs; counts are signed 64-bit integers. The words are read through
//! [`Word`], so that a server reads numbers exactly as its own commands do
//! (the module's words are the server's strings, parsed by the server's
//! `string2ll` and `strtod` rules); every bound is checked here, once.

use crate::algorithm::bucket_window::BucketWindow;
use crate::algorithm::cell::CellGcra;
use crate::algorithm::concurrency::Concurrency;
use crate::algorithm::fixed_window::FixedWindow;
use crate::algorithm::gcra::Gcra;
use crate::algorithm::leaky_bucket::LeakyBucket;
use crate::algorithm::plan::{Op, Options};
use crate::algorithm::sliding_log::SlidingLog;
use crate::algorithm::sliding_window::SlidingWindow;
use crate::algorithm::token_bucket::TokenBucket;
use crate::calendar::{Calendar, Unit, Zone};
use crate::error::{Error, Result};
use crate::time::seconds_to_us;

/// A calendar window's zone without `TZ`.
const UTC: Zone = Zone::Offset(0);

mod zone;
pub use crate::keyword::is_keyword;
pub use zone::misplaced_zone;

/// One argument, as the grammar reads it. Copy, and borrowing its bytes for
/// `'a` (the call).
pub trait Word<'a>: Copy {
    /// The argument's bytes.
    fn bytes(self) -> Result<&'a [u8]>;
    /// The argument as a signed 64-bit integer, `None` when it is not one
    /// (Redis's `string2ll` rules: no spaces, no `+`, no fraction).
    fn to_i64(self) -> Result<Option<i64>>;
    /// The argument as a float, `None` when it is not one (Redis's rules).
    fn to_f64(self) -> Result<Option<f64>>;
}

/// The bounds a server sets on definitions (its settings), checked for
/// definitions from a client only ([`Origin::checks_local_bounds`]).
pub trait LocalBounds {
    /// The largest `SLIDINGLOG` limit (`sliding-log-max-limit`).
    fn sliding_log_max_limit(&self) -> i64;
    /// The most sliding-log entries one call may touch
    /// (`sliding-log-call-budget`).
    fn sliding_log_call_budget(&self) -> i64;
    /// The largest `CONCURRENCY` limit (`concurrency-max-limit`).
    fn concurrency_max_limit(&self) -> i64;
}

/// Where a limit's definition comes from, which decides whether this
/// server's definition-time bounds apply (settings such as
/// `sliding-log-max-limit`). The one place such bounds are waived:
/// every bound a parser checks asks [`Origin::checks_local_bounds`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Origin {
    /// A client's command (`RL.*`, `RL.POLICY SET` / `LOAD`): every bound
    /// of this server applies.
    #[default]
    Client,
    /// A definition its master (or the server that wrote the file) already
    /// accepted: an RDB's policies, an AOF replay, the replication stream.
    /// This server's own bounds do not apply, so that policies load
    /// wherever their master accepted them.
    Accepted,
}

impl Origin {
    /// Whether this server's definition-time bounds apply.
    pub fn checks_local_bounds(self) -> bool {
        self == Origin::Client
    }
}

/// The arguments of one call (`argv[0]` being the command name), or the
/// words of one definition.
pub struct Args<'a, W> {
    argv: &'a [W],
    origin: Origin,
}

impl<'a, W: Word<'a>> Args<'a, W> {
    /// A client's arguments.
    pub fn new(argv: &'a [W]) -> Self {
        Self {
            argv,
            origin: Origin::Client,
        }
    }

    /// Arguments of a definition from `origin` (a policy's limit).
    pub fn with_origin(argv: &'a [W], origin: Origin) -> Self {
        Self { argv, origin }
    }

    /// Where these arguments come from.
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// Number of arguments, including the command name.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.argv.len()
    }

    /// Argument `i` (a key name, say). Missing: [`Error::Syntax`].
    #[inline]
    pub fn arg(&self, i: usize) -> Result<W> {
        self.argv.get(i).copied().ok_or(Error::Syntax)
    }

    /// The bytes of argument `i`.
    #[inline]
    pub fn bytes(&self, i: usize) -> Result<&'a [u8]> {
        self.arg(i)?.bytes()
    }

    /// Argument `i` as a signed 64-bit integer ([`Error::NotAnInteger`]
    /// names it `name`).
    #[inline]
    pub fn integer(&self, i: usize, name: &'static str) -> Result<i64> {
        self.arg(i)?
            .to_i64()?
            .ok_or(Error::NotAnInteger { arg: name })
    }

    /// Argument `i` as an integer ≥ `min` ([`Error::OutOfRange`] with
    /// `bound` otherwise).
    pub fn integer_at_least(
        &self,
        i: usize,
        name: &'static str,
        min: i64,
        bound: &'static str,
    ) -> Result<i64> {
        let v = self.integer(i, name)?;
        if v < min {
            return Err(Error::OutOfRange { arg: name, bound });
        }
        Ok(v)
    }

    /// Argument `i`, a duration in seconds (fractional allowed), as whole
    /// microseconds: [`Error::NotAFloat`] or [`Error::BadPeriod`].
    #[inline(always)]
    pub fn seconds_as_us(&self, i: usize, name: &'static str) -> Result<i64> {
        let arg = self.arg(i)?;
        // Fast path: whole seconds, as most periods are. Any string the
        // integer parser accepts, the float parser reads as the same value
        // (exactly, within the accepted range), so the result is identical.
        if let Some(whole) = arg.to_i64()? {
            return seconds_to_us(whole as f64).ok_or(Error::BadPeriod { arg: name });
        }
        // Hex floats (`0x10`) are refused on every server: Redis 7.0's parser
        // reads them, Valkey 9.1's does not, and the Functions library must
        // answer as the module does wherever it runs.
        if arg.bytes()?.iter().any(|&b| b == b'x' || b == b'X') {
            return Err(Error::NotAFloat { arg: name });
        }
        let secs = arg.to_f64()?.ok_or(Error::NotAFloat { arg: name })?;
        seconds_to_us(secs).ok_or(Error::BadPeriod { arg: name })
    }

    /// The options after the parameters at `from`, any order, each once:
    /// `[TOKENS n | REFUND n] [FORCE] [PEEK] [BLOCK duration]` (FORCE with
    /// PEEK or REFUND: [`Error::ForceSyntax`]); else [`Error::Syntax`].
    pub fn options(&self, from: usize) -> Result<Options> {
        self.options_with(from, |_, _| Ok(None))
    }

    /// [`Args::options`] plus a command's own options: `own(word, i)` is
    /// called with a word that is none of the common options, at index `i`,
    /// and answers how many arguments it took (`None`: a syntax error).
    pub fn options_with(
        &self,
        from: usize,
        mut own: impl FnMut(&[u8], usize) -> Result<Option<usize>>,
    ) -> Result<Options> {
        let mut options = Options::default();
        let (mut op_seen, mut block_seen) = (false, false);
        let mut i = from;
        while i < self.len() {
            let word = self.bytes(i)?;
            if is_keyword(word, b"TOKENS") || is_keyword(word, b"REFUND") {
                if op_seen {
                    return Err(Error::Syntax);
                }
                op_seen = true;
                options.op = if is_keyword(word, b"TOKENS") {
                    Op::Take(self.integer_at_least(i + 1, "TOKENS", 1, ">= 1")?)
                } else {
                    Op::Refund(self.integer_at_least(i + 1, "REFUND", 1, ">= 1")?)
                };
                i += 2;
            } else if is_keyword(word, b"PEEK") && !options.peek {
                options.peek = true;
                i += 1;
            } else if is_keyword(word, b"FORCE") && !options.force {
                options.force = true;
                i += 1;
            } else if is_keyword(word, b"BLOCK") && !block_seen {
                block_seen = true;
                options.block_us = Some(self.seconds_as_us(i + 1, "BLOCK")?);
                i += 2;
            } else {
                match own(word, i)? {
                    Some(taken) if taken > 0 => i += taken,
                    _ => return Err(Error::Syntax),
                }
            }
        }
        if options.force && (options.peek || matches!(options.op, Op::Refund(_))) {
            return Err(Error::ForceSyntax);
        }
        Ok(options)
    }
}

/// One limit: an algorithm with its validated parameters.
#[derive(Debug, Clone, Copy)]
pub enum Limit {
    Gcra(Gcra),
    TokenBucket(TokenBucket),
    LeakyBucket(LeakyBucket),
    FixedWindow(FixedWindow),
    SlidingWindow(SlidingWindow),
    /// `RL.SLIDINGWINDOW … BUCKETS k`.
    BucketWindow(BucketWindow),
    SlidingLog(SlidingLog),
    /// `RL.CONCURRENCY`: at most `limit` leases' slots at once.
    Concurrency(Concurrency),
    /// `CL.THROTTLE`: GCRA reading redis-cell's nanosecond states too.
    Throttle(CellGcra),
}

/// What a policy adds to its limit (`RL.POLICY SET … [SHADOW] [SOFT percent]
/// [BLOCK duration]`); all off for the limits of the `RL.*` commands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Modes {
    /// `SHADOW`: decide as usual, write nothing on a refusal, answer allowed.
    pub shadow: bool,
    /// `SOFT`: the limit given decides (scaled up); replies speak of this
    /// nominal limit (see [`crate::algorithm::policy::soft_reply`]).
    pub nominal_limit: Option<i64>,
    /// The policy's `BLOCK`, µs; with the call's `BLOCK` too, the longer one.
    pub block_us: Option<i64>,
    /// A policy's limit: a key holding another algorithm's state (the
    /// policy's algorithm changed, `RL.POLICY SET … RESET`) reads as no key,
    /// and a write replaces it.
    pub policy: bool,
    /// `FORCE`: the call's, not a policy's (a single command's option, or
    /// written after one limit of `RL.ALL`): record the cost whatever the
    /// limit says ([`crate::algorithm::forced`]).
    pub force: bool,
}

/// How `SOFT` scales a parameter of a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// A count (limit, capacity, tokens per period): scaled as is.
    Plain,
    /// GCRA's `max_burst`: its limit `max_burst + 1` is scaled.
    Burst,
}

/// A limit type of the grammar (`RL.ALL`, `RL.POLICY SET`, and each
/// command's parameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gcra,
    TokenBucket,
    LeakyBucket,
    FixedWindow,
    SlidingWindow,
    SlidingLog,
    Concurrency,
}

impl Kind {
    /// Which limit a keyword names (any case); `None` for anything else.
    #[inline(always)]
    pub fn of(word: &[u8]) -> Option<Kind> {
        // By length first: one case-insensitive comparison per call, each
        // with its keyword a constant (its windows unrolled).
        #[inline(always)]
        fn named(word: &[u8], kind: Kind) -> Option<Kind> {
            is_keyword(word, kind.name()).then_some(kind)
        }
        match word.len() {
            4 => named(word, Kind::Gcra),
            10 => named(word, Kind::SlidingLog),
            11 => match word[0] | 0x20 {
                b't' => named(word, Kind::TokenBucket),
                b'f' => named(word, Kind::FixedWindow),
                b'c' => named(word, Kind::Concurrency),
                _ => named(word, Kind::LeakyBucket),
            },
            13 => named(word, Kind::SlidingWindow),
            _ => None,
        }
    }

    /// The keyword, upper case.
    pub const fn name(self) -> &'static [u8] {
        match self {
            Kind::Gcra => b"GCRA",
            Kind::TokenBucket => b"TOKENBUCKET",
            Kind::LeakyBucket => b"LEAKYBUCKET",
            Kind::FixedWindow => b"FIXEDWINDOW",
            Kind::SlidingWindow => b"SLIDINGWINDOW",
            Kind::SlidingLog => b"SLIDINGLOG",
            Kind::Concurrency => b"CONCURRENCY",
        }
    }

    /// How many parameters follow the keyword (or the key, in a command).
    pub const fn params(self) -> usize {
        match self {
            Kind::Gcra | Kind::TokenBucket | Kind::LeakyBucket => 3,
            Kind::FixedWindow | Kind::SlidingWindow | Kind::SlidingLog | Kind::Concurrency => 2,
        }
    }

    /// The parameters `SOFT` scales (by position after the keyword); the
    /// first is the limit replies speak of.
    pub const fn counts(self) -> &'static [(usize, Count)] {
        match self {
            Kind::Gcra => &[(0, Count::Burst), (1, Count::Plain)],
            Kind::TokenBucket | Kind::LeakyBucket => &[(0, Count::Plain), (1, Count::Plain)],
            Kind::FixedWindow | Kind::SlidingWindow | Kind::SlidingLog | Kind::Concurrency => {
                &[(0, Count::Plain)]
            }
        }
    }

    /// Parses and validates this limit's parameters starting at argument
    /// `at`; a sliding log's limit also against `bounds` where the
    /// arguments' origin checks them.
    ///
    /// Errors: [`Error::NotAnInteger`], [`Error::NotAFloat`] or
    /// [`Error::BadPeriod`] naming the parameter; the algorithm's own
    /// (`new`: [`Error::OutOfRange`], [`Error::RateTooHigh`],
    /// [`Error::RefillTooLong`], [`Error::Overflow`]); for a sliding log,
    /// [`Error::LimitAboveSetting`] and [`Error::OverBudget`].
    #[inline(always)] // a command's kind is a constant: its match folds away
    pub fn parse<'a, W: Word<'a>>(
        self,
        args: &Args<'a, W>,
        at: usize,
        bounds: &impl LocalBounds,
    ) -> Result<Limit> {
        Ok(match self {
            Kind::Gcra => {
                let max_burst = args.integer(at, "max_burst")?;
                let tokens_per_period = args.integer(at + 1, "tokens_per_period")?;
                let period_us = args.seconds_as_us(at + 2, "period")?;
                Limit::Gcra(Gcra::new(max_burst, tokens_per_period, period_us)?)
            }
            Kind::TokenBucket => {
                let capacity = args.integer(at, "capacity")?;
                let refill_tokens = args.integer(at + 1, "refill_tokens")?;
                let refill_period_us = args.seconds_as_us(at + 2, "refill_period")?;
                Limit::TokenBucket(TokenBucket::new(capacity, refill_tokens, refill_period_us)?)
            }
            Kind::LeakyBucket => {
                let capacity = args.integer(at, "capacity")?;
                let leak_tokens = args.integer(at + 1, "leak_tokens")?;
                let leak_period_us = args.seconds_as_us(at + 2, "leak_period")?;
                Limit::LeakyBucket(LeakyBucket::new(capacity, leak_tokens, leak_period_us)?)
            }
            Kind::FixedWindow => {
                let limit = args.integer(at, "limit")?;
                Limit::FixedWindow(match args.seconds_as_us(at + 1, "window") {
                    Ok(window_us) => FixedWindow::new(limit, window_us)?,
                    Err(e @ Error::NotAFloat { .. }) => match Unit::of(args.bytes(at + 1)?) {
                        Some(unit) => FixedWindow::calendar(limit, Calendar { unit, zone: UTC })?,
                        None => return Err(e),
                    },
                    Err(e) => return Err(e),
                })
            }
            Kind::SlidingWindow => {
                let limit = args.integer(at, "limit")?;
                let window_us = args.seconds_as_us(at + 1, "window")?;
                Limit::SlidingWindow(SlidingWindow::new(limit, window_us)?)
            }
            Kind::SlidingLog => {
                let limit = args.integer(at, "limit")?;
                let window_us = args.seconds_as_us(at + 1, "window")?;
                Limit::SlidingLog(new_log(limit, window_us, args.origin(), bounds)?)
            }
            Kind::Concurrency => {
                let limit = args.integer(at, "limit")?;
                let lease_us = args.seconds_as_us(at + 1, "lease")?;
                let max = args.origin().checks_local_bounds();
                let max = max.then(|| bounds.concurrency_max_limit());
                Limit::Concurrency(Concurrency::within(limit, lease_us, max)?)
            }
        })
    }
}

/// Validates `limit window` of a sliding log, `limit` also against the
/// server's `sliding-log-max-limit` and `sliding-log-call-budget` (a limit
/// whose cheapest call, `TOKENS 1`, could not fit the budget) where `origin`
/// checks this server's bounds (the call-time budget check applies to every
/// call anyway).
pub fn new_log(
    limit: i64,
    window_us: i64,
    origin: Origin,
    bounds: &impl LocalBounds,
) -> Result<SlidingLog> {
    // The setting first: a limit above it reads the same whether or not it
    // is also above the setting's own maximum (`SlidingLog::MAX_LIMIT`).
    if origin.checks_local_bounds() {
        let max_limit = bounds.sliding_log_max_limit();
        if limit > max_limit {
            return Err(Error::LimitAboveSetting { max: max_limit });
        }
    }
    let log = SlidingLog::new(limit, window_us)?;
    if !origin.checks_local_bounds() {
        return Ok(log);
    }
    let (entries, budget) = (log.call_entries(1), bounds.sliding_log_call_budget());
    if entries > budget {
        return Err(Error::OverBudget { entries, budget });
    }
    Ok(log)
}

#[cfg(test)]
mod tests;
