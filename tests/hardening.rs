//! Never hurting the server: bounded work per call (an empty SLOWLOG at a
//! 5 ms threshold under adversarial state and arguments), the sliding log's
//! `limit` bound and its setting, a renamed `SYNC` that must not let
//! commands reach the replication stream verbatim, and module reloads that
//! give their memory back.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{
    call, call_err, fill_stale_log, info_field, info_int, module_path, query, slow_module_calls,
    Server,
};

#[test]
fn no_call_takes_more_than_5_ms_whatever_the_state_and_arguments() {
    let server = Server::start_with(&[
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        "no",
        "--slowlog-log-slower-than",
        "5000",
    ]);
    let mut con = server.connect();
    // The longest log there can be (`SlidingLog::MAX_ENTRIES` less its
    // block): every member the module could write, all stale but the newest.
    fill_stale_log(&mut con, "stale", 199_999, |i| (i + 1).to_string());
    assert_eq!(
        query::<i64>(&mut con, &["ZCARD", "stale"]).unwrap(),
        200_000
    );
    let _: () = query(&mut con, &["SLOWLOG", "RESET"]).unwrap();

    // Allowed calls over 200,000 stale entries: each removes a bounded few
    // (the window is long enough for the key not to expire meanwhile).
    for i in 0..20 {
        let reply = call(&mut con, &["RL.SLIDINGLOG", "stale", "1000", "10"]);
        assert_eq!(reply[0], 0, "call {i}: {reply:?}");
    }
    let left: i64 = query(&mut con, &["ZCARD", "stale"]).unwrap();
    assert!(
        (190_000..200_000).contains(&left),
        "20 calls removed {} entries",
        200_020 - left
    );
    // Limited calls over the same log, many times.
    for _ in 0..50 {
        assert_eq!(
            call(&mut con, &["RL.SLIDINGLOG", "stale", "20", "10"])[0],
            1
        );
    }
    // The largest accepted cost on a fresh key, then limited calls over it.
    let max = common::sliding_log_max_limit(&mut con);
    let reply = call(
        &mut con,
        &["RL.SLIDINGLOG", "big", &max, "1000", "TOKENS", &max],
    );
    assert_eq!(reply[0], 0, "{reply:?}");
    for _ in 0..20 {
        assert_eq!(
            call(&mut con, &["RL.SLIDINGLOG", "big", &max, "1000"])[0],
            1
        );
    }
    // A huge cost on every O(1) command.
    let huge = "9000000000000000000";
    for args in [
        vec!["RL.GCRA", "g", "10", "1", "1", "TOKENS", huge],
        vec!["RL.TOKENBUCKET", "t", "10", "1", "1", "TOKENS", huge],
        vec!["RL.LEAKYBUCKET", "l", "10", "1", "1", "TOKENS", huge],
        vec!["RL.FIXEDWINDOW", "f", "10", "1", "TOKENS", huge],
        vec!["RL.SLIDINGWINDOW", "w", "10", "1", "TOKENS", huge],
        vec!["CL.THROTTLE", "c", "10", "1", "1", huge],
    ] {
        let _: redis::Value = query(&mut con, &args).unwrap();
    }
    let slow = slow_module_calls(&mut con);
    assert!(slow.is_empty(), "calls slower than 5 ms: {slow:?}");
}

#[test]
fn the_sliding_log_limit_is_bounded_by_a_module_setting() {
    if !common::module_only("a module setting") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    assert_eq!(
        info_field(&mut con, "ratelimit", "ratelimit_sliding_log_max_limit"),
        "1000"
    );
    assert_eq!(
        call(&mut con, &["RL.SLIDINGLOG", "a", "1000", "1"])[1],
        1000
    );
    assert_eq!(
        call_err(&mut con, &["RL.SLIDINGLOG", "a", "1001", "1"]),
        "ERR limit must be <= 1000 (the module's sliding-log-max-limit); for larger limits use RL.SLIDINGWINDOW"
    );
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "a"]).unwrap(), 1);
    drop(con);
    drop(server);

    let module = module_path();
    let module = module.to_str().unwrap();
    let server = Server::start_without_module(&[
        "--save",
        "",
        "--loadmodule",
        module,
        "sliding-log-max-limit",
        "5000",
        "sliding-log-call-budget",
        "9000",
    ]);
    let mut con = server.connect();
    assert_eq!(
        call(&mut con, &["RL.SLIDINGLOG", "b", "5000", "1"])[1],
        5000
    );
    assert!(call_err(&mut con, &["RL.SLIDINGLOG", "b", "5001", "1"]).contains("<= 5000"));
    // The call budget bounds the work too: 5000 + 4001 entries are over it.
    assert!(call_err(
        &mut con,
        &["RL.SLIDINGLOG", "b", "5000", "1", "TOKENS", "4001"]
    )
    .contains("may touch 9001 sliding-log entries"));
    // A limit above the setting's own ceiling reads as one above the setting
    // (one message for every too-large limit), and the setting stops there.
    assert!(
        call_err(&mut con, &["RL.SLIDINGLOG", "b", "100001", "1"]).contains("<= 5000"),
        "a limit above the hard ceiling is refused as above the setting"
    );
    assert!(redis::cmd("CONFIG")
        .arg(&["SET", "ratelimit.sliding-log-max-limit", "100001"])
        .query::<()>(&mut con)
        .is_err());
    drop(con);
    drop(server);

    // A bad value refuses the load.
    let server = Server::start_without_module(&["--save", "", "--enable-module-command", "yes"]);
    let mut con = server.connect();
    for bad in ["0", "100001", "many"] {
        let refused: redis::RedisResult<()> = redis::cmd("MODULE")
            .arg("LOAD")
            .arg(module)
            .arg("sliding-log-max-limit")
            .arg(bad)
            .query(&mut con);
        assert!(refused.is_err(), "sliding-log-max-limit {bad} was accepted");
    }
    assert!(server
        .log()
        .contains("sliding-log-max-limit needs an integer from 1 to 100000"));
}

/// Reads from `stream` until `until` bytes were seen or `timeout` passed.
fn read_for(stream: &mut TcpStream, timeout: Duration, until: &[u8]) -> Vec<u8> {
    let deadline = Instant::now() + timeout;
    let mut all = Vec::new();
    let mut buf = [0u8; 65536];
    stream
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => all.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
        if !until.is_empty() && all.windows(until.len()).any(|w| w == until) {
            break;
        }
    }
    all
}

fn contains_ignore_case(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

#[test]
fn a_replica_syncing_through_a_renamed_sync_receives_only_effects() {
    if !common::module_only("the module's propagation filter") {
        return;
    }
    let server = Server::start_with(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--rename-command",
        "SYNC",
        "hidden-sync",
    ]);
    let mut con = server.connect();
    // Writes before any replica: nothing consumes them, yet they must not be
    // handed over verbatim either once someone syncs.
    call(&mut con, &["RL.GCRA", "before", "5", "1", "1"]);

    let mut replica = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    replica.write_all(b"hidden-sync\r\n").unwrap();
    // The RDB transfer: wait until the payload has arrived.
    let _rdb = read_for(&mut replica, Duration::from_secs(10), b"before");
    std::thread::sleep(Duration::from_millis(100));

    call(&mut con, &["RL.GCRA", "after", "5", "1", "1"]);
    call(&mut con, &["RL.TOKENBUCKET", "bucket", "5", "1", "1"]);
    call(&mut con, &["RL.SLIDINGLOG", "log", "5", "1"]);
    let stream = read_for(&mut replica, Duration::from_secs(5), b"PEXPIREAT");
    assert!(
        contains_ignore_case(&stream, b"PXAT") && contains_ignore_case(&stream, b"ZADD"),
        "the stream lacks the effects: {:?}",
        String::from_utf8_lossy(&stream)
    );
    for command in [&b"RL.GCRA"[..], b"RL.TOKENBUCKET", b"RL.SLIDINGLOG"] {
        assert!(
            !contains_ignore_case(&stream, command),
            "{} reached the stream verbatim: {:?}",
            String::from_utf8_lossy(command),
            String::from_utf8_lossy(&stream)
        );
    }
    assert_eq!(
        info_field(&mut con, "ratelimit", "ratelimit_writes_unpropagated"),
        "0",
        "with SYNC renamed no write may skip propagation"
    );
}

#[test]
fn two_hundred_reloads_give_their_memory_back() {
    if !common::module_only("MODULE LOAD/UNLOAD") {
        return;
    }
    let server = Server::start_without_module(&["--save", "", "--enable-module-command", "yes"]);
    let mut con = server.connect();
    let module = module_path();
    let module = module.to_str().unwrap();
    let used = |con: &mut redis::Connection| -> i64 { info_int(con, "memory", "used_memory") };
    let cycle = |con: &mut redis::Connection| {
        // `policies unloadable`: a module with a data type cannot be unloaded.
        let _: () = query(con, &["MODULE", "LOAD", module, "policies", "unloadable"]).unwrap();
        call(con, &["RL.GCRA", "k", "5", "1", "1"]);
        let _: () = query(con, &["MODULE", "UNLOAD", "ratelimit"]).unwrap();
    };
    let _: i64 = query(&mut con, &["DEL", "k"]).unwrap();
    // Warm up whatever the server allocates once (command table slots, …).
    for _ in 0..20 {
        cycle(&mut con);
    }
    let _: i64 = query(&mut con, &["DEL", "k"]).unwrap();
    let before = used(&mut con);
    let cycles = 200;
    for _ in 0..cycles {
        cycle(&mut con);
    }
    let _: i64 = query(&mut con, &["DEL", "k"]).unwrap();
    let after = used(&mut con);
    let per_cycle = (after - before) / cycles;
    // Measured: under 130 bytes on Redis 7.0, 8.0 and Valkey 8.0 (allocator
    // rounding). Redis 8 and Valkey 8 keep ~0.5 KB of a container's
    // subcommands at every unload: with `policies unloadable`, RL.POLICY has none,
    // and this bound catches it if it ever gets them back.
    assert!(
        per_cycle < 256,
        "each MODULE UNLOAD + LOAD kept {per_cycle} bytes ({before} -> {after})"
    );
}

fn config(con: &mut redis::Connection, name: &str) -> String {
    let pair: Vec<String> = query(con, &["CONFIG", "GET", name]).unwrap();
    assert_eq!(pair.len(), 2, "CONFIG GET {name} → {pair:?}");
    pair[1].clone()
}

#[test]
fn the_settings_are_module_configs() {
    if !common::module_only("module configs") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    assert_eq!(config(&mut con, "ratelimit.sliding-log-max-limit"), "1000");
    assert_eq!(config(&mut con, "ratelimit.propagate-always"), "no");
    // Changed at run time, in force at once.
    let _: () = query(
        &mut con,
        &["CONFIG", "SET", "ratelimit.sliding-log-max-limit", "2000"],
    )
    .unwrap();
    assert_eq!(
        call(&mut con, &["RL.SLIDINGLOG", "l", "2000", "1"])[1],
        2000
    );
    assert!(call_err(&mut con, &["RL.SLIDINGLOG", "l", "2001", "1"]).contains("<= 2000"));
    assert_eq!(
        info_field(&mut con, "ratelimit", "ratelimit_sliding_log_max_limit"),
        "2000"
    );
    // Out of bounds, or not changeable while running: refused.
    for (name, value) in [
        ("ratelimit.sliding-log-max-limit", "0"),
        ("ratelimit.sliding-log-max-limit", "100001"),
        ("ratelimit.propagate-always", "yes"),
    ] {
        let refused: redis::RedisResult<()> = query(&mut con, &["CONFIG", "SET", name, value]);
        assert!(refused.is_err(), "CONFIG SET {name} {value} was accepted");
    }
    assert_eq!(config(&mut con, "ratelimit.propagate-always"), "no");
    drop(con);
    drop(server);

    // A load argument gives the default; a config line wins over it.
    let module = module_path();
    let module = module.to_str().unwrap();
    let server = Server::start_without_module(&[
        "--save",
        "",
        "--loadmodule",
        module,
        "sliding-log-max-limit",
        "5000",
        "propagate-always",
    ]);
    let mut con = server.connect();
    assert_eq!(config(&mut con, "ratelimit.sliding-log-max-limit"), "5000");
    assert_eq!(config(&mut con, "ratelimit.propagate-always"), "yes");
    call(&mut con, &["RL.GCRA", "g", "1", "1", "1"]);
    assert_eq!(
        info_field(&mut con, "ratelimit", "ratelimit_writes_unpropagated"),
        "0"
    );
    drop(con);
    drop(server);
    let server = Server::start_without_module(&[
        "--save",
        "",
        "--loadmodule",
        module,
        "sliding-log-max-limit",
        "5000",
        "--ratelimit.sliding-log-max-limit",
        "300",
    ]);
    let mut con = server.connect();
    assert_eq!(config(&mut con, "ratelimit.sliding-log-max-limit"), "300");
    assert!(call_err(&mut con, &["RL.SLIDINGLOG", "l", "301", "1"]).contains("<= 300"));
}
