//! Unit tests of the limit grammar, with words read by Rust's parsers (the
//! module reads the server's strings; both accept the forms used here).

use super::*;

/// A word of these tests.
#[derive(Clone, Copy)]
struct W<'a>(&'a str);

impl<'a> Word<'a> for W<'a> {
    fn bytes(self) -> Result<&'a [u8]> {
        Ok(self.0.as_bytes())
    }
    fn to_i64(self) -> Result<Option<i64>> {
        Ok(self.0.parse().ok())
    }
    fn to_f64(self) -> Result<Option<f64>> {
        Ok(self.0.parse().ok())
    }
}

/// This server's bounds: `sliding-log-max-limit` 1000, budget 4000.
struct Bounds;

impl LocalBounds for Bounds {
    fn sliding_log_max_limit(&self) -> i64 {
        1_000
    }
    fn sliding_log_call_budget(&self) -> i64 {
        4_000
    }
    fn concurrency_max_limit(&self) -> i64 {
        1000
    }
}

fn words(text: &str) -> Vec<W<'_>> {
    text.split(' ').map(W).collect()
}

fn parse(text: &str, origin: Origin) -> Result<Limit> {
    let argv = words(text);
    let args = Args::with_origin(&argv, origin);
    let kind = Kind::of(args.bytes(0)?).ok_or(Error::UnknownLimit)?;
    assert_eq!(args.len(), 1 + kind.params(), "{text}");
    kind.parse(&args, 1, &Bounds)
}

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

#[test]
fn keywords_compared_by_windows_match_byte_by_byte() {
    // Lengths 4 to 7: two 4-byte windows (the same one, overlapping, or
    // side by side); 8 to 17: one 8-byte window, two, two overlapping, three.
    for name in [
        &b"GCRA"[..],
        b"BLOCK",
        b"TOKENS",
        b"POLICYX",
        b"ABCDEFGH",
        b"WITHLIMITS",
        b"FIXEDWINDOW",
        b"SLIDINGWINDOW",
        b"ABCDEFGHIJKLMNOP",
        b"ABCDEFGHIJKLMNOPQ",
    ] {
        let lower = name.to_ascii_lowercase();
        assert!(is_keyword(name, name) && is_keyword(&lower, name));
        // Every byte at every position: only the letter's two cases match.
        for at in 0..name.len() {
            for b in 0..=255u8 {
                let mut word = lower.clone();
                word[at] = b;
                let expected = b.eq_ignore_ascii_case(&name[at]);
                assert_eq!(is_keyword(&word, name), expected, "{name:?} at {at}: {b}");
            }
        }
        assert!(!is_keyword(&lower[1..], name));
        assert!(!is_keyword(&[&lower[..], b"S"].concat(), name));
    }
}

#[test]
fn every_kind_is_named_by_its_keyword_in_any_case() {
    let kinds = [
        Kind::Gcra,
        Kind::TokenBucket,
        Kind::LeakyBucket,
        Kind::FixedWindow,
        Kind::SlidingWindow,
        Kind::SlidingLog,
    ];
    for kind in kinds {
        let name = kind.name();
        assert_eq!(Kind::of(name), Some(kind));
        assert_eq!(Kind::of(&name.to_ascii_lowercase()), Some(kind));
        assert_eq!(Kind::of(&name[1..]), None);
    }
    for word in [&b"POLICY"[..], b"GCRAS", b"TOKENBUCKEX", b"", b"XXXX"] {
        assert_eq!(Kind::of(word), None, "{word:?}");
    }
}

#[test]
fn limits_parse_as_their_commands_validate_them() {
    let ok = [
        "GCRA 99 100 60",
        "TOKENBUCKET 10 5 1.5",
        "LEAKYBUCKET 10 1 0.1",
        "FIXEDWINDOW 100 60",
        "SLIDINGWINDOW 100 60",
        "SLIDINGLOG 1000 60",
    ];
    for text in ok {
        assert!(parse(text, Origin::Client).is_ok(), "{text}");
    }
    let refused = [
        ("GCRA x 100 60", Error::NotAnInteger { arg: "max_burst" }),
        (
            "GCRA 1 y 60",
            Error::NotAnInteger {
                arg: "tokens_per_period",
            },
        ),
        ("GCRA 1 1 z", Error::NotAFloat { arg: "period" }),
        ("GCRA 1 1 0", Error::BadPeriod { arg: "period" }),
        (
            "TOKENBUCKET 10 5 -1",
            Error::BadPeriod {
                arg: "refill_period",
            },
        ),
        ("LEAKYBUCKET q 1 1", Error::NotAnInteger { arg: "capacity" }),
        (
            "FIXEDWINDOW 10 31622401",
            Error::BadPeriod { arg: "window" },
        ),
        ("SLIDINGWINDOW n 60", Error::NotAnInteger { arg: "limit" }),
        (
            "SLIDINGLOG 1001 60",
            Error::LimitAboveSetting { max: 1_000 },
        ),
    ];
    for (text, want) in refused {
        assert_eq!(parse(text, Origin::Client).err(), Some(want), "{text}");
    }
}

#[test]
fn accepted_definitions_skip_this_servers_bounds_only() {
    assert_eq!(
        parse("SLIDINGLOG 1001 60", Origin::Client).err(),
        Some(Error::LimitAboveSetting { max: 1_000 })
    );
    assert!(matches!(
        parse("SLIDINGLOG 1001 60", Origin::Accepted),
        Ok(Limit::SlidingLog(_))
    ));
    // The algorithm's own bounds hold wherever a definition comes from.
    assert_eq!(
        parse("SLIDINGLOG 10 0", Origin::Accepted).err(),
        Some(Error::BadPeriod { arg: "window" })
    );
}

#[test]
fn options_are_each_at_most_once() {
    let cases: [(&str, Result<Options>); 13] = [
        (
            "force TOKENS 600 BLOCK 2",
            Ok(Options {
                op: Op::Take(600),
                peek: false,
                block_us: Some(2_000_000),
                force: true,
            }),
        ),
        ("FORCE FORCE", Err(Error::Syntax)),
        ("FORCE PEEK", Err(Error::ForceSyntax)),
        ("PEEK TOKENS 2 Force", Err(Error::ForceSyntax)),
        ("REFUND 2 FORCE", Err(Error::ForceSyntax)),
        ("FORCE REFUND 1", Err(Error::ForceSyntax)),
        ("", Ok(Options::default())),
        (
            "TOKENS 3 PEEK",
            Ok(Options {
                op: Op::Take(3),
                peek: true,
                block_us: None,
                force: false,
            }),
        ),
        (
            "BLOCK 1.5 refund 2",
            Ok(Options {
                op: Op::Refund(2),
                peek: false,
                block_us: Some(1_500_000),
                force: false,
            }),
        ),
        ("TOKENS 1 REFUND 1", Err(Error::Syntax)),
        ("PEEK PEEK", Err(Error::Syntax)),
        (
            "TOKENS 0",
            Err(Error::OutOfRange {
                arg: "TOKENS",
                bound: ">= 1",
            }),
        ),
        ("WHAT", Err(Error::Syntax)),
    ];
    for (text, want) in cases {
        let mut argv = words("CMD key");
        if !text.is_empty() {
            argv.extend(words(text));
        }
        assert_eq!(Args::new(&argv).options(2), want, "{text}");
    }
}

#[test]
fn a_calendar_window_takes_a_zone_right_after_it() {
    use crate::calendar::{Calendar, Unit, Zone};
    let zoned = |text: &str| {
        let argv = words(text);
        let args = Args::new(&argv);
        Kind::FixedWindow
            .parse_zoned(&args, 1, &Bounds)
            .map(|(limit, taken)| match limit {
                Limit::FixedWindow(fw) => (fw.calendar_window(), taken),
                _ => panic!("{text}"),
            })
    };
    let month_in = |zone| {
        Some(Calendar {
            unit: Unit::Month,
            zone,
        })
    };
    assert_eq!(zoned("FIXEDWINDOW 10 60"), Ok((None, 2)));
    assert_eq!(zoned("FIXEDWINDOW 10 60 TOKENS 2"), Ok((None, 2)));
    assert_eq!(
        zoned("FIXEDWINDOW 10 month"),
        Ok((month_in(Zone::Offset(0)), 2))
    );
    assert_eq!(
        zoned("FIXEDWINDOW 10 MONTH tz Europe/Paris PEEK"),
        Ok((month_in(Zone::Named("Europe/Paris")), 4))
    );
    assert_eq!(
        zoned("FIXEDWINDOW 10 MONTH TZ -05:00"),
        Ok((month_in(Zone::Offset(-18_000)), 4))
    );
    // A window in seconds leaves `TZ` to its caller, which says what it is.
    assert_eq!(zoned("FIXEDWINDOW 10 60 TZ UTC"), Ok((None, 2)));
    assert_eq!(
        misplaced_zone(b"tz", Error::Syntax),
        Error::ZoneWithoutCalendar
    );
    assert_eq!(misplaced_zone(b"TZX", Error::Syntax), Error::Syntax);
    assert_eq!(zoned("FIXEDWINDOW 10 MONTH TZ"), Err(Error::Syntax));
    assert_eq!(
        zoned("FIXEDWINDOW 10 MONTH TZ Nowhere"),
        Err(Error::UnknownZone {
            zone: crate::error::ZoneName::new(b"Nowhere")
        })
    );
    assert_eq!(
        zoned("FIXEDWINDOW 10 FORTNIGHT"),
        Err(Error::NotAFloat { arg: "window" })
    );
    assert_eq!(
        zoned("FIXEDWINDOW 0 DAY"),
        Err(Error::OutOfRange {
            arg: "limit",
            bound: ">= 1"
        })
    );
}
