//! Argument parsing, shared by every command.
//!
//! Integers and floats are parsed by the server's own parsers (see
//! [`crate::server::string::Arg`]), so they accept exactly what Redis's own
//! commands accept: signed 64-bit integers without spaces, `+` or fractions;
//! floats as `strtod` reads them, whole.

use crate::error::{Error, Result};
use crate::server::string::Arg;
use crate::time::seconds_to_us;

/// The arguments of one call, `argv[0]` being the command name.
pub struct Args<'a> {
    argv: &'a [Arg<'a>],
}

impl<'a> Args<'a> {
    pub(crate) fn new(argv: &'a [Arg<'a>]) -> Self {
        Self { argv }
    }

    /// Number of arguments, including the command name.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.argv.len()
    }

    /// Argument `i` (a key name, say).
    pub fn arg(&self, i: usize) -> Result<Arg<'a>> {
        self.argv.get(i).copied().ok_or(Error::Syntax)
    }

    /// The bytes of argument `i`.
    pub fn bytes(&self, i: usize) -> Result<&'a [u8]> {
        self.arg(i)?.bytes()
    }

    /// Argument `i` as a signed 64-bit integer, parsed as Redis parses its own.
    pub fn integer(&self, i: usize, name: &'static str) -> Result<i64> {
        self.arg(i)?
            .to_i64()?
            .ok_or(Error::NotAnInteger { arg: name })
    }

    /// Argument `i` as an integer ≥ `min`.
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

    /// Argument `i`, a duration in seconds (fractional allowed, parsed as
    /// Redis parses floats), as whole microseconds.
    pub fn seconds_as_us(&self, i: usize, name: &'static str) -> Result<i64> {
        let arg = self.arg(i)?;
        // Fast path: whole seconds, as most periods are. Any string the
        // integer parser accepts, the float parser reads as the same value
        // (exactly, within the accepted range), so the result is identical.
        if let Some(whole) = arg.to_i64()? {
            return seconds_to_us(whole as f64).ok_or(Error::BadPeriod { arg: name });
        }
        let secs = arg.to_f64()?.ok_or(Error::NotAFloat { arg: name })?;
        seconds_to_us(secs).ok_or(Error::BadPeriod { arg: name })
    }

    /// `key limit window [TOKENS n]`: `(limit, window in µs, cost)`.
    pub fn limit_window_cost(&self) -> Result<(i64, i64, i64)> {
        Ok((
            self.integer(2, "limit")?,
            self.seconds_as_us(3, "window")?,
            self.tokens_option(4)?,
        ))
    }

    /// The optional `[TOKENS n]` that may follow the parameters at `from`:
    /// the cost of this request, an integer ≥ 1, default 1. Anything else
    /// after the parameters is a syntax error.
    pub fn tokens_option(&self, from: usize) -> Result<i64> {
        match self.len().checked_sub(from) {
            Some(0) => Ok(1),
            Some(2) if self.bytes(from)?.eq_ignore_ascii_case(b"TOKENS") => {
                self.integer_at_least(from + 1, "TOKENS", 1, ">= 1")
            }
            _ => Err(Error::Syntax),
        }
    }
}
