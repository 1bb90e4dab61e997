//! What the Functions library's calls cost the server in commands (issue
//! 45): a refused `rl_slidinglog` call with the caller's clock (`NOW`) makes
//! at most three `redis.call`s — its length, its old entries, its newest
//! entries (the retry) — where the full path makes five: a flood of refused
//! hits costs about what `limits`' moving window does (one call).
//! And `rl_concurrency`'s common forms read the lease set with one `ZRANGE`:
//! a held lease acquired again makes three (`ZRANGE`, `ZADD`, `PEXPIREAT`)
//! where the full path made ten.
//!
//! Counted by the server itself: `INFO commandstats` counts every command a
//! script runs, so the calls of one `FCALL` are the commands counted between
//! `CONFIG RESETSTAT` and the `INFO` that follows, less the `FCALL` itself.
//! The library runs on a server without the module, whatever the engine
//! under test.

mod common;

use common::Server;
use redis::Value;

/// The commands one call ran inside the server (`FCALL` / `FCALL_RO` and
/// the statistics' own `CONFIG RESETSTAT` not counted), by name, and the
/// call's reply.
fn commands_of(con: &mut redis::Connection, args: &[&str]) -> (Vec<(String, i64)>, Value) {
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query::<()>(con)
        .expect("CONFIG RESETSTAT");
    let mut command = redis::cmd(args[0]);
    for a in &args[1..] {
        command.arg(*a);
    }
    let reply: Value = command.query(con).expect("the call");
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(con)
        .expect("INFO");
    let mut ran = Vec::new();
    for line in stats.lines() {
        // cmdstat_zcard:calls=1,usec=2,usec_per_call=2.00,rejected_calls=0,failed_calls=0
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        let calls: i64 = fields
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if calls > 0 && !matches!(name, "fcall" | "fcall_ro" | "config|resetstat") {
            ran.push((name.to_string(), calls));
        }
    }
    ran.sort();
    (ran, reply)
}

fn total(ran: &[(String, i64)]) -> i64 {
    ran.iter().map(|(_, n)| n).sum()
}

fn integers(v: &Value) -> Vec<i64> {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::Int(n) => *n,
                other => panic!("not an integer: {other:?}"),
            })
            .collect(),
        other => panic!("not a reply of integers: {other:?}"),
    }
}

const T0: i64 = 1_800_000_000_000_000;

/// `function key args… NOW t` through FCALL, or FCALL_RO for a `_ro`
/// twin: the commands it ran and its reply.
fn call_with_now(
    con: &mut redis::Connection,
    function: &str,
    key: &str,
    args: &[&str],
    now: i64,
) -> (Vec<(String, i64)>, Vec<i64>) {
    let now = now.to_string();
    let fcall = if function.ends_with("_ro") {
        "FCALL_RO"
    } else {
        "FCALL"
    };
    let mut all = vec![fcall, function, "1", key];
    all.extend_from_slice(args);
    all.extend_from_slice(&["NOW", &now]);
    let (ran, reply) = commands_of(con, &all);
    (ran, integers(&reply))
}

/// `rl_slidinglog key limit 60 … NOW t` through `function` (FCALL or
/// FCALL_RO).
fn log_call(
    con: &mut redis::Connection,
    function: &str,
    key: &str,
    limit: &str,
    extra: &[&str],
    now: i64,
) -> (Vec<(String, i64)>, Vec<i64>) {
    let mut args = vec![limit, "60"];
    args.extend_from_slice(extra);
    call_with_now(con, function, key, &args, now)
}

#[test]
fn a_refused_sliding_log_call_with_now_makes_at_most_three_calls() {
    let server = Server::start_library(&["--save", "", "--appendonly", "no"]);
    let mut con = server.connect();
    // Logs refused in different states: full of live entries; with stale
    // entries before its window, refused a cost of several tokens; refused
    // a cost with room for fewer; PEEK; the read-only twin; a limit of one;
    // a log holding the block member after its block ended.
    struct Case {
        key: &'static str,
        limit: &'static str,
        fill: Vec<(i64, &'static [&'static str])>,
        refused: (&'static str, &'static [&'static str], i64),
    }
    let cases = [
        Case {
            key: "full",
            limit: "10",
            fill: (0..10).map(|i| (T0 + i * 1000, &[][..])).collect(),
            refused: ("rl_slidinglog", &[], T0 + 20_000),
        },
        Case {
            key: "stale",
            limit: "5",
            fill: vec![
                (T0, &["TOKENS", "2"][..]),
                (T0 + 30_000_000, &["TOKENS", "3"][..]),
            ],
            refused: ("rl_slidinglog", &["TOKENS", "3"], T0 + 61_000_000),
        },
        Case {
            key: "tokens",
            limit: "10",
            fill: vec![(T0, &["TOKENS", "8"][..])],
            refused: ("rl_slidinglog", &["TOKENS", "3"], T0 + 1_000),
        },
        Case {
            key: "peek",
            limit: "3",
            fill: (0..3).map(|i| (T0 + i, &[][..])).collect(),
            refused: ("rl_slidinglog", &["PEEK"], T0 + 10),
        },
        Case {
            key: "twin",
            limit: "3",
            fill: (0..3).map(|i| (T0 + i, &[][..])).collect(),
            refused: ("rl_slidinglog_ro", &[], T0 + 10),
        },
        Case {
            key: "one",
            limit: "1",
            fill: vec![(T0, &[][..])],
            refused: ("rl_slidinglog", &[], T0 + 1),
        },
        Case {
            key: "after-a-block",
            limit: "2",
            // Refused with BLOCK 1 (the block member B written, scored by
            // its end), then refused again after the block ended, the
            // block's member still in the window.
            fill: vec![
                (T0, &[][..]),
                (T0 + 1, &[][..]),
                (T0 + 2, &["BLOCK", "1"][..]),
            ],
            refused: ("rl_slidinglog", &[], T0 + 2_000_000),
        },
    ];
    for case in &cases {
        for (at, extra) in &case.fill {
            log_call(&mut con, "rl_slidinglog", case.key, case.limit, extra, *at);
        }
        let (function, extra, at) = case.refused;
        let (ran, reply) = log_call(&mut con, function, case.key, case.limit, extra, at);
        assert_eq!(reply[0], 1, "{}: refused, {reply:?}", case.key);
        assert!(
            total(&ran) <= 3,
            "{}: a refused rl_slidinglog call made {} redis.calls: {ran:?}",
            case.key,
            total(&ran)
        );
        assert!(
            ran.iter().all(|(name, _)| !name.starts_with("time")),
            "{}: NOW given, yet the server's clock was read: {ran:?}",
            case.key
        );
    }
    // For scale: the same refusal in a form without a fast path (the options
    // in lower case) takes the full path and makes more calls. If it ever
    // makes as few, this test no longer shows what the fast path saves.
    let (ran, reply) = log_call(
        &mut con,
        "rl_slidinglog",
        "full",
        "10",
        &["peek"],
        T0 + 20_000,
    );
    assert_eq!(reply[0], 1);
    assert!(total(&ran) > 3, "the full path: {ran:?}");
}

/// `rl_concurrency key 3 60 <op…> NOW t` through `function` (FCALL or
/// FCALL_RO): the commands it ran and its reply.
fn lease_call(
    con: &mut redis::Connection,
    function: &str,
    key: &str,
    op: &[&str],
    now: i64,
) -> (Vec<(String, i64)>, Vec<i64>) {
    let mut args = vec!["3", "60"];
    args.extend_from_slice(op);
    call_with_now(con, function, key, &args, now)
}

/// (function, operation, at, limited, the commands it runs)
type LeaseCase<'a> = (&'a str, &'a [&'a str], i64, i64, &'a [&'a str]);

#[test]
fn a_lease_call_reads_its_set_once() {
    // rl_concurrency's fast path (its common forms) reads the lease set with
    // one ZRANGE, then writes what the full path writes: a held lease
    // acquired again costs ZRANGE, ZADD, PEXPIREAT where the full path ran
    // ten commands (ZCARD, the newest two, the block's score, two slots'
    // scores, the old entries, the live ones, the newest other, ZADD,
    // PEXPIREAT).
    let server = Server::start_library(&["--save", "", "--appendonly", "no"]);
    let mut con = server.connect();
    // The limit parsed once (the fast path takes limits already parsed).
    lease_call(&mut con, "rl_concurrency", "warm", &["ACQUIRE", "g"], T0);
    let (write, read) = (["pexpireat", "zadd", "zrange"], ["zrange"]);
    let cases: [LeaseCase; 9] = [
        // (function, operation, at, limited, the commands it runs)
        ("rl_concurrency", &["ACQUIRE", "g"], T0, 0, &write),
        ("rl_concurrency", &["ACQUIRE", "g"], T0 + 1_000, 0, &write),
        (
            "rl_concurrency",
            &["ACQUIRE", "h", "TOKENS", "2"],
            T0 + 2_000,
            0,
            &write,
        ),
        // The limit of 3 held (g 1, h 2): refused, having read the set.
        ("rl_concurrency", &["ACQUIRE", "i"], T0 + 3_000, 1, &read),
        (
            "rl_concurrency",
            &["RENEW", "h", "PEEK"],
            T0 + 4_000,
            0,
            &read,
        ),
        ("rl_concurrency_ro", &["ACQUIRE", "g"], T0 + 4_000, 0, &read),
        ("rl_concurrency", &["RENEW", "h"], T0 + 5_000, 0, &write),
        // g given back while h lives: its slot removed, the expiry kept.
        (
            "rl_concurrency",
            &["RELEASE", "g"],
            T0 + 6_000,
            0,
            &["pexpireat", "zrange", "zrem"],
        ),
        // Every lease expired: h given back, the key goes.
        (
            "rl_concurrency",
            &["RELEASE", "h"],
            T0 + 61_000_000,
            0,
            &["unlink", "zrange"],
        ),
    ];
    for (function, op, at, limited, expected) in cases {
        let (ran, reply) = lease_call(&mut con, function, "leases", op, at);
        assert_eq!(reply[0], limited, "{function} {op:?}: {reply:?}");
        let names: Vec<&str> = ran.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, expected, "{function} {op:?}: {ran:?}");
        assert_eq!(
            total(&ran),
            expected.len() as i64,
            "{function} {op:?}: {ran:?}"
        );
    }
    // For scale: the same acquisition in a form without a fast path (the
    // operation in lower case) takes the full path and makes more calls.
    lease_call(
        &mut con,
        "rl_concurrency",
        "leases",
        &["ACQUIRE", "g"],
        T0 + 62_000_000,
    );
    let (ran, reply) = lease_call(
        &mut con,
        "rl_concurrency",
        "leases",
        &["acquire", "g"],
        T0 + 62_001_000,
    );
    assert_eq!(reply[0], 0);
    assert!(total(&ran) > 3, "the full path: {ran:?}");
}
