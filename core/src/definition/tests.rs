//! Unit tests of policy definitions, with words read by Rust's parsers
//! (the module reads them as server strings; both accept the forms here).

use super::*;

#[derive(Clone, Copy)]
struct W<'a>(&'a [u8]);

impl<'a> Word<'a> for W<'a> {
    fn bytes(self) -> Result<&'a [u8]> {
        Ok(self.0)
    }
    fn to_i64(self) -> Result<Option<i64>> {
        Ok(std::str::from_utf8(self.0)
            .ok()
            .and_then(|s| s.parse().ok()))
    }
    fn to_f64(self) -> Result<Option<f64>> {
        Ok(std::str::from_utf8(self.0)
            .ok()
            .and_then(|s| s.parse().ok()))
    }
}

struct Plain;

impl ReadWords for Plain {
    type W<'a> = W<'a>;
    fn read<T>(
        &self,
        words: &[&[u8]],
        origin: Origin,
        parse: impl for<'a> FnOnce(&Args<'a, W<'a>>) -> Result<T>,
    ) -> Result<T> {
        let argv: Vec<W> = words.iter().map(|w| W(w)).collect();
        parse(&Args::with_origin(&argv, origin))
    }
}

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

fn def(text: &str, origin: Origin) -> Result<Definition> {
    let words: Vec<&[u8]> = text.split(' ').map(str::as_bytes).collect();
    define(&words, origin, &Plain, &Bounds)
}

#[test]
fn definitions_keep_their_words_in_canonical_order() {
    let cases = [
        ("gcra 9 10 1", "GCRA 9 10 1"),
        (
            "FIXEDWINDOW 100 60 BLOCK 30 shadow",
            "FIXEDWINDOW 100 60 SHADOW BLOCK 30",
        ),
        ("SLIDINGLOG 5 60 RESET SOFT 20", "SLIDINGLOG 5 60 SOFT 20"),
    ];
    for (text, canonical) in cases {
        let d = def(text, Origin::Client).unwrap();
        assert_eq!(d.text, canonical.as_bytes(), "{text}");
    }
    assert!(def("SLIDINGLOG 5 60 RESET", Origin::Client).unwrap().reset);
}

#[test]
fn soft_scales_every_count_and_replies_speak_of_the_nominal_limit() {
    // GCRA 9 10 1 SOFT 50: the limit 10 becomes 15 (max_burst 14), 10/s 15/s.
    let d = def("GCRA 9 10 1 SOFT 50", Origin::Client).unwrap();
    let rule = d.rule.unwrap();
    assert_eq!(rule.modes.nominal_limit, Some(10));
    let scaled = def("GCRA 14 15 1", Origin::Client).unwrap().rule.unwrap();
    assert_eq!(format!("{:?}", rule.limit), format!("{:?}", scaled.limit));
    assert!(rule.modes.policy && !rule.modes.shadow);
}

#[test]
fn bad_definitions_are_refused_from_clients_and_kept_from_their_primary() {
    let refused = [
        ("", Error::UnknownPolicyLimit),
        ("NOPE 1 2", Error::UnknownPolicyLimit),
        ("GCRA 1 2", Error::PolicySyntax),
        ("GCRA 1 2 3 SHADOW SHADOW", Error::PolicySyntax),
        (
            "GCRA 1 2 3 SOFT 0",
            Error::OutOfRange {
                arg: "SOFT",
                bound: ">= 1 and <= 1000",
            },
        ),
        (
            "SLIDINGLOG 5000 60",
            Error::LimitAboveSetting { max: 1_000 },
        ),
    ];
    for (text, want) in refused {
        assert_eq!(def(text, Origin::Client).err(), Some(want), "{text}");
    }
    // From the primary: kept, unusable, as its words.
    let words: Vec<&[u8]> = vec![b"GCRA", b"1", b"2", b"0"];
    let (name, d) = entry(b"p", &words, Origin::Accepted, &Plain, &Bounds).unwrap();
    assert_eq!(
        (name.as_slice(), d.text.as_slice()),
        (&b"p"[..], &b"GCRA 1 2 0"[..])
    );
    assert_eq!(d.rule.err(), Some(Error::BadPeriod { arg: "period" }));
    assert!(unusable_message(b"p", &def("GCRA 1 2 3", Origin::Client).unwrap()).is_none());
    // A bad name is refused from anywhere.
    assert_eq!(
        entry(b"a b", &words, Origin::Accepted, &Plain, &Bounds).err(),
        Some(Error::PolicyName)
    );
}

#[test]
fn a_text_parses_whole_or_names_its_first_bad_line() {
    let text = b"a GCRA 9 10 1\nb FIXEDWINDOW 100 60 SHADOW\n";
    let parsed = parse_text(text, Origin::Client, &Plain, &Bounds).unwrap();
    let names: Vec<&[u8]> = parsed.iter().map(|(_, n, _)| n.as_slice()).collect();
    assert_eq!(names, [&b"a"[..], b"b"]);
    let twice = b"a GCRA 9 10 1\na GCRA 9 10 1\n";
    assert_eq!(
        parse_text(twice, Origin::Client, &Plain, &Bounds)
            .err()
            .as_deref(),
        Some("ERR line 2: policy 'a' is defined twice")
    );
    let bad = b"a GCRA 9 10 1\nb GCRA x 10 1\n";
    assert_eq!(
        parse_text(bad, Origin::Client, &Plain, &Bounds)
            .err()
            .as_deref(),
        Some("ERR line 2: max_burst is not an integer or out of range")
    );
    let dumped = dump_text(
        parsed
            .iter()
            .map(|(_, n, d)| (n.as_slice(), d.text.as_slice())),
    );
    assert_eq!(dumped, b"a GCRA 9 10 1\nb FIXEDWINDOW 100 60 SHADOW\n");
}

#[test]
fn changing_an_algorithm_needs_reset_from_a_client_only() {
    let old = def("GCRA 9 10 1", Origin::Client).unwrap().rule;
    let new = def("FIXEDWINDOW 10 1", Origin::Client).unwrap();
    assert_eq!(
        check_change(b"p", &old, &new, Origin::Client, false),
        Err(Error::PolicyAlgorithmChange {
            name: PolicyName::new(b"p"),
            from: "GCRA",
            to: "FIXEDWINDOW",
        })
    );
    assert!(check_change(b"p", &old, &new, Origin::Client, true).is_ok());
    assert!(check_change(b"p", &old, &new, Origin::Accepted, false).is_ok());
    let same = def("GCRA 1 1 1", Origin::Client).unwrap();
    assert!(check_change(b"p", &old, &same, Origin::Client, false).is_ok());
}

#[test]
fn calendar_definitions_keep_their_zone_and_round_trip() {
    use crate::calendar::{Calendar, Unit, Zone};
    let cases = [
        ("FIXEDWINDOW 1000 MONTH", "FIXEDWINDOW 1000 MONTH"),
        (
            "fixedwindow 500 day tz Europe/Paris SHADOW",
            "FIXEDWINDOW 500 day TZ Europe/Paris SHADOW",
        ),
        ("FIXEDWINDOW 10 WEEK BLOCK 60 TZ -03:30", ""),
        (
            "FIXEDWINDOW 10 YEAR TZ +05:45 SOFT 50 BLOCK 60",
            "FIXEDWINDOW 10 YEAR TZ +05:45 SOFT 50 BLOCK 60",
        ),
    ];
    for (text, canonical) in cases {
        let d = def(text, Origin::Client);
        if canonical.is_empty() {
            // TZ follows the window, before the policy's options.
            assert_eq!(d.err(), Some(Error::PolicySyntax), "{text}");
            continue;
        }
        let d = d.unwrap();
        assert_eq!(d.text, canonical.as_bytes(), "{text}");
        // The text defines the same rule again (RDB, AOF, DUMP / LOAD).
        let again = def(canonical, Origin::Accepted).unwrap();
        assert_eq!(again.text, d.text);
        assert_eq!(
            format!("{:?}", again.rule.unwrap().limit),
            format!("{:?}", d.rule.unwrap().limit)
        );
    }
    // SOFT scales the limit and keeps the zone.
    let soft = def(
        "FIXEDWINDOW 10 YEAR TZ Asia/Kathmandu SOFT 50",
        Origin::Client,
    )
    .unwrap();
    let Limit::FixedWindow(fw) = soft.rule.unwrap().limit else {
        panic!("a fixed window");
    };
    assert_eq!(
        fw.calendar_window(),
        Some(Calendar {
            unit: Unit::Year,
            zone: Zone::Named("Asia/Kathmandu")
        })
    );
    assert_eq!(
        def("FIXEDWINDOW 10 60 TZ UTC", Origin::Client).err(),
        Some(Error::ZoneWithoutCalendar)
    );
    // A zone this module does not know, from the primary: kept, unusable.
    let words: Vec<&[u8]> = vec![b"FIXEDWINDOW", b"1", b"DAY", b"TZ", b"Mars/Olympus"];
    let (_, d) = entry(b"p", &words, Origin::Accepted, &Plain, &Bounds).unwrap();
    assert_eq!(d.text, b"FIXEDWINDOW 1 DAY TZ Mars/Olympus");
    assert!(matches!(d.rule, Err(Error::UnknownZone { .. })));
}
