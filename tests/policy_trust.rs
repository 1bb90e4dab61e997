//! Issue 22, "Trust under pressure", for policies: large `LOAD` texts and a
//! bounded `INFO ratelimit` (`RL.POLICY STATS`), definitions the master
//! accepted load everywhere, algorithm changes need `RESET`, who may change
//! policies (ACL), injective `INFO` names, shadow statistics, `HELP`.
//! (Speed is measured by `make bench`, not here.)

mod common;

use common::{call, call_err, info_field, query, wait_for_sync, Server};

fn ok(con: &mut redis::Connection, args: &[&str]) {
    let reply: String = query(con, args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert_eq!(reply, "OK", "{args:?}");
}

fn dump(con: &mut redis::Connection) -> String {
    query(con, &["RL.POLICY", "DUMP"]).unwrap()
}

fn load(con: &mut redis::Connection, args: &[&str]) -> i64 {
    query(con, args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Redis 7.2+ and Valkey: module commands get ACL categories.
fn is_7_2_or_later(con: &mut redis::Connection) -> bool {
    let info: String = query(con, &["INFO", "server"]).unwrap();
    info.contains("valkey_version:") || !info.contains("redis_version:7.0.")
}

/// `INFO ratelimit`'s line for `name` (`policy_free`).
fn stats(con: &mut redis::Connection, name: &str) -> String {
    info_field(con, "ratelimit", &format!("ratelimit_{name}"))
}

const ZERO: &str =
    "calls_allowed=0,calls_limited=0,tokens_allowed=0,shadow_limited=0,soft_over=0,blocked=0";

#[test]
fn a_large_load_is_all_or_nothing_and_info_shows_a_bounded_part() {
    if !common::module_only("policies are module data") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    let n = 20_000;
    let text: String = (0..n).map(|i| format!("t:{i:05} GCRA 9 10 1\n")).collect();
    // A refused last line (defined twice, or bad) changes nothing.
    for last in ["t:00000 GCRA 1 1 1\n", "late GCRA 1 1 -1\n"] {
        let e = call_err(&mut con, &["RL.POLICY", "LOAD", &format!("{text}{last}")]);
        assert!(e.starts_with(&format!("ERR line {}: ", n + 1)), "{e}");
        assert_eq!(dump(&mut con), "");
    }
    assert_eq!(load(&mut con, &["RL.POLICY", "LOAD", &text]), n);
    assert_eq!(dump(&mut con), text);
    let names: Vec<String> = query(&mut con, &["RL.POLICY", "LIST"]).unwrap();
    assert_eq!(names.len() as i64, n);
    // INFO: the count, how many lines were left out, and only the first
    // 100 names' lines (the server shows ':' as '_'; see the names test).
    assert_eq!(
        info_field(&mut con, "ratelimit", "ratelimit_policies"),
        "20000"
    );
    assert_eq!(
        info_field(&mut con, "ratelimit", "ratelimit_policy_lines_omitted"),
        "19900"
    );
    let info: String = query(&mut con, &["INFO", "ratelimit"]).unwrap();
    let lines: Vec<&str> = info
        .lines()
        .filter(|l| l.starts_with("ratelimit_policy_t"))
        .collect();
    assert_eq!(lines.len(), 100);
    assert!(
        lines[0].starts_with("ratelimit_policy_t/00000:"),
        "{}",
        lines[0]
    );
    assert!(
        lines[99].starts_with("ratelimit_policy_t/00099:"),
        "{}",
        lines[99]
    );
    // Every policy's statistics stay reachable: RL.POLICY STATS.
    call(&mut con, &["RL.LIMIT", "k", "t:19999", "TOKENS", "3"]);
    let fields: Vec<(String, i64)> = query(&mut con, &["RL.POLICY", "STATS", "t:19999"]).unwrap();
    assert_eq!(
        fields,
        [
            ("calls_allowed".to_string(), 1),
            ("calls_limited".to_string(), 0),
            ("tokens_allowed".to_string(), 3),
            ("shadow_limited".to_string(), 0),
            ("soft_over".to_string(), 0),
            ("blocked".to_string(), 0),
        ]
    );
    let missing: Option<Vec<String>> = query(&mut con, &["RL.POLICY", "STATS", "nope"]).unwrap();
    assert_eq!(missing, None);
    // REPLACE with the same names keeps their statistics; a smaller text
    // drops the rest.
    assert_eq!(
        load(
            &mut con,
            &["RL.POLICY", "LOAD", "REPLACE", "t:19999 GCRA 99 100 1\n"]
        ),
        1
    );
    assert_eq!(dump(&mut con), "t:19999 GCRA 99 100 1\n");
    let fields: Vec<(String, i64)> = query(&mut con, &["RL.POLICY", "STATS", "t:19999"]).unwrap();
    assert_eq!(fields[2], ("tokens_allowed".to_string(), 3));
    assert_eq!(
        info_field(&mut con, "ratelimit", "ratelimit_policy_lines_omitted"),
        "0"
    );
}

/// The module's sliding-log-max-limit from the load arguments.
/// A server with `sliding-log-max-limit max` and, as docs/commands/rl.slidinglog.md asks of a
/// raised limit, a `sliding-log-call-budget` of twice that.
fn server_with_max(max: &str, extra: &[&str]) -> Server {
    let budget = (2 * max.parse::<i64>().unwrap()).to_string();
    Server::start_with_module_args(
        &[
            "sliding-log-max-limit",
            max,
            "sliding-log-call-budget",
            &budget,
        ],
        extra,
    )
}

#[test]
fn definitions_the_master_accepted_load_wherever_it_goes() {
    if !common::module_only("policies are module data") {
        return;
    }
    let master = server_with_max(
        "5000",
        &[
            "--save",
            "",
            "--appendonly",
            "no",
            "--enable-debug-command",
            "yes",
        ],
    );
    let mut m = master.connect();
    ok(
        &mut m,
        &["RL.POLICY", "SET", "big", "SLIDINGLOG", "3000", "60"],
    );
    // A replica with the default setting (1000) gets it by the full sync's
    // RDB, then by the replication stream (SET and LOAD).
    let replica = Server::start();
    let mut r = replica.connect();
    let e = call_err(
        &mut r,
        &["RL.POLICY", "SET", "x", "SLIDINGLOG", "3000", "60"],
    );
    assert!(e.contains("<= 1000"), "a client's SET still checks: {e}");
    let _: () = query(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    )
    .unwrap();
    wait_for_sync(&mut r);
    assert_eq!(dump(&mut r), "big SLIDINGLOG 3000 60\n");
    ok(
        &mut m,
        &["RL.POLICY", "SET", "bigger", "SLIDINGLOG", "4000", "60"],
    );
    let _: i64 = query(&mut m, &["RL.POLICY", "LOAD", "biggest SLIDINGLOG 5000 60"]).unwrap();
    let acked: i64 = query(&mut m, &["WAIT", "1", "5000"]).unwrap();
    assert_eq!(acked, 1);
    assert_eq!(dump(&mut r), dump(&mut m));
    assert_eq!(dump(&mut r).lines().count(), 3);

    // Lowering the setting keeps the policies already defined, across a
    // reload of the dataset; clients' new definitions obey the new bound.
    ok(
        &mut m,
        &["CONFIG", "SET", "ratelimit.sliding-log-max-limit", "1000"],
    );
    let before = dump(&mut m);
    ok(&mut m, &["DEBUG", "RELOAD"]);
    assert_eq!(dump(&mut m), before);
    assert_eq!(
        call(&mut m, &["RL.LIMIT", "k", "big"])[..3],
        [0, 3000, 2999]
    );
    let e = call_err(
        &mut m,
        &["RL.POLICY", "SET", "big", "SLIDINGLOG", "3000", "60"],
    );
    assert!(e.contains("<= 1000"), "{e}");
    let e = call_err(&mut m, &["RL.POLICY", "LOAD", "new SLIDINGLOG 2000 60"]);
    assert!(e.starts_with("ERR line 1:") && e.contains("<= 1000"), "{e}");
}

#[test]
fn an_aof_replays_definitions_this_server_would_refuse_from_a_client() {
    if !common::module_only("policies are module data") {
        return;
    }
    let config = [
        "--save",
        "",
        "--appendonly",
        "yes",
        "--enable-debug-command",
        "yes",
    ];
    let server = server_with_max("5000", &config);
    let mut con = server.connect();
    ok(
        &mut con,
        &["RL.POLICY", "SET", "log", "SLIDINGLOG", "3000", "60"],
    );
    ok(&mut con, &["RL.POLICY", "SET", "a", "GCRA", "4", "5", "1"]);
    ok(
        &mut con,
        &["RL.POLICY", "SET", "a", "FIXEDWINDOW", "5", "60", "RESET"],
    );
    let expected = dump(&mut con);
    drop(con);
    let dir = server.shutdown("NOSAVE");
    // Take RESET out of the AOF: a file an older module (or an older
    // master) wrote changes the algorithm without it; the replay accepts it.
    let aof_dir = dir.path().join("appendonlydir");
    let mut edited = 0;
    for entry in std::fs::read_dir(&aof_dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let with = b"*7\r\n$9\r\nRL.POLICY\r\n$3\r\nSET\r\n$1\r\na\r\n$11\r\nFIXEDWINDOW\r\n$1\r\n5\r\n$2\r\n60\r\n$5\r\nRESET\r\n";
        let without =
            b"*6\r\n$9\r\nRL.POLICY\r\n$3\r\nSET\r\n$1\r\na\r\n$11\r\nFIXEDWINDOW\r\n$1\r\n5\r\n$2\r\n60\r\n";
        if let Some(at) = bytes.windows(with.len()).position(|w| w == with) {
            let mut out = bytes[..at].to_vec();
            out.extend_from_slice(without);
            out.extend_from_slice(&bytes[at + with.len()..]);
            std::fs::write(&path, out).unwrap();
            edited += 1;
        }
    }
    assert_eq!(edited, 1, "the AOF holds the SET … RESET verbatim");
    // Restarted with the default bound (1000): the replay keeps both.
    let server = Server::start_in(dir, &config);
    let mut con = server.connect();
    assert_eq!(dump(&mut con), expected);
    // And so does DEBUG LOADAOF.
    ok(&mut con, &["DEBUG", "LOADAOF"]);
    assert_eq!(dump(&mut con), expected);
}

/// Every algorithm a policy can have, as `RL.POLICY SET` takes it.
const POLICY_ALGORITHMS: [(&str, &str); 6] = [
    ("GCRA", "GCRA 9 10 60"),
    ("TOKENBUCKET", "TOKENBUCKET 10 1 6"),
    ("LEAKYBUCKET", "LEAKYBUCKET 10 1 6"),
    ("FIXEDWINDOW", "FIXEDWINDOW 10 60"),
    ("SLIDINGWINDOW", "SLIDINGWINDOW 10 60"),
    ("SLIDINGLOG", "SLIDINGLOG 10 60"),
];

#[test]
fn changing_a_policys_algorithm_needs_reset() {
    if !common::module_only("policies are module data") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    for (from, from_def) in POLICY_ALGORITHMS {
        for (to, to_def) in POLICY_ALGORITHMS {
            let mut set = vec!["RL.POLICY", "SET", "p"];
            set.extend(from_def.split(' '));
            set.push("RESET");
            ok(&mut con, &set);
            let before = dump(&mut con);
            let mut set = vec!["RL.POLICY", "SET", "p"];
            set.extend(to_def.split(' '));
            if from == to {
                // Other parameters, same algorithm: no RESET needed.
                ok(&mut con, &set);
                continue;
            }
            let e = call_err(&mut con, &set);
            assert_eq!(
                e,
                format!(
                    "ERR policy 'p' is {from}; redefining it as {to} makes its limiters start over: add RESET to do so"
                )
            );
            let line = format!("q GCRA 1 1 1\np {to_def}\n");
            let e = call_err(&mut con, &["RL.POLICY", "LOAD", &line]);
            assert!(e.starts_with("ERR line 2: policy 'p' is"), "{e}");
            let e = call_err(&mut con, &["RL.POLICY", "LOAD", "REPLACE", &line]);
            assert!(e.starts_with("ERR line 2: policy 'p' is"), "{e}");
            assert_eq!(dump(&mut con), before, "{from} → {to}: nothing changed");
            // RESET: on SET, on the LOAD line, or for the whole LOAD.
            set.push("RESET");
            ok(&mut con, &set);
            assert_eq!(dump(&mut con), format!("p {to_def}\n"));
            let mut back = vec!["RL.POLICY", "SET", "p"];
            back.extend(from_def.split(' '));
            back.push("RESET");
            ok(&mut con, &back);
            let n: i64 = query(
                &mut con,
                &["RL.POLICY", "LOAD", &format!("p {to_def} RESET")],
            )
            .unwrap();
            assert_eq!(n, 1);
            ok(&mut con, &back);
            let n: i64 = query(
                &mut con,
                &["RL.POLICY", "LOAD", "RESET", &format!("p {to_def}")],
            )
            .unwrap();
            assert_eq!(n, 1);
            assert_eq!(
                dump(&mut con),
                format!("p {to_def}\n"),
                "RESET is never stored"
            );
        }
    }
    let e = call_err(
        &mut con,
        &["RL.POLICY", "LOAD", "REPLACE", "REPLACE", "x GCRA 1 1 1"],
    );
    assert!(e.contains("RL.POLICY LOAD [REPLACE] [RESET] text"), "{e}");
}

#[test]
fn an_application_user_with_read_and_write_cannot_change_policies() {
    if !common::module_only("policies are module data") {
        return;
    }
    let server = Server::start();
    let mut admin = server.connect();
    if !is_7_2_or_later(&mut admin) {
        // Redis 7.0: module commands belong to no ACL category at all
        // (README, Operations); a user gets them by name.
        return;
    }
    ok(
        &mut admin,
        &["RL.POLICY", "SET", "free", "GCRA", "4", "5", "1"],
    );
    let mut rules = vec!["on", ">pw", "~rl:*", "+@read", "+@write"];
    // Where the server has module categories (Redis 7.4+, Valkey 8+).
    let custom: redis::RedisResult<String> =
        query(&mut admin, &["ACL", "SETUSER", "probe", "+@ratelimit"]);
    if custom.is_ok() {
        rules.push("+@ratelimit");
    }
    let mut setuser = vec!["ACL", "SETUSER", "app"];
    setuser.extend(rules.iter().copied());
    ok(&mut admin, &setuser);
    let client = redis::Client::open(format!("redis://app:pw@127.0.0.1:{}/", server.port)).unwrap();
    let mut app = client.get_connection().unwrap();
    for change in [
        vec!["RL.POLICY", "SET", "free", "GCRA", "99", "5", "1"],
        vec!["RL.POLICY", "LOAD", "REPLACE", ""],
        vec!["RL.POLICY", "DEL", "free"],
        vec!["RL.POLICY", "RESETSTATS"],
    ] {
        let e = call_err(&mut app, &change);
        assert!(e.starts_with("NOPERM"), "{rules:?} {change:?}: {e}");
    }
    assert_eq!(call(&mut app, &["RL.GCRA", "rl:g", "4", "5", "1"])[0], 0);
    assert_eq!(call(&mut app, &["RL.LIMIT", "rl:1", "free"])[0], 0);
    let words: Vec<String> = query(&mut app, &["RL.POLICY", "GET", "free"]).unwrap();
    assert_eq!(words[0], "GCRA");
    let names: Vec<String> = query(&mut app, &["RL.POLICY", "LIST"]).unwrap();
    assert_eq!(names, ["free"]);
    let fields: Vec<redis::Value> = query(&mut app, &["RL.POLICY", "STATS", "free"]).unwrap();
    assert_eq!(fields.len(), 12);
    assert_eq!(dump(&mut admin), "free GCRA 4 5 1\n");
}

#[test]
fn info_names_are_one_to_one_and_shadow_counts_only_taken_tokens() {
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
            "a:b FIXEDWINDOW 5 86400\na_b FIXEDWINDOW 5 86400\nshadow FIXEDWINDOW 1 86400 SHADOW",
        ],
    )
    .unwrap();
    // a:b and a_b have a line each; names without ':' keep theirs.
    call(&mut con, &["RL.LIMIT", "k1", "a:b", "TOKENS", "2"]);
    assert!(stats(&mut con, "policy_a/b")
        .starts_with("calls_allowed=1,calls_limited=0,tokens_allowed=2,"));
    assert_eq!(stats(&mut con, "policy_a_b"), ZERO);
    // A shadow policy: the first call takes its 1 token, the next 4 would
    // be refused and take nothing.
    for _ in 0..5 {
        assert_eq!(call(&mut con, &["RL.LIMIT", "s", "shadow"])[0], 0);
    }
    assert_eq!(
        stats(&mut con, "policy_shadow"),
        "calls_allowed=5,calls_limited=0,tokens_allowed=1,shadow_limited=4,soft_over=0,blocked=0"
    );
    assert!(stats(&mut con, "cmdstat_rl.limit").contains(",tokens_allowed=3,"));
    // In RL.ALL: the shadow policy's line counts only what its key took.
    ok(&mut con, &["RL.POLICY", "RESETSTATS"]);
    for _ in 0..3 {
        let reply: Vec<i64> = query(
            &mut con,
            &[
                "RL.ALL",
                "2",
                "{x}1",
                "{x}2",
                "POLICY",
                "shadow",
                "FIXEDWINDOW",
                "10",
                "60",
                "TOKENS",
                "1",
            ],
        )
        .unwrap();
        assert_eq!(reply[0], 0);
    }
    assert_eq!(
        stats(&mut con, "policy_shadow"),
        "calls_allowed=3,calls_limited=0,tokens_allowed=1,shadow_limited=2,soft_over=0,blocked=0"
    );
}

#[test]
fn policy_help_lists_every_subcommand() {
    if !common::module_only("policies are module data") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    let lines: Vec<String> = query(&mut con, &["RL.POLICY", "HELP"]).unwrap();
    assert!(lines[0].starts_with("RL.POLICY <subcommand>"), "{lines:?}");
    for sub in [
        "SET",
        "GET",
        "DEL",
        "LIST",
        "DUMP",
        "LOAD",
        "STATS",
        "RESETSTATS",
        "HELP",
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with(sub)),
            "{sub} missing from {lines:?}"
        );
    }
    let lower: Vec<String> = query(&mut con, &["rl.policy", "help"]).unwrap();
    assert_eq!(lower, lines);
}

/// The state each command (and variant) writes, by a name for the table.
const WRITERS: [(&str, &str); 8] = [
    ("GCRA", "RL.GCRA k 9 10 60"),
    ("TOKENBUCKET", "RL.TOKENBUCKET k 10 1 6"),
    ("LEAKYBUCKET", "RL.LEAKYBUCKET k 10 1 6"),
    ("FIXEDWINDOW", "RL.FIXEDWINDOW k 10 60"),
    (
        "FIXEDWINDOW ALIGN FIRST",
        "RL.FIXEDWINDOW k 10 60 ALIGN FIRST",
    ),
    ("SLIDINGWINDOW", "RL.SLIDINGWINDOW k 10 60"),
    (
        "SLIDINGWINDOW BUCKETS 4",
        "RL.SLIDINGWINDOW k 10 60 BUCKETS 4",
    ),
    ("SLIDINGLOG", "RL.SLIDINGLOG k 10 60"),
];

/// What the first `RL.LIMIT` under a policy reads from a key another
/// algorithm wrote (3 calls of 1 token, every limiter 10 a minute):
/// `Continues` — its state means the same instant (GCRA's TAT, a bucket's
/// full-at: when the limiter is full again) or it is the same algorithm;
/// `Fresh` — read as no key, the call is a new limiter's first.
#[derive(Debug, PartialEq)]
enum Read {
    Continues,
    Fresh,
}

fn expected_read(writer: &str, policy: &str) -> Read {
    fn family(a: &str) -> &str {
        match a {
            "GCRA" | "TOKENBUCKET" | "LEAKYBUCKET" => "full-at",
            other => other,
        }
    }
    if family(writer) == family(policy) {
        Read::Continues
    } else {
        Read::Fresh
    }
}

#[test]
fn a_policy_reads_another_algorithms_state_as_documented_for_every_pair() {
    if !common::module_only("policies are module data") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    for (writer, command) in WRITERS {
        for (policy, definition) in POLICY_ALGORITHMS {
            let what = format!("{writer} read as {policy}");
            let _: i64 = query(&mut con, &["DEL", "k"]).unwrap();
            let mut set = vec!["RL.POLICY", "SET", "p"];
            set.extend(definition.split(' '));
            set.push("RESET");
            ok(&mut con, &set);
            let command: Vec<&str> = command.split(' ').collect();
            for _ in 0..3 {
                assert_eq!(call(&mut con, &command)[0], 0, "{what}");
            }
            let before: Vec<u8> = query(&mut con, &["DUMP", "k"]).unwrap();
            // A PEEK and a limited call write nothing, whatever they read.
            let peek = call(&mut con, &["RL.LIMIT", "k", "p", "PEEK"]);
            let refused = call(&mut con, &["RL.LIMIT", "k", "p", "TOKENS", "11"]);
            assert_eq!(refused[0], 1, "{what}");
            let unchanged: Vec<u8> = query(&mut con, &["DUMP", "k"]).unwrap();
            assert_eq!(unchanged, before, "{what}: PEEK or a refusal wrote");
            let reply = call(&mut con, &["RL.LIMIT", "k", "p"]);
            let expected = match expected_read(writer, policy) {
                Read::Continues => 6,
                Read::Fresh => 9,
            };
            assert_eq!(
                (reply[0], reply[1], reply[2]),
                (0, 10, expected),
                "{what}: {reply:?}"
            );
            assert_eq!(peek[..3], reply[..3], "{what}: PEEK answers as the call");
            let kind: String = query(&mut con, &["TYPE", "k"]).unwrap();
            let want = if policy == "SLIDINGLOG" {
                "zset"
            } else {
                "string"
            };
            assert_eq!(kind, want, "{what}: the key is the policy's type");
            let ttl: i64 = query(&mut con, &["PTTL", "k"]).unwrap();
            assert!(ttl > 0, "{what}: expires");
            // RL.ALL plans a policy's limit its own way: the same read,
            // and the key replaced alike (a sorted set by a string, say).
            if policy == "LEAKYBUCKET" {
                continue; // not part of RL.ALL
            }
            let _: i64 = query(&mut con, &["DEL", "k"]).unwrap();
            for _ in 0..3 {
                assert_eq!(call(&mut con, &command)[0], 0, "{what}");
            }
            let all: Vec<i64> = query(&mut con, &["RL.ALL", "1", "k", "POLICY", "p"]).unwrap();
            assert_eq!(all[..3], reply[..3], "{what}: RL.ALL {all:?}");
            let kind: String = query(&mut con, &["TYPE", "k"]).unwrap();
            assert_eq!(kind, want, "{what}: RL.ALL: the key is the policy's type");
        }
    }
    // The one collision that is not the same instant: a token bucket's
    // `<full_at_us>:<remainder>` reads, under FIXEDWINDOW, as a window
    // starting at the bucket's full-at with `remainder` tokens counted.
    ok(
        &mut con,
        &["RL.POLICY", "SET", "p", "FIXEDWINDOW", "10", "60", "RESET"],
    );
    let _: i64 = query(&mut con, &["DEL", "k"]).unwrap();
    call(
        &mut con,
        &["RL.TOKENBUCKET", "k", "10", "3", "7", "TOKENS", "4"],
    );
    let state: String = query(&mut con, &["GET", "k"]).unwrap();
    let remainder: i64 = state.split(':').nth(1).unwrap().parse().unwrap();
    assert!((1..3).contains(&remainder), "{state}");
    let reply = call(&mut con, &["RL.LIMIT", "k", "p"]);
    assert_eq!(reply[2], 9 - remainder, "{state}: {reply:?}");
    assert!(
        reply[4] > 60_000,
        "the window ends after a minute: {reply:?}"
    );

    // Values the module never wrote keep their error and stay.
    ok(&mut con, &["SET", "s", "hello"]);
    let _: i64 = query(&mut con, &["ZADD", "z", "1", "a"]).unwrap();
    let _: i64 = query(&mut con, &["HSET", "h", "f", "v"]).unwrap();
    for key in ["s", "z", "h"] {
        for (_, definition) in POLICY_ALGORITHMS {
            let mut set = vec!["RL.POLICY", "SET", "p"];
            set.extend(definition.split(' '));
            set.push("RESET");
            ok(&mut con, &set);
            let e = call_err(&mut con, &["RL.LIMIT", key, "p"]);
            assert!(
                e.starts_with("ERR the value at this key is not") || e.starts_with("WRONGTYPE"),
                "{key} under {definition}: {e}"
            );
        }
    }
    let score: f64 = query(&mut con, &["ZSCORE", "z", "a"]).unwrap();
    assert_eq!(score, 1.0);
    let field: String = query(&mut con, &["HGET", "h", "f"]).unwrap();
    assert_eq!(field, "v");
    let s: String = query(&mut con, &["GET", "s"]).unwrap();
    assert_eq!(s, "hello");
    // The commands themselves still refuse another algorithm's state.
    call(&mut con, &["RL.GCRA", "g", "9", "10", "60"]);
    let e = call_err(&mut con, &["RL.FIXEDWINDOW", "g", "10", "60"]);
    assert!(
        e.starts_with("ERR the value at this key is not RL.FIXEDWINDOW"),
        "{e}"
    );
}

#[test]
fn a_replaced_key_is_the_same_on_replicas() {
    if !common::module_only("policies are module data") {
        return;
    }
    let master = Server::start();
    let mut m = master.connect();
    let replica = Server::start();
    let mut r = replica.connect();
    let _: () = query(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    )
    .unwrap();
    wait_for_sync(&mut r);
    ok(&mut m, &["RL.POLICY", "SET", "p", "GCRA", "9", "10", "60"]);
    call(&mut m, &["RL.LIMIT", "a", "p"]);
    call(&mut m, &["RL.SLIDINGLOG", "b", "10", "60"]);
    ok(
        &mut m,
        &["RL.POLICY", "SET", "p", "SLIDINGLOG", "10", "60", "RESET"],
    );
    assert_eq!(call(&mut m, &["RL.LIMIT", "a", "p"])[2], 9);
    ok(
        &mut m,
        &["RL.POLICY", "SET", "p", "FIXEDWINDOW", "10", "60", "RESET"],
    );
    assert_eq!(call(&mut m, &["RL.LIMIT", "b", "p"])[2], 9);
    let acked: i64 = query(&mut m, &["WAIT", "1", "5000"]).unwrap();
    assert_eq!(acked, 1);
    for key in ["a", "b"] {
        let on_master: Vec<u8> = query(&mut m, &["DUMP", key]).unwrap();
        let on_replica: Vec<u8> = query(&mut r, &["DUMP", key]).unwrap();
        assert_eq!(on_master, on_replica, "{key}");
    }
    let kind: String = query(&mut r, &["TYPE", "a"]).unwrap();
    assert_eq!(kind, "zset");
}
