//! Graceful shutdown (issue 34), on the real binary: on SIGTERM the
//! requests in flight are answered, `/healthcheck` turns 503 and gRPC
//! health NOT_SERVING while they drain, the gRPC port stops accepting, and
//! the process exits 0.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const YAML: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 100}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_the_requests_in_flight_then_exits_0() {
    let redis = Redis::start_with(&["--enable-debug-command", "local"]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, YAML).unwrap();
    let (grpc_port, http_port) = (free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_ratelimit-rls"))
        .arg("--config")
        .arg(&config)
        .args(["--grpc-addr", &format!("127.0.0.1:{grpc_port}")])
        .args(["--http-addr", &format!("127.0.0.1:{http_port}")])
        .args(["--redis-url", &redis.url(), "--redis-timeout-ms", "5000"])
        .args(["--drain-timeout-ms", "5000"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start ratelimit-rls");
    let endpoint = format!("http://127.0.0.1:{grpc_port}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let client = loop {
        match envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::connect(endpoint.clone()).await {
            Ok(c) => break c,
            Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(e) => panic!("the service did not start: {e}"),
        }
    };
    let health_channel = tonic::transport::Channel::from_shared(endpoint.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(health_channel);
    let mut watch = health
        .watch(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = watch.message().await.unwrap().unwrap().status;
    assert_eq!(
        first,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    // Redis sleeps 1.5 s: the requests sent now stay in flight.
    let blocker = {
        let url = redis.url();
        std::thread::spawn(move || {
            let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
            let _: () = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg("1.5")
                .query(&mut con)
                .unwrap();
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut in_flight = Vec::new();
    for i in 0..8 {
        let mut client = client.clone();
        in_flight.push(tokio::spawn(async move {
            client
                .should_rate_limit(request("d", vec![desc(&[("k", &i.to_string())])]))
                .await
        }));
    }
    // All eight reached the service (and wait for Redis).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, body) = http_get(http_port, "/metrics").await;
        if body.contains("ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"} 8") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the requests did not arrive:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The shell's own kill: no procps needed.
    let status = Command::new("sh")
        .args(["-c", &format!("kill -TERM {}", child.id())])
        .status()
        .unwrap();
    assert!(status.success());

    // Draining: gRPC health says NOT_SERVING, /healthcheck 503, no new connections.
    let next = watch.message().await.unwrap().unwrap().status;
    assert_eq!(
        next,
        tonic_health::pb::health_check_response::ServingStatus::NotServing as i32
    );
    let (code, body) = http_get(http_port, "/healthcheck").await;
    assert_eq!((code, body.as_str()), (503, "draining\n"));
    drop(watch);
    drop(health);
    let refused = tokio::net::TcpStream::connect(("127.0.0.1", grpc_port)).await;
    assert!(refused.is_err(), "the gRPC port still accepts");

    // Every request in flight is answered.
    for task in in_flight {
        let r = task.await.unwrap().expect("answered").into_inner();
        assert_eq!(r.overall_code, OK);
    }
    blocker.join().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(exit) = child.try_wait().unwrap() {
            break exit;
        }
        assert!(Instant::now() < deadline, "did not exit");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(exit.code(), Some(0), "{exit:?}");
}

/// `GET path` on `port`: (status code, body).
async fn http_get(port: u16, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).await.unwrap();
    let code = out[9..12].parse().unwrap();
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}
