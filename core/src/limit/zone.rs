//! A calendar window's `TZ zone`, which follows the window in every form
//! (`RL.FIXEDWINDOW`, `RL.ALL`, policies).

use super::{is_keyword, Args, Kind, Limit, LocalBounds, Word};
use crate::calendar::Zone;
use crate::error::{Error, Result};

impl Kind {
    /// [`Kind::parse`], then a calendar window's `TZ zone` right after the
    /// parameters: the limit, and how many words from `at` it took.
    ///
    /// Errors: those of [`Kind::parse`]; [`Error::ZoneWithoutCalendar`] for
    /// `TZ` after a window in seconds, [`Error::UnknownZone`] for a zone
    /// that is none, [`Error::Syntax`] for `TZ` without a zone.
    #[inline(always)]
    pub fn parse_zoned<'a, W: Word<'a>>(
        self,
        args: &Args<'a, W>,
        at: usize,
        bounds: &impl LocalBounds,
    ) -> Result<(Limit, usize)> {
        let limit = self.parse(args, at, bounds)?;
        let taken = self.params();
        // Only a calendar window reads a word more: a window in seconds
        // followed by `TZ` meets it where its caller reads on
        // ([`misplaced_zone`]).
        let Limit::FixedWindow(fw) = limit else {
            return Ok((limit, taken));
        };
        if fw.calendar_window().is_none() {
            return Ok((limit, taken));
        }
        match args.bytes(at + taken) {
            Ok(word) if is_keyword(word, b"TZ") => {
                let zone = Zone::parse(args.bytes(at + taken + 1)?)?;
                let fw = fw.in_zone(zone).ok_or(Error::ZoneWithoutCalendar)?;
                Ok((Limit::FixedWindow(fw), taken + 2))
            }
            _ => Ok((limit, taken)),
        }
    }
}

/// The error for a word a caller could not read after a limit: `TZ` (after
/// a window in seconds, since a calendar window takes its zone itself) is
/// [`Error::ZoneWithoutCalendar`]; anything else `otherwise`.
#[cold]
pub fn misplaced_zone(word: &[u8], otherwise: Error) -> Error {
    if is_keyword(word, b"TZ") {
        Error::ZoneWithoutCalendar
    } else {
        otherwise
    }
}
