//! The server's words for the limit grammar ([`crate::limit`]): a command
//! argument is a [`Word`] read by the server's own parsers, so integers and
//! floats are what Redis's own commands accept (signed 64-bit integers
//! without spaces, `+` or fractions; floats as `strtod` reads them, whole);
//! and this server's settings are the grammar's [`LocalBounds`].

use super::settings;
use crate::error::Result;
use crate::limit::{LocalBounds, Word};
use crate::server::string::Arg;

pub use crate::limit::{is_keyword, Origin};

/// The arguments of one call (or the words of a policy definition, as server
/// strings).
pub type Args<'a> = crate::limit::Args<'a, Arg<'a>>;

impl<'a> Word<'a> for Arg<'a> {
    #[inline]
    fn bytes(self) -> Result<&'a [u8]> {
        Arg::bytes(self)
    }
    #[inline]
    fn to_i64(self) -> Result<Option<i64>> {
        Arg::to_i64(self)
    }
    #[inline]
    fn to_f64(self) -> Result<Option<f64>> {
        Arg::to_f64(self)
    }
}

/// This server's settings as the grammar's bounds.
pub struct SettingsBounds;

impl LocalBounds for SettingsBounds {
    #[inline]
    fn sliding_log_max_limit(&self) -> i64 {
        settings::sliding_log_max_limit()
    }
    #[inline]
    fn sliding_log_call_budget(&self) -> i64 {
        settings::sliding_log_call_budget()
    }
    #[inline]
    fn concurrency_max_limit(&self) -> i64 {
        settings::concurrency_max_limit()
    }
}
