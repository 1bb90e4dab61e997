//! Trust under pressure: the refusal that starts a block says how long the
//! block lasts; the work of one call is bounded by the module's
//! `sliding-log-call-budget`, checked before anything is written; every
//! duration is capped, so every key the module writes expires.

mod common;

use common::{call_err, query, Server};

fn ints(con: &mut redis::Connection, args: &[&str]) -> Vec<i64> {
    query(con, args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn dump(con: &mut redis::Connection, key: &str) -> Option<Vec<u8>> {
    query::<Option<Vec<u8>>>(con, &["DUMP", key]).unwrap()
}

/// One token per second, for every command that takes `BLOCK` (`KEY` is
/// replaced by the key).
const ONE_PER_SECOND: &[&[&str]] = &[
    &["RL.GCRA", "KEY", "0", "1", "1"],
    &["RL.TOKENBUCKET", "KEY", "1", "1", "1"],
    &["RL.LEAKYBUCKET", "KEY", "1", "1", "1"],
    &["RL.FIXEDWINDOW", "KEY", "1", "1"],
    &["RL.SLIDINGWINDOW", "KEY", "1", "1"],
    &["RL.SLIDINGWINDOW", "KEY", "1", "1", "BUCKETS", "4"],
    &["RL.SLIDINGLOG", "KEY", "1", "1"],
    &[
        "RL.ALL",
        "2",
        "KEY",
        "KEY:2",
        "GCRA",
        "9",
        "10",
        "1",
        "SLIDINGLOG",
        "1",
        "1",
    ],
];

fn with(cmd: &[&str], key: &str, extra: &[&str]) -> Vec<String> {
    cmd.iter()
        .map(|a| a.replace("KEY", key))
        .chain(extra.iter().map(|s| s.to_string()))
        .collect()
}

fn run(con: &mut redis::Connection, args: &[String]) -> Vec<i64> {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    ints(con, &refs)
}

/// Calls until refused (a clock-aligned window may end between two calls).
fn until_refused(con: &mut redis::Connection, args: &[String]) -> Vec<i64> {
    for _ in 0..3 {
        let reply = run(con, args);
        if reply[0] == 1 {
            return reply;
        }
    }
    panic!("{args:?} was never refused");
}

/// Whether a reply is "limited for the block's 5 s": retry and reset cover
/// the block (waiting the returned time is always enough), rounded up.
fn covers_block(r: &[i64]) -> bool {
    r[0] == 1 && r[2] == 0 && (4_900..=5_000).contains(&r[3]) && r[4] >= r[3]
}

#[test]
fn the_refusal_that_starts_a_block_reports_the_block() {
    let server = Server::start();
    let mut con = server.connect();
    for (i, cmd) in ONE_PER_SECOND.iter().enumerate() {
        let key = format!("b{i}");
        assert_eq!(run(&mut con, &with(cmd, &key, &["BLOCK", "5"]))[0], 0);
        // PEEK answers what the call would: the block it would start (and
        // starts none).
        let before = dump(&mut con, &key);
        let mut peeked = run(&mut con, &with(cmd, &key, &["PEEK", "BLOCK", "5"]));
        if peeked[0] == 0 {
            // A window ended: take its token, then peek again.
            run(&mut con, &with(cmd, &key, &[]));
            peeked = run(&mut con, &with(cmd, &key, &["PEEK", "BLOCK", "5"]));
        }
        assert!(covers_block(&peeked), "{cmd:?} PEEK: {peeked:?}");
        let before_block = dump(&mut con, &key);
        assert!(before.is_some() && before_block.is_some());
        // The refusal that starts the block.
        let r = until_refused(&mut con, &with(cmd, &key, &["BLOCK", "5"]));
        assert!(covers_block(&r), "{cmd:?} starting the block: {r:?}");
        if cmd[0] == "RL.ALL" {
            assert_eq!(r[5], 2, "the blocked log binds: {r:?}");
        }
        let pttl: i64 = query(
            &mut con,
            &["PTTL", if cmd[0] == "RL.ALL" { "b7:2" } else { &key }],
        )
        .unwrap();
        assert!(pttl >= r[3] - 20, "{cmd:?}: the block outlives the key");
        // A refusal meeting the block, with or without BLOCK.
        for extra in [&["BLOCK", "5"][..], &[]] {
            let r = run(&mut con, &with(cmd, &key, extra));
            assert!(covers_block(&r), "{cmd:?} {extra:?} in the block: {r:?}");
        }
    }
}

#[test]
fn a_policy_block_is_reported_and_a_shadow_blocks_nothing() {
    if !common::module_only("policies are module data") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    for (name, def) in [
        ("lock", &["SLIDINGLOG", "1", "1", "BLOCK", "5"][..]),
        (
            "shadow",
            &["GCRA", "0", "1", "1", "SHADOW", "BLOCK", "5"][..],
        ),
    ] {
        let mut set = vec!["RL.POLICY", "SET", name];
        set.extend_from_slice(def);
        let _: String = query(&mut con, &set).unwrap();
    }
    assert_eq!(ints(&mut con, &["RL.LIMIT", "p", "lock"])[0], 0);
    let r = ints(&mut con, &["RL.LIMIT", "p", "lock"]);
    assert!(covers_block(&r), "RL.LIMIT starting the block: {r:?}");
    let r = ints(&mut con, &["RL.ALL", "1", "p", "POLICY", "lock"]);
    assert!(covers_block(&r), "RL.ALL meeting the block: {r:?}");
    // SHADOW: answered allowed, nothing blocked, the limiter unchanged.
    assert_eq!(ints(&mut con, &["RL.LIMIT", "s", "shadow"])[0], 0);
    let before = dump(&mut con, "s");
    let r = ints(&mut con, &["RL.LIMIT", "s", "shadow"]);
    assert_eq!((r[0], r[3]), (0, -1), "{r:?}");
    assert_eq!(dump(&mut con, "s"), before);
    // A call that can never pass starts no block and says "never".
    let r = ints(
        &mut con,
        &["RL.SLIDINGLOG", "n", "1", "1", "TOKENS", "2", "BLOCK", "5"],
    );
    assert_eq!((r[0], r[3]), (1, -1));
}

fn writes(con: &mut redis::Connection) -> i64 {
    common::writes_counter(con)
}

fn err(con: &mut redis::Connection, args: &[String]) -> String {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    common::call_err(con, &refs)
}

/// `RL.ALL n KEY… SLIDINGLOG limit window …` over keys `{t}0 … {t}n−1`.
fn all_logs(tag: &str, logs: &[(i64, &str)], extra: &[&str]) -> Vec<String> {
    let mut a = vec!["RL.ALL".to_string(), logs.len().to_string()];
    a.extend((0..logs.len()).map(|i| format!("{{{tag}}}{i}")));
    for (limit, window) in logs {
        a.extend([
            "SLIDINGLOG".to_string(),
            limit.to_string(),
            window.to_string(),
        ]);
    }
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

const BUDGET_ERR: &str = "sliding-log entries (limit + TOKENS of each SLIDINGLOG), more than the module's sliding-log-call-budget of";

#[test]
fn a_call_over_the_sliding_log_budget_is_refused_before_it_writes() {
    let server = Server::start();
    let mut con = server.connect();
    if common::engine() == common::Engine::Module {
        let budget: Vec<String> = query(
            &mut con,
            &["CONFIG", "GET", "ratelimit.sliding-log-call-budget"],
        )
        .unwrap();
        assert_eq!(budget[1], "4000");
        assert_eq!(
            common::info_field(&mut con, "ratelimit", "ratelimit_sliding_log_call_budget"),
            "4000"
        );
    }
    // 64 logs of 1000 taking 1000 each: 64 × 2000 entries, refused before any
    // key is opened. The one key that exists is left as it was.
    ints(&mut con, &["RL.SLIDINGLOG", "{z}0", "1000", "60"]);
    let before = dump(&mut con, "{z}0");
    let counted = writes(&mut con);
    let heavy = all_logs("z", &[(1000, "60"); 64], &["TOKENS", "1000"]);
    for extra in [&[][..], &["PEEK"], &["BLOCK", "60"]] {
        let mut call = heavy.clone();
        call.extend(extra.iter().map(|s| s.to_string()));
        let e = err(&mut con, &call);
        assert_eq!(
            e,
            format!("ERR this call may touch 128000 {BUDGET_ERR} 4000; use fewer or smaller SLIDINGLOG limits, or RL.SLIDINGWINDOW"),
            "{extra:?}"
        );
    }
    assert_eq!(dump(&mut con, "{z}0"), before);
    for i in 1..64 {
        assert!(dump(&mut con, &format!("{{z}}{i}")).is_none());
    }
    // The module counts its own writes. Under the library the counter is the
    // server's `rdb_changes_since_last_save`, which once rose by 10 here on
    // Redis 7.0 with no key changed (the dumps above): the keys are the proof.
    if common::engine() == common::Engine::Module {
        assert_eq!(writes(&mut con), counted, "a refused call wrote");
    }
    // At the budget: two logs of 1000 taking 1000 each (2 × 2000) work.
    let at = all_logs("a", &[(1000, "60"), (1000, "60")], &["TOKENS", "1000"]);
    let r = run(&mut con, &at);
    assert_eq!((r[0], r[2]), (0, 0), "{r:?}");
    assert_eq!(query::<i64>(&mut con, &["ZCARD", "{a}1"]).unwrap(), 1000);
    // Just over (a third log of 1, taking its 1: 4002): refused, and so is
    // a refund of as much.
    let over = all_logs(
        "b",
        &[(1000, "60"), (1000, "60"), (1, "60")],
        &["TOKENS", "1000"],
    );
    assert!(err(&mut con, &over).contains("may touch 4002 "), "{over:?}");
    assert!(dump(&mut con, "{b}0").is_none());
    let refund = all_logs(
        "a",
        &[(1000, "60"), (1000, "60"), (1, "60")],
        &["REFUND", "1000"],
    );
    assert!(err(&mut con, &refund).contains("may touch 4002 "));
    assert_eq!(query::<i64>(&mut con, &["ZCARD", "{a}1"]).unwrap(), 1000);
    if common::engine() == common::Engine::Functions {
        // The rest raises the module's setting and defines policies.
        return;
    }
    // A limit whose cheapest call cannot fit is refused where it is given.
    let _: String = query(
        &mut con,
        &["CONFIG", "SET", "ratelimit.sliding-log-max-limit", "100000"],
    )
    .unwrap();
    let e = call_err(&mut con, &["RL.SLIDINGLOG", "big", "100000", "60"]);
    assert!(
        e.contains("may touch 100001 ") && e.contains("of 4000;"),
        "{e}"
    );
    let e = call_err(
        &mut con,
        &["RL.POLICY", "SET", "big", "SLIDINGLOG", "5000", "60"],
    );
    assert!(e.contains("may touch 5001 "), "{e}");
    // A lower budget applies to policies already defined, at the call.
    let _: String = query(
        &mut con,
        &["RL.POLICY", "SET", "log", "SLIDINGLOG", "1000", "60"],
    )
    .unwrap();
    let _: String = query(
        &mut con,
        &["CONFIG", "SET", "ratelimit.sliding-log-call-budget", "1500"],
    )
    .unwrap();
    let e = call_err(&mut con, &["RL.LIMIT", "p", "log", "TOKENS", "600"]);
    assert!(
        e.contains("may touch 1600 ") && e.contains("of 1500;"),
        "{e}"
    );
    assert!(dump(&mut con, "p").is_none());
    assert_eq!(
        ints(&mut con, &["RL.LIMIT", "p", "log", "TOKENS", "500"])[0],
        0
    );
    // The setting's bounds.
    for bad in ["0", "200001", "x"] {
        assert!(query::<String>(
            &mut con,
            &["CONFIG", "SET", "ratelimit.sliding-log-call-budget", bad]
        )
        .is_err());
    }
    let _: String = query(
        &mut con,
        &[
            "CONFIG",
            "SET",
            "ratelimit.sliding-log-call-budget",
            "200000",
        ],
    )
    .unwrap();
    assert_eq!(
        ints(&mut con, &["RL.SLIDINGLOG", "big", "100000", "60"])[0],
        0
    );
}

#[test]
fn the_call_budget_is_a_load_argument_too() {
    if !common::module_only("a module load argument") {
        return;
    }
    let server = Server::start_with_module_args(&["sliding-log-call-budget", "10"], &[]);
    let mut con = server.connect();
    assert!(call_err(&mut con, &["RL.SLIDINGLOG", "k", "10", "60"]).contains("of 10;"));
    assert_eq!(
        ints(&mut con, &["RL.SLIDINGLOG", "k", "5", "60", "TOKENS", "5"])[0],
        0
    );
    let budget: Vec<String> = query(
        &mut con,
        &["CONFIG", "GET", "ratelimit.sliding-log-call-budget"],
    )
    .unwrap();
    assert_eq!(budget[1], "10");
}

const DAYS_366_MS: i64 = 31_622_400_000;
const PERIOD_ERR: &str =
    "must be a finite number of seconds, at least 0.000001 and at most 31622400 (366 days)";
const REFILL_ERR: &str = "ERR the time to refill from empty (limit × period / tokens per period) must be <= 31622400 seconds (366 days)";

#[test]
fn durations_are_capped_so_every_key_expires_within_366_days() {
    let server = Server::start();
    let mut con = server.connect();
    // (command with DUR for its duration, the argument's name, the longest
    // life of its key in 366-day units)
    let cases: &[(&[&str], &str, i64)] = &[
        (&["RL.GCRA", "KEY", "0", "1", "DUR"], "period", 1),
        (
            &["RL.TOKENBUCKET", "KEY", "1", "1", "DUR"],
            "refill_period",
            1,
        ),
        (
            &["RL.LEAKYBUCKET", "KEY", "1", "1", "DUR"],
            "leak_period",
            1,
        ),
        (&["RL.FIXEDWINDOW", "KEY", "1", "DUR"], "window", 1),
        (
            &["RL.FIXEDWINDOW", "KEY", "1", "DUR", "ALIGN", "FIRST"],
            "window",
            1,
        ),
        (&["RL.SLIDINGWINDOW", "KEY", "1", "DUR"], "window", 2),
        (
            &["RL.SLIDINGWINDOW", "KEY", "1", "DUR", "BUCKETS", "4"],
            "window",
            2,
        ),
        (&["RL.SLIDINGLOG", "KEY", "1", "DUR"], "window", 1),
        (
            &["RL.GCRA", "KEY", "0", "1", "1", "BLOCK", "DUR"],
            "BLOCK",
            1,
        ),
        (
            &["RL.ALL", "1", "KEY", "SLIDINGLOG", "1", "DUR"],
            "window",
            1,
        ),
    ];
    for (i, (cmd, arg, lives)) in cases.iter().enumerate() {
        // 9.2e12 s (once accepted: keys that outlive us all), just past
        // 366 days, and infinity are refused, and nothing is written.
        for huge in ["9.2e12", "31622400.001", "inf"] {
            let key = format!("huge{i}");
            let call: Vec<String> = cmd
                .iter()
                .map(|a| a.replace("KEY", &key).replace("DUR", huge))
                .collect();
            assert_eq!(
                err(&mut con, &call),
                format!("ERR {arg} {PERIOD_ERR}"),
                "{call:?}"
            );
            assert!(dump(&mut con, &key).is_none());
        }
        // At the bound: the key expires within the documented time (a block
        // is started by a second, refused, call).
        let key = format!("max{i}");
        let call: Vec<String> = cmd
            .iter()
            .map(|a| a.replace("KEY", &key).replace("DUR", "31622400"))
            .collect();
        run(&mut con, &call);
        run(&mut con, &call);
        let pttl: i64 = query(&mut con, &["PTTL", &key]).unwrap();
        // + 1: the expiry is the µs time rounded up to the ms, and PTTL
        // counts from the server's ms clock rounded down (servers with a µs
        // clock: Redis 7.2+, Valkey).
        assert!(
            pttl > 0 && pttl <= lives * DAYS_366_MS + 1,
            "{call:?}: PTTL {pttl}"
        );
    }
    // A rate limiter must refill from empty within 366 days: its TAT (or
    // its key's expiry) lies at most that far ahead.
    for call in [
        &["RL.GCRA", "r", "1", "1", "31622400"][..],
        &["RL.GCRA", "r", "366", "1", "86400"],
        &["RL.TOKENBUCKET", "r", "2", "1", "31622400"],
        &["RL.LEAKYBUCKET", "r", "367", "1", "86400"],
        &["CL.THROTTLE", "r", "366", "1", "86400"],
        &["RL.ALL", "1", "r", "GCRA", "1", "1", "31622400"],
    ] {
        assert_eq!(call_err(&mut con, call), REFILL_ERR, "{call:?}");
    }
    assert!(dump(&mut con, "r").is_none());
    assert_eq!(ints(&mut con, &["RL.GCRA", "r", "365", "1", "86400"])[0], 0);
    assert_eq!(
        call_err(&mut con, &["CL.THROTTLE", "r2", "0", "1", "31622401"]),
        "ERR period must be >= 1 and <= 31622400 (366 days)"
    );
    if common::engine() == common::Engine::Module {
        // Policies are module data.
        let e = call_err(
            &mut con,
            &["RL.POLICY", "SET", "long", "GCRA", "0", "1", "31622401"],
        );
        assert_eq!(e, format!("ERR period {PERIOD_ERR}"));
    }
}
