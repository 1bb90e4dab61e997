//! Keys the module did not write (issue 29): whatever a client with write
//! access to a limiter's key stores there, every call stays within its
//! budget (an empty SLOWLOG at a 5 ms threshold). A value that is not one
//! of the module's gets an error naming the key and nothing is written; a
//! log as long as a log can be is freed lazily (`UNLINK`); every expiry the
//! module writes is at most 366 days ahead (732 for a sliding window).

mod common;

use common::{aof_contents, call, call_err, fill_stale_log, query, slow_module_calls, Server};

const DAY_US: i64 = 86_400_000_000;
const DAY_MS: i64 = 86_400_000;

/// One test at a time: each fills keys with hundreds of thousands of
/// entries, and a server starved of CPU by the others' would log slow calls
/// that are not the module's.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A server that logs every call slower than 5 ms, with the AOF on (every
/// write propagates).
fn slowlog_server() -> Server {
    Server::start_with(&[
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        "no",
        // No rewrite forked meanwhile (its copy-on-write slows every write).
        "--auto-aof-rewrite-percentage",
        "0",
        "--slowlog-log-slower-than",
        "5000",
    ])
}

fn now_us(con: &mut redis::Connection) -> i64 {
    let t: Vec<String> = query(con, &["TIME"]).unwrap();
    t[0].parse::<i64>().unwrap() * 1_000_000 + t[1].parse::<i64>().unwrap()
}

fn assert_no_slow_calls(con: &mut redis::Connection) {
    let slow = slow_module_calls(con);
    assert!(slow.is_empty(), "calls slower than 5 ms: {slow:?}");
}

/// Runs `setup`, then `calls` with the slow log emptied, until the server
/// logs no module call slower than 5 ms, at most 3 times; returns how many
/// tries it took. The slow log times a call by the clock, and a loaded
/// shared machine can take the CPU from the server in the middle of one:
/// a refund that deletes a log of 200,000 entries, about 70 µs of work,
/// was logged at 3-8 ms under a load average of 7. A call whose own work
/// passes 5 ms does so on every try.
fn within_5_ms_in_one_of_3(
    con: &mut redis::Connection,
    mut setup: impl FnMut(&mut redis::Connection),
    mut calls: impl FnMut(&mut redis::Connection),
) -> usize {
    let mut seen = Vec::new();
    for tries in 1..=3 {
        setup(con);
        let _: () = query(con, &["SLOWLOG", "RESET"]).unwrap();
        calls(con);
        let slow = slow_module_calls(con);
        if slow.is_empty() {
            return tries;
        }
        seen.push(slow);
    }
    panic!("calls slower than 5 ms on each of 3 tries: {seen:?}");
}

#[test]
fn sorted_sets_with_foreign_members_are_refused_without_reading_them() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = slowlog_server();
    let mut con = server.connect();
    let big = "x".repeat(4_000);
    let keys: Vec<String> = (0..64).map(|i| format!("fm{i}")).collect();
    for key in &keys {
        // 200 stale entries with 4,000-byte members, then a newest entry
        // the module could have written (member 0, as stale).
        fill_stale_log(&mut con, key, 200, |i| format!("{big}{i}"));
    }
    let _: () = query(&mut con, &["SLOWLOG", "RESET"]).unwrap();

    // 64 × (31 + 31) = 3,968 entries: within the default call budget.
    let mut args = vec!["RL.ALL", "64"];
    args.extend(keys.iter().map(String::as_str));
    for _ in &keys {
        args.extend(["SLIDINGLOG", "31", "1"]);
    }
    args.extend(["TOKENS", "31"]);
    let err = call_err(&mut con, &args);
    assert_eq!(
        err,
        "ERR the value at key 'fm0' is not RL.SLIDINGLOG state (a member the module did not write)"
    );
    // Nothing was written anywhere.
    for key in &keys {
        assert_eq!(
            query::<i64>(&mut con, &["ZCARD", key]).unwrap(),
            201,
            "{key}"
        );
        assert_eq!(query::<i64>(&mut con, &["PTTL", key]).unwrap(), -1, "{key}");
    }
    // Each alone, and a refund, the same.
    for extra in [&["TOKENS", "31"][..], &["REFUND", "1"][..], &[][..]] {
        let mut args = vec!["RL.SLIDINGLOG", "fm7", "31", "1"];
        args.extend(extra);
        assert_eq!(
            call_err(&mut con, &args),
            "ERR the value at key 'fm7' is not RL.SLIDINGLOG state (a member the module did not write)",
            "{args:?}"
        );
    }
    // A foreign member among the live entries (counted from the newest).
    let now = now_us(&mut con);
    let live: Vec<String> = vec![
        "ZADD".into(),
        "fl".into(),
        (now - 3_000).to_string(),
        big.clone(),
        (now - 2_000).to_string(),
        "1".into(),
        (now - 1_000).to_string(),
        "2".into(),
    ];
    let live: Vec<&str> = live.iter().map(String::as_str).collect();
    let _: i64 = query(&mut con, &live).unwrap();
    // Refused: the entry whose leaving makes room is the foreign one.
    assert_eq!(
        call_err(&mut con, &["RL.SLIDINGLOG", "fl", "3", "60"]),
        "ERR the value at key 'fl' is not RL.SLIDINGLOG state (a member the module did not write)"
    );
    assert_eq!(query::<i64>(&mut con, &["ZCARD", "fl"]).unwrap(), 3);
    assert_no_slow_calls(&mut con);
}

#[test]
fn a_sorted_set_longer_than_any_log_is_refused_and_the_longest_log_is_freed_lazily() {
    if !common::module_only("it defines policies (module data)") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = slowlog_server();
    let mut con = server.connect();
    // A million stale entries and one live one: no log is that long.
    fill_stale_log(&mut con, "z1", 1_000_000, |i| (i + 1).to_string());
    let now = now_us(&mut con);
    let _: i64 = query(&mut con, &["ZADD", "z1", &now.to_string(), "0"]).unwrap();
    let _: () = query(&mut con, &["SLOWLOG", "RESET"]).unwrap();

    for extra in [&["REFUND", "1"][..], &[][..], &["PEEK"][..]] {
        let mut args = vec!["RL.SLIDINGLOG", "z1", "10", "60"];
        args.extend(extra);
        assert_eq!(
            call_err(&mut con, &args),
            "ERR the value at key 'z1' is not RL.SLIDINGLOG state (more than 200001 entries)",
            "{args:?}"
        );
    }
    assert_eq!(query::<i64>(&mut con, &["ZCARD", "z1"]).unwrap(), 1_000_001);
    assert_no_slow_calls(&mut con);

    // The refund empties the longest log there can be (every member below
    // 200,000, all stale but the newest, which is live): it is deleted as
    // UNLINK does, and propagated so.
    let longest = |con: &mut redis::Connection, key: &str| {
        fill_stale_log(con, key, 199_999, |i| (i + 1).to_string());
        let now = now_us(con);
        let _: i64 = query(con, &["ZADD", key, &now.to_string(), "0"]).unwrap();
        assert_eq!(query::<i64>(con, &["ZCARD", key]).unwrap(), 200_000);
    };
    let refunds = within_5_ms_in_one_of_3(
        &mut con,
        |con| longest(con, "z2"),
        |con| {
            let reply = call(con, &["RL.SLIDINGLOG", "z2", "10", "60", "REFUND", "1"]);
            assert_eq!(reply, [0, 10, 10, -1, 0]);
            assert_eq!(query::<i64>(con, &["EXISTS", "z2"]).unwrap(), 0);
        },
    );

    // A policy whose algorithm changed replaces such a log lazily too.
    let _: () = query(
        &mut con,
        &["RL.POLICY", "SET", "p", "SLIDINGLOG", "10", "60"],
    )
    .unwrap();
    let _: () = query(
        &mut con,
        &["RL.POLICY", "SET", "p", "GCRA", "9", "10", "1", "RESET"],
    )
    .unwrap();
    let replaces = within_5_ms_in_one_of_3(
        &mut con,
        |con| {
            let _: i64 = query(con, &["DEL", "z3"]).unwrap();
            longest(con, "z3");
        },
        |con| {
            let reply = call(con, &["RL.LIMIT", "z3", "p"]);
            assert_eq!(reply[0], 0, "{reply:?}");
            assert_eq!(query::<String>(con, &["TYPE", "z3"]).unwrap(), "string");
            // A policy over the million-entry set keeps its error.
            let err = call_err(con, &["RL.LIMIT", "z1", "p"]);
            assert!(err.starts_with("WRONGTYPE"), "{err}");
            assert_eq!(query::<i64>(con, &["ZCARD", "z1"]).unwrap(), 1_000_001);
        },
    );

    // One UNLINK per refund and per replacement (the DEL of a try's GCRA
    // state before the next is a DEL).
    let aof = String::from_utf8_lossy(&aof_contents(server.dir.path())).to_lowercase();
    assert_eq!(
        aof.matches("unlink").count(),
        refunds + replaces,
        "the AOF holds every UNLINK"
    );
}

#[test]
fn a_string_state_ahead_of_the_horizon_is_refused_and_left_alone() {
    if !common::module_only("it defines policies (module data)") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = slowlog_server();
    let mut con = server.connect();
    let now = now_us(&mut con);
    let ahead = now + 3_650 * DAY_US; // ten years
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        ("RL.GCRA", ahead.to_string(), vec!["4", "10", "1"]),
        ("RL.TOKENBUCKET", ahead.to_string(), vec!["4", "1", "1"]),
        ("RL.LEAKYBUCKET", ahead.to_string(), vec!["4", "1", "1"]),
        ("RL.FIXEDWINDOW", format!("{ahead}:1"), vec!["4", "10"]),
        (
            "RL.FIXEDWINDOW",
            format!("F{ahead}:1"),
            vec!["4", "10", "ALIGN", "FIRST"],
        ),
        ("RL.SLIDINGWINDOW", format!("{ahead}:0:1"), vec!["4", "10"]),
        (
            "CL.THROTTLE",
            (ahead as i128 * 1_000).to_string(),
            vec!["4", "10", "1"],
        ),
        // A block ending ten years ahead, over a valid state.
        ("RL.GCRA", format!("B{ahead};{now}"), vec!["4", "10", "1"]),
        ("RL.FIXEDWINDOW", format!("B{ahead};"), vec!["4", "10"]),
    ];
    for (i, (command, value, params)) in cases.iter().enumerate() {
        let key = format!("s{i}");
        let _: () = query(&mut con, &["SET", &key, value]).unwrap();
        let extras = if *command == "CL.THROTTLE" {
            vec![&[][..], &["1"][..]]
        } else {
            vec![&["REFUND", "1"][..], &[][..], &["PEEK"][..]]
        };
        for extra in extras {
            let mut args = vec![*command, key.as_str()];
            args.extend(params);
            args.extend(extra);
            assert_eq!(
                call_err(&mut con, &args),
                format!(
                    "ERR the value at key '{key}' is not {command} state (a time more than 366 days after the server clock)"
                ),
                "{args:?}"
            );
        }
        assert_eq!(query::<String>(&mut con, &["GET", &key]).unwrap(), *value);
        assert_eq!(query::<i64>(&mut con, &["PTTL", &key]).unwrap(), -1);
    }
    // A sliding log whose newest entry, or whose block, lies ten years ahead.
    let _: i64 = query(&mut con, &["ZADD", "l1", &ahead.to_string(), "0"]).unwrap();
    let _: i64 = query(&mut con, &["ZADD", "l2", &now.to_string(), "0"]).unwrap();
    let _: i64 = query(&mut con, &["ZADD", "l2", &ahead.to_string(), "B"]).unwrap();
    for key in ["l1", "l2"] {
        assert_eq!(
            call_err(&mut con, &["RL.SLIDINGLOG", key, "10", "60"]),
            format!(
                "ERR the value at key '{key}' is not RL.SLIDINGLOG state (a time more than 366 days after the server clock)"
            )
        );
        assert_eq!(query::<i64>(&mut con, &["PTTL", key]).unwrap(), -1);
    }
    // A policy over such a value keeps the error too.
    let _: () = query(&mut con, &["RL.POLICY", "SET", "g", "GCRA", "4", "10", "1"]).unwrap();
    let err = call_err(&mut con, &["RL.LIMIT", "s0", "g", "REFUND", "1"]);
    assert!(err.contains("key 's0'"), "{err}");
    // A long key name is cut in the message.
    let long = "k".repeat(100);
    let _: () = query(&mut con, &["SET", &long, &ahead.to_string()]).unwrap();
    let err = call_err(&mut con, &["RL.GCRA", &long, "4", "10", "1"]);
    assert!(err.contains(&format!("'{}...'", "k".repeat(64))), "{err}");
    assert_no_slow_calls(&mut con);
}

#[test]
fn every_expiry_the_module_writes_is_within_the_horizon() {
    let server = Server::start();
    let mut con = server.connect();
    let now = now_us(&mut con);
    let year = "31622400"; // 366 days, the longest window
                           // Window starts 300 days ahead (only a clock stepped back, or another
                           // writer, leaves those): a year-long window would keep the key 666 days.
    let start = now + 300 * DAY_US;
    let _: () = query(&mut con, &["SET", "fw", &format!("{start}:1")]).unwrap();
    assert_eq!(call(&mut con, &["RL.FIXEDWINDOW", "fw", "10", year])[0], 0);
    let _: () = query(&mut con, &["SET", "sw", &format!("{start}:0:1")]).unwrap();
    assert_eq!(
        call(&mut con, &["RL.SLIDINGWINDOW", "sw", "10", year])[0],
        0
    );
    let _: i64 = query(&mut con, &["ZADD", "sl", &start.to_string(), "0"]).unwrap();
    assert_eq!(call(&mut con, &["RL.SLIDINGLOG", "sl", "10", year])[0], 0);
    // A key another client set to expire in ten years, then blocked: the
    // block keeps the longer expiry, up to the horizon.
    assert_eq!(call(&mut con, &["RL.GCRA", "gb", "0", "1", "60"])[0], 0);
    assert_eq!(call(&mut con, &["RL.SLIDINGLOG", "lb", "1", "60"])[0], 0);
    for key in ["gb", "lb"] {
        let _: i64 = query(&mut con, &["PEXPIRE", key, &(3_650 * DAY_MS).to_string()]).unwrap();
    }
    assert_eq!(
        call(&mut con, &["RL.GCRA", "gb", "0", "1", "60", "BLOCK", "10"])[0],
        1
    );
    assert_eq!(
        call(&mut con, &["RL.SLIDINGLOG", "lb", "1", "60", "BLOCK", "10"])[0],
        1
    );

    for (key, horizon_days) in [
        ("fw", 366),
        ("sw", 732),
        ("sl", 366),
        ("gb", 366),
        ("lb", 366),
    ] {
        let pttl: i64 = query(&mut con, &["PTTL", key]).unwrap();
        assert!(
            // (+ 1 ms: the µs expiry is rounded up to the ms)
            pttl > 0 && pttl <= horizon_days * DAY_MS + 1,
            "{key}: PTTL {pttl} ms, more than {horizon_days} days"
        );
    }
}

/// A string another client stored, however long, is refused after reading
/// at most a few hundred bytes of it (issue 41): `FCALL rl_gcra` on a
/// 64 MiB string read all of it first (345–563 ms); every command over a
/// string state, alone and in `RL.ALL`, with `PEEK` and `REFUND`, answers
/// within 5 ms and writes nothing. Both engines.
#[test]
fn a_huge_foreign_string_is_refused_without_reading_it() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = slowlog_server();
    let mut con = server.connect();
    let cases: &[(&str, &[&str])] = &[
        ("RL.GCRA", &["4", "10", "1"]),
        ("RL.TOKENBUCKET", &["4", "1", "1"]),
        ("RL.LEAKYBUCKET", &["4", "1", "1"]),
        ("RL.FIXEDWINDOW", &["4", "10"]),
        ("RL.SLIDINGWINDOW", &["4", "10"]),
        ("RL.SLIDINGWINDOW", &["4", "10", "BUCKETS", "10"]),
        ("CL.THROTTLE", &["4", "10", "1"]),
    ];
    // 64 MiB and 1 MB, written by SETRANGE (no 64 MiB argument to send).
    for (key, last) in [("hs64", 64 * 1024 * 1024 - 1), ("hs1", 999_999)] {
        let _: i64 = query(&mut con, &["SETRANGE", key, &last.to_string(), "7"]).unwrap();
    }
    let _: () = query(&mut con, &["SLOWLOG", "RESET"]).unwrap();
    for key in ["hs64", "hs1"] {
        for (command, params) in cases {
            let extras: &[&[&str]] = if *command == "CL.THROTTLE" {
                &[&[]]
            } else {
                &[&[], &["PEEK"], &["REFUND", "1"], &["BLOCK", "5"]]
            };
            for extra in extras {
                let mut args = vec![*command, key];
                args.extend_from_slice(params);
                args.extend_from_slice(extra);
                let err = call_err(&mut con, &args);
                assert!(
                    err.starts_with("ERR the value at this key is not "),
                    "{args:?}: {err}"
                );
            }
        }
        let err = call_err(&mut con, &["RL.ALL", "1", key, "GCRA", "4", "10", "1"]);
        assert!(
            err.starts_with("ERR the value at this key is not RL.GCRA"),
            "{err}"
        );
        assert_eq!(query::<i64>(&mut con, &["PTTL", key]).unwrap(), -1);
    }
    assert_eq!(
        query::<i64>(&mut con, &["STRLEN", "hs64"]).unwrap(),
        64 * 1024 * 1024
    );
    let slow = common::slow_calls_of_either_engine(&mut con);
    assert!(slow.is_empty(), "calls slower than 5 ms: {slow:?}");
}

/// `RL.ALL 64 × SLIDINGLOG 31 60 TOKENS 31` over logs of 1,000 stale
/// entries removed up to `31 + 128` per log, 10,176 in all, which the
/// budget did not count (issue 41: 21 ms under load): the stale entries a
/// call removes now count against `sliding-log-call-budget`, shared by all
/// its limits in order (here 4,000 − 3,968 = 32, all from the first log);
/// the rest stays and never counts. Both engines, the same for lease sets.
/// (Timed by `make bench`: a debug build takes longer than 5 ms for 64
/// logs of 31 already.)
#[test]
fn stale_removals_share_the_call_budget() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start();
    let mut con = server.connect();
    let logs: Vec<String> = (0..64).map(|i| format!("{{s}}log{i}")).collect();
    let leases: Vec<String> = (0..64).map(|i| format!("{{s}}lease{i}")).collect();
    for key in &logs {
        // Members 128 … 1127: never ones a limit of 31 reuses (its members
        // cycle below 128), so every entry removed is one removed as stale.
        fill_stale_log(&mut con, key, 1_000, |i| (128 + i).to_string());
    }
    for key in &leases {
        // 1,001 leases that expired an hour ago.
        fill_stale_log(&mut con, key, 1_000, |i| format!("1:x{i}"));
        let _: i64 = query(&mut con, &["ZREM", key, "0"]).unwrap();
        let _: i64 = query(&mut con, &["ZADD", key, "1", "1:old"]).unwrap();
        let _: i64 = query(&mut con, &["ZREM", key, "1:old"]).unwrap();
    }
    let zcards = |con: &mut redis::Connection, keys: &[String]| -> Vec<i64> {
        keys.iter()
            .map(|k| query::<i64>(con, &["ZCARD", k]).unwrap())
            .collect()
    };

    // 64 × (31 + 31) = 3,968 entries: 32 stale ones left to remove.
    let mut args = vec!["RL.ALL", "64"];
    args.extend(logs.iter().map(String::as_str));
    for _ in &logs {
        args.extend(["SLIDINGLOG", "31", "60"]);
    }
    args.extend(["TOKENS", "31"]);
    let reply: Vec<i64> = query(&mut con, &args).unwrap();
    assert_eq!(reply[..3], [0, 31, 0], "{reply:?}");
    let mut expected = vec![1_001 + 31; 64];
    expected[0] -= 32;
    assert_eq!(zcards(&mut con, &logs), expected);
    // The stale entries left never count: full, exactly.
    let mut again = args.clone();
    *again.last_mut().unwrap() = "1";
    let reply: Vec<i64> = query(&mut con, &again).unwrap();
    assert_eq!(reply[..3], [1, 31, 0], "{reply:?}");
    // 40 − 31 − 1 (what a call of one would leave).
    assert_eq!(
        call(&mut con, &["RL.SLIDINGLOG", &logs[5], "40", "60", "PEEK"])[2],
        8
    );
    assert_eq!(zcards(&mut con, &logs), expected);
    // The next allowed call removes the next 32 (as the budget leaves).
    let mut one = vec!["RL.ALL", "64"];
    one.extend(logs.iter().map(String::as_str));
    for _ in &logs {
        one.extend(["SLIDINGLOG", "40", "60"]);
    }
    one.extend(["TOKENS", "1"]);
    // 64 × (40 + 1) = 2,624 entries: 1,376 stale ones may go, up to 129
    // per log, from the first log on.
    let reply: Vec<i64> = query(&mut con, &one).unwrap();
    assert_eq!(reply[..3], [0, 40, 8], "{reply:?}");
    let mut left = 1_376;
    for (i, e) in expected.iter_mut().enumerate() {
        let stale = if i == 0 { 1_001 - 32 } else { 1_001 };
        let removed = stale.min(129).min(left);
        left -= removed;
        *e += 1 - removed;
    }
    assert_eq!(zcards(&mut con, &logs), expected);

    // Lease sets: 64 × ACQUIRE … TOKENS 31, 32 expired leases removed.
    let mut args = vec!["RL.ALL", "64"];
    args.extend(leases.iter().map(String::as_str));
    for _ in &leases {
        args.extend(["CONCURRENCY", "31", "60", "ACQUIRE", "a"]);
    }
    args.extend(["TOKENS", "31"]);
    let reply: Vec<i64> = query(&mut con, &args).unwrap();
    assert_eq!(reply[..3], [0, 31, 0], "{reply:?}");
    let mut expected = vec![1_000 + 31; 64];
    expected[0] -= 32;
    assert_eq!(zcards(&mut con, &leases), expected);
}

/// The sliding-log calls of [`stale_removals_share_the_call_budget`],
/// timed: `RL.ALL` over 64 logs that each hold 1,000 stale entries (members
/// 1 … 1,000, as issue 41 measured), at the default budget (64 × SLIDINGLOG
/// 31 taking 31; 64 × SLIDINGLOG 1 taking 1, which removes the most stale
/// entries the budget allows, 3,872), answer within 5 ms: the library took
/// 6.4 and 7.5 ms, reading every member it checked through `tonumber` and
/// formatting every member it wrote. The call's own work is timed: the
/// server has already served such calls (the first calls after a start
/// grow its heap, page by page), and each call is timed up to five times on
/// keys prepared alike, the fastest counting (the others may have been
/// preempted on a shared machine). The library only: its time does not
/// depend on how the module was built, and a debug build of the module
/// takes longer than 5 ms on these calls (`make bench` times the module's
/// release build: its worst-call rows). Not here: the same over lease sets,
/// or over logs whose every added entry is a new member (the sets' tables
/// double), where the server's own inserts take most of the time: `make
/// bench` rows, docs/operations.md.
#[test]
fn rl_all_over_64_stale_logs_answers_within_5_ms() {
    if common::engine() != common::Engine::Functions {
        eprintln!("skipped for the module: timed by make bench (a debug build is slower)");
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = slowlog_server();
    let mut con = server.connect();
    let keys: Vec<String> = (0..64).map(|i| format!("{{t}}{i}")).collect();
    // Fills the 64 keys with 1,000 entries each, scored an hour ago.
    let fill = |con: &mut redis::Connection| {
        // SYNC: no background thread freeing the last keys meanwhile.
        let _: () = query(con, &["FLUSHALL", "SYNC"]).unwrap();
        for key in &keys {
            fill_stale_log(con, key, 1_000, |i| (1 + i).to_string());
        }
    };
    let all = |limit: &[&str], tokens: &str| -> Vec<String> {
        let mut args = vec!["RL.ALL".to_string(), "64".into()];
        args.extend(keys.iter().cloned());
        for _ in &keys {
            args.extend(limit.iter().map(|s| s.to_string()));
        }
        args.extend(["TOKENS".into(), tokens.into()]);
        args
    };
    let calls = [
        (all(&["SLIDINGLOG", "31", "60"], "31"), 31),
        (all(&["SLIDINGLOG", "1", "60"], "1"), 1),
    ];
    // The server's first such calls (its heap grows), untimed.
    for (args, _) in &calls {
        fill(&mut con);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let _: Vec<i64> = query(&mut con, &args).unwrap();
    }
    for (args, limit) in &calls {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut slow = Vec::new();
        for _ in 0..5 {
            fill(&mut con);
            let _: () = query(&mut con, &["SLOWLOG", "RESET"]).unwrap();
            let reply: Vec<i64> = query(&mut con, &args).unwrap();
            assert_eq!(reply[..3], [0, *limit, 0], "{:?}", &args[..4]);
            slow = common::slow_calls_of_either_engine(&mut con);
            if slow.is_empty() {
                break;
            }
        }
        let slow: Vec<_> = slow.iter().map(|(c, us)| (&c[..30], us)).collect();
        assert!(
            slow.is_empty(),
            "{:?} slower than 5 ms five times: {slow:?}",
            &args[66..69]
        );
    }
}

/// A sorted-set member another client wrote, however long, is read at most
/// once per call (issue 41): no engine can learn a member's length without
/// copying it (the module's floor: one copy, about 1 ms per MiB; the
/// library's: one read into Lua, about 4–5 ms per MiB), so each reads it
/// once and answers. The library read an 8 MiB member three times through
/// `rl_slidinglog` (its fast path's walk, then the full path's newest two
/// entries and walk) and twice through `rl_all`; and twice through each
/// operation of `rl_concurrency` (its fast path reads the lease set whole,
/// then the full path read the member again), live or expired. Each call
/// timed against one read of the same member into Lua (`EVAL`) timed just
/// before it, the fastest of three each, three tries (a second read costs
/// 1.8–2x every time, a busy machine only now and then). The library only (the module's one copy is its API's; it
/// answers the same errors, tests/differential.rs).
#[test]
fn a_long_foreign_member_is_read_at_most_once() {
    if common::engine() != common::Engine::Functions {
        eprintln!("skipped for the module: RedisModule_ZsetRangeCurrentElement copies once");
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = slowlog_server();
    let mut con = server.connect();
    let _: () = query(&mut con, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]).unwrap();
    let now = now_us(&mut con);
    // The long member the oldest entry, then one the module could have
    // written, newer.
    let _: () = query(
        &mut con,
        &[
            "EVAL",
            "redis.call('ZADD', KEYS[1], ARGV[1], string.rep('x', 8388608))",
            "1",
            "big",
            &(now - 3_600_000_000).to_string(),
        ],
    )
    .unwrap();
    let _: i64 = query(&mut con, &["ZADD", "big", &(now - 1_000).to_string(), "0"]).unwrap();
    // Lease sets: the long member live (another lease's slot after it, the
    // newest) or expired (a live slot after it).
    for (key, at) in [("live", now + 10_000_000), ("expired", now - 3_600_000_000)] {
        let _: () = query(
            &mut con,
            &[
                "EVAL",
                "redis.call('ZADD', KEYS[1], ARGV[1], string.rep('x', 8388608))",
                "1",
                key,
                &at.to_string(),
            ],
        )
        .unwrap();
        let _: i64 = query(
            &mut con,
            &["ZADD", key, &(now + 20_000_000).to_string(), "1:a"],
        )
        .unwrap();
    }
    // The fastest of three calls, in µs (SLOWLOG logs every call here; a
    // script's own calls come first, the script's last).
    let fastest = |con: &mut redis::Connection, args: &[&str]| -> i64 {
        (0..3)
            .map(|_| {
                let _: () = query(con, &["SLOWLOG", "RESET"]).unwrap();
                let _: redis::Value = redis::cmd(args[0])
                    .arg(&args[1..])
                    .query(con)
                    .unwrap_or(redis::Value::Nil);
                let entry: Vec<redis::Value> = query(con, &["SLOWLOG", "GET", "1"]).unwrap();
                match entry.first() {
                    Some(redis::Value::Array(fields)) => match fields.get(2) {
                        Some(redis::Value::Int(us)) => *us,
                        _ => i64::MAX,
                    },
                    _ => i64::MAX,
                }
            })
            .min()
            .unwrap()
    };
    let read_once = [
        "EVAL",
        "return #redis.call('ZRANGE', KEYS[1], 0, 0)[1]",
        "1",
        "big",
    ];
    let mut commands = vec![
        vec!["FCALL", "rl_slidinglog", "1", "big", "10", "60"],
        vec!["FCALL", "rl_all", "1", "big", "SLIDINGLOG", "10", "60"],
    ];
    for key in ["live", "expired"] {
        for op in ["ACQUIRE", "RENEW", "RELEASE"] {
            commands.push(vec![
                "FCALL",
                "rl_concurrency",
                "1",
                key,
                "10",
                "60",
                op,
                "a",
            ]);
        }
        commands.push(vec![
            "FCALL",
            "rl_concurrency_ro",
            "1",
            key,
            "10",
            "60",
            "ACQUIRE",
            "b",
        ]);
        commands.push(vec![
            "FCALL",
            "rl_all",
            "1",
            key,
            "CONCURRENCY",
            "10",
            "60",
            "ACQUIRE",
            "b",
        ]);
    }
    for command in &commands {
        let (key, kind) = match command[3] {
            "big" => ("big", "RL.SLIDINGLOG"),
            key => (key, "RL.CONCURRENCY"),
        };
        assert_eq!(
            call_err(&mut con, command),
            format!("ERR the value at key '{key}' is not {kind} state (a member the module did not write)"),
            "{command:?}"
        );
        // Beside one read timed just before it; a busy machine may slow
        // either, a second read never leaves: three tries.
        let mut times = Vec::new();
        for _ in 0..3 {
            let read = fastest(&mut con, &read_once);
            let took = fastest(&mut con, command);
            times.push((took, read));
            if took * 2 < read * 3 {
                break;
            }
        }
        let (took, read) = times[times.len() - 1];
        assert!(
            took * 2 < read * 3,
            "{command:?} took longer than 1.5 reads of the member three times (µs, call and read): {times:?}"
        );
    }
    for key in ["big", "live", "expired"] {
        assert_eq!(query::<i64>(&mut con, &["ZCARD", key]).unwrap(), 2);
        assert_eq!(query::<i64>(&mut con, &["PTTL", key]).unwrap(), -1);
    }
}

/// Each sorted-set read a call made (SLOWLOG at 0 logs every command a
/// script runs, before the script's own entry), run again by one `EVAL`
/// (the set is unchanged: the call refused it): how many members longer
/// than 4 KiB those reads copied into the script.
fn long_members_copied(con: &mut redis::Connection, args: &[&str]) -> i64 {
    let _: () = query(con, &["SLOWLOG", "RESET"]).unwrap();
    let _: redis::Value = redis::cmd(args[0])
        .arg(&args[1..])
        .query(con)
        .unwrap_or(redis::Value::Nil);
    let entries: Vec<redis::Value> = query(con, &["SLOWLOG", "GET", "-1"]).unwrap();
    let text = |v: &redis::Value| match v {
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        redis::Value::SimpleString(s) => s.clone(),
        other => panic!("a SLOWLOG argument: {other:?}"),
    };
    let mut copied = 0;
    for entry in entries {
        let redis::Value::Array(fields) = entry else {
            panic!("a SLOWLOG entry: {entry:?}")
        };
        let redis::Value::Array(argv) = &fields[3] else {
            panic!("SLOWLOG arguments: {fields:?}")
        };
        let argv: Vec<String> = argv.iter().map(text).collect();
        let name = argv[0].to_ascii_uppercase();
        // Every command that answers members: the ranges, the scans.
        let answers_members = name.starts_with("ZRANGE")
            || name.starts_with("ZREVRANGE")
            || matches!(
                name.as_str(),
                "ZSCAN" | "ZRANDMEMBER" | "ZUNION" | "ZINTER" | "ZDIFF"
            );
        if !answers_members {
            continue;
        }
        let mut replay = vec![
            "EVAL",
            "local n = 0 for _, v in ipairs(redis.call(unpack(ARGV))) do \
             if type(v) == 'string' and #v > 4096 then n = n + 1 end end return n",
            "0",
        ];
        replay.extend(argv.iter().map(String::as_str));
        copied += query::<i64>(con, &replay).unwrap();
    }
    copied
}

/// The long member the newest entry (or among the newest the call reads)
/// of a full log, or of one that is not full, or stale: the library's
/// `rl_slidinglog` copied it twice (issue 41), its fast path's read of the
/// newest entries, then the full path's zset_open or its retry lookup
/// (`log_nth_newest`) read it again; `FORCE` read a stale one twice (each
/// count fetched the old entries anew). Counted, not timed: each read
/// the call ran (SLOWLOG) replayed. Every call answers the module's error
/// and copies the member once. The library only (the module's reads are
/// its API's, not logged).
#[test]
fn a_long_newest_member_is_copied_once() {
    if common::engine() != common::Engine::Functions {
        eprintln!("skipped for the module: its reads are not commands");
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = slowlog_server();
    let mut con = server.connect();
    let _: () = query(&mut con, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]).unwrap();
    let _: () = query(&mut con, &["CONFIG", "SET", "slowlog-max-len", "4096"]).unwrap();
    let now = now_us(&mut con);
    let long = |con: &mut redis::Connection, key: &str, at: i64| {
        let _: () = query(
            con,
            &[
                "EVAL",
                "redis.call('ZADD', KEYS[1], ARGV[1], string.rep('x', 1048576))",
                "1",
                key,
                &at.to_string(),
            ],
        )
        .unwrap();
    };
    let add = |con: &mut redis::Connection, key: &str, at: i64, member: &str| {
        let _: i64 = query(con, &["ZADD", key, &at.to_string(), member]).unwrap();
    };
    const S: i64 = 1_000_000;
    // Full (limit 10): nine of the module's entries and the long one newest.
    for i in 0..9 {
        add(&mut con, "newest", now - 30 * S + i, &i.to_string());
    }
    long(&mut con, "newest", now - S);
    // Full: the long one second newest (the retry looks it up).
    for i in 0..9 {
        add(&mut con, "second", now - 30 * S + i, &i.to_string());
    }
    long(&mut con, "second", now - 2 * S);
    add(&mut con, "second", now - S, "9");
    // Full: a past block newest, the long one next.
    for i in 0..9 {
        add(&mut con, "behind", now - 30 * S + i, &i.to_string());
    }
    long(&mut con, "behind", now - 2 * S);
    add(&mut con, "behind", now - S, "B");
    // Not full: the long one alone, live; stale.
    long(&mut con, "alone", now - S);
    long(&mut con, "stale", now - 3_600 * S);
    // FORCE over a full log: twelve stale entries of the module's, the long
    // one the oldest but twelve (read, not checked, by the first count).
    for i in 0..12 {
        add(
            &mut con,
            "forced",
            now - 3_600 * S + i,
            &(100 + i).to_string(),
        );
    }
    long(&mut con, "forced", now - 3_000 * S);
    for i in 0..10 {
        add(&mut con, "forced", now - 30 * S + i, &i.to_string());
    }
    let not_ours = "(a member the module did not write)";
    let other = "(it was written by something else)";
    let cases: [(&[&str], &str); 8] = [
        (
            &["FCALL", "rl_slidinglog", "1", "newest", "10", "60"],
            other,
        ),
        (
            &["FCALL", "rl_slidinglog_ro", "1", "newest", "10", "60"],
            other,
        ),
        (
            &["FCALL", "rl_slidinglog", "1", "second", "10", "60"],
            not_ours,
        ),
        (
            &["FCALL", "rl_all", "1", "second", "SLIDINGLOG", "10", "60"],
            not_ours,
        ),
        (
            &["FCALL", "rl_slidinglog", "1", "behind", "10", "60"],
            other,
        ),
        (&["FCALL", "rl_slidinglog", "1", "alone", "10", "60"], other),
        (&["FCALL", "rl_slidinglog", "1", "stale", "10", "60"], other),
        (
            &["FCALL", "rl_slidinglog", "1", "forced", "10", "60", "FORCE"],
            not_ours,
        ),
    ];
    let mut copies = Vec::new();
    for (command, why) in cases {
        let err = call_err(&mut con, command);
        assert!(
            err.starts_with("ERR the value at ")
                && err.contains(" is not RL.SLIDINGLOG state ")
                && err.ends_with(why),
            "{command:?}: {err}"
        );
        copies.push((
            command[1..].join(" "),
            long_members_copied(&mut con, command),
        ));
    }
    assert!(
        copies.iter().all(|(_, n)| *n == 1),
        "each call copies the long member once: {copies:#?}"
    );
    for key in ["newest", "second", "behind", "alone", "stale", "forced"] {
        assert_eq!(query::<i64>(&mut con, &["PTTL", key]).unwrap(), -1, "{key}");
    }
}
