//! Issue 46: the service answers a client that has no `.proto` files, through
//! gRPC server reflection alone (as `grpcurl -plaintext -d '{…}' host:port
//! envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` does):
//! `reflection_call.py`, with PyPI's grpcio-reflection client, in the
//! virtualenv `make test-rls` prepares (`build/rls-reflection`, or
//! `RLS_REFLECTION_PYTHON`).

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::*;

fn python() -> PathBuf {
    let path = std::env::var_os("RLS_REFLECTION_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../build/rls-reflection/bin/python")
        });
    assert!(
        path.exists(),
        "{} not found: `make test-rls` creates the virtualenv with grpcio-reflection",
        path.display()
    );
    path
}

#[tokio::test]
async fn a_call_through_server_reflection_alone() {
    let redis = Redis::start();
    let yaml =
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n";
    let rls = Rls::start(&redis.url(), yaml, &[]).await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/reflection_call.py");
    let body = r#"{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "x"}]}]}"#;
    let python = python();
    let addr = rls.running.grpc_addr.to_string();
    for expected in ["\"overallCode\": \"OK\"", "\"overallCode\": \"OVER_LIMIT\""] {
        let (python, script, addr) = (python.clone(), script.clone(), addr.clone());
        let out = tokio::task::spawn_blocking(move || {
            Command::new(python)
                .arg(script)
                .arg(addr)
                .arg(body)
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        assert!(
            stdout.contains("envoy.service.ratelimit.v3.RateLimitService")
                && stdout.contains("grpc.health.v1.Health"),
            "{stdout}"
        );
        assert!(stdout.contains(expected), "{expected} not in {stdout}");
        assert!(stdout.contains("\"requestsPerUnit\": 1"), "{stdout}");
    }
}
