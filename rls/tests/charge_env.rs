//! `RLS_CHARGE`, the environment's form of `--charge` (issue 43), on the
//! real binary: its own process, so that the variable reaches nothing else.
//! `RLS_CHARGE=always` makes the rules without `charge:` record every hit;
//! `--charge admitted` on the command line wins over it; a bad value stops
//! the start with the accepted values.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

const YAML: &str = "domain: d
descriptors:
  - key: default
    rate_limit: {unit: hour, requests_per_unit: 2}
";

/// The service as a user starts it: `RLS_CHARGE` set to `charge`, `flags`
/// after the common ones.
fn spawn(
    redis: &Redis,
    config: &std::path::Path,
    grpc_port: u16,
    charge: &str,
    flags: &[&str],
) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ratelimit-rls"))
        .env("RLS_CHARGE", charge)
        .arg("--config")
        .arg(config)
        .args(["--grpc-addr", &format!("127.0.0.1:{grpc_port}")])
        .args(["--http-addr", &format!("127.0.0.1:{}", free_port())])
        .args(["--redis-url", &redis.url(), "--redis-timeout-ms", "5000"])
        .args(flags)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ratelimit-rls")
}

async fn connect(grpc_port: u16) -> RateLimitServiceClient<tonic::transport::Channel> {
    let endpoint = format!("http://127.0.0.1:{grpc_port}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match RateLimitServiceClient::connect(endpoint.clone()).await {
            Ok(c) => return c,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("the service did not start: {e}"),
        }
    }
}

#[tokio::test]
async fn rls_charge_from_the_environment() {
    let redis = Redis::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, YAML).unwrap();
    // (RLS_CHARGE, flags, in debt after 3 hits on a limit of 2)
    for (charge, flags, in_debt) in [
        ("always", &[][..], true),
        ("admitted", &[][..], false),
        ("always", &["--charge", "admitted"][..], false),
    ] {
        let grpc_port = free_port();
        let mut child = spawn(&redis, &config, grpc_port, charge, flags);
        let mut client = connect(grpc_port).await;
        let value = format!("{charge}{}", flags.join(""));
        let r = call(
            &mut client,
            request("d", vec![desc_hits(&[("default", &value)], 3)]),
        )
        .await;
        assert_eq!(r.overall_code, OVER_LIMIT, "RLS_CHARGE={charge} {flags:?}");
        let check = call(
            &mut client,
            request("d", vec![desc_hits(&[("default", &value)], 0)]),
        )
        .await;
        let expected = if in_debt {
            (OVER_LIMIT, Some(2), 0)
        } else {
            (OK, Some(2), 2)
        };
        assert_eq!(
            statuses(&check),
            vec![expected],
            "RLS_CHARGE={charge} {flags:?}"
        );
        child.kill().ok();
        child.wait().ok();
    }
    // A bad value: the start fails, naming the accepted values.
    let mut child = spawn(&redis, &config, free_port(), "sometimes", &[]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().ok();
            panic!("RLS_CHARGE=sometimes: the service started");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success(), "RLS_CHARGE=sometimes: {status}");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr).unwrap();
    assert!(
        stderr.contains("sometimes") && stderr.contains("always") && stderr.contains("admitted"),
        "RLS_CHARGE=sometimes: {stderr}"
    );
}
