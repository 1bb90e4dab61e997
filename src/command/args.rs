//! Argument parsing, shared by every command.
//!
//! Integers and floats are parsed by the server's own parsers (see
//! [`crate::server::string::Arg`]), so they accept exactly what Redis's own
//! commands accept: signed 64-bit integers without spaces, `+` or fractions;
//! floats as `strtod` reads them, whole.

use super::limiter::{Op, Options};
use crate::error::{Error, Result};
use crate::server::string::Arg;
use crate::time::seconds_to_us;

/// Whether `word` is the keyword `name` (ASCII letters only), ignoring
/// case. Exact for letter-only keywords: `b | 0x20` equals a lowercase letter
/// only for that letter and its uppercase; a few instructions a byte, where
/// `eq_ignore_ascii_case` costs several times that on the hot path.
pub fn is_keyword(word: &[u8], name: &[u8]) -> bool {
    debug_assert!(name.iter().all(u8::is_ascii_alphabetic));
    word.len() == name.len() && word.iter().zip(name).all(|(w, n)| (w | 0x20) == (n | 0x20))
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

/// The arguments of one call, `argv[0]` being the command name.
pub struct Args<'a> {
    argv: &'a [Arg<'a>],
    origin: Origin,
}

impl<'a> Args<'a> {
    pub(crate) fn new(argv: &'a [Arg<'a>]) -> Self {
        Self {
            argv,
            origin: Origin::Client,
        }
    }

    /// Arguments of a definition from `origin` (a policy's limit).
    pub(crate) fn with_origin(argv: &'a [Arg<'a>], origin: Origin) -> Self {
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

    /// The options that may follow the parameters at `from`, in any order,
    /// each at most once: `[TOKENS n | REFUND n] [PEEK] [BLOCK duration]`.
    /// `TOKENS n` (default 1) is the cost of the request and `REFUND n` the
    /// tokens given back, integers ≥ 1; `BLOCK` takes seconds, parsed like
    /// periods. Anything else is a syntax error.
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
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::is_keyword;

    #[test]
    fn keywords_match_in_any_case_and_nothing_else() {
        for word in [&b"TOKENS"[..], b"tokens", b"ToKeNs"] {
            assert!(is_keyword(word, b"TOKENS"));
        }
        // Same length, one byte off by 0x20 in a non-letter, or another letter.
        for word in [
            &b"TOKEN"[..],
            b"TOKENSS",
            b"TOKEN\x13",
            b"TOKEN3",
            b"TOKENT",
            b"",
        ] {
            assert!(!is_keyword(word, b"TOKENS"), "{word:?}");
        }
        // Every byte that is not one of the two cases of a letter is refused.
        for b in 0..=255u8 {
            let expected = b == b'P' || b == b'p';
            assert_eq!(is_keyword(&[b], b"P"), expected, "{b}");
        }
    }
}
