//! Trust under pressure: the refusal that starts a block says how long the
//! block lasts; the work of one call is bounded by the module's
//! `sliding-log-call-budget`, checked before anything is written; every
//! duration is capped, so every key the module writes expires.

mod common;

use common::{query, Server};

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
