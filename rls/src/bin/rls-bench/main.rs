//! `make bench-rls`: what one decision costs.
//!
//! 1. Redis server cost per decision for 1, 3 and 5 descriptors: ours (one
//!    `RL.ALL … WITHLIMITS`) against envoyproxy/ratelimit's pattern (a
//!    pipeline of `INCRBY key n` + `EXPIRE key unit` per descriptor), on the
//!    same server: the commands' own time (`INFO commandstats` usec) and the
//!    server's whole CPU time (`INFO cpu`, which also counts reading,
//!    parsing and replying).
//! 2. The service (in-process, on loopback) under a load generator at a
//!    fixed rate: decisions/s achieved and latency percentiles, measured
//!    from each request's scheduled start (no coordinated omission).
//! 3. The service at 16 and 64 requests in flight, CPU per decision, for a
//!    request answered without Redis, one limit, three, and a flood on an
//!    exhausted limit with the local over-limit cache off and on
//!    ([`streams`]).

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use redis::aio::MultiplexedConnection;
use streams::Case;
use tonic::transport::Channel;

mod streams;

#[derive(Parser)]
struct Args {
    /// A redis-server with the module (it is flushed).
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// Decisions per measurement of part 1; 0 skips it.
    #[arg(long, default_value_t = 20_000)]
    decisions: u64,
    /// Concurrent connections of part 1.
    #[arg(long, default_value_t = 8)]
    connections: u64,
    /// The load generator's rate, requests/s (part 2); 0 skips it.
    #[arg(long, default_value_t = 2_000)]
    rate: u64,
    /// The load generator's duration, s.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Part 3: these numbers of requests in flight at once (closed loop:
    /// each stream sends its next request when its last one is answered),
    /// over 4 gRPC connections, for `--seconds` each; 0 skips it.
    #[arg(long, value_delimiter = ',', default_value = "16,64")]
    streams: Vec<u64>,
    /// Part 3: runs of the without-Redis baseline and of one limit, in
    /// turn, at each number of streams; their medians are compared.
    #[arg(long, default_value_t = 3)]
    rounds: u64,
    /// Part 3 runs only this request (`without-redis`, `one-limit`,
    /// `three-limits`, `flood`), once per number of streams: for profiling
    /// (`perf record -t <a service thread>`, `strace -c`).
    #[arg(long)]
    only: Option<String>,
    /// Part 3 fails (exit status 1) when one limit's CPU per decision in
    /// the service, at the most streams, is more than this times the
    /// baseline's; 0: no check.
    #[arg(long, default_value_t = 0.0)]
    max_ratio: f64,
    /// The server runs under `valgrind --tool=callgrind` with this pid:
    /// part 1 counts the whole server's instructions per decision (reading,
    /// parsing, executing, replying), and part 2 is skipped.
    #[arg(long)]
    callgrind_pid: Option<u32>,
    /// The directory of that server's `callgrind.out.<pid>*` dumps.
    #[arg(long, default_value = ".")]
    callgrind_dir: std::path::PathBuf,
}

/// The whole server's instructions since the last zeroing (`callgrind_control -d`).
fn callgrind_total(pid: u32, dir: &std::path::Path) -> f64 {
    let status = std::process::Command::new("callgrind_control")
        .arg("-d")
        .arg(pid.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "callgrind_control -d");
    let prefix = format!("callgrind.out.{pid}");
    let newest = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .expect("a callgrind dump");
    let text = std::fs::read_to_string(newest.path()).unwrap();
    text.lines()
        .find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("totals in the dump")
}

fn callgrind_zero(pid: u32) {
    let status = std::process::Command::new("callgrind_control")
        .arg("-z")
        .arg(pid.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "callgrind_control -z");
}

fn info_field(info: &str, section_line: &str, field: &str) -> f64 {
    info.lines()
        .find(|l| l.split(':').next() == Some(section_line))
        .and_then(|l| {
            l.split([':', ','])
                .find_map(|kv| kv.strip_prefix(&format!("{field}=")))
                .or_else(|| l.strip_prefix(&format!("{section_line}:")))
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

async fn info(con: &mut MultiplexedConnection, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query_async(con)
        .await
        .unwrap()
}

/// (commands' usec, server CPU s, or under callgrind the whole server's
/// instructions) spent by `run`.
async fn measure<F, Fut>(
    con: &mut MultiplexedConnection,
    commands: &[&str],
    callgrind: Option<(u32, &std::path::Path)>,
    run: F,
) -> (f64, f64)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(con)
        .await
        .unwrap();
    let cpu = |i: &str| info_field(i, "used_cpu_user", "") + info_field(i, "used_cpu_sys", "");
    if let Some((pid, _)) = callgrind {
        callgrind_zero(pid);
    }
    let before = cpu(&info(con, "cpu").await);
    run().await;
    let after = cpu(&info(con, "cpu").await);
    let spent = match callgrind {
        Some((pid, dir)) => callgrind_total(pid, dir),
        None => after - before,
    };
    let stats = info(con, "commandstats").await;
    let usec: f64 = commands
        .iter()
        .map(|c| info_field(&stats, &format!("cmdstat_{c}"), "usec"))
        .sum();
    (usec, spent)
}

/// Runs `per_connection` decisions on each of `connections` connections.
async fn drive<F>(client: &redis::Client, connections: u64, per_connection: u64, make: F)
where
    F: Fn(u64) -> redis::Pipeline + Send + Sync + 'static,
{
    let make = Arc::new(make);
    let mut tasks = Vec::new();
    for c in 0..connections {
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let make = make.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per_connection {
                let p = make(c * per_connection + i);
                let _: redis::Value = p.query_async(&mut con).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let client = redis::Client::open(args.redis_url.as_str()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    if args.decisions > 0 {
        redis_cost(&args, &client, &mut con).await;
    }
    if args.callgrind_pid.is_some() {
        return std::process::ExitCode::SUCCESS;
    }
    let _: () = redis::cmd("FLUSHALL").query_async(&mut con).await.unwrap();
    // The service on a runtime of its own, as `ratelimit-rls` builds it: the
    // CPU time of its threads is the service's, apart from this load
    // generator's.
    let service_runtime = ratelimit_rls::runtime::build().unwrap();
    let dir = std::env::temp_dir().join(format!("rls-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.yaml");
    std::fs::write(&config, streams::CONFIG).unwrap();
    let flags: Vec<String> = [
        "ratelimit-rls",
        "--config",
        config.to_str().unwrap(),
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--redis-url",
        &args.redis_url,
        "--hash-tag-keys",
        "user",
        "--redis-timeout-ms",
        "1000",
    ]
    .map(String::from)
    .into();
    let start = |extra: &[&str]| {
        let settings = ratelimit_rls::settings::Settings::parse_from(
            flags
                .iter()
                .map(String::as_str)
                .chain(extra.iter().copied()),
        );
        service_runtime.spawn(async move { ratelimit_rls::start(&settings).await.unwrap() })
    };
    let running = start(&[]).await.unwrap();
    let clients = streams::connect(&format!("http://{}", running.grpc_addr)).await;
    if args.rate > 0 {
        fixed_rate(&args, &running, &clients).await;
    }
    let mut ok = true;
    if args.streams.iter().any(|&s| s > 0) {
        let cached = start(&["--local-cache-size-in-bytes", "10000000"])
            .await
            .unwrap();
        let cached_clients = streams::connect(&format!("http://{}", cached.grpc_addr)).await;
        ok = match args.only.as_deref() {
            Some(only) => {
                streams::only(only, &args.streams, args.seconds, &clients).await;
                true
            }
            None => {
                streams::part3(
                    &args.streams,
                    args.seconds,
                    args.rounds,
                    args.max_ratio,
                    &clients,
                    &cached_clients,
                )
                .await
            }
        };
        drop(cached);
    }
    drop(running);
    service_runtime.shutdown_background();
    let _ = std::fs::remove_dir_all(&dir);
    if ok {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}

/// Part 1: the Redis server's cost per decision, ours against envoy's.
async fn redis_cost(args: &Args, client: &redis::Client, con: &mut MultiplexedConnection) {
    let per_connection = args.decisions / args.connections;
    let n = (per_connection * args.connections) as f64;
    let callgrind = args
        .callgrind_pid
        .map(|pid| (pid, args.callgrind_dir.as_path()));
    let whole = if callgrind.is_some() {
        "server instructions"
    } else {
        "server CPU µs"
    };
    println!(
        "## Redis server cost per decision ({n} decisions, {} connections, 1000 users{})\n",
        args.connections,
        if callgrind.is_some() {
            ", under callgrind"
        } else {
            ""
        }
    );
    println!("| descriptors | RL.ALL usec | INCRBY+EXPIRE usec | ratio | RL.ALL {whole} | INCRBY+EXPIRE {whole} | ratio | RL.ALL without WITHLIMITS {whole} | ratio |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for k in [1u64, 3, 5] {
        // As the service sends it (WITHLIMITS for k > 1), and without WITHLIMITS.
        let mut ours = (0.0, 0.0);
        let mut plain = (0.0, 0.0);
        for with_limits in [true, false] {
            let _: () = redis::cmd("FLUSHALL").query_async(con).await.unwrap();
            let spent = measure(con, &["rl.all"], callgrind, || {
                drive(client, args.connections, per_connection, move |i| {
                    let user = i % 1000;
                    let mut cmd = redis::cmd("RL.ALL");
                    cmd.arg(k);
                    for d in 0..k {
                        cmd.arg(format!("rls:{{user={user}}}:bench_user_{user}_d_{d}_fw60"));
                    }
                    for _ in 0..k {
                        cmd.arg("FIXEDWINDOW").arg(1_000_000_000).arg(60);
                    }
                    if with_limits && k > 1 {
                        cmd.arg("WITHLIMITS");
                    }
                    let mut p = redis::pipe();
                    p.add_command(cmd);
                    p
                })
            })
            .await;
            if with_limits {
                ours = spent;
            } else {
                plain = spent;
            }
        }
        let _: () = redis::cmd("FLUSHALL").query_async(con).await.unwrap();
        let envoy = measure(con, &["incrby", "expire"], callgrind, || {
            drive(client, args.connections, per_connection, move |i| {
                let user = i % 1000;
                let mut p = redis::pipe();
                for d in 0..k {
                    let key = format!("bench_user_{user}_d_{d}_1700000000");
                    p.cmd("INCRBY").arg(&key).arg(1);
                    p.cmd("EXPIRE").arg(&key).arg(60);
                }
                p
            })
        })
        .await;
        let scale = if callgrind.is_some() { 1.0 } else { 1e6 };
        println!(
            "| {k} | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} | {:.2} | {:.0} | {:.2} |",
            ours.0 / n,
            envoy.0 / n,
            ours.0 / envoy.0,
            ours.1 * scale / n,
            envoy.1 * scale / n,
            ours.1 / envoy.1,
            plain.1 * scale / n,
            plain.1 / envoy.1
        );
    }
}

/// Part 2: the service under a fixed rate, 3 descriptors per request.
async fn fixed_rate(
    args: &Args,
    running: &ratelimit_rls::Running,
    clients: &[RateLimitServiceClient<Channel>],
) {
    let total = args.rate * args.seconds;
    let interval = Duration::from_nanos(1_000_000_000 / args.rate.max(1));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(total as usize);
    for i in 0..total {
        let due = started + interval * i as u32;
        tokio::time::sleep_until(due.into()).await;
        let mut client = clients[(i % 4) as usize].clone();
        tasks.push(tokio::spawn(async move {
            let request = Case::ThreeLimits.request(i);
            let ok = client.should_rate_limit(request).await.is_ok();
            (due.elapsed(), ok)
        }));
    }
    let mut latencies = Vec::with_capacity(tasks.len());
    let mut errors = 0;
    for t in tasks {
        let (latency, ok) = t.await.unwrap();
        latencies.push(latency);
        errors += usize::from(!ok);
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort();
    let failures_before = failures(running);
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    println!(
        "\n## The service: 3 descriptors per request, {} requests/s offered for {} s (4 gRPC connections, loopback)\n",
        args.rate, args.seconds
    );
    println!("| decisions/s | p50 | p99 | p99.9 | max | errors | Redis failures |");
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {:.0} | {:?} | {:?} | {:?} | {:?} | {} | {} |",
        latencies.len() as f64 / elapsed,
        pct(0.5),
        pct(0.99),
        pct(0.999),
        latencies.last().copied().unwrap_or_default(),
        errors,
        failures_before
    );
}

/// The service's Redis failures so far.
fn failures(running: &ratelimit_rls::Running) -> u64 {
    running.shared.metrics.value(
        "ratelimit_service_should_rate_limit_error",
        &[("err_type", "redis_error")],
    )
}
