//! The harness of the service's tests: a real `redis-server` with the module
//! on a free loopback port, the service in-process on free ports, a tonic
//! client.
//!
//! * `RATELIMIT_MODULE` — the module (default: `target/debug/libredis_ratelimit.so`
//!   of the workspace; `make test-rls` builds it).
//! * `REDIS_SERVER` — the server binary (default: `redis-server`).
//! * `RATELIMIT_TEST_ENGINE` — the engine the suite runs on (issue 31):
//!   `module` (default: servers load the module), `functions` (servers
//!   without it: the service finds no module and loads the Functions
//!   library) or `eval` (servers without it, the service started with
//!   `--engine eval`). `make test-rls` runs the suite on each.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use ratelimit_rls::settings::Settings;
use tonic::transport::Channel;

/// The engine the suite runs on: `RATELIMIT_TEST_ENGINE`, `module` by default.
pub fn test_engine() -> &'static str {
    static ENGINE: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    ENGINE.get_or_init(|| match std::env::var("RATELIMIT_TEST_ENGINE").as_deref() {
        Err(_) | Ok("module") => "module",
        Ok("functions") => "functions",
        Ok("eval") => "eval",
        Ok(other) => panic!("RATELIMIT_TEST_ENGINE={other}: expected module, functions or eval"),
    })
}

pub fn module_path() -> PathBuf {
    let path = std::env::var_os("RATELIMIT_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/debug/libredis_ratelimit.so")
        });
    assert!(
        path.exists(),
        "module not found at {}: run `make test-rls` (or `cargo build` at the root first)",
        path.display()
    );
    path
}

/// A free loopback port ≤ 55535 (a cluster bus at port + 10000 fits).
pub fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        if port <= 55_535 {
            return port;
        }
    }
}

/// A running `redis-server --loadmodule …`, killed on drop.
pub struct Redis {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Redis {
    pub fn start() -> Redis {
        Redis::start_with(&[])
    }

    /// With extra `--name value` arguments; with the module unless the
    /// suite runs on another engine ([`test_engine`]).
    pub fn start_with(extra: &[&str]) -> Redis {
        Redis::start_server(test_engine() == "module", extra)
    }

    /// A server without the module, whatever the suite's engine.
    pub fn start_without_module(extra: &[&str]) -> Redis {
        Redis::start_server(false, extra)
    }

    /// A server with the module, whatever the suite's engine.
    pub fn start_with_module(extra: &[&str]) -> Redis {
        Redis::start_server(true, extra)
    }

    /// Stops the server and starts another on the same port, empty (no
    /// persistence), with or without the module: a restart, or a failover
    /// to a server that lacks what the first one had.
    pub fn restart(&mut self, with_module: bool) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir"));
        let next = Redis::spawn_on(with_module, &[], dir, Some(self.port));
        *self = next;
    }

    fn start_server(with_module: bool, extra: &[&str]) -> Redis {
        Redis::spawn_on(
            with_module,
            extra,
            tempfile::tempdir().expect("temp dir"),
            None,
        )
    }

    /// Starts a server in `dir` on `fixed` or a free port (tried 5 times).
    fn spawn_on(
        with_module: bool,
        extra: &[&str],
        dir: tempfile::TempDir,
        fixed: Option<u16>,
    ) -> Redis {
        let module: Vec<std::ffi::OsString> = if with_module {
            vec!["--loadmodule".into(), module_path().into()]
        } else {
            Vec::new()
        };
        for _ in 0..5 {
            let port = fixed.unwrap_or_else(free_port);
            let mut child = Command::new(
                std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into()),
            )
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir.path())
            .args(&module)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // the port was taken: try another
                }
                if let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}")) {
                    if let Ok(mut con) = client.get_connection() {
                        if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                            return Redis { child, port, dir };
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("redis-server did not start");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn query<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut self.connection()).unwrap()
    }

    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The service, in-process, with its configuration in a temp dir.
pub struct Rls {
    pub running: ratelimit_rls::Running,
    pub config_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Rls {
    /// Starts the service with this YAML and these extra flags.
    pub async fn start(redis_url: &str, yaml: &str, flags: &[&str]) -> Rls {
        let dir = tempfile::tempdir().expect("temp dir");
        let config_path = dir.path().join("config.yaml");
        std::fs::write(&config_path, yaml).unwrap();
        let mut args: Vec<String> = vec![
            "ratelimit-rls".into(),
            "--config".into(),
            config_path.display().to_string(),
            "--grpc-addr".into(),
            "127.0.0.1:0".into(),
            "--http-addr".into(),
            "127.0.0.1:0".into(),
            "--redis-url".into(),
            redis_url.into(),
        ];
        if !flags.contains(&"--reload-interval-ms") {
            args.extend(["--reload-interval-ms".into(), "50".into()]);
        }
        // A loaded machine (2 cores, several suites at once) can hold a call
        // past the default 100 ms: the tests of timeouts say theirs.
        if !flags.contains(&"--redis-timeout-ms") {
            args.extend(["--redis-timeout-ms".into(), "2000".into()]);
        }
        if test_engine() == "eval" && !flags.contains(&"--engine") {
            args.extend(["--engine".into(), "eval".into()]);
        }
        args.extend(flags.iter().map(|s| s.to_string()));
        let settings = Settings::parse_from(args);
        let running = ratelimit_rls::start(&settings)
            .await
            .expect("start the service");
        Rls {
            running,
            config_path,
            _dir: dir,
        }
    }

    pub async fn client(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::connect(format!("http://{}", self.running.grpc_addr))
            .await
            .expect("connect")
    }

    /// The engine the service reports in use (`ratelimit_rls_engine` on
    /// `/metrics`), waiting up to 5 s for it to be found.
    pub async fn engine(&self) -> Option<String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let (_, body) = self.http_get("/metrics").await;
            let on: Vec<&str> = body
                .lines()
                .filter_map(|l| {
                    l.strip_prefix("ratelimit_rls_engine{engine=\"")?
                        .strip_suffix("\"} 1")
                })
                .collect();
            assert!(on.len() <= 1, "one engine at a time:\n{body}");
            if let Some(engine) = on.first() {
                return Some(engine.to_string());
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `GET path` on the HTTP port: (status code, body).
    pub async fn http_get(&self, path: &str) -> (u16, String) {
        self.http("GET", path).await
    }

    /// `method path` on the HTTP port, one request on its connection
    /// (`connection: close`: the server keeps connections alive otherwise):
    /// (status code, body).
    pub async fn http(&self, method: &str, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(self.running.http_addr)
            .await
            .unwrap();
        stream
            .write_all(
                format!("{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                    .as_bytes(),
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
}

/// A descriptor from `(key, value)` pairs.
pub fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

/// A descriptor with its own `hits_addend`.
pub fn desc_hits(entries: &[(&str, &str)], hits: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(envoy_types::pb::google::protobuf::UInt64Value { value: hits }),
        ..desc(entries)
    }
}

pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

pub async fn call(
    client: &mut RateLimitServiceClient<Channel>,
    request: RateLimitRequest,
) -> RateLimitResponse {
    client
        .should_rate_limit(request)
        .await
        .expect("ShouldRateLimit")
        .into_inner()
}

pub const OK: i32 = 1;
pub const OVER_LIMIT: i32 = 2;

/// Per status: (code, requests_per_unit or None, remaining).
pub fn statuses(r: &RateLimitResponse) -> Vec<(i32, Option<u32>, u32)> {
    r.statuses
        .iter()
        .map(|s| {
            (
                s.code,
                s.current_limit.as_ref().map(|l| l.requests_per_unit),
                s.limit_remaining,
            )
        })
        .collect()
}

/// Three masters with the module, slots split evenly.
pub fn cluster() -> Vec<Redis> {
    let nodes: Vec<Redis> = (0..3)
        .map(|_| {
            Redis::start_with(&[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "5000",
            ])
        })
        .collect();
    let ranges = [(0, 5460), (5461, 10922), (10923, 16383)];
    for (node, (lo, hi)) in nodes.iter().zip(ranges) {
        let _: () = node.query(&["CLUSTER", "ADDSLOTSRANGE", &lo.to_string(), &hi.to_string()]);
    }
    for node in &nodes[1..] {
        let _: () = nodes[0].query(&["CLUSTER", "MEET", "127.0.0.1", &node.port.to_string()]);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for node in &nodes {
        loop {
            let info: String = node.query(&["CLUSTER", "INFO"]);
            if info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3") {
                break;
            }
            assert!(Instant::now() < deadline, "cluster not ready:\n{info}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    nodes
}
