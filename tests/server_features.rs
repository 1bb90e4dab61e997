//! What a server offers beyond the commands themselves: command docs, ACL
//! categories and key patterns, keyspace notifications, the cached clock in
//! transactions, and panic containment. Gated on the server's version where
//! an API only exists on newer servers (7.2+, Valkey; 7.4+ for module ACL
//! categories).

mod common;

use std::time::Duration;

use common::{call, call_err, error_text, query, Server};

/// Every command with arguments that work on a fresh `rl:` key.
const COMMANDS: [&[&str]; 7] = [
    &["RL.GCRA", "KEY", "4", "10", "1"],
    &["RL.TOKENBUCKET", "KEY", "5", "10", "1"],
    &["CL.THROTTLE", "KEY", "4", "10", "1"],
    &["RL.FIXEDWINDOW", "KEY", "5", "1"],
    &["RL.SLIDINGWINDOW", "KEY", "5", "1"],
    &["RL.SLIDINGLOG", "KEY", "5", "1"],
    &["RL.LEAKYBUCKET", "KEY", "5", "10", "1"],
];

fn with_key<'a>(cmd: &[&'a str], key: &'a str) -> Vec<&'a str> {
    cmd.iter()
        .map(|&a| if a == "KEY" { key } else { a })
        .collect()
}

/// (major, minor) of the Redis API the server implements, and of Valkey if
/// it is Valkey (which reports the Redis API it started from, 7.2).
fn server_version(con: &mut redis::Connection) -> ((u32, u32), Option<(u32, u32)>) {
    let info: String = query(con, &["INFO", "server"]).unwrap();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let parse = |version: &str| {
        let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    };
    (
        parse(field("redis_version:").unwrap_or("0.0")),
        field("valkey_version:").map(parse),
    )
}

fn has_acl_categories(con: &mut redis::Connection) -> bool {
    server_version(con).0 >= (7, 2)
}

/// Module ACL categories (`RedisModule_AddACLCategory`): Redis 7.4+, Valkey 8+.
fn has_module_categories(con: &mut redis::Connection) -> bool {
    match server_version(con) {
        (_, Some(valkey)) => valkey >= (8, 0),
        (redis, None) => redis >= (7, 4),
    }
}

#[test]
fn command_docs_show_summary_arguments_complexity_and_since() {
    if !common::module_only("COMMAND DOCS") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    for cmd in COMMANDS {
        let name = cmd[0].to_lowercase();
        let docs: redis::Value = query(&mut con, &["COMMAND", "DOCS", &name]).unwrap();
        let text = format!("{docs:?}");
        for field in [
            "summary",
            "complexity",
            "since",
            "arguments",
            "key",
            "0.1.0",
        ] {
            assert!(text.contains(field), "{name}: no {field} in {text}");
        }
        let complexity = if name == "rl.slidinglog" {
            "O(log(N) + limit)"
        } else {
            "O(1)"
        };
        assert!(text.contains(complexity), "{name}: {text}");
        if name != "cl.throttle" {
            assert!(
                text.contains("TOKENS"),
                "{name}: the TOKENS option is not documented"
            );
        }
    }
}

#[test]
fn acl_key_patterns_apply_to_the_limiter_key() {
    if !common::module_only("ACL key specs of the module's commands") {
        return;
    }
    let server = Server::start();
    let mut admin = server.connect();
    let _: () = query(
        &mut admin,
        &["ACL", "SETUSER", "app", "on", ">pw", "~rl:*", "+@all"],
    )
    .unwrap();
    let mut app = server.connect();
    let _: () = query(&mut app, &["AUTH", "app", "pw"]).unwrap();
    for (i, cmd) in COMMANDS.iter().enumerate() {
        let (allowed_key, other_key) = (format!("rl:user:{i}"), format!("other:user:{i}"));
        let allowed = call(&mut app, &with_key(cmd, &allowed_key));
        assert_eq!(allowed[0], 0, "{cmd:?}");
        let err = call_err(&mut app, &with_key(cmd, &other_key));
        assert!(err.starts_with("NOPERM"), "{cmd:?}: {err}");
    }
}

#[test]
fn acl_categories_write_fast_and_ratelimit() {
    if !common::module_only("ACL categories of the module's commands") {
        return;
    }
    let server = Server::start();
    let mut admin = server.connect();
    let users = [
        ("nowrite", vec!["+@all", "-@write"]),
        ("fastonly", vec!["+@fast"]),
        ("limiter", vec!["+@ratelimit"]),
    ];
    let acl_categories = has_acl_categories(&mut admin);
    let module_categories = has_module_categories(&mut admin);
    for (user, rules) in &users {
        if *user == "limiter" && !module_categories {
            continue;
        }
        let mut args = vec!["ACL", "SETUSER", user, "on", ">pw", "~*"];
        args.extend(rules.iter().copied());
        let _: () = query(&mut admin, &args).unwrap();
    }
    let login = |user: &str| {
        let mut con = server.connect();
        let _: () = query(&mut con, &["AUTH", user, "pw"]).unwrap();
        con
    };
    if !acl_categories {
        return; // Redis 7.0 puts module commands in no ACL category but @all.
    }
    // Without @write, no command may run.
    let mut nowrite = login("nowrite");
    for cmd in COMMANDS {
        let err = call_err(&mut nowrite, &with_key(cmd, "k"));
        assert!(err.starts_with("NOPERM"), "{cmd:?}: {err}");
    }
    // With only @fast: the O(1) commands, not the sliding log. One key per
    // command: each refuses a value another algorithm wrote.
    let mut fast = login("fastonly");
    for cmd in COMMANDS {
        let key = format!("k:{}", cmd[0]);
        let r: redis::RedisResult<redis::Value> = {
            let args = with_key(cmd, &key);
            query(&mut fast, &args)
        };
        if cmd[0] == "RL.SLIDINGLOG" {
            let e = r.expect_err("the sliding log is not @fast");
            assert!(error_text(&e).starts_with("NOPERM"), "{e}");
        } else {
            assert!(r.is_ok(), "{cmd:?}: {r:?}");
        }
    }
    if module_categories {
        let mut limiter = login("limiter");
        for cmd in COMMANDS {
            let key = format!("k2:{}", cmd[0]);
            assert!(call(&mut limiter, &with_key(cmd, &key))[1] > 0, "{cmd:?}");
        }
        let cats: Vec<String> = query(&mut admin, &["ACL", "CAT"]).unwrap();
        assert!(cats.iter().any(|c| c == "ratelimit"), "{cats:?}");
    }
}

/// The next keyevent on `pubsub`: (event, key).
fn next_event(pubsub: &mut redis::PubSub) -> (String, String) {
    let msg = pubsub.get_message().expect("a keyspace event within 2 s");
    let event = msg
        .get_channel_name()
        .trim_start_matches("__keyevent@0__:")
        .to_string();
    (event, msg.get_payload().unwrap())
}

thread_local! {
    /// The last event [`next_distinct_event`] returned.
    static LAST_EVENT: std::cell::RefCell<Option<(String, String)>> = const { std::cell::RefCell::new(None) };
}

/// [`next_event`], past a `zadd` that repeats the one before it under
/// RATELIMIT_ENGINE=functions: the library's events are those of the
/// commands it runs (docs/functions.md), and its sliding log adds with one
/// `ZADD` per entry, so one call may raise several `zadd` in a row where the
/// module raises one.
fn next_distinct_event(pubsub: &mut redis::PubSub) -> (String, String) {
    loop {
        let event = next_event(pubsub);
        let repeated = LAST_EVENT.with(|last| last.borrow().as_ref() == Some(&event));
        if common::engine() == common::Engine::Functions && event.0 == "zadd" && repeated {
            continue;
        }
        LAST_EVENT.with(|last| *last.borrow_mut() = Some(event.clone()));
        return event;
    }
}

#[test]
fn writes_raise_the_keyspace_events_of_set_expire_and_zadd() {
    let server = Server::start_with(&["--save", "", "--notify-keyspace-events", "KEA"]);
    let mut con = server.connect();
    let mut sub = server.connect();
    sub.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut pubsub = sub.as_pubsub();
    pubsub.psubscribe("__keyevent@0__:*").unwrap();
    let evt = |e: &str| (e.to_string(), "evt".to_string());
    for cmd in COMMANDS {
        if cmd[0] == "RL.SLIDINGLOG" {
            continue;
        }
        call(&mut con, &with_key(cmd, "evt"));
        assert_eq!(next_event(&mut pubsub), evt("set"), "{cmd:?}");
        assert_eq!(next_event(&mut pubsub), evt("expire"), "{cmd:?}");
        // A limited call (a cost above the limit) raises nothing; DEL raises `del`.
        let mut limited = with_key(cmd, "evt");
        if cmd[0] == "CL.THROTTLE" {
            limited.push("99");
        } else {
            limited.extend(["TOKENS", "99"]);
        }
        assert_eq!(call(&mut con, &limited)[0], 1);
        let _: () = query(&mut con, &["DEL", "evt"]).unwrap();
        assert_eq!(
            next_event(&mut pubsub),
            evt("del"),
            "{cmd:?}: a limited call raised an event"
        );
    }
    // Windows of 1 s, calls 0.5 s apart: the second call must come before
    // the first entries leave (0.5 s of margin), the third after they left
    // and before the second's entry leaves (0.4 s of margin), on a busy
    // machine too (with 0.2 s, 0.1 and 0.08 s).
    let log = |e: &str| (e.to_string(), "log".to_string());
    call(&mut con, &["RL.SLIDINGLOG", "log", "3", "1", "TOKENS", "2"]);
    assert_eq!(next_distinct_event(&mut pubsub), log("zadd"));
    assert_eq!(next_distinct_event(&mut pubsub), log("expire"));
    std::thread::sleep(Duration::from_millis(500));
    call(&mut con, &["RL.SLIDINGLOG", "log", "3", "1"]);
    assert_eq!(next_distinct_event(&mut pubsub), log("zadd"));
    assert_eq!(next_distinct_event(&mut pubsub), log("expire"));
    // 1 s after the first two entries they leave the window (the third
    // keeps the key alive): removing them raises zrem.
    std::thread::sleep(Duration::from_millis(600));
    call(&mut con, &["RL.SLIDINGLOG", "log", "3", "1"]);
    assert_eq!(next_distinct_event(&mut pubsub), log("zrem"));
    assert_eq!(next_distinct_event(&mut pubsub), log("zadd"));
    assert_eq!(next_distinct_event(&mut pubsub), log("expire"));
    // Deleted now: its expiry would raise `expired` amid big's events.
    let _: () = query(&mut con, &["DEL", "log"]).unwrap();
    assert_eq!(next_distinct_event(&mut pubsub), log("del"));
    // Many expired entries removed by one call: still one event.
    let big = |e: &str| (e.to_string(), "big".to_string());
    call(
        &mut con,
        &["RL.SLIDINGLOG", "big", "100", "1", "TOKENS", "50"],
    );
    assert_eq!(next_distinct_event(&mut pubsub), big("zadd"));
    assert_eq!(next_distinct_event(&mut pubsub), big("expire"));
    std::thread::sleep(Duration::from_millis(500));
    call(&mut con, &["RL.SLIDINGLOG", "big", "100", "1"]);
    assert_eq!(next_distinct_event(&mut pubsub), big("zadd"));
    assert_eq!(next_distinct_event(&mut pubsub), big("expire"));
    std::thread::sleep(Duration::from_millis(600));
    call(&mut con, &["RL.SLIDINGLOG", "big", "100", "1"]);
    assert_eq!(next_distinct_event(&mut pubsub), big("zrem"));
    assert_eq!(next_distinct_event(&mut pubsub), big("zadd"));
    assert_eq!(next_distinct_event(&mut pubsub), big("expire"));
}

#[test]
fn every_call_in_one_transaction_sees_the_same_instant() {
    if !common::module_only("the module reads the cached clock; a function reads TIME") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    if !has_acl_categories(&mut con) {
        return; // Redis 7.0 has no cached command time: the clock is read per call.
    }
    let (a, b): (Vec<i64>, Vec<i64>) = redis::pipe()
        .atomic()
        .cmd("RL.GCRA")
        .arg("a")
        .arg(0)
        .arg(1)
        .arg(10)
        .cmd("RL.GCRA")
        .arg("b")
        .arg(0)
        .arg(1)
        .arg(10)
        .query(&mut con)
        .unwrap();
    assert_eq!((a[0], b[0]), (0, 0));
    let tat_a: i64 = query(&mut con, &["GET", "a"]).unwrap();
    let tat_b: i64 = query(&mut con, &["GET", "b"]).unwrap();
    assert_eq!(
        tat_a, tat_b,
        "two calls in one MULTI/EXEC saw different instants"
    );
    assert_ne!(
        tat_a % 1000,
        0,
        "microsecond resolution expected on 7.2+ (flaky 1 in 1000)"
    );
    // The same inside one script.
    let script = "redis.call('RL.GCRA', KEYS[1], 0, 1, 10); \
                  redis.call('RL.SLIDINGLOG', KEYS[2], 5, 10); \
                  redis.call('RL.GCRA', KEYS[3], 0, 1, 10); \
                  return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[3]), \
                          redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')[2]}";
    let (first, last, logged): (i64, i64, i64) = redis::cmd("EVAL")
        .arg(script)
        .arg(3)
        .arg("c")
        .arg("log")
        .arg("d")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        first, last,
        "two calls in one script saw different instants"
    );
    assert_eq!(
        first - logged,
        10_000_000,
        "the sliding log logged another instant"
    );
}

#[test]
fn a_panic_in_a_handler_is_an_err_reply_not_a_crash() {
    if !common::module_only("RL.DEBUGPANIC") {
        return;
    }
    let mut server = Server::start();
    let mut con = server.connect();
    let debug_command: redis::Value =
        query(&mut con, &["COMMAND", "INFO", "rl.debugpanic"]).unwrap();
    if debug_command == redis::Value::Array(vec![redis::Value::Nil]) {
        // RL.DEBUGPANIC exists only in debug builds (`make test`); `make test-release` skips this.
        eprintln!("skipped: the module under test is a release build without RL.DEBUGPANIC");
        return;
    }
    call(&mut con, &["RL.GCRA", "before", "4", "10", "100"]);
    let err = call_err(&mut con, &["RL.DEBUGPANIC"]);
    assert_eq!(
        err,
        "ERR internal error in the ratelimit module (a panic was caught); nothing was written"
    );
    assert!(server.is_alive(), "the server died");
    assert_eq!(query::<String>(&mut con, &["PING"]).unwrap(), "PONG");
    assert_eq!(
        call(&mut con, &["RL.GCRA", "before", "4", "10", "100"])[2],
        3,
        "state survived"
    );
}

#[test]
fn debugclock_fixes_the_clock_every_command_reads_until_off() {
    if !common::module_only("RL.DEBUGCLOCK") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    let debug_command: redis::Value =
        query(&mut con, &["COMMAND", "INFO", "rl.debugpanic"]).unwrap();
    if debug_command == redis::Value::Array(vec![redis::Value::Nil]) {
        // A release build (`make test-release`): it has neither debug command.
        let clock: redis::Value = query(&mut con, &["COMMAND", "INFO", "rl.debugclock"]).unwrap();
        assert_eq!(clock, redis::Value::Array(vec![redis::Value::Nil]));
        eprintln!("skipped: the module under test is a release build without RL.DEBUGCLOCK");
        return;
    }
    let now_ms: i64 = {
        let t: Vec<i64> = query(&mut con, &["TIME"]).unwrap();
        t[0] * 1000 + t[1] / 1000
    };
    // A day ahead, one second into a 10 s window.
    let window_start_s = (now_ms / 1000 + 86_400) / 10 * 10;
    let fixed_us = (window_start_s + 1) * 1_000_000;
    let ok: String = query(&mut con, &["RL.DEBUGCLOCK", &fixed_us.to_string()]).unwrap();
    assert_eq!(ok, "OK");
    assert_eq!(
        call(&mut con, &["RL.FIXEDWINDOW", "fw", "5", "10"]),
        [0, 5, 4, -1, 9000]
    );
    std::thread::sleep(std::time::Duration::from_millis(5));
    // The same instant however long the wall clock moved.
    assert_eq!(
        call(&mut con, &["RL.FIXEDWINDOW", "fw", "5", "10", "PEEK"]),
        [0, 5, 3, -1, 9000]
    );
    let expire_ms: i64 = query(&mut con, &["PEXPIRETIME", "fw"]).unwrap();
    assert_eq!(expire_ms, (window_start_s + 10) * 1000);
    // GCRA at the same µs: TAT = now + emission interval (2 s).
    call(&mut con, &["RL.GCRA", "g", "0", "1", "2"]);
    let expire_ms: i64 = query(&mut con, &["PEXPIRETIME", "g"]).unwrap();
    assert_eq!(expire_ms, fixed_us / 1000 + 2000);

    for bad in ["-1", "soon", "1.5", ""] {
        assert_eq!(
            call_err(&mut con, &["RL.DEBUGCLOCK", bad]),
            "ERR unix_us must be an integer >= 0 (µs since the Unix epoch) or OFF",
            "{bad:?}"
        );
    }
    assert!(call_err(&mut con, &["RL.DEBUGCLOCK"]).contains("wrong number of arguments"));
    // A refused argument left the clock fixed.
    assert_eq!(
        call(&mut con, &["RL.FIXEDWINDOW", "fw", "5", "10", "PEEK"]),
        [0, 5, 3, -1, 9000]
    );

    let ok: String = query(&mut con, &["RL.DEBUGCLOCK", "off"]).unwrap();
    assert_eq!(ok, "OK");
    call(&mut con, &["RL.GCRA", "g2", "0", "1", "2"]);
    let expire_ms: i64 = query(&mut con, &["PEXPIRETIME", "g2"]).unwrap();
    assert!(
        (now_ms..now_ms + 60_000).contains(&(expire_ms - 2000)),
        "the server's clock is back: {expire_ms} vs {now_ms}"
    );
}

#[test]
fn resizing_a_state_keeps_the_keys_lfu_counter() {
    let server = Server::start_with(&["--save", "", "--maxmemory-policy", "allkeys-lfu"]);
    let mut con = server.connect();
    // 3 tokens per second: the state alternates between `<us>` and
    // `<us>:<remainder>`, so the string is re-created on most calls.
    let mut pipe = redis::pipe();
    for _ in 0..2000 {
        pipe.add_command(common::cmd(&["RL.TOKENBUCKET", "tb", "1000000", "3", "1"]))
            .ignore();
        pipe.add_command(common::cmd(&["RL.GCRA", "gcra", "1000000", "3", "1"]))
            .ignore();
    }
    let _: () = pipe.query(&mut con).unwrap();
    // The LFU counter grows logarithmically and at random: after 2000 hits a
    // kept counter is past 20 (GCRA's, whose state never changes length, for
    // comparison); one reset on every re-creation stays near its initial 5.
    let tb: i64 = query(&mut con, &["OBJECT", "FREQ", "tb"]).unwrap();
    let gcra: i64 = query(&mut con, &["OBJECT", "FREQ", "gcra"]).unwrap();
    assert!(
        tb >= 15,
        "a hot token bucket looks cold: freq {tb} (GCRA {gcra})"
    );
}

#[test]
fn a_limited_call_leaves_watch_alone_and_a_write_invalidates_it() {
    let server = Server::start();
    let mut watcher = server.connect();
    let mut other = server.connect();
    assert_eq!(call(&mut other, &["RL.GCRA", "k", "0", "1", "100"])[0], 0);
    let transaction = |con: &mut redis::Connection| -> Option<Vec<String>> {
        redis::pipe()
            .atomic()
            .cmd("SET")
            .arg("x")
            .arg(1)
            .query(con)
            .unwrap()
    };
    let _: () = query(&mut watcher, &["WATCH", "k"]).unwrap();
    assert_eq!(
        call(&mut other, &["RL.GCRA", "k", "0", "1", "100"])[0],
        1,
        "limited"
    );
    assert!(
        transaction(&mut watcher).is_some(),
        "a limited call aborted a WATCH transaction"
    );
    let _: () = query(&mut watcher, &["WATCH", "k"]).unwrap();
    assert_eq!(
        call(
            &mut other,
            &["RL.GCRA", "k", "0", "1", "100", "TOKENS", "5"]
        )[0],
        1
    );
    assert_eq!(
        call(
            &mut other,
            &["RL.SLIDINGLOG", "log", "1", "100", "TOKENS", "2"]
        )[0],
        1
    );
    assert!(
        transaction(&mut watcher).is_some(),
        "a refused call aborted a WATCH transaction"
    );
    let _: () = query(&mut watcher, &["WATCH", "k", "log"]).unwrap();
    assert_eq!(
        call(&mut other, &["RL.SLIDINGLOG", "log", "1", "100"])[0],
        0
    );
    assert!(
        transaction(&mut watcher).is_none(),
        "a write did not invalidate WATCH"
    );
    let _: () = query(&mut watcher, &["WATCH", "k2"]).unwrap();
    assert_eq!(call(&mut other, &["RL.GCRA", "k2", "0", "1", "100"])[0], 0);
    assert!(
        transaction(&mut watcher).is_none(),
        "a write did not invalidate WATCH"
    );
}

#[test]
fn reloading_the_module_keeps_its_acl_category() {
    if !common::module_only("MODULE LOAD") {
        return;
    }
    // `policies unloadable`: a module with a data type cannot be unloaded.
    let server = Server::start_with_module_args(
        &["policies", "unloadable"],
        &["--save", "", "--enable-module-command", "yes"],
    );
    let mut admin = server.connect();
    if !has_module_categories(&mut admin) {
        return;
    }
    let _: () = query(&mut admin, &["MODULE", "UNLOAD", "ratelimit"]).unwrap();
    let path = common::module_path();
    let _: () = query(
        &mut admin,
        &[
            "MODULE",
            "LOAD",
            path.to_str().unwrap(),
            "policies",
            "unloadable",
        ],
    )
    .unwrap();
    let _: () = query(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "limiter",
            "on",
            ">pw",
            "~*",
            "+@ratelimit",
        ],
    )
    .unwrap();
    let mut limiter = server.connect();
    let _: () = query(&mut limiter, &["AUTH", "limiter", "pw"]).unwrap();
    for (i, cmd) in COMMANDS.iter().enumerate() {
        let key = format!("reload:{i}");
        assert_eq!(call(&mut limiter, &with_key(cmd, &key))[0], 0, "{cmd:?}");
    }
}

#[test]
fn the_module_refuses_to_load_when_a_propagated_command_is_renamed() {
    if !common::module_only("MODULE LOAD") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let port = common::free_port().to_string();
    let mut child = std::process::Command::new(common::server_binary())
        .args(["--port", &port, "--bind", "127.0.0.1", "--save", ""])
        .args(["--rename-command", "PEXPIREAT", ""])
        .arg("--logfile")
        .arg(&log)
        .arg("--loadmodule")
        .arg(common::module_path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // It must exit by itself, quickly; a server that keeps running loaded the module.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server started although PEXPIREAT is gone");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success(), "the server exited cleanly: {status}");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.contains("no pexpireat command"),
        "no explanation in the log:\n{text}"
    );
}
