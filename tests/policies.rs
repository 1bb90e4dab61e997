//! Server-side policies (`RL.POLICY`, `RL.LIMIT`, `RL.ALL … POLICY`) against a
//! real server: definitions, decisions with SHADOW / SOFT / BLOCK, statistics,
//! persistence (RDB, AOF, replica, failover), ACLs and the `policies` setting.

mod common;

use std::time::Duration;

use common::{call, call_err, info_field, query, wait_for_sync, wait_until, Server};

fn ints(con: &mut redis::Connection, args: &[&str]) -> Vec<i64> {
    query(con, args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn ok(con: &mut redis::Connection, args: &[&str]) {
    let reply: String = query(con, args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert_eq!(reply, "OK", "{args:?}");
}

fn dump(con: &mut redis::Connection) -> String {
    query(con, &["RL.POLICY", "DUMP"]).unwrap()
}

/// Redis 7.2+ and Valkey: module commands get ACL categories, and RDB aux
/// data can be left out when empty (`aux_save2`).
fn is_7_2_or_later(con: &mut redis::Connection) -> bool {
    let info: String = query(con, &["INFO", "server"]).unwrap();
    info.contains("valkey_version:") || !info.contains("redis_version:7.0.")
}

/// `INFO ratelimit`'s line for `name` (`policy_free`, `cmdstat_rl.limit`).
fn stats(con: &mut redis::Connection, name: &str) -> String {
    info_field(con, "ratelimit", &format!("ratelimit_{name}"))
}

const TIERS: &str = "free GCRA 4 5 1\npro FIXEDWINDOW 100 60 SOFT 10\n";

#[test]
fn set_get_list_dump_load_del_round_trip() {
    if !common::module_only("policies are module data") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    ok(
        &mut con,
        &["RL.POLICY", "SET", "free", "gcra", "4", "5", "1"],
    );
    ok(
        &mut con,
        &[
            "RL.POLICY",
            "SET",
            "login",
            "SlidingLog",
            "5",
            "60",
            "block",
            "900",
            "shadow",
            "SOFT",
            "20",
        ],
    );
    // GET answers the words as SET takes them: keyword upper case, options
    // in a fixed order.
    let words: Vec<String> = query(&mut con, &["RL.POLICY", "GET", "login"]).unwrap();
    assert_eq!(
        words,
        [
            "SLIDINGLOG",
            "5",
            "60",
            "SHADOW",
            "SOFT",
            "20",
            "BLOCK",
            "900"
        ]
    );
    let missing: Option<Vec<String>> = query(&mut con, &["RL.POLICY", "GET", "nope"]).unwrap();
    assert_eq!(missing, None);
    let names: Vec<String> = query(&mut con, &["RL.POLICY", "LIST"]).unwrap();
    assert_eq!(names, ["free", "login"]);
    let text = dump(&mut con);
    assert_eq!(
        text,
        "free GCRA 4 5 1\nlogin SLIDINGLOG 5 60 SHADOW SOFT 20 BLOCK 900\n"
    );
    // What GET answers, SET takes back unchanged.
    let mut again = vec!["RL.POLICY", "SET", "copy"];
    again.extend(words.iter().map(String::as_str));
    ok(&mut con, &again);
    let copy: Vec<String> = query(&mut con, &["RL.POLICY", "GET", "copy"]).unwrap();
    assert_eq!(copy, words);
    // LOAD REPLACE with DUMP's text gives back exactly the dumped policies.
    let loaded: i64 = query(&mut con, &["RL.POLICY", "LOAD", "REPLACE", &text]).unwrap();
    assert_eq!(loaded, 2);
    assert_eq!(dump(&mut con), text);
    // LOAD without REPLACE adds and replaces, keeping the others.
    let loaded: i64 = query(
        &mut con,
        &[
            "RL.POLICY",
            "LOAD",
            "# tiers\nfree GCRA 9 10 1\n\nextra FIXEDWINDOW 3 1",
        ],
    )
    .unwrap();
    assert_eq!(loaded, 2);
    assert_eq!(
        dump(&mut con),
        "extra FIXEDWINDOW 3 1\nfree GCRA 9 10 1\nlogin SLIDINGLOG 5 60 SHADOW SOFT 20 BLOCK 900\n"
    );
    assert_eq!(stats(&mut con, "policies"), "3");
    assert_eq!(stats(&mut con, "policies_enabled"), "1");
    let deleted: i64 = query(&mut con, &["RL.POLICY", "DEL", "extra"]).unwrap();
    let again: i64 = query(&mut con, &["RL.POLICY", "DEL", "extra"]).unwrap();
    assert_eq!((deleted, again), (1, 0));
    let names: Vec<String> = query(&mut con, &["RL.POLICY", "LIST"]).unwrap();
    assert_eq!(names, ["free", "login"]);
}

#[test]
fn bad_definitions_are_refused_with_the_commands_own_errors() {
    if !common::module_only("policies are module data") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    ok(
        &mut con,
        &["RL.POLICY", "SET", "keep", "GCRA", "1", "1", "1"],
    );
    let cases: &[(&[&str], &str)] = &[
        (
            &["bad name", "GCRA", "1", "1", "1"],
            "policy names are 1 to 64",
        ),
        (&["x", "GCRA", "x", "1", "1"], "max_burst is not an integer"),
        (
            &["x", "GCRA", "1", "0", "1"],
            "tokens_per_period must be >= 1",
        ),
        (&["x", "FIXEDWINDOW", "0", "1"], "limit must be >= 1"),
        (&["x", "SLIDINGLOG", "5000", "1"], "sliding-log-max-limit"),
        (&["x", "GCRA", "1", "1"], "syntax error"),
        (
            &["x", "GCRA", "1", "1", "1", "SHADOW", "SHADOW"],
            "syntax error",
        ),
        (
            &["x", "GCRA", "1", "1", "1", "SOFT", "0"],
            "SOFT must be >= 1 and <= 1000",
        ),
        (
            &["x", "GCRA", "1", "1", "1", "SOFT", "1001"],
            "SOFT must be",
        ),
        (
            &["x", "GCRA", "1", "1", "1", "BLOCK", "0"],
            "BLOCK must be a finite number",
        ),
        (&["x", "GCRA", "1", "1", "1", "TOKENS", "2"], "syntax error"),
        (&["x", "POLICY", "keep"], "unknown limit type"),
        (&["x", "NOPE", "1"], "unknown limit type"),
        // Scaled by SOFT beyond what the command accepts.
        (
            &["x", "SLIDINGLOG", "1000", "1", "SOFT", "10"],
            "sliding-log-max-limit",
        ),
    ];
    for (args, expected) in cases {
        let mut full = vec!["RL.POLICY", "SET"];
        full.extend_from_slice(args);
        let e = call_err(&mut con, &full);
        assert!(
            e.starts_with("ERR") && e.contains(expected),
            "{args:?}: {e}"
        );
    }
    assert_eq!(dump(&mut con), "keep GCRA 1 1 1\n", "nothing changed");
    // RL.LIMIT: unknown policy, BLOCK (the policy's), bad options.
    let e = call_err(&mut con, &["RL.LIMIT", "k", "nope"]);
    assert_eq!(e, "ERR unknown policy 'nope'");
    let e = call_err(&mut con, &["RL.LIMIT", "k", "keep", "BLOCK", "10"]);
    assert!(e.contains("BLOCK belongs to the policy"), "{e}");
    let e = call_err(&mut con, &["RL.LIMIT", "k", "keep", "FOO"]);
    assert!(e.starts_with("ERR syntax error"), "{e}");
    let exists: i64 = query(&mut con, &["EXISTS", "k"]).unwrap();
    assert_eq!(exists, 0, "an error writes nothing");
}

#[test]
fn a_bad_load_text_changes_nothing_and_names_its_line() {
    if !common::module_only("policies are module data") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    let _: i64 = query(&mut con, &["RL.POLICY", "LOAD", TIERS]).unwrap();
    let before = dump(&mut con);
    let texts = [
        (
            "a GCRA 1 1 1\n\nb FIXEDWINDOW 0 1\n",
            "ERR line 3: limit must be >= 1",
        ),
        (
            "a GCRA 1 1 1\na GCRA 2 2 2\n",
            "ERR line 2: policy 'a' is defined twice",
        ),
        (
            "# c\nbad/name GCRA 1 1 1",
            "ERR line 2: policy names are 1 to 64",
        ),
        (
            "a GCRA 1 1 1 SHADOW\r\nb SLIDINGLOG",
            "ERR line 2: syntax error",
        ),
    ];
    for (text, expected) in texts {
        for replace in [false, true] {
            let mut args = vec!["RL.POLICY", "LOAD"];
            if replace {
                args.push("REPLACE");
            }
            args.push(text);
            let e = call_err(&mut con, &args);
            assert!(e.starts_with(expected), "{text:?}: {e}");
            assert_eq!(dump(&mut con), before, "{text:?} changed the policies");
        }
    }
}

#[test]
fn limit_decides_with_the_policy_and_replies_as_its_command() {
    if !common::module_only("policies are module data") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    let _: i64 = query(
        &mut con,
        &[
            "RL.POLICY",
            "LOAD",
            "g GCRA 2 3 60\nq LEAKYBUCKET 2 1 60\nw SLIDINGLOG 2 60",
        ],
    )
    .unwrap();
    for (policy, command) in [
        ("g", vec!["RL.GCRA", "2", "3", "60"]),
        ("q", vec!["RL.LEAKYBUCKET", "2", "1", "60"]),
        ("w", vec!["RL.SLIDINGLOG", "2", "60"]),
    ] {
        for i in 0..5 {
            let by_policy = call(&mut con, &["RL.LIMIT", &format!("p:{policy}"), policy]);
            let mut direct = vec![command[0], "d"];
            let key = format!("d:{policy}");
            direct[1] = &key;
            direct.extend_from_slice(&command[1..]);
            let by_command = call(&mut con, &direct);
            // Same decisions; durations may differ by the ms between calls.
            assert_eq!(by_policy[..3], by_command[..3], "{policy} call {i}");
        }
        let a: Vec<u8> = query(&mut con, &["DUMP", &format!("p:{policy}")]).unwrap();
        assert!(!a.is_empty());
    }
    // PEEK and REFUND work through a policy.
    let peek = call(&mut con, &["RL.LIMIT", "fresh", "g", "PEEK"]);
    assert_eq!(peek[..3], [0, 3, 2]);
    let exists: i64 = query(&mut con, &["EXISTS", "fresh"]).unwrap();
    assert_eq!(exists, 0);
    call(&mut con, &["RL.LIMIT", "fresh", "g", "TOKENS", "3"]);
    let refund = call(&mut con, &["RL.LIMIT", "fresh", "g", "REFUND", "1"]);
    assert_eq!(refund[..3], [0, 3, 1]);
    // A changed policy applies to existing keys from their next call.
    let r = call(&mut con, &["RL.LIMIT", "fresh", "g"]);
    assert_eq!(r[..3], [0, 3, 0]);
    assert_eq!(call(&mut con, &["RL.LIMIT", "fresh", "g"])[0], 1);
    ok(&mut con, &["RL.POLICY", "SET", "g", "GCRA", "9", "3", "60"]);
    let r = call(&mut con, &["RL.LIMIT", "fresh", "g"]);
    assert_eq!(r[..3], [0, 10, 6], "{r:?}");
}

#[test]
fn shadow_soft_and_block_decide_as_documented() {
    if !common::module_only("policies are module data") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    let _: i64 = query(
        &mut con,
        &[
            "RL.POLICY",
            "LOAD",
            "shadow FIXEDWINDOW 2 86400 SHADOW\n\
             soft FIXEDWINDOW 10 86400 SOFT 20\n\
             lock FIXEDWINDOW 2 86400 BLOCK 0.3\n\
             softshadow FIXEDWINDOW 2 86400 SOFT 50 SHADOW",
        ],
    )
    .unwrap();
    // SHADOW: answers allowed; a call it would refuse writes nothing.
    let replies: Vec<Reply> = (0..4)
        .map(|_| call(&mut con, &["RL.LIMIT", "s", "shadow"]))
        .collect();
    assert_eq!(
        replies.iter().map(|r| r[0]).collect::<Vec<_>>(),
        [0, 0, 0, 0]
    );
    assert_eq!(
        replies.iter().map(|r| r[2]).collect::<Vec<_>>(),
        [1, 0, 0, 0]
    );
    assert!(replies.iter().all(|r| r[1] == 2 && r[3] == -1));
    let count: String = query(&mut con, &["GET", "s"]).unwrap();
    assert!(
        count.ends_with(":2") || count.contains('2'),
        "state {count}"
    );
    assert_eq!(
        stats(&mut con, "policy_shadow"),
        "calls_allowed=4,calls_limited=0,tokens_allowed=2,shadow_limited=2,soft_over=0,blocked=0"
    );

    // SOFT 20 on 10: 12 admitted; replies speak of the nominal 10.
    let replies: Vec<Reply> = (0..13)
        .map(|_| call(&mut con, &["RL.LIMIT", "f", "soft"]))
        .collect();
    assert!(replies.iter().all(|r| r[1] == 10), "{replies:?}");
    assert_eq!(
        replies.iter().map(|r| r[0]).collect::<Vec<_>>(),
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    );
    assert_eq!(
        replies.iter().map(|r| r[2]).collect::<Vec<_>>(),
        [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0]
    );
    assert_eq!(
        stats(&mut con, "policy_soft"),
        "calls_allowed=12,calls_limited=1,tokens_allowed=12,shadow_limited=0,soft_over=2,blocked=0"
    );

    // BLOCK 0.3 s: the refusal blocks; calls before its end are refused
    // even though the window would allow a refund's worth.
    call(&mut con, &["RL.LIMIT", "b", "lock"]);
    call(&mut con, &["RL.LIMIT", "b", "lock"]);
    let refused = call(&mut con, &["RL.LIMIT", "b", "lock"]);
    assert_eq!(refused[0], 1);
    let refund = call(&mut con, &["RL.LIMIT", "b", "lock", "REFUND", "2"]);
    assert_eq!(refund[0], 0);
    let blocked = call(&mut con, &["RL.LIMIT", "b", "lock"]);
    assert_eq!((blocked[0], blocked[2]), (1, 0), "{blocked:?}");
    assert!(blocked[3] > 0 && blocked[3] <= 300, "{blocked:?}");
    std::thread::sleep(Duration::from_millis(blocked[3] as u64 + 20));
    assert_eq!(
        call(&mut con, &["RL.LIMIT", "b", "lock"])[0],
        0,
        "the block ended"
    );
    let line = stats(&mut con, "policy_lock");
    assert!(
        line.contains("calls_limited=2,") && line.ends_with("blocked=1"),
        "{line}"
    );

    // SOFT and SHADOW together: 3 admitted for real, the rest shadowed.
    let replies: Vec<Reply> = (0..5)
        .map(|_| call(&mut con, &["RL.LIMIT", "ss", "softshadow"]))
        .collect();
    assert!(replies.iter().all(|r| r[0] == 0 && r[1] == 2));
    assert_eq!(
        stats(&mut con, "policy_softshadow"),
        "calls_allowed=5,calls_limited=0,tokens_allowed=3,shadow_limited=2,soft_over=1,blocked=0"
    );
}

type Reply = [i64; 5];

#[test]
fn statistics_are_exact_after_a_known_workload_and_reset() {
    if !common::module_only("policies are module data") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    let _: i64 = query(
        &mut con,
        &[
            "RL.POLICY",
            "LOAD",
            "a FIXEDWINDOW 3 86400\nb FIXEDWINDOW 5 86400",
        ],
    )
    .unwrap();
    for _ in 0..5 {
        call(&mut con, &["RL.LIMIT", "k1", "a", "TOKENS", "1"]);
    }
    call(&mut con, &["RL.LIMIT", "k2", "a", "TOKENS", "2"]);
    call(&mut con, &["RL.LIMIT", "k2", "a", "PEEK"]);
    // RL.ALL: a policy counts there too (allowed 3 times, then a refuses).
    for _ in 0..4 {
        ints(
            &mut con,
            &[
                "RL.ALL", "2", "{x}1", "{x}2", "POLICY", "b", "POLICY", "a", "TOKENS", "1",
            ],
        );
    }
    let a = stats(&mut con, "policy_a");
    let b = stats(&mut con, "policy_b");
    // a: k1 3 allowed + 2 limited; k2 1 allowed (2 tokens) + 1 PEEK allowed
    // (0 taken); RL.ALL {x}2 3 allowed, then 1 refused.
    assert_eq!(
        a,
        "calls_allowed=8,calls_limited=3,tokens_allowed=8,shadow_limited=0,soft_over=0,blocked=0"
    );
    // b: allowed in the 3 allowed RL.ALL calls; not counted in the one a refused.
    assert_eq!(
        b,
        "calls_allowed=3,calls_limited=0,tokens_allowed=3,shadow_limited=0,soft_over=0,blocked=0"
    );
    assert_eq!(
        stats(&mut con, "cmdstat_rl.limit"),
        "calls_allowed=5,calls_limited=2,tokens_allowed=5,shadow_limited=0,soft_over=0,blocked=0"
    );
    ok(&mut con, &["RL.POLICY", "RESETSTATS"]);
    let zero =
        "calls_allowed=0,calls_limited=0,tokens_allowed=0,shadow_limited=0,soft_over=0,blocked=0";
    assert_eq!(stats(&mut con, "policy_a"), zero);
    assert_eq!(stats(&mut con, "cmdstat_rl.limit"), zero);
    assert_eq!(stats(&mut con, "cmdstat_rl.all"), zero);
    // SET of the same name keeps the counts; DEL drops the line.
    call(&mut con, &["RL.LIMIT", "k3", "a"]);
    ok(
        &mut con,
        &["RL.POLICY", "SET", "a", "FIXEDWINDOW", "9", "86400"],
    );
    assert!(stats(&mut con, "policy_a").starts_with("calls_allowed=1,"));
    let _: i64 = query(&mut con, &["RL.POLICY", "DEL", "a"]).unwrap();
    let info: String = query(&mut con, &["INFO", "ratelimit"]).unwrap();
    assert!(!info.contains("ratelimit_policy_a:"), "{info}");
}

#[test]
fn all_accepts_policies_except_leaky_buckets() {
    if !common::module_only("policies are module data") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    let _: i64 = query(
        &mut con,
        &[
            "RL.POLICY",
            "LOAD",
            "day FIXEDWINDOW 2 86400\nq LEAKYBUCKET 2 1 1\nsh FIXEDWINDOW 1 86400 SHADOW",
        ],
    )
    .unwrap();
    let r = ints(
        &mut con,
        &[
            "RL.ALL", "2", "{u}m", "{u}d", "GCRA", "9", "10", "1", "POLICY", "day",
        ],
    );
    assert_eq!((r[0], r[1], r[2], r[5]), (0, 2, 1, 2), "{r:?}");
    ints(
        &mut con,
        &[
            "RL.ALL", "2", "{u}m", "{u}d", "GCRA", "9", "10", "1", "POLICY", "day",
        ],
    );
    let r = ints(
        &mut con,
        &[
            "RL.ALL", "2", "{u}m", "{u}d", "GCRA", "9", "10", "1", "POLICY", "day",
        ],
    );
    assert_eq!((r[0], r[5]), (1, 2), "{r:?}");
    // A shadow policy never refuses the call, nor binds it.
    let both = [
        "RL.ALL",
        "2",
        "{v}a",
        "{v}b",
        "POLICY",
        "sh",
        "FIXEDWINDOW",
        "5",
        "86400",
    ];
    for i in 0..3 {
        let r = ints(&mut con, &both);
        assert_eq!((r[0], r[1], r[2], r[5]), (0, 5, 4 - i, 2), "{r:?}");
    }
    // Only shadows: one of them binds (and never refuses).
    let r = ints(&mut con, &["RL.ALL", "1", "{v}a", "POLICY", "sh"]);
    assert_eq!((r[0], r[2], r[5]), (0, 0, 1), "{r:?}");
    let e = call_err(&mut con, &["RL.ALL", "1", "k", "POLICY", "q"]);
    assert!(e.contains("LEAKYBUCKET cannot be part of RL.ALL"), "{e}");
    let e = call_err(&mut con, &["RL.ALL", "1", "k", "POLICY", "nope"]);
    assert_eq!(e, "ERR unknown policy 'nope'");
    let e = call_err(&mut con, &["RL.ALL", "1", "k", "POLICY"]);
    assert!(e.contains("exactly numkeys limits"), "{e}");
}

#[test]
fn policies_survive_rdb_and_aof_restarts() {
    if !common::module_only("policies are module data") {
        return;
    }
    for (config, what) in [
        (vec!["--save", "", "--appendonly", "no"], "rdb"),
        (vec!["--save", "", "--appendonly", "yes"], "aof"),
        (
            vec![
                "--save",
                "",
                "--appendonly",
                "yes",
                "--aof-use-rdb-preamble",
                "yes",
            ],
            "aof after rewrite",
        ),
    ] {
        let server = Server::start_with(&config);
        let mut con = server.connect();
        let _: i64 = query(&mut con, &["RL.POLICY", "LOAD", TIERS]).unwrap();
        ok(
            &mut con,
            &["RL.POLICY", "SET", "later", "GCRA", "1", "2", "3", "SHADOW"],
        );
        let _: i64 = query(&mut con, &["RL.POLICY", "DEL", "free"]).unwrap();
        let expected = dump(&mut con);
        match what {
            "rdb" => ok(&mut con, &["SAVE"]),
            "aof after rewrite" => {
                let _: String = query(&mut con, &["BGREWRITEAOF"]).unwrap();
                wait_until("the AOF rewrite", Duration::from_secs(10), || {
                    info_field(&mut con, "persistence", "aof_rewrite_in_progress") == "0"
                        && info_field(&mut con, "persistence", "aof_rewrite_scheduled") == "0"
                });
                ok(
                    &mut con,
                    &["RL.POLICY", "SET", "after", "FIXEDWINDOW", "1", "1"],
                );
            }
            _ => {}
        }
        let expected = if what == "aof after rewrite" {
            dump(&mut con)
        } else {
            expected
        };
        drop(con);
        let dir = server.shutdown("NOSAVE");
        let server = Server::start_in(dir, &config);
        let mut con = server.connect();
        assert_eq!(dump(&mut con), expected, "{what}");
    }
}

#[test]
fn policies_reach_replicas_and_survive_failover() {
    if !common::module_only("policies are module data") {
        return;
    }
    let master = Server::start();
    let mut m = master.connect();
    // Set before the replica attaches: the full sync's RDB carries them.
    let _: i64 = query(&mut m, &["RL.POLICY", "LOAD", TIERS]).unwrap();
    let replica = Server::start();
    let mut r = replica.connect();
    // A policy the replica had of its own goes with the full sync.
    ok(
        &mut r,
        &["RL.POLICY", "SET", "stale", "GCRA", "1", "1", "1"],
    );
    let _: () = query(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    )
    .unwrap();
    wait_for_sync(&mut r);
    assert_eq!(dump(&mut r), TIERS);
    // Changes propagate.
    ok(
        &mut m,
        &["RL.POLICY", "SET", "new", "TOKENBUCKET", "5", "1", "1"],
    );
    let _: i64 = query(&mut m, &["RL.POLICY", "DEL", "free"]).unwrap();
    let _: i64 = query(&mut m, &["RL.POLICY", "LOAD", "bulk FIXEDWINDOW 7 1"]).unwrap();
    let acked: i64 = query(&mut m, &["WAIT", "1", "5000"]).unwrap();
    assert_eq!(acked, 1);
    let expected = dump(&mut m);
    assert_eq!(dump(&mut r), expected);
    // A replica refuses changes from clients.
    let e = call_err(&mut r, &["RL.POLICY", "SET", "x", "GCRA", "1", "1", "1"]);
    assert!(e.starts_with("READONLY"), "{e}");
    // Failover: the promoted replica has them and serves RL.LIMIT; the old
    // master, now its replica, follows its changes.
    let _: () = query(&mut r, &["REPLICAOF", "NO", "ONE"]).unwrap();
    assert_eq!(dump(&mut r), expected);
    assert_eq!(call(&mut r, &["RL.LIMIT", "u", "new"])[..3], [0, 5, 4]);
    let _: () = query(
        &mut m,
        &["REPLICAOF", "127.0.0.1", &replica.port.to_string()],
    )
    .unwrap();
    wait_for_sync(&mut m);
    ok(
        &mut r,
        &["RL.POLICY", "SET", "after", "GCRA", "2", "2", "2"],
    );
    let acked: i64 = query(&mut r, &["WAIT", "1", "5000"]).unwrap();
    assert_eq!(acked, 1);
    assert_eq!(dump(&mut m), dump(&mut r));
}

#[test]
fn an_rdb_without_policies_loads_without_the_module_where_the_server_allows() {
    if !common::module_only("policies are module data") {
        return;
    }
    let server = Server::start_with(&["--save", "", "--appendonly", "no"]);
    let mut con = server.connect();
    let modern = is_7_2_or_later(&mut con);
    ok(
        &mut con,
        &["RL.POLICY", "SET", "gone", "GCRA", "1", "1", "1"],
    );
    let _: i64 = query(&mut con, &["RL.POLICY", "DEL", "gone"]).unwrap();
    call(&mut con, &["RL.GCRA", "k", "9", "1", "600"]);
    ok(&mut con, &["SAVE"]);
    drop(con);
    let dir = server.shutdown("NOSAVE");
    let rdb = dir.path().join("dump.rdb");
    let plain = tempfile::tempdir().unwrap();
    std::fs::copy(&rdb, plain.path().join("dump.rdb")).unwrap();
    if modern {
        // aux_save2: no policies, no record; the limiter keys are strings.
        let bare = Server::start_without_module_in(plain, &["--save", "", "--appendonly", "no"]);
        let mut con = bare.connect();
        let kind: String = query(&mut con, &["TYPE", "k"]).unwrap();
        assert_eq!(kind, "string");
    } else {
        // Redis 7.0 has only aux_save: the record is always there, and a
        // server without the module refuses the file (as docs/policies.md says;
        // load the module with `policies unloadable` to avoid it).
        let log =
            common::run_without_module_expecting_exit(plain, &["--save", "", "--appendonly", "no"]);
        assert!(log.contains("rl-policy"), "{log}");
    }
}

#[test]
fn an_application_user_can_limit_but_not_change_policies() {
    if !common::module_only("policies are module data") {
        return;
    }
    let server = Server::start();
    let mut admin = server.connect();
    ok(
        &mut admin,
        &["RL.POLICY", "SET", "free", "GCRA", "4", "5", "1"],
    );
    let modern = is_7_2_or_later(&mut admin);
    let mut users = vec![(
        "narrow",
        vec![
            "on",
            ">pw",
            "~app:*",
            "+rl.limit",
            "+rl.policy|get",
            "+rl.policy|list",
        ],
    )];
    if modern {
        // Where module commands have ACL categories: everything but @dangerous.
        users.push(("broad", vec!["on", ">pw", "~app:*", "+@all", "-@dangerous"]));
    }
    for (user, rules) in users {
        let mut args = vec!["ACL", "SETUSER", user];
        args.extend(rules.iter().copied());
        ok(&mut admin, &args);
        let client =
            redis::Client::open(format!("redis://{user}:pw@127.0.0.1:{}/", server.port)).unwrap();
        let mut app = client.get_connection().unwrap();
        assert_eq!(
            call(&mut app, &["RL.LIMIT", "app:1", "free"])[0],
            0,
            "{user}"
        );
        let words: Vec<String> = query(&mut app, &["RL.POLICY", "GET", "free"]).unwrap();
        assert_eq!(words[0], "GCRA");
        for change in [
            vec!["RL.POLICY", "SET", "free", "GCRA", "99", "5", "1"],
            vec!["RL.POLICY", "DEL", "free"],
            vec!["RL.POLICY", "LOAD", "REPLACE", ""],
            vec!["RL.POLICY", "RESETSTATS"],
        ] {
            let e = call_err(&mut app, &change);
            assert!(e.starts_with("NOPERM"), "{user} {change:?}: {e}");
        }
        let e = call_err(&mut app, &["RL.LIMIT", "other:1", "free"]);
        assert!(e.starts_with("NOPERM"), "{user}: {e}");
    }
    assert_eq!(dump(&mut admin), "free GCRA 4 5 1\n");
}

#[test]
fn policies_unloadable_refuses_policy_commands_and_keeps_the_module_unloadable() {
    if !common::module_only("policies are module data") {
        return;
    }
    for load_args in [
        vec!["--loadmodule", "MODULE", "policies", "unloadable"],
        vec![
            "--loadmodule",
            "MODULE",
            "--ratelimit.policies",
            "unloadable",
        ],
    ] {
        let module = common::module_path();
        let module = module.to_str().unwrap();
        let extra: Vec<&str> = load_args
            .iter()
            .map(|a| if *a == "MODULE" { module } else { a })
            .chain([
                "--save",
                "",
                "--appendonly",
                "no",
                "--enable-module-command",
                "yes",
            ])
            .collect();
        let server = Server::start_without_module(&extra);
        let mut con = server.connect();
        let config: Vec<String> =
            query(&mut con, &["CONFIG", "GET", "ratelimit.policies"]).unwrap();
        assert_eq!(config, ["ratelimit.policies", "unloadable"]);
        assert_eq!(stats(&mut con, "policies_enabled"), "0");
        let e = call_err(&mut con, &["RL.POLICY", "SET", "a", "GCRA", "1", "1", "1"]);
        assert!(e.contains("policies are off"), "{e}");
        let e = call_err(&mut con, &["RL.POLICY", "GET", "a"]);
        assert!(e.contains("policies are off"), "{e}");
        let e = call_err(&mut con, &["RL.LIMIT", "k", "a"]);
        assert!(e.contains("policies are off"), "{e}");
        // One plain command, no subcommands (the last field of its
        // COMMAND INFO): see the reload test in tests/hardening.rs.
        let info: Vec<Vec<redis::Value>> =
            query(&mut con, &["COMMAND", "INFO", "rl.policy"]).unwrap();
        assert_eq!(
            info[0].last(),
            Some(&redis::Value::Array(vec![])),
            "{info:?}"
        );
        // In the module's ACL category wherever the server has one (the
        // seventh field lists the categories: RL.GCRA's tells).
        let gcra: Vec<Vec<redis::Value>> =
            query(&mut con, &["COMMAND", "INFO", "rl.gcra"]).unwrap();
        let ratelimit = redis::Value::SimpleString("@ratelimit".into());
        let in_category = |info: &[Vec<redis::Value>]| match &info[0][6] {
            redis::Value::Array(cats) | redis::Value::Set(cats) => cats.contains(&ratelimit),
            other => panic!("categories: {other:?}"),
        };
        assert_eq!(in_category(&info), in_category(&gcra), "{info:?} {gcra:?}");
        assert_eq!(call(&mut con, &["RL.GCRA", "k", "1", "1", "1"])[0], 0);
        let _: () = query(&mut con, &["MODULE", "UNLOAD", "ratelimit"]).unwrap();
    }
    // With policies (the default) the server refuses to unload a module
    // with a data type, and the module goes on working.
    let server = Server::start_with(&["--save", "", "--enable-module-command", "yes"]);
    let mut con = server.connect();
    let e = call_err(&mut con, &["MODULE", "UNLOAD", "ratelimit"]);
    assert!(e.contains("data types") || e.contains("ERR"), "{e}");
    ok(&mut con, &["RL.POLICY", "SET", "a", "GCRA", "1", "1", "1"]);
    assert_eq!(call(&mut con, &["RL.LIMIT", "k", "a"])[0], 0);
}

/// A definition kept from when `sliding-log-call-budget` was larger fails
/// every call (its cheapest call no longer fits): `INFO` counts it as
/// unusable until the budget fits it again (issue 29).
#[test]
fn a_policy_over_the_call_budget_counts_as_unusable() {
    if !common::module_only("policies are module data") {
        return;
    }
    let server = Server::start_with(&["--save", ""]);
    let mut con = server.connect();
    let unusable =
        |con: &mut redis::Connection| info_field(con, "ratelimit", "ratelimit_policies_unusable");
    for (name, value) in [
        ("ratelimit.sliding-log-max-limit", "10000"),
        ("ratelimit.sliding-log-call-budget", "20000"),
    ] {
        let _: () = query(&mut con, &["CONFIG", "SET", name, value]).unwrap();
    }
    ok(
        &mut con,
        &["RL.POLICY", "SET", "old2", "SLIDINGLOG", "5000", "60"],
    );
    ok(
        &mut con,
        &["RL.POLICY", "SET", "small", "SLIDINGLOG", "10", "60"],
    );
    assert_eq!(call(&mut con, &["RL.LIMIT", "k", "old2"])[0], 0);
    assert_eq!(unusable(&mut con), "0");
    // Lowering the largest limit alone leaves it usable: calls still fit.
    let _: () = query(
        &mut con,
        &["CONFIG", "SET", "ratelimit.sliding-log-max-limit", "1000"],
    )
    .unwrap();
    assert_eq!(call(&mut con, &["RL.LIMIT", "k", "old2"])[0], 0);
    assert_eq!(unusable(&mut con), "0");
    // Lowering the budget below its cheapest call (5,001 entries) does not.
    let _: () = query(
        &mut con,
        &["CONFIG", "SET", "ratelimit.sliding-log-call-budget", "4000"],
    )
    .unwrap();
    let e = call_err(&mut con, &["RL.LIMIT", "k", "old2"]);
    assert!(e.contains("sliding-log-call-budget of 4000"), "{e}");
    assert_eq!(unusable(&mut con), "1");
    assert_eq!(call(&mut con, &["RL.LIMIT", "k2", "small"])[0], 0);
    let _: () = query(
        &mut con,
        &["CONFIG", "SET", "ratelimit.sliding-log-call-budget", "5001"],
    )
    .unwrap();
    assert_eq!(unusable(&mut con), "0");
    assert_eq!(call(&mut con, &["RL.LIMIT", "k", "old2"])[0], 0);
}

/// A `SHADOW` policy's refusals write nothing, its `BLOCK` included: its
/// reply is its limiter's, whose `reset_after` the key's expiry matches,
/// not one answered as made during a block never written (issue 29).
#[test]
fn a_shadow_policy_with_block_replies_as_without_it() {
    if !common::module_only("policies are module data") {
        return;
    }
    let server = Server::start_with(&["--save", ""]);
    let mut con = server.connect();
    ok(
        &mut con,
        &[
            "RL.POLICY",
            "SET",
            "sb",
            "GCRA",
            "0",
            "1",
            "7",
            "SHADOW",
            "BLOCK",
            "100",
        ],
    );
    ok(
        &mut con,
        &["RL.POLICY", "SET", "s", "GCRA", "0", "1", "7", "SHADOW"],
    );
    assert_eq!(call(&mut con, &["RL.LIMIT", "kb", "sb"])[0], 0);
    assert_eq!(call(&mut con, &["RL.LIMIT", "k", "s"])[0], 0);
    // Refused in shadow: answered allowed, remaining 0.
    let with_block = call(&mut con, &["RL.LIMIT", "kb", "sb"]);
    let without = call(&mut con, &["RL.LIMIT", "k", "s"]);
    assert_eq!(&with_block[..3], &[0, 1, 0], "{with_block:?}");
    assert_eq!(with_block[3], -1);
    assert!(
        (with_block[4] - without[4]).abs() <= 5,
        "with BLOCK {with_block:?}, without {without:?}"
    );
    let pttl: i64 = query(&mut con, &["PTTL", "kb"]).unwrap();
    assert!(
        with_block[4] <= 7_000 && (with_block[4] - pttl).abs() <= 5,
        "reset_after {} ms, PTTL {pttl} ms",
        with_block[4]
    );
    // Nothing blocked: the key holds no block.
    let value: String = query(&mut con, &["GET", "kb"]).unwrap();
    assert!(!value.starts_with('B'), "{value}");
    // In RL.ALL too, with the call's own BLOCK.
    let reply: Vec<i64> = query(
        &mut con,
        &["RL.ALL", "1", "kb", "POLICY", "sb", "BLOCK", "100"],
    )
    .unwrap();
    assert!(reply[4] <= 7_000, "{reply:?}");
    let value: String = query(&mut con, &["GET", "kb"]).unwrap();
    assert!(!value.starts_with('B'), "{value}");
}
