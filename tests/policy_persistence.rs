//! Policies never vanish or diverge silently (issue 22, items 3a and 3b):
//! they survive every persistence path — an AOF rewrite with or without the
//! RDB preamble (with policy changes while it runs), `CONFIG SET appendonly
//! yes`, a rewrite while writes are paused — and a server loaded with
//! `policies no` loads, keeps and saves again the policies of an RDB or a
//! full sync instead of exiting.

mod common;

use std::time::Duration;

use common::{aof_contents, call_err, info_field, query, wait_for_sync, wait_until, Server};

fn ok(con: &mut redis::Connection, args: &[&str]) {
    let reply: String = query(con, args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert_eq!(reply, "OK", "{args:?}");
}

fn dump(con: &mut redis::Connection) -> String {
    query(con, &["RL.POLICY", "DUMP"]).unwrap()
}

/// Stops `server` without a final save, starts a server on its files with
/// `config`, and returns that server's policies (`RL.POLICY DUMP`).
fn policies_after_restart(server: Server, con: redis::Connection, config: &[&str]) -> String {
    drop(con);
    let dir = server.shutdown("NOSAVE");
    let restarted = Server::start_in(dir, config);
    let mut con = restarted.connect();
    dump(&mut con)
}
fn aof_config(preamble: &'static str) -> Vec<&'static str> {
    vec![
        "--save",
        "",
        "--appendonly",
        "yes",
        "--aof-use-rdb-preamble",
        preamble,
    ]
}

fn rewrite_done(con: &mut redis::Connection) -> bool {
    info_field(con, "persistence", "aof_rewrite_in_progress") == "0"
        && info_field(con, "persistence", "aof_rewrite_scheduled") == "0"
}

fn wait_rewrite_done(con: &mut redis::Connection) {
    wait_until("the AOF rewrite", Duration::from_secs(20), || {
        rewrite_done(con)
    });
    assert_eq!(
        info_field(con, "persistence", "aof_last_bgrewrite_status"),
        "ok"
    );
}

/// Policies, then `BGREWRITEAOF` slowed down by keys to write, with a storm
/// of policy changes while it runs, then more after it; a restart from the
/// AOF has every policy as it was.
fn rewrite_with_changes_then_restart(preamble: &'static str) {
    let config = aof_config(preamble);
    let server = Server::start_with(&config);
    let mut con = server.connect();
    let _: i64 = query(
        &mut con,
        &[
            "RL.POLICY",
            "LOAD",
            "free GCRA 4 5 1\npro FIXEDWINDOW 100 60 SOFT 10\nold TOKENBUCKET 5 1 1\n\
             monthly FIXEDWINDOW 1000000 month tz Europe/Paris SOFT 10\n\
             daily FIXEDWINDOW 500 DAY TZ +05:30 BLOCK 60\n",
        ],
    )
    .unwrap();
    // 100 keys at 5 ms each (a test-only setting): the rewrite runs ~0.5 s.
    for i in 0..100 {
        ok(&mut con, &["SET", &format!("filler:{i}"), "x"]);
    }
    ok(&mut con, &["CONFIG", "SET", "rdb-key-save-delay", "5000"]);
    let _: String = query(&mut con, &["BGREWRITEAOF"]).unwrap();
    wait_until("the rewrite to start", Duration::from_secs(10), || {
        info_field(&mut con, "persistence", "aof_rewrite_in_progress") == "1"
    });
    for i in 0..50 {
        let name = format!("storm{i}");
        ok(
            &mut con,
            &[
                "RL.POLICY",
                "SET",
                &name,
                "GCRA",
                &(i + 1).to_string(),
                "1",
                "1",
            ],
        );
        if i % 3 == 0 {
            let _: i64 = query(&mut con, &["RL.POLICY", "DEL", &name]).unwrap();
        }
    }
    let _: i64 = query(&mut con, &["RL.POLICY", "DEL", "old"]).unwrap();
    let _: i64 = query(&mut con, &["RL.POLICY", "LOAD", "bulk SLIDINGWINDOW 7 1"]).unwrap();
    assert_eq!(
        info_field(&mut con, "persistence", "aof_rewrite_in_progress"),
        "1",
        "the rewrite ended before the changes that should overlap it"
    );
    ok(&mut con, &["CONFIG", "SET", "rdb-key-save-delay", "0"]);
    wait_rewrite_done(&mut con);
    ok(
        &mut con,
        &["RL.POLICY", "SET", "after", "LEAKYBUCKET", "3", "1", "1"],
    );
    let expected = dump(&mut con);
    assert!(expected.contains("free GCRA 4 5 1\n"), "{expected}");
    // Calendar windows keep their zone (TZ upper case, the rest as given).
    assert!(
        expected.contains("monthly FIXEDWINDOW 1000000 month TZ Europe/Paris SOFT 10\n")
            && expected.contains("daily FIXEDWINDOW 500 DAY TZ +05:30 BLOCK 60\n"),
        "{expected}"
    );
    assert_eq!(
        policies_after_restart(server, con, &config),
        expected,
        "AOF restart after a rewrite with aof-use-rdb-preamble {preamble}"
    );
}

#[test]
fn policies_survive_an_aof_rewrite_without_the_rdb_preamble_and_a_restart() {
    if !common::module_only("policies are module data") {
        return;
    }
    rewrite_with_changes_then_restart("no");
}

#[test]
fn policies_survive_an_aof_rewrite_with_the_rdb_preamble_and_a_restart() {
    if !common::module_only("policies are module data") {
        return;
    }
    rewrite_with_changes_then_restart("yes");
}

#[test]
fn policies_survive_config_set_appendonly_yes_then_a_restart() {
    if !common::module_only("policies are module data") {
        return;
    }
    // `appendonly yes` at run time starts a rewrite that writes the first
    // base: without the preamble it would hold no policies.
    let server = Server::start_with(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--aof-use-rdb-preamble",
        "no",
    ]);
    let mut con = server.connect();
    ok(&mut con, &["RL.POLICY", "SET", "a", "GCRA", "1", "2", "3"]);
    ok(
        &mut con,
        &["RL.POLICY", "SET", "b", "SLIDINGLOG", "5", "10"],
    );
    ok(&mut con, &["CONFIG", "SET", "appendonly", "yes"]);
    wait_until("the first AOF", Duration::from_secs(20), || {
        info_field(&mut con, "persistence", "aof_enabled") == "1" && rewrite_done(&mut con)
    });
    let expected = dump(&mut con);
    assert_eq!(
        policies_after_restart(server, con, &aof_config("no")),
        expected
    );
}

#[test]
fn no_policies_at_a_rewrite_write_nothing_and_restart_empty() {
    if !common::module_only("policies are module data") {
        return;
    }
    let config = aof_config("no");
    let server = Server::start_with(&config);
    let mut con = server.connect();
    ok(
        &mut con,
        &["RL.POLICY", "SET", "gone", "GCRA", "1", "2", "3"],
    );
    let _: i64 = query(&mut con, &["RL.POLICY", "DEL", "gone"]).unwrap();
    let _: String = query(&mut con, &["BGREWRITEAOF"]).unwrap();
    wait_rewrite_done(&mut con);
    // Give a (wrong) propagation time to land: it goes from a 0 ms timer.
    std::thread::sleep(Duration::from_millis(200));
    drop(con);
    let dir = server.shutdown("NOSAVE");
    let aof = String::from_utf8_lossy(&aof_contents(dir.path())).to_lowercase();
    assert!(!aof.contains("rl.policy"), "{aof}");
    let restarted = Server::start_in(dir, &config);
    let mut con = restarted.connect();
    assert_eq!(dump(&mut con), "");
}

#[test]
fn a_rewrite_while_writes_are_paused_keeps_the_server_up_and_the_policies() {
    if !common::module_only("policies are module data") {
        return;
    }
    // The server asserts that nothing propagates during a pause: the module
    // waits for its end.
    let config = aof_config("no");
    let mut server = Server::start_with(&config);
    let mut con = server.connect();
    ok(&mut con, &["RL.POLICY", "SET", "a", "GCRA", "1", "2", "3"]);
    ok(&mut con, &["CLIENT", "PAUSE", "500", "WRITE"]);
    let _: String = query(&mut con, &["BGREWRITEAOF"]).unwrap();
    wait_rewrite_done(&mut con);
    assert!(server.is_alive(), "{}", server.log());
    wait_until("the pause to end", Duration::from_secs(10), || {
        let aof = String::from_utf8_lossy(&aof_contents(server.dir.path())).to_lowercase();
        aof.contains("rl.policy")
    });
    let expected = dump(&mut con);
    assert_eq!(policies_after_restart(server, con, &config), expected);
}

#[test]
fn replicas_get_nothing_from_the_masters_rewrite() {
    if !common::module_only("policies are module data") {
        return;
    }
    // The LOAD REPLACE goes to the AOF only: a replica's stream stays the
    // master's changes, and its policies stay equal.
    let master = Server::start_with(&aof_config("no"));
    let mut m = master.connect();
    ok(&mut m, &["RL.POLICY", "SET", "a", "GCRA", "1", "2", "3"]);
    let replica = Server::start();
    let mut r = replica.connect();
    let _: () = query(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    )
    .unwrap();
    wait_for_sync(&mut r);
    let offset_before = info_field(&mut m, "replication", "master_repl_offset");
    let _: String = query(&mut m, &["BGREWRITEAOF"]).unwrap();
    wait_rewrite_done(&mut m);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        info_field(&mut m, "replication", "master_repl_offset"),
        offset_before
    );
    assert_eq!(dump(&mut r), dump(&mut m));
}

// --- 3b: `policies no` carries policies --------------------------------------

const RDB: [&str; 4] = ["--save", "", "--appendonly", "no"];

/// An RDB with policies, written by a server with `policies yes`.
fn rdb_with_policies() -> (tempfile::TempDir, String) {
    let server = Server::start_with(&RDB);
    let mut con = server.connect();
    ok(&mut con, &["RL.POLICY", "SET", "a", "GCRA", "1", "2", "3"]);
    ok(
        &mut con,
        &["RL.POLICY", "SET", "b", "FIXEDWINDOW", "5", "10"],
    );
    let expected = dump(&mut con);
    ok(&mut con, &["SAVE"]);
    drop(con);
    (server.shutdown("NOSAVE"), expected)
}

fn assert_policies_off(con: &mut redis::Connection) {
    for args in [
        vec!["RL.POLICY", "DUMP"],
        vec!["RL.POLICY", "SET", "x", "GCRA", "1", "1", "1"],
        vec!["RL.LIMIT", "k", "a"],
    ] {
        let e = call_err(con, &args);
        assert!(e.contains("policies are off"), "{args:?}: {e}");
    }
}

#[test]
fn a_policies_no_server_starts_on_an_rdb_with_policies_and_saves_them_again() {
    if !common::module_only("policies are module data") {
        return;
    }
    let (dir, expected) = rdb_with_policies();
    let mut off = Server::start_in_with_module_args(dir, &["policies", "no"], &RDB);
    let mut con = off.connect();
    assert!(off.is_alive());
    assert_policies_off(&mut con);
    assert_eq!(info_field(&mut con, "ratelimit", "ratelimit_policies"), "2");
    assert!(
        off.log().contains("2 policies loaded and kept, not served"),
        "{}",
        off.log()
    );
    // They are saved again, and served by a server with `policies yes`.
    std::fs::remove_file(off.dir.path().join("dump.rdb")).unwrap();
    ok(&mut con, &["SAVE"]);
    assert_eq!(policies_after_restart(off, con, &RDB), expected);
}

#[test]
fn a_policies_no_replica_full_syncs_from_a_master_with_policies_and_carries_them() {
    if !common::module_only("policies are module data") {
        return;
    }
    let master = Server::start_with(&RDB);
    let mut m = master.connect();
    ok(&mut m, &["RL.POLICY", "SET", "a", "GCRA", "1", "2", "3"]);
    ok(&mut m, &["RL.POLICY", "SET", "gone", "GCRA", "9", "9", "9"]);
    let mut replica = Server::start_with_module_args(&["policies", "no"], &RDB);
    let mut r = replica.connect();
    let _: () = query(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    )
    .unwrap();
    wait_for_sync(&mut r);
    assert!(replica.is_alive(), "{}", replica.log());
    // Changes from the master are applied, not served.
    ok(
        &mut m,
        &["RL.POLICY", "SET", "b", "SLIDINGWINDOW", "5", "10"],
    );
    let _: i64 = query(&mut m, &["RL.POLICY", "DEL", "gone"]).unwrap();
    let _: i64 = query(&mut m, &["RL.POLICY", "LOAD", "c TOKENBUCKET 5 1 1"]).unwrap();
    let acked: i64 = query(&mut m, &["WAIT", "1", "5000"]).unwrap();
    assert_eq!(acked, 1);
    // (A replica answers READONLY to the changes.)
    let e = call_err(&mut r, &["RL.POLICY", "DUMP"]);
    assert!(e.contains("policies are off"), "{e}");
    assert_eq!(info_field(&mut r, "ratelimit", "ratelimit_policies"), "3");
    let expected = dump(&mut m);
    // Promoted, then saved and restarted with `policies yes`: all there.
    let _: () = query(&mut r, &["REPLICAOF", "NO", "ONE"]).unwrap();
    assert_policies_off(&mut r);
    ok(&mut r, &["SAVE"]);
    assert_eq!(policies_after_restart(replica, r, &RDB), expected);
}

#[test]
fn a_policies_no_server_applies_policy_commands_of_its_aof() {
    if !common::module_only("policies are module data") {
        return;
    }
    // An AOF without the preamble holds the policies as RL.POLICY commands:
    // a `policies no` server replays them, and a rewrite with the preamble
    // carries them on.
    let (no_preamble, with_preamble) = (aof_config("no"), aof_config("yes"));
    let server = Server::start_with(&no_preamble);
    let mut con = server.connect();
    ok(&mut con, &["RL.POLICY", "SET", "a", "GCRA", "1", "2", "3"]);
    let _: i64 = query(&mut con, &["RL.POLICY", "LOAD", "b FIXEDWINDOW 5 10"]).unwrap();
    let expected = dump(&mut con);
    drop(con);
    let dir = server.shutdown("NOSAVE");
    let off = Server::start_in_with_module_args(dir, &["policies", "no"], &with_preamble);
    let mut con = off.connect();
    assert_eq!(info_field(&mut con, "ratelimit", "ratelimit_policies"), "2");
    let _: String = query(&mut con, &["BGREWRITEAOF"]).unwrap();
    wait_rewrite_done(&mut con);
    assert_eq!(policies_after_restart(off, con, &with_preamble), expected);
}

#[test]
fn a_policies_unloadable_server_exits_on_an_rdb_with_policies_as_documented() {
    if !common::module_only("policies are module data") {
        return;
    }
    // No data type: the server's own check refuses module data of a type
    // it does not know. Hence `unloadable` only where no such data loads.
    let (dir, _) = rdb_with_policies();
    let module = common::module_path();
    let mut args = vec![
        "--loadmodule",
        module.to_str().unwrap(),
        "policies",
        "unloadable",
    ];
    args.extend(RDB);
    // (The helper starts a bare server; `args` loads the module.)
    let log = common::run_without_module_expecting_exit(dir, &args);
    assert!(log.contains("rl-policy"), "{log}");
}

/// RESP for one command, as an AOF holds it.
fn resp(args: &[&str]) -> String {
    let mut out = format!("*{}\r\n", args.len());
    for a in args {
        out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    out
}

/// A definition accepted where it was written (here an AOF of a module that
/// allowed a 1,000-day period) that this module cannot use is kept as it
/// is: dumped, saved, reloaded and full-synced; `RL.LIMIT` refuses it loudly
/// until a client redefines it. (It used to be dropped with a log line.)
#[test]
fn a_definition_this_module_cannot_use_is_kept_not_dropped() {
    if !common::module_only("policies are module data") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let old = ["RL.POLICY", "SET", "old", "GCRA", "1", "1", "86400000"];
    let fine = ["RL.POLICY", "SET", "fine", "GCRA", "1", "1", "60"];
    std::fs::write(dir.path().join("appendonly.aof"), resp(&old) + &resp(&fine)).unwrap();
    let config = [
        "--save",
        "",
        "--appendonly",
        "yes",
        "--enable-debug-command",
        "yes",
    ];
    let master = Server::start_in(dir, &config);
    let mut m = master.connect();
    let dumped = "fine GCRA 1 1 60\nold GCRA 1 1 86400000\n";
    let dump =
        |con: &mut redis::Connection| -> String { query(con, &["RL.POLICY", "DUMP"]).unwrap() };
    assert_eq!(dump(&mut m), dumped);
    assert_eq!(
        info_field(&mut m, "ratelimit", "ratelimit_policies_unusable"),
        "1"
    );
    assert!(master
        .log()
        .contains("policy 'old' kept as defined but not usable"));
    let e = call_err(&mut m, &["RL.LIMIT", "k", "old"]);
    assert!(
        e.contains("policy 'old'") && e.contains("cannot use it"),
        "{e}"
    );
    let e = call_err(&mut m, &["RL.ALL", "1", "k", "POLICY", "old"]);
    assert!(e.contains("cannot use it"), "{e}");
    let fine_reply: Vec<i64> = query(&mut m, &["RL.LIMIT", "k", "fine"]).unwrap();
    assert_eq!(fine_reply[0], 0);

    // Through an RDB (aux data) and a full sync.
    let _: () = query(&mut m, &["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(dump(&mut m), dumped);
    let replica = Server::start();
    let mut r = replica.connect();
    let _: () = query(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    )
    .unwrap();
    wait_for_sync(&mut r);
    assert_eq!(dump(&mut r), dumped);

    // A client cannot define it; redefining it makes it usable everywhere.
    let e = call_err(&mut m, &old[..]);
    assert!(e.contains("366 days"), "{e}");
    let _: () = query(
        &mut m,
        &["RL.POLICY", "SET", "old", "GCRA", "1", "1", "3600"],
    )
    .unwrap();
    assert_eq!(
        info_field(&mut m, "ratelimit", "ratelimit_policies_unusable"),
        "0"
    );
    let reply: Vec<i64> = query(&mut m, &["RL.LIMIT", "k2", "old"]).unwrap();
    assert_eq!(reply[0], 0);
    let _: i64 = query(&mut m, &["WAIT", "1", "5000"]).unwrap();
    assert_eq!(
        info_field(&mut r, "ratelimit", "ratelimit_policies_unusable"),
        "0"
    );
}

/// The policies the rewrite writes as one `LOAD REPLACE` replay whole even
/// where this server's settings would refuse one of them from a client: a
/// policy defined under a raised `sliding-log-max-limit` (a `CONFIG SET` the
/// restart did not keep) must not take every other policy down with it.
/// (Found in review: a replay of `LOAD` refused the whole text, silently.)
#[test]
fn a_policy_over_this_servers_bounds_does_not_sink_the_rewritten_load() {
    if !common::module_only("policies are module data") {
        return;
    }
    let server = Server::start_with(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--aof-use-rdb-preamble",
        "no",
    ]);
    let mut con = server.connect();
    ok(
        &mut con,
        &["CONFIG", "SET", "ratelimit.sliding-log-max-limit", "5000"],
    );
    ok(
        &mut con,
        &[
            "CONFIG",
            "SET",
            "ratelimit.sliding-log-call-budget",
            "10000",
        ],
    );
    ok(
        &mut con,
        &["RL.POLICY", "SET", "big", "SLIDINGLOG", "3000", "60"],
    );
    ok(
        &mut con,
        &["RL.POLICY", "SET", "small", "GCRA", "1", "2", "3"],
    );
    ok(&mut con, &["CONFIG", "SET", "appendonly", "yes"]);
    wait_until("the first AOF", Duration::from_secs(20), || {
        info_field(&mut con, "persistence", "aof_enabled") == "1" && rewrite_done(&mut con)
    });
    let expected = "big SLIDINGLOG 3000 60\nsmall GCRA 1 2 3\n";
    assert_eq!(dump(&mut con), expected);
    drop(con);
    let dir = server.shutdown("NOSAVE");
    // The defaults again: a client could not define `big` here.
    let restarted = Server::start_in(dir, &aof_config("no"));
    let mut con = restarted.connect();
    assert_eq!(dump(&mut con), expected);
    let e = call_err(
        &mut con,
        &["RL.POLICY", "SET", "big2", "SLIDINGLOG", "3000", "60"],
    );
    assert!(e.contains("<= 1000"), "{e}");
}
