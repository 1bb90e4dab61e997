//! Calendar windows (`RL.FIXEDWINDOW key limit DAY|WEEK|MONTH|YEAR [TZ zone]`)
//! at fixed instants: the module's clock set by `RL.DEBUGCLOCK`, the
//! library's by `NOW <µs>`. The issue's eight instants, a full window that
//! refuses until its boundary and admits just after it, `RL.ALL`, policies,
//! errors and `INFO`.

mod common;

use common::{call_err, engine, info_field, query, Engine, Reply, Server};

/// µs since the epoch of `2026-02-28T23:30:00Z` and the like (whole seconds).
fn instant(text: &str) -> i64 {
    let out = std::process::Command::new("date")
        .args(["-u", "-d", text, "+%s"])
        .output()
        .expect("date");
    let secs: i64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    secs * 1_000_000
}

/// The words of a call at `now_us`: the module's clock is set first; the
/// library takes `NOW now_us` last.
fn words_at(con: &mut redis::Connection, now_us: i64, args: &[&str]) -> Vec<String> {
    let mut words: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    match engine() {
        Engine::Module => {
            let _: () = redis::cmd("RL.DEBUGCLOCK")
                .arg(now_us.to_string())
                .query(con)
                .expect("RL.DEBUGCLOCK (a debug build of the module)");
        }
        Engine::Functions => words.extend(["NOW".to_string(), now_us.to_string()]),
    }
    words
}

/// Whether this test cannot set the clock: the module under test is a
/// release build, without `RL.DEBUGCLOCK` (`make test-release`); the test is
/// then skipped (`make test` runs it on the debug build).
fn no_clock(con: &mut redis::Connection) -> bool {
    if engine() != Engine::Module {
        return false;
    }
    let info: redis::Value = redis::cmd("COMMAND")
        .arg(&["INFO", "rl.debugclock"])
        .query(con)
        .unwrap();
    let missing = info == redis::Value::Array(vec![redis::Value::Nil]);
    if missing {
        eprintln!("skipped: the module under test is a release build without RL.DEBUGCLOCK");
    }
    missing
}

/// `args` at `now_us`: its five integers.
fn call_at(con: &mut redis::Connection, now_us: i64, args: &[&str]) -> Reply {
    let words = words_at(con, now_us, args);
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    common::call(con, &words)
}

/// `args` at `now_us`: its error text.
fn err_at(con: &mut redis::Connection, now_us: i64, args: &[&str]) -> String {
    let words = words_at(con, now_us, args);
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    call_err(con, &words)
}

/// Whether the engine under test takes IANA zones (the library refuses
/// them with a clear error, checked here).
fn takes_iana(con: &mut redis::Connection, now_us: i64) -> bool {
    if engine() == Engine::Module {
        return true;
    }
    let args = ["RL.FIXEDWINDOW", "iana", "1", "DAY", "TZ", "Europe/Paris"];
    assert_eq!(
        err_at(con, now_us, &args),
        "ERR time zone 'Europe/Paris' needs the module: the Functions library takes UTC and offsets +hh:mm / -hh:mm"
    );
    false
}

#[test]
fn the_issues_instants_reset_at_the_next_local_boundary() {
    let server = Server::start();
    let mut con = server.connect();
    if no_clock(&mut con) {
        return;
    }
    // (instant UTC, window, zone, ms to the next boundary).
    let cases = [
        ("2026-02-28 23:30", "MONTH", None, 1_800_000),
        ("2028-02-28 12:00", "month", None, 129_600_000),
        ("2026-11-29 23:00", "WEEK", None, 3_600_000),
        ("2026-12-31 23:59:59", "YEAR", Some("UTC"), 1_000),
        ("2026-06-15 18:00", "DAY", Some("+05:30"), 1_800_000),
        ("2026-03-28 23:30", "DAY", Some("Europe/Paris"), 81_000_000),
        ("2026-10-24 22:30", "DAY", Some("Europe/Paris"), 88_200_000),
        (
            "2026-11-01 03:00",
            "MONTH",
            Some("America/New_York"),
            3_600_000,
        ),
    ];
    for (i, (when, window, zone, reset_ms)) in cases.into_iter().enumerate() {
        let now_us = instant(&format!("{when} UTC"));
        let key = format!("k{i}");
        let mut args = vec!["RL.FIXEDWINDOW", &key, "1000", window];
        if let Some(zone) = zone {
            if zone.contains('/') && !takes_iana(&mut con, now_us) {
                continue;
            }
            args.extend(["TZ", zone]);
        }
        assert_eq!(
            call_at(&mut con, now_us, &args),
            [0, 1000, 999, -1, reset_ms],
            "{when} {window} {zone:?}"
        );
    }
}

#[test]
fn a_full_window_refuses_until_the_boundary_and_admits_just_after_it() {
    let server = Server::start();
    let mut con = server.connect();
    if no_clock(&mut con) {
        return;
    }
    // A +05:45 month (and a Paris one, where the engine takes IANA zones):
    // July ends at 2030-07-31T18:15:00Z in Kathmandu's offset. (Instants
    // after the server's clock: the server expires keys by its own.)
    let boundary_us = instant("2030-07-31 18:15 UTC");
    let mut zones = vec![("+05:45", boundary_us)];
    if takes_iana(&mut con, boundary_us) {
        zones.push(("Europe/Paris", instant("2030-07-31 22:00 UTC")));
    }
    for (zone, boundary_us) in zones {
        let key = format!("full:{zone}");
        let args = ["RL.FIXEDWINDOW", &key, "2", "MONTH", "TZ", zone];
        let hour_us = 3_600_000_000;
        assert_eq!(
            call_at(&mut con, boundary_us - hour_us, &args),
            [0, 2, 1, -1, 3_600_000]
        );
        assert_eq!(
            call_at(&mut con, boundary_us - hour_us, &args),
            [0, 2, 0, -1, 3_600_000]
        );
        assert_eq!(
            call_at(&mut con, boundary_us - 1_000, &args),
            [1, 2, 0, 1, 1],
            "{zone}: refused 1 ms before the boundary, retry in 1 ms"
        );
        let august_ms = 31 * 86_400_000;
        assert_eq!(
            call_at(&mut con, boundary_us, &args),
            [0, 2, 1, -1, august_ms],
            "{zone}: admitted at the boundary, for all of August"
        );
        // Stored as the window's start and count, expiring at its end.
        let value: String = query(&mut con, &["GET", &key]).unwrap();
        assert_eq!(value, format!("{boundary_us}:1"));
        let expire_ms: i64 = query(&mut con, &["PEXPIRETIME", &key]).unwrap();
        assert_eq!(expire_ms, boundary_us / 1000 + august_ms);
    }
}

#[test]
fn rl_all_takes_a_calendar_limit_with_its_zone() {
    let server = Server::start();
    let mut con = server.connect();
    if no_clock(&mut con) {
        return;
    }
    let now_us = instant("2026-02-28 23:30 UTC");
    // 00:30 on March 1st in Paris: March ends at 22:00 UTC (summer time),
    // 31 days less 1 h 30 min; at +01:00, 31 days less 30 min.
    let (zone, month_ms) = if takes_iana(&mut con, now_us) {
        ("Europe/Paris", 31 * 86_400_000 - 5_400_000)
    } else {
        ("+01:00", 31 * 86_400_000 - 1_800_000)
    };
    let words = words_at(
        &mut con,
        now_us,
        &[
            "RL.ALL",
            "2",
            "{a}m",
            "{a}d",
            "FIXEDWINDOW",
            "1000",
            "MONTH",
            "TZ",
            zone,
            "FIXEDWINDOW",
            "5",
            "day",
            "TOKENS",
            "2",
            "WITHLIMITS",
        ],
    );
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let reply: Vec<i64> = query(&mut con, &words).unwrap();
    assert_eq!(
        reply,
        [0, 5, 3, -1, 1_800_000, 2, 0, 1000, 998, -1, month_ms, 0, 5, 3, -1, 1_800_000]
    );
}

#[test]
fn zones_and_calendar_windows_are_checked() {
    let server = Server::start();
    let mut con = server.connect();
    if no_clock(&mut con) {
        return;
    }
    let now_us = instant("2026-05-05 12:00 UTC");
    let cases = [
        (
            vec!["RL.FIXEDWINDOW", "e", "5", "60", "TZ", "UTC"],
            "ERR syntax error: TZ takes a calendar window (DAY, WEEK, MONTH or YEAR), not one in seconds",
        ),
        (
            vec!["RL.FIXEDWINDOW", "e", "5", "DAY", "TZ", "+5:30"],
            "ERR unknown time zone '+5:30': expected an IANA zone name (Europe/Paris), UTC, or an offset +hh:mm / -hh:mm",
        ),
        (
            vec!["RL.FIXEDWINDOW", "e", "5", "FORTNIGHT"],
            "ERR window is not a valid float",
        ),
        (
            vec!["RL.FIXEDWINDOW", "e", "5", "MONTH", "ALIGN", "FIRST"],
            "ERR ALIGN FIRST takes a window in seconds: a calendar window starts at its boundaries",
        ),
        (
            vec!["RL.FIXEDWINDOW", "e", "5", "MONTH", "PEEK", "TZ", "+01:00"],
            "ERR syntax error: expected [TOKENS n | REFUND n] [PEEK] [BLOCK duration] [ALIGN EPOCH | ALIGN FIRST] after the parameters",
        ),
        (
            vec!["RL.ALL", "1", "e", "FIXEDWINDOW", "5", "60", "TZ", "UTC"],
            "ERR syntax error: TZ takes a calendar window (DAY, WEEK, MONTH or YEAR), not one in seconds",
        ),
    ];
    for (args, want) in cases {
        assert_eq!(err_at(&mut con, now_us, &args), want, "{args:?}");
    }
    if takes_iana(&mut con, now_us) {
        let args = ["RL.FIXEDWINDOW", "e", "5", "DAY", "TZ", "Mars/Olympus"];
        assert_eq!(
            err_at(&mut con, now_us, &args),
            "ERR unknown time zone 'Mars/Olympus': expected an IANA zone name (Europe/Paris), UTC, or an offset +hh:mm / -hh:mm"
        );
    }
    let exists: i64 = query(&mut con, &["EXISTS", "e"]).unwrap();
    assert_eq!(exists, 0, "nothing written on an error");
}

#[test]
fn peek_refund_and_block_work_on_a_calendar_window() {
    let server = Server::start();
    let mut con = server.connect();
    if no_clock(&mut con) {
        return;
    }
    let now_us = instant("2030-12-31 23:00 UTC"); // a year ends in an hour
    let args = |extra: &[&'static str]| {
        let mut a = vec!["RL.FIXEDWINDOW", "y", "3", "YEAR", "TZ", "-00:30"];
        a.extend_from_slice(extra);
        a
    };
    let to_end = 5_400_000; // 2027 starts at 00:30 UTC at -00:30
    assert_eq!(
        call_at(&mut con, now_us, &args(&["TOKENS", "3"])),
        [0, 3, 0, -1, to_end]
    );
    assert_eq!(
        call_at(&mut con, now_us, &args(&["PEEK"])),
        [1, 3, 0, to_end, to_end]
    );
    assert_eq!(
        call_at(&mut con, now_us, &args(&["REFUND", "1"])),
        [0, 3, 1, -1, to_end]
    );
    // A refusal with BLOCK locks the key out for 60 s, or to the window's
    // end if later: a token given back does not open it.
    let blocked = call_at(&mut con, now_us, &args(&["TOKENS", "2", "BLOCK", "60"]));
    assert_eq!(blocked[..2], [1, 3]);
    assert_eq!(call_at(&mut con, now_us + 1_000_000, &args(&[]))[0], 1);
}

#[test]
fn policies_take_a_calendar_window_with_its_zone() {
    if !common::module_only("policies are module data") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    if no_clock(&mut con) {
        return;
    }
    let _: () = query(
        &mut con,
        &[
            "RL.POLICY",
            "SET",
            "monthly",
            "FIXEDWINDOW",
            "1000",
            "month",
            "tz",
            "America/New_York",
            "SHADOW",
        ],
    )
    .unwrap();
    let words: Vec<String> = query(&mut con, &["RL.POLICY", "GET", "monthly"]).unwrap();
    assert_eq!(
        words.join(" "),
        "FIXEDWINDOW 1000 month TZ America/New_York SHADOW"
    );
    let now_us = instant("2026-11-01 03:00 UTC");
    assert_eq!(
        call_at(&mut con, now_us, &["RL.LIMIT", "u", "monthly"]),
        [0, 1000, 999, -1, 3_600_000]
    );
    let err: String = call_err(
        &mut con,
        &[
            "RL.POLICY",
            "SET",
            "bad",
            "FIXEDWINDOW",
            "10",
            "DAY",
            "TZ",
            "Nowhere/City",
        ],
    );
    assert!(
        err.starts_with("ERR unknown time zone 'Nowhere/City'"),
        "{err}"
    );
}

#[test]
fn info_says_which_tz_database_the_module_carries() {
    if !common::module_only("INFO is the module's") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    if no_clock(&mut con) {
        return;
    }
    let version = info_field(&mut con, "ratelimit", "ratelimit_tzdb_version");
    assert_eq!(version, ratelimit_core_tzdb_version());
}

/// The version the core crate was built with (`2026f`).
fn ratelimit_core_tzdb_version() -> &'static str {
    redis_ratelimit::calendar::TZDB_VERSION
}

#[test]
fn a_repeated_call_counts_in_the_same_calendar_window() {
    // The same arguments twice (the library's fast path sees them the second
    // time; a calendar window takes its full path): 2030-02-28 23:30 UTC.
    let server = Server::start();
    let mut con = server.connect();
    if no_clock(&mut con) {
        return;
    }
    let now_us = instant("2030-02-28 23:30 UTC");
    let args = ["RL.FIXEDWINDOW", "again", "1000", "MONTH"];
    for remaining in [999, 998, 997] {
        assert_eq!(
            call_at(&mut con, now_us, &args),
            [0, 1000, remaining, -1, 1_800_000]
        );
    }
    let value: String = query(&mut con, &["GET", "again"]).unwrap();
    assert_eq!(value, format!("{}:3", instant("2030-02-01 00:00 UTC")));
}

#[test]
fn force_on_a_calendar_window_overshoots_until_the_boundary_only() {
    let server = Server::start();
    let mut con = server.connect();
    if no_clock(&mut con) {
        return;
    }
    // A +05:45 month: a charge of 5 on a limit of 2 is recorded (FORCE),
    // refuses until the next local 1st, and is not carried past it.
    let boundary_us = instant("2030-07-31 18:15 UTC");
    let hour_us = 3_600_000_000;
    let args = ["RL.FIXEDWINDOW", "force:cal", "2", "MONTH", "TZ", "+05:45"];
    let mut forced = args.to_vec();
    forced.extend(["TOKENS", "5", "FORCE"]);
    assert_eq!(
        call_at(&mut con, boundary_us - hour_us, &forced),
        [1, 2, 0, 3_600_000, 3_600_000],
        "an overshoot: limited, retry and reset at the boundary"
    );
    let value: String = query(&mut con, &["GET", "force:cal"]).unwrap();
    assert_eq!(value, format!("{}:5", boundary_us - 31 * 86_400_000_000));
    assert_eq!(
        call_at(&mut con, boundary_us - 1_000, &args),
        [1, 2, 0, 1, 1],
        "refused until the boundary"
    );
    let august_ms = 31 * 86_400_000;
    assert_eq!(
        call_at(&mut con, boundary_us, &args),
        [0, 2, 1, -1, august_ms],
        "no debt carried into August"
    );
}
