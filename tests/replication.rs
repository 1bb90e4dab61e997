//! Effects, not commands, reach replicas and the AOF: a replica and an AOF
//! replay end with the same bytes and absolute expiry as the master, and the
//! AOF holds no RL.* / CL.* command.

mod common;

use std::time::Duration;

use common::{aof_contents, call, query, snapshot, wait_for_sync, Server};

/// Waits, when the next hour is less than a minute away, until it has
/// begun: the workload's fixed windows of an hour end, and their keys
/// expire, on the hour; one that ended between the master's snapshot and
/// the replica's would tell them apart (seen once at 11:00 on a busy
/// machine).
fn away_from_the_hour_end() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock after 1970");
    let into_hour = Duration::from_millis((now.as_millis() % 3_600_000) as u64);
    let to_end = Duration::from_secs(3600) - into_hour;
    if to_end < Duration::from_secs(60) {
        std::thread::sleep(to_end + Duration::from_millis(100));
    }
}

/// A mixed workload over several keys: allowed and limited calls, costs,
/// forced costs past the limit (debts, some under a block), and all the
/// commands. Long periods keep the keys alive for the test.
fn workload(con: &mut redis::Connection) -> Vec<String> {
    away_from_the_hour_end();
    let mut keys = Vec::new();
    for i in 0..30 {
        let [g, t, c, f, s, l, q] =
            ["gcra", "tb", "cell", "fixed", "sliding", "log", "queue"].map(|p| format!("{p}:{i}"));
        for j in 0..(i % 7 + 1) {
            let cost = (j % 3 + 1).to_string();
            call(con, &["RL.GCRA", &g, "4", "3", "600", "TOKENS", &cost]);
            call(
                con,
                &["RL.TOKENBUCKET", &t, "6", "7", "900.5", "TOKENS", &cost],
            );
            call(con, &["CL.THROTTLE", &c, "3", "2", "600", &cost]);
            call(con, &["RL.FIXEDWINDOW", &f, "5", "3600", "TOKENS", &cost]);
            call(con, &["RL.SLIDINGWINDOW", &s, "5", "600", "TOKENS", &cost]);
            call(con, &["RL.SLIDINGLOG", &l, "5", "600", "TOKENS", &cost]);
            call(
                con,
                &["RL.LEAKYBUCKET", &q, "5", "3", "600", "TOKENS", &cost],
            );
        }
        // FORCE past the limit (debts), under a BLOCK now and then, and
        // one forced limit of RL.ALL beside one that is not.
        if i % 3 == 0 {
            let block: &[&str] = if i % 2 == 0 { &["BLOCK", "900"] } else { &[] };
            for (cmd, key, params) in [
                ("RL.GCRA", &g, &["4", "3", "600"][..]),
                ("RL.TOKENBUCKET", &t, &["6", "7", "900.5"]),
                ("RL.FIXEDWINDOW", &f, &["5", "3600"]),
                ("RL.SLIDINGWINDOW", &s, &["5", "600"]),
                ("RL.SLIDINGLOG", &l, &["5", "600"]),
                ("RL.LEAKYBUCKET", &q, &["5", "3", "600"]),
            ] {
                let mut args = vec![cmd, key.as_str()];
                args.extend(params);
                // A log holds at most twice its limit in its window.
                let cost = if cmd == "RL.SLIDINGLOG" { "3" } else { "7" };
                args.extend(["TOKENS", cost, "FORCE"]);
                args.extend(block);
                call(con, &args);
            }
            let (fa, fb) = (format!("{{all:{i}}}:a"), format!("{{all:{i}}}:b"));
            let _: Vec<i64> = query(
                con,
                &[
                    "RL.ALL",
                    "2",
                    &fa,
                    &fb,
                    "GCRA",
                    "2",
                    "1",
                    "600",
                    "FORCE",
                    "FIXEDWINDOW",
                    "10",
                    "3600",
                    "TOKENS",
                    "5",
                ],
            )
            .unwrap();
            keys.extend([fa, fb]);
        }
        keys.extend([g, t, c, f, s, l, q]);
    }
    keys
}

/// A master with an AOF (`appendfsync always`) and a replica in sync with it.
fn master_with_replica() -> (Server, Server) {
    let master = Server::start_with(&[
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ]);
    let replica = Server::start();
    let mut r = replica.connect();
    let _: () = query(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    )
    .unwrap();
    wait_for_sync(&mut r);
    (master, replica)
}

#[test]
fn replica_and_aof_replay_match_the_master_byte_for_byte() {
    let (master, replica) = master_with_replica();
    let (mut m, mut r) = (master.connect(), replica.connect());

    let keys = workload(&mut m);
    let acked: i64 = query(&mut m, &["WAIT", "1", "5000"]).unwrap();
    assert_eq!(acked, 1, "the replica did not acknowledge");
    let on_master = snapshot(&mut m, &keys);
    assert_eq!(
        snapshot(&mut r, &keys),
        on_master,
        "replica differs from master"
    );

    // The AOF holds the effects (SET … PXAT) and never the commands.
    let aof = common::aof_text(master.dir.path());
    assert!(aof.contains("PXAT"), "no SET … PXAT in the AOF");
    assert!(aof.contains("ZADD"), "no sliding-log entries in the AOF");
    for forbidden in ["RL.", "CL.THROTTLE", "FCALL"] {
        assert!(!aof.contains(forbidden), "the AOF holds {forbidden}");
    }

    // A fresh server replaying that AOF ends with the same bytes and expiry.
    let dir = master.shutdown("NOSAVE");
    let replayed = Server::start_in(dir, &["--save", "", "--appendonly", "yes"]);
    let mut p = replayed.connect();
    assert_eq!(
        snapshot(&mut p, &keys),
        on_master,
        "AOF replay differs from master"
    );
}

#[test]
fn limited_calls_propagate_nothing() {
    let master = Server::start_with(&[
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ]);
    let mut m = master.connect();
    assert_eq!(call(&mut m, &["RL.GCRA", "k", "0", "1", "600"])[0], 0);
    let before = aof_contents(master.dir.path());
    for cmd in [
        &["RL.GCRA", "k", "0", "1", "600"][..],
        &["RL.GCRA", "k", "0", "1", "600", "TOKENS", "5"],
        &["RL.TOKENBUCKET", "never", "1", "1", "600", "TOKENS", "2"],
        &["CL.THROTTLE", "k", "0", "1", "600", "0"],
    ] {
        let r = call(&mut m, cmd);
        assert!(r[0] == 1 || cmd.last() == Some(&"0"), "{cmd:?} → {r:?}");
    }
    assert_eq!(
        aof_contents(master.dir.path()),
        before,
        "a limited or read-only call reached the AOF"
    );
}

#[test]
fn sliding_log_removals_reach_the_replica_and_the_aof_as_effects() {
    let (master, replica) = master_with_replica();
    let (mut m, mut r) = (master.connect(), replica.connect());
    // Old entries leave a 0.5 s window while newer ones stay; the next request
    // removes them; then the replica must hold the same bytes and expiry.
    let scenario = |m: &mut redis::Connection,
                    r: &mut redis::Connection,
                    key: &str,
                    limit: &str,
                    (old, newer): (&str, &str),
                    remaining: i64,
                    left: i64| {
        let log = |m: &mut redis::Connection, tokens: &str| {
            call(m, &["RL.SLIDINGLOG", key, limit, "0.5", "TOKENS", tokens])
        };
        assert_eq!(log(m, old)[0], 0);
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(log(m, newer)[0], 0);
        std::thread::sleep(Duration::from_millis(260));
        let limit_n: i64 = limit.parse().unwrap();
        assert_eq!(log(m, "1")[..3], [0, limit_n, remaining]);
        let acked: i64 = query(m, &["WAIT", "1", "5000"]).unwrap();
        assert_eq!(acked, 1);
        let keys = [key.to_string()];
        assert_eq!(snapshot(r, &keys), snapshot(m, &keys), "replica differs");
        assert_eq!(query::<i64>(r, &["ZCARD", key]).unwrap(), left);
    };
    // Two expired entries, removed one by one.
    scenario(&mut m, &mut r, "log", "3", ("2", "1"), 1, 2);
    // 300 expired entries: one call removes at most its cost + 128 of them
    // (bounded work per call), the rest stays for later calls; the effect is
    // `ZREM` of exactly those members.
    scenario(
        &mut m,
        &mut r,
        "big",
        "500",
        ("300", "10"),
        489,
        300 - 129 + 10 + 1,
    );
    let stats: String = query(&mut m, &["INFO", "commandstats"]).unwrap();
    assert!(
        !stats.contains("cmdstat_zremrangebyscore:"),
        "the module ran a command instead of using the key API:\n{stats}"
    );
    let aof = common::aof_text(master.dir.path());
    assert!(aof.contains("ZREM"), "no removal effect in the AOF");
    assert!(
        !aof.contains("RL.SLIDINGLOG") && !aof.contains("FCALL"),
        "the AOF holds the command"
    );
}
