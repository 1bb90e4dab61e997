//! The engine the service decides with (issue 31): the module when the
//! server has it, else the Functions library, else its code through
//! EVALSHA; kept working after FUNCTION FLUSH, SCRIPT FLUSH, a restart, a
//! server that lost the module, and a server that refuses TIME in scripts.

mod common;

use common::*;
use ratelimit_rls::backend::engine::{LIBRARY_CODE, LIBRARY_VERSION};

const YAML: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 20}\n";

fn req() -> envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest {
    request("d", vec![desc(&[("k", "x")])])
}

/// `n` requests from 8 concurrent clients: how many were admitted (every
/// request must be answered: `call` panics on an error).
async fn admitted(rls: &Rls, n: usize) -> usize {
    let mut tasks = Vec::new();
    for t in 0..8 {
        let mut client = rls.client().await;
        let share = n / 8 + usize::from(t < n % 8);
        tasks.push(tokio::spawn(async move {
            let mut ok = 0;
            for _ in 0..share {
                if call(&mut client, req()).await.overall_code == OK {
                    ok += 1;
                }
            }
            ok
        }));
    }
    let mut ok = 0;
    for t in tasks {
        ok += t.await.unwrap();
    }
    ok
}

fn library_version(redis: &Redis) -> Option<i64> {
    let mut con = redis.connection();
    redis::cmd("FCALL_RO")
        .arg("rl_version")
        .arg(0)
        .query(&mut con)
        .ok()
}

fn redis_errors(rls: &Rls) -> u64 {
    rls.running.shared.metrics.value(
        "ratelimit_service_should_rate_limit_error",
        &[("err_type", "redis_error")],
    )
}

/// The suite's servers and settings give the suite's engine, reported by
/// the metric; the library is loaded only where it decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_reports_the_engine_it_decides_with() {
    let redis = Redis::start();
    let rls = Rls::start(&redis.url(), YAML, &[]).await;
    assert_eq!(rls.engine().await.as_deref(), Some(test_engine()));
    assert_eq!(admitted(&rls, 25).await, 20);
    let loaded = library_version(&redis);
    match test_engine() {
        "functions" => assert_eq!(loaded, Some(*LIBRARY_VERSION)),
        _ => assert_eq!(
            loaded,
            None,
            "nothing loaded by the {} engine",
            test_engine()
        ),
    }
    let (_, body) = rls.http_get("/metrics").await;
    for engine in ["module", "functions", "eval"] {
        let value = if engine == test_engine() { 1 } else { 0 };
        let line = format!("ratelimit_rls_engine{{engine=\"{engine}\"}} {value}");
        assert!(body.lines().any(|l| l == line), "{line} not in:\n{body}");
    }
}

/// A server with the module: auto picks it; a service forced to the
/// library on the same server continues the same limiter (same keys).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_module_first_and_both_engines_share_the_keys() {
    let redis = Redis::start_with_module(&[]);
    let rls = Rls::start(&redis.url(), YAML, &["--engine", "auto"]).await;
    assert_eq!(rls.engine().await.as_deref(), Some("module"));
    assert_eq!(admitted(&rls, 8).await, 8);
    drop(rls);
    for (engine, n, ok) in [("functions", 8, 8), ("eval", 8, 4)] {
        let rls = Rls::start(&redis.url(), YAML, &["--engine", engine]).await;
        assert_eq!(rls.engine().await.as_deref(), Some(engine));
        assert_eq!(admitted(&rls, n).await, ok, "{engine}");
    }
}

/// FUNCTION FLUSH between two bursts of concurrent requests: the next call
/// loads the library again and no request fails or is admitted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_flush_mid_run_costs_no_request() {
    let redis = Redis::start_without_module(&[]);
    let rls = Rls::start(&redis.url(), YAML, &["--engine", "auto"]).await;
    assert_eq!(rls.engine().await.as_deref(), Some("functions"));
    assert_eq!(admitted(&rls, 12).await, 12);
    let _: () = redis.query(&["FUNCTION", "FLUSH"]);
    assert_eq!(library_version(&redis), None);
    assert_eq!(admitted(&rls, 16).await, 8);
    assert_eq!(library_version(&redis), Some(*LIBRARY_VERSION));
    assert_eq!(redis_errors(&rls), 0);
    assert_eq!(rls.engine().await.as_deref(), Some("functions"));
}

/// The EVAL form, forced: nothing is loaded, SCRIPT FLUSH costs no request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_eval_survives_a_script_flush() {
    let redis = Redis::start_without_module(&[]);
    let rls = Rls::start(&redis.url(), YAML, &["--engine", "eval"]).await;
    assert_eq!(rls.engine().await.as_deref(), Some("eval"));
    assert_eq!(admitted(&rls, 12).await, 12);
    let _: () = redis.query(&["SCRIPT", "FLUSH"]);
    assert_eq!(admitted(&rls, 16).await, 8);
    assert_eq!(library_version(&redis), None, "no library loaded");
    assert_eq!(redis_errors(&rls), 0);
}

/// A restart (nothing persisted) and a server that comes back without the
/// module: the service finds the engine again and decides, without an error
/// once Redis answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_without_the_module_switches_to_the_library() {
    let mut redis = Redis::start_with_module(&[]);
    let rls = Rls::start(&redis.url(), YAML, &["--engine", "auto"]).await;
    assert_eq!(rls.engine().await.as_deref(), Some("module"));
    assert_eq!(admitted(&rls, 5).await, 5);
    for round in 0..2 {
        // Round 0: the module is gone; round 1: the library is gone.
        redis.restart(false);
        wait_healthy(&rls).await;
        let errors = redis_errors(&rls);
        assert_eq!(admitted(&rls, 25).await, 20, "round {round}");
        assert_eq!(redis_errors(&rls), errors, "round {round}");
        assert_eq!(rls.engine().await.as_deref(), Some("functions"));
        assert_eq!(library_version(&redis), Some(*LIBRARY_VERSION));
    }
}

async fn wait_healthy(rls: &Rls) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while rls.http_get("/healthcheck").await.0 != 200 {
        assert!(std::time::Instant::now() < deadline, "redis back");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// An older library is replaced by the embedded one; a newer one is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_library_is_replaced_and_a_newer_one_kept() {
    let current = format!("local VERSION = {}\n", *LIBRARY_VERSION);
    for (found, expected) in [
        (0, *LIBRARY_VERSION),
        (*LIBRARY_VERSION + 1, *LIBRARY_VERSION + 1),
    ] {
        let redis = Redis::start_without_module(&[]);
        let code = LIBRARY_CODE.replacen(&current, &format!("local VERSION = {found}\n"), 1);
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg(&code)
            .query(&mut redis.connection())
            .unwrap();
        assert_eq!(library_version(&redis), Some(found));
        let rls = Rls::start(&redis.url(), YAML, &["--engine", "auto"]).await;
        assert_eq!(rls.engine().await.as_deref(), Some("functions"));
        assert_eq!(admitted(&rls, 3).await, 3);
        assert_eq!(library_version(&redis), Some(expected), "found {found}");
    }
}

/// A server that refuses TIME inside scripts (here an ACL user without
/// +time, as ElastiCache Serverless refuses it): the service passes its own
/// clock and decides exactly as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_refused_in_scripts_passes_the_services_clock() {
    let redis = Redis::start_without_module(&[]);
    let _: () = redis.query(&["ACL", "SETUSER", "default", "-time"]);
    for engine in ["functions", "eval"] {
        let _: () = redis.query(&["FLUSHALL"]);
        let rls = Rls::start(&redis.url(), YAML, &["--engine", engine]).await;
        assert_eq!(admitted(&rls, 25).await, 20, "{engine}");
        assert_eq!(redis_errors(&rls), 0, "{engine}");
    }
    // Forced to the server's clock: refused.
    let rls = Rls::start(
        &redis.url(),
        YAML,
        &["--engine", "functions", "--clock", "server"],
    )
    .await;
    let mut client = rls.client().await;
    let err = client.should_rate_limit(req()).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
}

/// The binary logs the engine it found at start, before any request, found
/// or forced.
#[test]
fn the_engine_is_logged_at_start() {
    let redis = Redis::start_without_module(&[]);
    for (setting, engine) in [("auto", "functions"), ("eval", "eval")] {
        let line = first_engine_log(&redis, &["--engine", setting]);
        assert!(line.contains(&format!(r#""engine":"{engine}""#)), "{line}");
    }
}

/// The binary's first `engine in use` log line (JSON), within 10 s.
fn first_engine_log(redis: &Redis, flags: &[&str]) -> String {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, YAML).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ratelimit-rls"))
        .arg("--config")
        .arg(&config)
        .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .args(["--redis-url", &redis.url(), "--log-format", "json"])
        .args(flags)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start ratelimit-rls");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("engine in use") && tx.send(line).is_err() {
                break;
            }
        }
    });
    let line = rx.recv_timeout(std::time::Duration::from_secs(10));
    let _ = child.kill();
    let _ = child.wait();
    line.expect("'engine in use' logged")
}
