//! Restarts lose nothing and resurrect nothing: after a mixed workload over
//! all seven commands, a server restarted from its AOF (with or without a
//! rewrite in the middle of the workload) or from an RDB snapshot holds every
//! limiter key byte for byte (`DUMP`) with the same absolute expiry
//! (`PEXPIRETIME`), and no key whose expiry passed in the meantime.
//!
//! Most keys live for minutes or more. A few expire within two seconds of
//! the workload: alive when the server stops, past their expiry when the new
//! one is checked, so they must be gone. An effect propagated with a relative
//! expiry (`PX`, `PEXPIRE`) would fail both checks: the long-lived keys'
//! expiries would move by the restart's duration, and the short-lived keys
//! would come back to life.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{info_field, query, Server};
use redis::Value;

/// A key's `DUMP` and `PEXPIRETIME`, by name.
type Snapshot = BTreeMap<String, (Vec<u8>, i64)>;

/// Keys expiring sooner than this after the snapshot are "short-lived".
const SHORT_MS: i64 = 60_000;

const AOF: &[&str] = &[
    "--save",
    "",
    "--appendonly",
    "yes",
    "--appendfsync",
    "always",
];
const RDB: &[&str] = &["--save", "", "--appendonly", "no"];

fn server_ms(con: &mut redis::Connection) -> i64 {
    let t: Vec<i64> = query(con, &["TIME"]).unwrap();
    t[0] * 1000 + t[1] / 1000
}

/// Runs `calls` in one pipeline; every reply must be five integers.
fn run_all(con: &mut redis::Connection, calls: &[Vec<String>]) -> Vec<[i64; 5]> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for c in calls {
        let words: Vec<&str> = c.iter().map(String::as_str).collect();
        pipe.add_command(common::cmd(&words));
    }
    let replies: Vec<Value> = pipe.query(con).expect("workload");
    calls
        .iter()
        .zip(replies)
        .map(|(c, r)| {
            redis::from_redis_value::<Vec<i64>>(r.clone())
                .ok()
                .and_then(|v| v.try_into().ok())
                .unwrap_or_else(|| panic!("{c:?} → {r:?}"))
        })
        .collect()
}

fn cmd(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

/// A mixed workload over every command, tagged so that several rounds
/// write distinct keys: costs, allowed and limited calls, parameters that
/// change between calls (a short period, then a long one), sliding logs whose
/// old entries are removed, `CL.THROTTLE … 0` reads; the last calls leave a
/// few keys that expire 0.5–2 s later. Returns how many calls
/// were allowed and how many limited.
fn workload(con: &mut redis::Connection, tag: &str) -> (usize, usize) {
    let mut first = Vec::new();
    let mut second = Vec::new();
    for i in 0..20 {
        let k = |p: &str| format!("{p}:{tag}:{i}");
        let [g, t, c, f, s, l, q] = ["gcra", "tb", "cell", "fw", "sw", "log", "leaky"].map(k);
        // Aligned windows of 366 days, the longest accepted (the next
        // boundary is in February 2027): no window ends during the test.
        let window = "31622400";
        if i % 4 == 0 {
            // A short period first: the key's first expiry is near, the
            // later calls (long period) push it far.
            first.push(cmd(&["RL.GCRA", &g, "4", "3", "0.05"]));
            first.push(cmd(&[
                "RL.TOKENBUCKET",
                &t,
                "6",
                "7",
                "0.05",
                "TOKENS",
                "3",
            ]));
            first.push(cmd(&[
                "RL.LEAKYBUCKET",
                &q,
                "5",
                "3",
                "0.05",
                "TOKENS",
                "2",
            ]));
        }
        // Sliding logs: entries that a later call with a short window removes.
        first.push(cmd(&["RL.SLIDINGLOG", &l, "10", "3600", "TOKENS", "3"]));
        second.push(cmd(&["RL.SLIDINGLOG", &l, "10", "0.05"]));
        for j in 0..(i % 7 + 1) {
            let cost = (j % 3 + 1).to_string();
            let cost = cost.as_str();
            second.extend([
                cmd(&["RL.GCRA", &g, "4", "3", "600", "TOKENS", cost]),
                cmd(&["RL.TOKENBUCKET", &t, "6", "7", "900.5", "TOKENS", cost]),
                cmd(&["CL.THROTTLE", &c, "3", "2", "600", cost]),
                cmd(&["CL.THROTTLE", &c, "3", "2", "600", "0"]),
                cmd(&["RL.FIXEDWINDOW", &f, "5", window, "TOKENS", cost]),
                cmd(&["RL.SLIDINGWINDOW", &s, "5", window, "TOKENS", cost]),
                cmd(&["RL.SLIDINGLOG", &l, "10", "3600", "TOKENS", cost]),
                cmd(&["RL.LEAKYBUCKET", &q, "5", "3", "600", "TOKENS", cost]),
            ]);
        }
        if i % 5 == 0 {
            // Short-lived keys: they expire 0.5–2 s later.
            let k = |p: &str| format!("short:{p}:{tag}:{i}");
            second.extend([
                cmd(&["RL.GCRA", &k("gcra"), "0", "1", "1"]),
                cmd(&["RL.TOKENBUCKET", &k("tb"), "2", "2", "1"]),
                cmd(&["CL.THROTTLE", &k("cell"), "0", "1", "1"]),
                cmd(&["RL.FIXEDWINDOW", &k("fw"), "3", "1"]),
                cmd(&["RL.SLIDINGWINDOW", &k("sw"), "3", "1"]),
                cmd(&["RL.SLIDINGLOG", &k("log"), "3", "1", "TOKENS", "2"]),
                cmd(&["RL.LEAKYBUCKET", &k("leaky"), "2", "2", "1"]),
            ]);
        }
    }
    let mut replies = run_all(con, &first);
    // Let the first entries and the short periods pass.
    std::thread::sleep(Duration::from_millis(60));
    replies.extend(run_all(con, &second));
    let allowed = replies.iter().filter(|r| r[0] == 0).count();
    (allowed, replies.len() - allowed)
}

/// Every key with its `DUMP` and `PEXPIRETIME`, read together by a script
/// (the clock is frozen inside it, so a key cannot expire between the two).
fn snapshot(con: &mut redis::Connection) -> Snapshot {
    let keys: Vec<String> = query(con, &["KEYS", "*"]).unwrap();
    let mut pipe = redis::pipe();
    for k in &keys {
        pipe.cmd("EVAL")
            .arg("return {redis.call('DUMP', KEYS[1]), redis.call('PEXPIRETIME', KEYS[1])}")
            .arg(1)
            .arg(k);
    }
    let replies: Vec<(Option<Vec<u8>>, i64)> = pipe.query(con).unwrap();
    let mut snap = Snapshot::new();
    for (k, (dump, expire)) in keys.into_iter().zip(replies) {
        let Some(dump) = dump else { continue }; // expired since KEYS
        assert!(expire > 0, "{k} has no expiry ({expire})");
        snap.insert(k, (dump, expire));
    }
    snap
}

/// Checks a restarted server against the snapshot taken before it stopped:
/// every long-lived key is there, byte for byte, with the same expiry; every
/// short-lived key is gone once its expiry has passed; nothing else exists.
fn assert_restored(con: &mut redis::Connection, before: &Snapshot, taken_at_ms: i64, what: &str) {
    let short_until = before
        .values()
        .map(|&(_, e)| e)
        .filter(|&e| e < taken_at_ms + SHORT_MS)
        .max();
    let short = before
        .values()
        .filter(|&&(_, e)| e < taken_at_ms + SHORT_MS)
        .count();
    assert!(
        short >= 10,
        "{what}: too few short-lived keys to check ({short})"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while server_ms(con) <= short_until.unwrap_or(0) {
        assert!(Instant::now() < deadline, "{what}: the clock does not move");
        std::thread::sleep(Duration::from_millis(10));
    }
    let after = snapshot(con);
    let mut problems = Vec::new();
    for (k, (dump, expire)) in before {
        match after.get(k) {
            _ if *expire < taken_at_ms + SHORT_MS => {
                if let Some((_, e)) = after.get(k) {
                    problems.push(format!(
                        "{k}: expired at {expire} but is back, expiring at {e}"
                    ));
                }
            }
            None => problems.push(format!("{k}: lost")),
            Some((d, e)) if d != dump || e != expire => problems.push(format!(
                "{k}: differs (expiry {expire} → {e}, bytes equal: {})",
                d == dump
            )),
            Some(_) => {}
        }
    }
    for k in after.keys().filter(|k| !before.contains_key(*k)) {
        problems.push(format!("{k}: appeared"));
    }
    assert!(
        problems.is_empty(),
        "{what}: {} of {} keys wrong:\n{}",
        problems.len(),
        before.len(),
        problems[..problems.len().min(20)].join("\n")
    );
}

/// The snapshot of a finished workload, with sanity checks that it covers
/// what the test is about.
fn checked_snapshot(con: &mut redis::Connection, rounds: usize) -> (Snapshot, i64) {
    let taken_at_ms = server_ms(con);
    let snap = snapshot(con);
    for prefix in ["gcra", "tb", "cell", "fw", "sw", "log", "leaky"] {
        let long = snap
            .keys()
            .filter(|k| k.starts_with(&format!("{prefix}:")))
            .count();
        assert_eq!(long, 20 * rounds, "{prefix}: long-lived keys");
    }
    (snap, taken_at_ms)
}

fn assert_mixed((allowed, limited): (usize, usize)) {
    assert!(
        allowed > 100 && limited > 100,
        "allowed {allowed}, limited {limited}"
    );
}

#[test]
fn a_restart_from_the_aof_restores_every_key_and_its_absolute_expiry() {
    let server = Server::start_with(AOF);
    let mut con = server.connect();
    assert_mixed(workload(&mut con, "a"));
    let (before, taken_at_ms) = checked_snapshot(&mut con, 1);
    let dir = server.shutdown("NOSAVE");
    // The AOF holds effects: values with absolute expiries, and the sliding
    // logs' removals.
    let mut aof = Vec::new();
    for entry in std::fs::read_dir(dir.path().join("appendonlydir")).unwrap() {
        aof.extend(std::fs::read(entry.unwrap().path()).unwrap());
    }
    let aof = String::from_utf8_lossy(&aof).to_uppercase();
    let restarted = Server::start_in(dir, AOF);
    let mut con = restarted.connect();
    assert_restored(&mut con, &before, taken_at_ms, "AOF restart");
    for effect in ["PXAT", "ZADD", "ZREM", "PEXPIREAT"] {
        assert!(aof.contains(effect), "no {effect} in the AOF");
    }
}

#[test]
fn a_restart_from_an_rdb_snapshot_restores_every_key_and_its_absolute_expiry() {
    let server = Server::start_with(RDB);
    let mut con = server.connect();
    assert_mixed(workload(&mut con, "b"));
    let (before, taken_at_ms) = checked_snapshot(&mut con, 1);
    let _: () = query(&mut con, &["SAVE"]).unwrap();
    let dir = server.shutdown("NOSAVE");
    assert!(dir.path().join("dump.rdb").exists(), "no dump.rdb");
    let restarted = Server::start_in(dir, RDB);
    let mut con = restarted.connect();
    assert_restored(&mut con, &before, taken_at_ms, "RDB restart");
}

/// A workload, an AOF rewrite with more of the workload while it runs, the
/// rest after it, then a restart from the AOF.
fn rewrite_mid_workload(preamble: &str) {
    let opts: Vec<&str> = AOF
        .iter()
        .copied()
        .chain(["--aof-use-rdb-preamble", preamble])
        .collect();
    let server = Server::start_with(&opts);
    let mut con = server.connect();
    assert_mixed(workload(&mut con, "c1"));
    // Slow the rewrite down (8 ms per key, a test-only setting) so that the
    // next part of the workload certainly runs while it is in progress.
    let _: () = query(&mut con, &["CONFIG", "SET", "rdb-key-save-delay", "8000"]).unwrap();
    let _: String = query(&mut con, &["BGREWRITEAOF"]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while info_field(&mut con, "persistence", "aof_rewrite_in_progress") != "1" {
        assert!(Instant::now() < deadline, "the rewrite did not start");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_mixed(workload(&mut con, "c2"));
    assert_eq!(
        info_field(&mut con, "persistence", "aof_rewrite_in_progress"),
        "1",
        "the rewrite ended before the workload that should overlap it"
    );
    let _: () = query(&mut con, &["CONFIG", "SET", "rdb-key-save-delay", "0"]).unwrap();
    while info_field(&mut con, "persistence", "aof_rewrite_in_progress") != "0"
        || info_field(&mut con, "persistence", "aof_rewrite_scheduled") != "0"
    {
        assert!(Instant::now() < deadline, "the rewrite did not finish");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        info_field(&mut con, "persistence", "aof_last_bgrewrite_status"),
        "ok"
    );
    assert_eq!(info_field(&mut con, "persistence", "aof_rewrites"), "1");
    assert_mixed(workload(&mut con, "c3"));
    let (before, taken_at_ms) = checked_snapshot(&mut con, 3);
    let dir = server.shutdown("NOSAVE");
    let restarted = Server::start_in(dir, &opts);
    let mut con = restarted.connect();
    assert_restored(
        &mut con,
        &before,
        taken_at_ms,
        &format!("AOF restart after a rewrite (aof-use-rdb-preamble {preamble})"),
    );
}

#[test]
fn an_aof_rewrite_in_the_middle_of_a_workload_loses_nothing() {
    rewrite_mid_workload("yes");
}

#[test]
fn an_aof_rewrite_without_rdb_preamble_in_the_middle_of_a_workload_loses_nothing() {
    rewrite_mid_workload("no");
}
