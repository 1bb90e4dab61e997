//! A keyspace-event subscriber that changes the key from its callback (as
//! Redis 7.0 allows) must not be able to crash the server through our
//! commands: every command raises its events only after its last use of the
//! key. `tests/keyspace_module/evil.c`, compiled here with `cc`, deletes,
//! rewrites or expires every `evil:*` key on each event; under it every
//! command keeps the server alive and replies, and a replica (without the
//! hostile module) stays identical.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::{module_path, query, wait_for_sync, Server};

/// Builds the hostile module once per test binary (the tests run in
/// parallel: the first one builds, the others wait).
fn evil_module() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(build_evil_module).clone()
}

fn build_evil_module() -> PathBuf {
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/keyspace_module/evil.c");
    let out = std::env::temp_dir().join(format!("ratelimit-evil-{}.so", std::process::id()));
    {
        let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(&out)
            .arg(&source)
            .status()
            .expect("run cc (build-essential) to build the test module");
        assert!(status.success(), "cc failed on {}", source.display());
    }
    out
}

/// Every command, in the shapes that write: new key, existing key, a
/// refused call, many tokens, expired entries of a sliding log (a few, and
/// more than one call removes), RL.ALL, BLOCK.
fn workload(key: &str) -> Vec<Vec<String>> {
    let k = |suffix: &str| format!("{key}:{suffix}");
    let mut calls: Vec<Vec<String>> = Vec::new();
    let mut add = |args: &[&str]| calls.push(args.iter().map(|s| s.to_string()).collect());
    for _ in 0..3 {
        add(&["RL.GCRA", &k("gcra"), "1", "10", "1"]);
        add(&["RL.TOKENBUCKET", &k("tb"), "2", "10", "1", "TOKENS", "2"]);
        add(&["RL.LEAKYBUCKET", &k("lb"), "2", "10", "1"]);
        add(&["RL.FIXEDWINDOW", &k("fw"), "2", "1"]);
        add(&["RL.SLIDINGWINDOW", &k("sw"), "2", "1"]);
        add(&["RL.SLIDINGLOG", &k("log"), "2", "0.02"]);
        add(&[
            "RL.SLIDINGLOG",
            &k("biglog"),
            "300",
            "0.02",
            "TOKENS",
            "150",
        ]);
        add(&["CL.THROTTLE", &k("cell"), "1", "10", "60"]);
        add(&[
            "RL.ALL",
            "2",
            &k("{all}a"),
            &k("{all}b"),
            "GCRA",
            "1",
            "10",
            "1",
            "SLIDINGLOG",
            "2",
            "0.02",
        ]);
        add(&["RL.FIXEDWINDOW", &k("blocked"), "1", "60", "BLOCK", "1"]);
        add(&["RL.SLIDINGLOG", &k("blockedlog"), "1", "60", "BLOCK", "1"]);
    }
    calls
}

fn run_mode(mode: &str) {
    let evil = evil_module();
    let module = module_path();
    let master = Server::start_without_module(&[
        "--save",
        "",
        "--loadmodule",
        module.to_str().unwrap(),
        "--loadmodule",
        evil.to_str().unwrap(),
        mode,
    ]);
    let replica = Server::start();
    let mut r = replica.connect();
    let _: () = query(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    )
    .unwrap();
    wait_for_sync(&mut r);
    let mut m = master.connect();
    for round in 0..3 {
        for args in workload("evil:k") {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            // An error reply (e.g. WRONGTYPE after a rewrite) is fine; a
            // dropped connection or a dead server is not.
            match query::<redis::Value>(&mut m, &refs) {
                Ok(redis::Value::Array(items)) => assert!(
                    items.iter().all(|v| matches!(v, redis::Value::Int(_))),
                    "{mode}: {args:?} replied {items:?}"
                ),
                Ok(other) => panic!("{mode}: {args:?} replied {other:?}"),
                Err(e) => assert!(e.code().is_some(), "{mode}: {args:?}: {e} (round {round})"),
            }
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    let mut master = master;
    assert!(
        master.is_alive(),
        "{mode}: the master died:\n{}",
        master.log()
    );
    assert_eq!(query::<String>(&mut m, &["PING"]).unwrap(), "PONG");
    // Read every key on the master (which expires what is due and
    // propagates it), then compare with the replica.
    let mut keys: Vec<String> = query(&mut m, &["KEYS", "*"]).unwrap();
    let replica_keys: Vec<String> = query(&mut r, &["KEYS", "*"]).unwrap();
    keys.extend(replica_keys);
    keys.sort();
    keys.dedup();
    let on_master: Vec<Option<Vec<u8>>> = keys
        .iter()
        .map(|k| query(&mut m, &["DUMP", k]).unwrap())
        .collect();
    let acked: i64 = query(&mut m, &["WAIT", "1", "5000"]).unwrap();
    assert_eq!(acked, 1, "{mode}: the replica did not acknowledge");
    let on_replica: Vec<Option<Vec<u8>>> = keys
        .iter()
        .map(|k| query(&mut r, &["DUMP", k]).unwrap())
        .collect();
    for ((key, a), b) in keys.iter().zip(&on_master).zip(&on_replica) {
        assert_eq!(a, b, "{mode}: {key} differs on the replica");
    }
}

#[test]
fn a_subscriber_deleting_the_key_in_its_callback_cannot_hurt() {
    run_mode("del");
}

#[test]
fn a_subscriber_rewriting_the_key_in_its_callback_cannot_hurt() {
    run_mode("rewrite");
}

#[test]
fn a_subscriber_expiring_the_key_in_its_callback_cannot_hurt() {
    run_mode("expire");
}
