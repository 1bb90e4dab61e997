//! `RL.ALL` (several limits in one atomic decision), and the options every
//! command takes: `PEEK`, `REFUND n`, `BLOCK duration`.

mod common;

use std::time::{Duration, Instant};

use common::{call_err, info_field, query, snapshot, wait_for_sync, Server};

/// Runs a command that replies with integers.
fn ints(con: &mut redis::Connection, args: &[&str]) -> Vec<i64> {
    query(con, args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn dump(con: &mut redis::Connection, key: &str) -> Option<Vec<u8>> {
    query::<Option<Vec<u8>>>(con, &["DUMP", key]).unwrap()
}

fn writes(con: &mut redis::Connection) -> i64 {
    common::writes_counter(con)
}

/// Redis 7.2+ and Valkey freeze the clock for a whole MULTI/EXEC; 7.0 reads
/// it per call.
fn frozen_clock_in_multi(con: &mut redis::Connection) -> bool {
    let info: String = query(con, &["INFO", "server"]).unwrap();
    info.contains("valkey_version:") || !info.contains("redis_version:7.0.")
}

#[test]
fn all_takes_from_every_limit_or_from_none() {
    let server = Server::start();
    let mut con = server.connect();
    let all = [
        "RL.ALL",
        "3",
        "a",
        "b",
        "c",
        "GCRA",
        "9",
        "10",
        "1",
        "fixedwindow",
        "5",
        "86400",
        "SlidingLog",
        "3",
        "600",
    ];
    // Allowed: every key takes one; the binding limit has the fewest
    // remaining (the sliding log, 3rd).
    let r = ints(&mut con, &all);
    assert_eq!((r[0], r[1], r[2], r[3], r[5]), (0, 3, 2, -1, 3), "{r:?}");
    assert_eq!(r.len(), 6);
    assert_eq!(query::<i64>(&mut con, &["ZCARD", "c"]).unwrap(), 1);
    assert!(dump(&mut con, "a").is_some() && dump(&mut con, "b").is_some());
    ints(&mut con, &all);
    let r = ints(&mut con, &all);
    assert_eq!((r[0], r[2], r[5]), (0, 0, 3));
    // The log is full: refused, and nothing is written anywhere.
    let before: Vec<_> = ["a", "b", "c"].iter().map(|k| dump(&mut con, k)).collect();
    let counted = writes(&mut con);
    let r = ints(&mut con, &all);
    assert_eq!((r[0], r[1], r[2], r[5]), (1, 3, 0, 3), "{r:?}");
    assert!(r[3] > 599_000, "retry after the log's window: {r:?}");
    let after: Vec<_> = ["a", "b", "c"].iter().map(|k| dump(&mut con, k)).collect();
    assert_eq!(before, after, "a refused RL.ALL wrote");
    assert_eq!(writes(&mut con), counted);
    // The GCRA alone still allows its 7 remaining tokens.
    assert_eq!(ints(&mut con, &["RL.GCRA", "a", "9", "10", "1"])[2], 6);
    // A limit that can never pass (cost above it) binds with retry -1, the
    // longest.
    let r = ints(
        &mut con,
        &[
            "RL.ALL",
            "2",
            "a",
            "d",
            "GCRA",
            "9",
            "10",
            "1",
            "FIXEDWINDOW",
            "2",
            "60",
            "TOKENS",
            "5",
        ],
    );
    assert_eq!((r[0], r[1], r[3], r[5]), (1, 2, -1, 2), "{r:?}");
    assert!(dump(&mut con, "d").is_none());
    // One key works like the single command, plus the position.
    let one = ints(
        &mut con,
        &["RL.ALL", "1", "e", "TOKENBUCKET", "4", "1", "1"],
    );
    let single = ints(&mut con, &["RL.TOKENBUCKET", "f", "4", "1", "1"]);
    assert_eq!(one[..5], single[..]);
    assert_eq!(one[5], 1);
}

#[test]
fn all_refuses_malformed_calls_and_writes_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    let cases: &[(&[&str], &str)] = &[
        (&["RL.ALL", "2", "k", "k", "GCRA", "1", "1", "1", "GCRA", "1", "1", "1"], "ERR RL.ALL names the same key twice"),
        // Before a bad limit; among three keys (the module compares two keys
        // through the server, more in its own code: both found).
        (&["RL.ALL", "2", "k", "k", "GCRA", "-1", "1", "1", "BUCKET"], "ERR RL.ALL names the same key twice"),
        (&["RL.ALL", "3", "k", "l", "k", "GCRA", "1", "1", "1", "GCRA", "1", "1", "1", "GCRA", "1", "1", "1"], "ERR RL.ALL names the same key twice"),
        (&["RL.ALL", "3", "kk", "k", "k", "GCRA", "-1", "1", "1", "GCRA", "1", "1", "1", "GCRA", "1", "1", "1"], "ERR RL.ALL names the same key twice"),
        // Keys that differ only in length or case are distinct.
        (&["RL.ALL", "2", "k", "kk", "GCRA", "-1", "1", "1", "GCRA", "1", "1", "1"], "ERR max_burst must be >= 0"),
        (&["RL.ALL", "2", "k", "K", "GCRA", "-1", "1", "1", "GCRA", "1", "1", "1"], "ERR max_burst must be >= 0"),
        (&["RL.ALL", "2", "k", "l", "GCRA", "1", "1", "1"], "ERR RL.ALL needs exactly numkeys limits, one per key"),
        (&["RL.ALL", "2", "k", "l", "GCRA", "1", "1", "1", "TOKENS", "2"], "ERR RL.ALL needs exactly numkeys limits, one per key"),
        (&["RL.ALL", "1", "k", "GCRA", "1", "1", "1", "GCRA", "1", "1", "1"], "ERR RL.ALL needs exactly numkeys limits, one per key"),
        (&["RL.ALL", "1", "k", "LEAKYBUCKET", "1", "1", "1"], "ERR LEAKYBUCKET cannot be part of RL.ALL: its 'allowed after a delay' has no all-or-nothing meaning"),
        (&["RL.ALL", "1", "k", "BUCKET", "1", "1", "1"], "ERR unknown limit type: expected GCRA, TOKENBUCKET, FIXEDWINDOW, SLIDINGWINDOW, SLIDINGLOG, CONCURRENCY or POLICY name"),
        (&["RL.ALL", "0", "k", "GCRA", "1", "1", "1"], "ERR numkeys must be >= 1 and <= 64"),
        (&["RL.ALL", "1", "k", "GCRA", "-1", "1", "1"], "ERR max_burst must be >= 0"),
        (&["RL.ALL", "1", "k", "FIXEDWINDOW", "1", "0"], "ERR window must be a finite number of seconds, at least 0.000001 and at most 31622400 (366 days)"),
        (&["RL.ALL", "1", "k", "GCRA", "1", "1", "1", "TOKENS", "1", "REFUND", "1"], "ERR syntax error: expected [TOKENS n | REFUND n] [PEEK] [BLOCK duration] after the parameters"),
        (&["RL.ALL", "1", "k", "GCRA", "1", "1", "1", "PEEK", "PEEK"], "ERR syntax error: expected [TOKENS n | REFUND n] [PEEK] [BLOCK duration] after the parameters"),
    ];
    for (args, want) in cases {
        assert_eq!(&call_err(&mut con, args), want, "{args:?}");
    }
    if common::engine() == common::Engine::Module {
        // numkeys as the server reads integers (one digit or more).
        for numkeys in ["01", "+1", " 1", "1.0"] {
            assert_eq!(
                call_err(&mut con, &["RL.ALL", numkeys, "k", "GCRA", "1", "1", "1"]),
                "ERR numkeys is not an integer or out of range",
                "{numkeys:?}"
            );
        }
        // FCALL's numkeys is the server's: it refuses 65 keys among fewer
        // arguments itself.
        assert_eq!(
            call_err(&mut con, &["RL.ALL", "65", "k", "GCRA", "1", "1", "1"]),
            "ERR numkeys must be >= 1 and <= 64"
        );
    }
    assert_eq!(query::<i64>(&mut con, &["DBSIZE"]).unwrap(), 0);
    // The single commands take the options too, and refuse them malformed.
    assert_eq!(
        call_err(&mut con, &["RL.GCRA", "k", "1", "1", "1", "BLOCK"]),
        "ERR syntax error: expected [TOKENS n | REFUND n] [PEEK] [BLOCK duration] after the parameters"
    );
    assert_eq!(
        call_err(&mut con, &["RL.GCRA", "k", "1", "1", "1", "REFUND", "0"]),
        "ERR REFUND must be >= 1"
    );
}

#[test]
fn all_declares_its_keys_for_acls_and_getkeys() {
    if !common::module_only("COMMAND GETKEYS and ACLs of RL.ALL") {
        return;
    }
    let server = Server::start();
    let mut admin = server.connect();
    let keys: Vec<String> = query(
        &mut admin,
        &[
            "COMMAND",
            "GETKEYS",
            "RL.ALL",
            "3",
            "x",
            "y",
            "z",
            "GCRA",
            "1",
            "1",
            "1",
            "FIXEDWINDOW",
            "1",
            "1",
            "SLIDINGLOG",
            "1",
            "1",
        ],
    )
    .unwrap();
    assert_eq!(keys, ["x", "y", "z"]);
    let _: () = query(
        &mut admin,
        &["ACL", "SETUSER", "app", "on", ">pw", "~a:*", "+@all"],
    )
    .unwrap();
    let mut app = server.connect();
    let _: () = query(&mut app, &["AUTH", "app", "pw"]).unwrap();
    let ok = ints(
        &mut app,
        &[
            "RL.ALL", "2", "a:1", "a:2", "GCRA", "1", "1", "1", "GCRA", "1", "1", "1",
        ],
    );
    assert_eq!(ok[0], 0);
    let err = call_err(
        &mut app,
        &[
            "RL.ALL", "2", "a:1", "b:1", "GCRA", "1", "1", "1", "GCRA", "1", "1", "1",
        ],
    );
    assert!(err.starts_with("NOPERM"), "{err}");
}

/// Every command with short periods, its key, and a `limit` of 1.
const ONE_PER_100MS: &[&[&str]] = &[
    &["RL.GCRA", "KEY", "0", "10", "1"],
    &["RL.TOKENBUCKET", "KEY", "1", "10", "1"],
    &["RL.LEAKYBUCKET", "KEY", "1", "10", "1"],
    &["RL.FIXEDWINDOW", "KEY", "1", "0.1"],
    &["RL.SLIDINGWINDOW", "KEY", "1", "0.1"],
    &["RL.SLIDINGLOG", "KEY", "1", "0.1"],
    &[
        "RL.ALL",
        "2",
        "KEY",
        "KEY:2",
        "GCRA",
        "0",
        "10",
        "1",
        "SLIDINGLOG",
        "1",
        "0.1",
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

/// Calls until refused (at most three times): with windows aligned to the
/// clock, a window may end between two calls, and the next one is refused.
fn until_refused(con: &mut redis::Connection, args: &[String]) -> Vec<i64> {
    let mut reply = run(con, args);
    for _ in 0..2 {
        if reply[0] == 1 {
            break;
        }
        reply = run(con, args);
    }
    assert_eq!(reply[0], 1, "{args:?} was never refused");
    reply
}

/// The server's clock, in ms.
fn now_ms(con: &mut redis::Connection) -> i64 {
    let t: Vec<i64> = query(con, &["TIME"]).unwrap();
    t[0] * 1_000 + t[1] / 1_000
}

/// Runs `f` (given the attempt's number, for keys of its own) until it ran
/// within one 100 ms window of the server's clock, at most three times, and
/// returns what it returned: a FIXEDWINDOW or SLIDINGWINDOW limit of one per
/// 0.1 s counts per window aligned to the clock, and a window that ends
/// between a few calls changes what the later ones answer.
fn within_one_window<T>(
    con: &mut redis::Connection,
    mut f: impl FnMut(&mut redis::Connection, usize) -> T,
) -> T {
    let mut attempt = 0;
    loop {
        let window = now_ms(con) / 100;
        let out = f(con, attempt);
        attempt += 1;
        if attempt == 3 || now_ms(con) / 100 == window {
            return out;
        }
    }
}

#[test]
fn peek_answers_as_the_next_call_would_and_writes_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    let frozen = frozen_clock_in_multi(&mut con);
    for (i, cmd) in ONE_PER_100MS.iter().enumerate() {
        let key = format!("peek{i}");
        // A missing key: a full limiter, and nothing is created.
        let counted = writes(&mut con);
        let peeked = run(&mut con, &with(cmd, &key, &["PEEK"]));
        assert_eq!(peeked[0], 0, "{cmd:?}");
        assert!(
            dump(&mut con, &key).is_none(),
            "{cmd:?}: PEEK created the key"
        );
        assert_eq!(writes(&mut con), counted, "{cmd:?}: PEEK wrote");
        // PEEK then the real call in one transaction: the same reply.
        for _ in 0..2 {
            let before = dump(&mut con, &key);
            let mut pipe = redis::pipe();
            pipe.atomic();
            for extra in [&["PEEK"][..], &[]] {
                let words = with(cmd, &key, extra);
                let words: Vec<&str> = words.iter().map(|w| w.as_ref()).collect();
                pipe.add_command(common::cmd(&words));
            }
            let (peek, real): (Vec<i64>, Vec<i64>) = pipe.query(&mut con).unwrap();
            if frozen {
                assert_eq!(peek, real, "{cmd:?} (before: {before:?})");
            } else {
                assert_eq!(peek[..3], real[..3], "{cmd:?}");
            }
        }
        // Limited now: PEEK says so, writes nothing, blocks nothing. (A
        // clock-aligned window may end between two calls, and the key
        // expires with it, which PEEK did not do: then again.)
        let mut tries = 0;
        let (before, after) = loop {
            tries += 1;
            until_refused(&mut con, &with(cmd, &key, &[]));
            let started = Instant::now();
            let pttl: i64 = query(&mut con, &["PTTL", &key]).unwrap();
            let before = dump(&mut con, &key);
            let peeked = run(&mut con, &with(cmd, &key, &["PEEK", "BLOCK", "60"]));
            let after = dump(&mut con, &key);
            let expired = after.is_none()
                && pttl >= 0
                && started.elapsed() + Duration::from_millis(1)
                    >= Duration::from_millis(pttl as u64);
            if tries == 3 || (peeked[0] == 1 && !expired) {
                assert_eq!(peeked[0], 1, "{cmd:?}");
                break (before, after);
            }
        };
        assert_eq!(after, before, "{cmd:?}: PEEK changed the key");
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(
            run(&mut con, &with(cmd, &key, &[]))[0],
            0,
            "{cmd:?}: PEEK blocked"
        );
    }
}

#[test]
fn block_locks_a_refusing_limiter_out_until_it_ends() {
    let server = Server::start();
    let mut con = server.connect();
    for (i, cmd) in ONE_PER_100MS.iter().enumerate() {
        let key = format!("block{i}");
        assert_eq!(
            run(&mut con, &with(cmd, &key, &["BLOCK", "0.6"]))[0],
            0,
            "{cmd:?}"
        );
        // Refused: blocked for 0.6 s.
        until_refused(&mut con, &with(cmd, &key, &["BLOCK", "0.6"]));
        let pttl: i64 = query(&mut con, &["PTTL", &key]).unwrap();
        assert!(
            pttl > 500,
            "{cmd:?}: the key's expiry does not cover the block ({pttl} ms)"
        );
        // The limiter alone would allow by now; the block refuses, with the
        // time left.
        std::thread::sleep(Duration::from_millis(250));
        let r = run(&mut con, &with(cmd, &key, &[]));
        assert_eq!((r[0], r[2]), (1, 0), "{cmd:?}: {r:?}");
        assert!((250..=360).contains(&r[3]), "{cmd:?}: retry {r:?}");
        std::thread::sleep(Duration::from_millis(r[3] as u64 + 20));
        assert_eq!(
            run(&mut con, &with(cmd, &key, &[]))[0],
            0,
            "{cmd:?}: still blocked"
        );
    }
    // A cost that can never pass blocks nothing.
    let r = ints(
        &mut con,
        &[
            "RL.GCRA", "never", "0", "10", "1", "TOKENS", "5", "BLOCK", "60",
        ],
    );
    assert_eq!((r[0], r[3]), (1, -1));
    assert!(dump(&mut con, "never").is_none());
    assert_eq!(ints(&mut con, &["RL.GCRA", "never", "0", "10", "1"])[0], 0);
    // A block never shortens one in force.
    ints(&mut con, &["RL.FIXEDWINDOW", "long", "1", "86400"]);
    ints(
        &mut con,
        &["RL.FIXEDWINDOW", "long", "1", "86400", "BLOCK", "900"],
    );
    ints(
        &mut con,
        &["RL.FIXEDWINDOW", "long", "1", "86400", "BLOCK", "1"],
    );
    let r = ints(&mut con, &["RL.FIXEDWINDOW", "long", "1", "86400"]);
    assert!(r[3] > 899_000, "{r:?}");
}

#[test]
fn the_login_form_example_locks_an_account_for_15_minutes() {
    let server = Server::start();
    let mut con = server.connect();
    let attempt = [
        "RL.ALL",
        "2",
        "login:{alice}:min",
        "login:{alice}:day",
        "SLIDINGLOG",
        "5",
        "60",
        "FIXEDWINDOW",
        "20",
        "86400",
        "BLOCK",
        "900",
    ];
    for i in 0..5 {
        assert_eq!(ints(&mut con, &attempt)[0], 0, "attempt {i}");
    }
    let r = ints(&mut con, &attempt);
    assert_eq!((r[0], r[5]), (1, 1), "the per-minute limit refuses: {r:?}");
    // Locked out for 15 minutes, whichever limit is asked.
    let r = ints(&mut con, &attempt);
    assert!(r[3] > 899_000, "{r:?}");
    let pttl: i64 = query(&mut con, &["PTTL", "login:{alice}:min"]).unwrap();
    assert!(pttl > 899_000, "{pttl}");
    // The daily counter was not charged by the refused attempts.
    let day: String = query(&mut con, &["GET", "login:{alice}:day"]).unwrap();
    assert!(day.ends_with(":5"), "{day}");
}

#[test]
fn twenty_connections_never_exceed_either_limit() {
    let server = Server::start();
    let all = [
        "RL.ALL",
        "2",
        "c:{1}:a",
        "c:{1}:b",
        "FIXEDWINDOW",
        "50",
        "86400",
        "SLIDINGLOG",
        "30",
        "600",
    ];
    let allowed: i64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..20)
            .map(|_| {
                let server = &server;
                s.spawn(move || {
                    let mut con = server.connect();
                    (0..10)
                        .map(|_| i64::from(ints(&mut con, &all)[0] == 0))
                        .sum::<i64>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let mut con = server.connect();
    assert_eq!(allowed, 30);
    assert_eq!(query::<i64>(&mut con, &["ZCARD", "c:{1}:b"]).unwrap(), 30);
    let counter: String = query(&mut con, &["GET", "c:{1}:a"]).unwrap();
    assert!(counter.ends_with(":30"), "{counter}");
}

#[test]
fn a_replica_and_an_aof_restart_hold_the_same_bytes_after_all_refund_and_block() {
    let master = Server::start_with(&["--save", "", "--appendonly", "yes"]);
    let replica = Server::start_with(&["--save", "", "--appendonly", "no"]);
    let mut m = master.connect();
    let mut r = replica.connect();
    let _: () = query(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    )
    .unwrap();
    wait_for_sync(&mut r);
    let workload: &[&[&str]] = &[
        &[
            "RL.ALL",
            "2",
            "w:a",
            "w:b",
            "GCRA",
            "4",
            "1",
            "60",
            "SLIDINGLOG",
            "3",
            "60",
        ],
        &[
            "RL.ALL",
            "2",
            "w:a",
            "w:b",
            "GCRA",
            "4",
            "1",
            "60",
            "SLIDINGLOG",
            "3",
            "60",
            "TOKENS",
            "2",
        ],
        &[
            "RL.ALL",
            "2",
            "w:a",
            "w:b",
            "GCRA",
            "4",
            "1",
            "60",
            "SLIDINGLOG",
            "3",
            "60",
            "BLOCK",
            "30",
        ],
        &["RL.TOKENBUCKET", "w:c", "5", "1", "60", "TOKENS", "4"],
        &["RL.TOKENBUCKET", "w:c", "5", "1", "60", "REFUND", "2"],
        &["RL.FIXEDWINDOW", "w:d", "2", "600", "TOKENS", "2"],
        &["RL.FIXEDWINDOW", "w:d", "2", "600", "BLOCK", "45"],
        &["RL.SLIDINGLOG", "w:e", "4", "600", "TOKENS", "3"],
        &["RL.SLIDINGLOG", "w:e", "4", "600", "REFUND", "1"],
        &["RL.SLIDINGLOG", "w:e", "4", "600", "TOKENS", "2"],
        &["RL.SLIDINGLOG", "w:e", "4", "600", "BLOCK", "50"],
        &["RL.GCRA", "w:f", "1", "1", "60", "TOKENS", "2"],
        &["RL.GCRA", "w:f", "1", "1", "60", "REFUND", "2"],
        &["RL.SLIDINGWINDOW", "w:g", "3", "600"],
        &["RL.LEAKYBUCKET", "w:h", "3", "1", "60", "TOKENS", "3"],
        &["RL.LEAKYBUCKET", "w:h", "3", "1", "60", "BLOCK", "20"],
    ];
    for args in workload {
        ints(&mut m, args);
    }
    let acked: i64 = query(&mut m, &["WAIT", "1", "5000"]).unwrap();
    assert_eq!(acked, 1);
    let mut keys: Vec<String> = query(&mut m, &["KEYS", "w:*"]).unwrap();
    keys.sort();
    assert!(
        !keys.contains(&"w:f".to_string()),
        "a refund to full must delete the key"
    );
    let on_master = snapshot(&mut m, &keys);
    assert_eq!(snapshot(&mut r, &keys), on_master, "the replica differs");
    assert_eq!(
        query::<i64>(&mut r, &["DBSIZE"]).unwrap(),
        query::<i64>(&mut m, &["DBSIZE"]).unwrap()
    );
    drop(r);
    drop(replica);
    let dir = master.shutdown("NOSAVE");
    let restarted = Server::start_in(dir, &["--save", "", "--appendonly", "yes"]);
    let mut con = restarted.connect();
    assert_eq!(
        snapshot(&mut con, &keys),
        on_master,
        "the AOF restart differs"
    );
}

#[test]
fn refund_gives_tokens_back_and_a_full_limiter_loses_its_key() {
    let server = Server::start();
    let mut con = server.connect();
    for (i, cmd) in ONE_PER_100MS.iter().enumerate() {
        // Limit 1 everywhere: take it, give it back, take it again at once.
        let (key, r, kept) = within_one_window(&mut con, |con, attempt| {
            let key = format!("refund{i}:{attempt}");
            assert_eq!(run(con, &with(cmd, &key, &[]))[0], 0, "{cmd:?}");
            until_refused(con, &with(cmd, &key, &[]));
            let r = run(con, &with(cmd, &key, &["REFUND", "1"]));
            (key.clone(), r, dump(con, &key))
        });
        assert_eq!((r[0], r[2], r[3]), (0, 1, -1), "{cmd:?}: {r:?}");
        assert!(kept.is_none(), "{cmd:?}: a full limiter kept its key");
        assert_eq!(
            run(&mut con, &with(cmd, &key, &[]))[0],
            0,
            "{cmd:?}: the refund did not take"
        );
        // A missing key: nothing changes, nothing is created.
        let missing = format!("missing{i}");
        let r = run(&mut con, &with(cmd, &missing, &["REFUND", "5"]));
        assert_eq!((r[0], r[2]), (0, 1), "{cmd:?}");
        assert!(
            dump(&mut con, &missing).is_none(),
            "{cmd:?}: REFUND created the key"
        );
    }
    // Never beyond full: 5 taken, 9 given back reads 10 remaining of 10.
    ints(
        &mut con,
        &["RL.TOKENBUCKET", "tb", "10", "1", "60", "TOKENS", "5"],
    );
    let r = ints(
        &mut con,
        &["RL.TOKENBUCKET", "tb", "10", "1", "60", "REFUND", "9"],
    );
    assert_eq!(r, [0, 10, 10, -1, 0]);
    // A refund keeps a block in force.
    ints(&mut con, &["RL.FIXEDWINDOW", "b", "1", "86400"]);
    ints(
        &mut con,
        &["RL.FIXEDWINDOW", "b", "1", "86400", "BLOCK", "600"],
    );
    ints(
        &mut con,
        &["RL.FIXEDWINDOW", "b", "1", "86400", "REFUND", "1"],
    );
    let r = ints(&mut con, &["RL.FIXEDWINDOW", "b", "1", "86400"]);
    assert_eq!(r[0], 1, "the refund lifted the block: {r:?}");
}

#[test]
fn info_ratelimit_counts_each_commands_decisions_exactly() {
    if !common::module_only("INFO ratelimit") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    let gcra = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = ["RL.GCRA", "s", "2", "1", "60"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    run(&mut con, &gcra(&["TOKENS", "2"])); // allowed, 2 tokens
    run(&mut con, &gcra(&[])); // allowed, 1 token (3 of 3 now)
    run(&mut con, &gcra(&["PEEK"])); // limited (would be)
    run(&mut con, &gcra(&["BLOCK", "60"])); // limited by the limiter, blocks
    run(&mut con, &gcra(&[])); // limited by the block
    run(&mut con, &gcra(&["REFUND", "1"])); // allowed, takes nothing
    ints(
        &mut con,
        &["RL.ALL", "1", "t", "FIXEDWINDOW", "10", "60", "TOKENS", "3"],
    );
    let line = info_field(&mut con, "ratelimit", "ratelimit_cmdstat_rl.gcra");
    assert_eq!(
        line,
        "calls_allowed=3,calls_limited=3,tokens_allowed=3,shadow_limited=0,soft_over=0,blocked=1"
    );
    let line = info_field(&mut con, "ratelimit", "ratelimit_cmdstat_rl.all");
    assert_eq!(
        line,
        "calls_allowed=1,calls_limited=0,tokens_allowed=3,shadow_limited=0,soft_over=0,blocked=0"
    );
    let line = info_field(&mut con, "ratelimit", "ratelimit_cmdstat_rl.tokenbucket");
    assert_eq!(
        line,
        "calls_allowed=0,calls_limited=0,tokens_allowed=0,shadow_limited=0,soft_over=0,blocked=0"
    );
}

#[test]
fn withlimits_appends_every_limits_own_five_integers_and_changes_nothing_else() {
    let server = Server::start();
    let mut con = server.connect();
    let base = [
        "RL.ALL",
        "3",
        "{u}:a",
        "{u}:b",
        "{u}:c",
        "FIXEDWINDOW",
        "5",
        "60",
        "GCRA",
        "2",
        "1",
        "60",
        "TOKENBUCKET",
        "10",
        "10",
        "60",
    ];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        base.iter().copied().chain(extra.iter().copied()).collect()
    };
    // The default reply stays six integers.
    let plain = ints(&mut con, &with(&["PEEK"]));
    assert_eq!(plain.len(), 6);
    // Allowed: the six integers, then each limit's (limited, limit, remaining,
    // retry_after_ms, reset_after_ms), in the order of the keys.
    let r = ints(&mut con, &with(&["WITHLIMITS"]));
    assert_eq!(r.len(), 6 + 3 * 5, "{r:?}");
    assert_eq!(&r[..6], &[0, 3, 2, -1, r[4], 2], "GCRA (3 at once) binds");
    assert_eq!(&r[6..9], &[0, 5, 4]);
    assert_eq!(&r[11..14], &[0, 3, 2]);
    assert_eq!(&r[16..19], &[0, 10, 9]);
    assert!(r[9] == -1 && r[14] == -1 && r[19] == -1);
    // Any case, any place among the options, PEEK too: the same shape.
    let r = ints(&mut con, &with(&["withlimits", "TOKENS", "2", "PEEK"]));
    assert_eq!(r.len(), 21);
    assert_eq!((r[6 + 2], r[11 + 2], r[16 + 2]), (2, 0, 7));
    // Refused by GCRA (3 taken of 3): each limit says what it alone decides;
    // nothing is written.
    ints(&mut con, &with(&["TOKENS", "2"]));
    let before: Vec<Option<Vec<u8>>> = ["{u}:a", "{u}:b", "{u}:c"]
        .iter()
        .map(|k| dump(&mut con, k))
        .collect();
    let r = ints(&mut con, &with(&["WITHLIMITS"]));
    assert_eq!(r.len(), 21);
    assert_eq!((r[0], r[5]), (1, 2), "refused by the GCRA limit");
    assert_eq!(&r[6..9], &[0, 5, 1], "the window alone would allow");
    assert_eq!(r[11], 1, "the GCRA limit refuses");
    assert!(r[14] > 0, "with a retry_after");
    assert_eq!(&r[16..19], &[0, 10, 6]);
    let after: Vec<Option<Vec<u8>>> = ["{u}:a", "{u}:b", "{u}:c"]
        .iter()
        .map(|k| dump(&mut con, k))
        .collect();
    assert_eq!(before, after, "a refused call writes nothing");
    // Given twice, or as a limit: errors.
    assert!(call_err(&mut con, &with(&["WITHLIMITS", "WITHLIMITS"])).contains("syntax"));
    let short = [
        "RL.ALL",
        "2",
        "{u}:a",
        "{u}:b",
        "FIXEDWINDOW",
        "5",
        "60",
        "WITHLIMITS",
    ];
    assert!(call_err(&mut con, &short).contains("exactly numkeys limits"));
}
