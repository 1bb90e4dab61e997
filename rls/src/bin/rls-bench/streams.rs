//! Part 3: as many requests in flight as streams (closed loop: each stream
//! sends its next request when its last is answered), and the CPU time per
//! decision of this process (the service and the load generator together),
//! for several requests: one the service answers without Redis (its
//! baseline), one limit, three, and a flood on an exhausted limit with the
//! local over-limit cache off and on. The service runs on a runtime of its
//! own (`ratelimit_rls::runtime`): the CPU time of its threads is the
//! service's, that of the whole process adds this load generator's.

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tonic::transport::Channel;

/// The service's rules for parts 2 and 3.
pub const CONFIG: &str = "domain: bench
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10000000}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 10000000, algorithm: sliding_window}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 10000000, algorithm: gcra}
  - key: flood
    rate_limit: {unit: hour, requests_per_unit: 1}
";

/// Four gRPC connections to the service at `endpoint`.
pub async fn connect(endpoint: &str) -> Vec<RateLimitServiceClient<Channel>> {
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(
            RateLimitServiceClient::connect(endpoint.to_string())
                .await
                .unwrap(),
        );
    }
    clients
}

/// Part 3 at each number of streams: the baseline and one limit `rounds`
/// times each, in turn (their medians compared), then three descriptors and
/// the flood with the cache off and on, once. Whether one limit's service
/// CPU per decision stayed within `max_ratio` times the baseline's (0: not
/// checked).
pub async fn part3(
    all_streams: &[u64],
    seconds: u64,
    rounds: u64,
    max_ratio: f64,
    clients: &[RateLimitServiceClient<Channel>],
    cached_clients: &[RateLimitServiceClient<Channel>],
) -> bool {
    // The flood's limit (1 per hour) exhausted.
    let _ = clients[0]
        .clone()
        .should_rate_limit(Case::Flood.request(0))
        .await;
    println!(
        "\n## The service: streams in flight (closed loop), {seconds} s each (4 gRPC connections, loopback)\n"
    );
    println!(
        "CPU per decision: the service's threads (its runtime), and the whole process (the service \
         and the load generator together); not Redis. Ratios to the request answered without Redis \
         at the same streams; the baseline and one limit: the median of {rounds} runs each, in turn \
         (the range in brackets).\n"
    );
    println!("| streams | request | decisions/s | service CPU µs per decision | ratio | process CPU µs per decision | ratio | p50 | p99 | errors |");
    println!("|---|---|---:|---:|---:|---:|---:|---|---|---|");
    let mut ok = true;
    let mut gate = Vec::new();
    for &streams in all_streams.iter().filter(|&&s| s > 0) {
        let mut base_runs = Vec::new();
        let mut one_runs = Vec::new();
        for _ in 0..rounds.max(1) {
            base_runs.push(run(clients, Case::WithoutRedis, streams, seconds).await);
            one_runs.push(run(clients, Case::OneLimit, streams, seconds).await);
        }
        let base = Figures::median(&mut base_runs);
        let one = Figures::median(&mut one_runs);
        let row = |name: &str, f: &Figures| {
            println!(
                "| {streams} | {name} | {:.0} | {:.1}{} | {:.2} | {:.1} | {:.2} | {:?} | {:?} | {} |",
                f.per_second,
                f.service_us,
                f.range,
                f.service_us / base.service_us,
                f.process_us,
                f.process_us / base.process_us,
                f.p50,
                f.p99,
                f.errors
            );
        };
        row(Case::WithoutRedis.name(), &base);
        row(Case::OneLimit.name(), &one);
        for (case, cache) in [
            (Case::ThreeLimits, false),
            (Case::Flood, false),
            (Case::Flood, true),
        ] {
            let on = if cache { cached_clients } else { clients };
            let f = run(on, case, streams, seconds).await;
            let name = match (case, cache) {
                (Case::Flood, true) => format!("{}, local cache on", case.name()),
                (Case::Flood, false) => format!("{}, cache off", case.name()),
                _ => case.name().to_string(),
            };
            row(&name, &f);
        }
        gate.push((streams, one.service_us / base.service_us));
    }
    // --max-ratio bounds the most streams' ratio only: with few streams the
    // batches of commands are small and the ratio moves with the machine's
    // load (1.67-1.99 at 16 streams on an idle 2-core VM, 2026-11-28).
    let gated = gate.iter().map(|&(s, _)| s).max();
    println!();
    for (streams, ratio) in gate {
        let target = if ratio <= TARGET_RATIO {
            "met"
        } else {
            "not met"
        };
        let bound = if max_ratio > 0.0 && Some(streams) == gated {
            let passed = ratio <= max_ratio;
            ok &= passed;
            format!(
                "; the regression bound {max_ratio}x: {}",
                if passed { "ok" } else { "FAILED" }
            )
        } else {
            String::new()
        };
        println!(
            "one limit at {streams} streams: the service's CPU per decision is {ratio:.2}x that of a request answered without Redis (target at most {TARGET_RATIO}x): {target}{bound}"
        );
    }
    ok
}

/// One request kind (`--only`), once per number of streams.
pub async fn only(
    name: &str,
    all_streams: &[u64],
    seconds: u64,
    clients: &[RateLimitServiceClient<Channel>],
) {
    let case = match name {
        "without-redis" => Case::WithoutRedis,
        "one-limit" => Case::OneLimit,
        "three-limits" => Case::ThreeLimits,
        "flood" => Case::Flood,
        other => panic!("--only {other}: without-redis, one-limit, three-limits or flood"),
    };
    for &streams in all_streams.iter().filter(|&&s| s > 0) {
        let f = run(clients, case, streams, seconds).await;
        println!(
            "{streams} streams, {}: {:.0} decisions/s, service CPU {:.1} µs per decision, process {:.1}",
            case.name(),
            f.per_second,
            f.service_us,
            f.process_us
        );
    }
}

/// Issue 47's target: one limit costs the service at most this times the
/// CPU per decision of a request answered without Redis. Not met at 16
/// streams on the 2-core development VM (see rls/README.md, "The floor, and
/// the gate"), so `make bench-rls` fails only above its `RLS_MAX_RATIO`, at
/// the most streams.
pub const TARGET_RATIO: f64 = 1.3;

/// The requests part 3 sends.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// A descriptor no rule matches: answered without Redis.
    WithoutRedis,
    /// One limit (`user`): one `RL.ALL` of one key.
    OneLimit,
    /// Three limits (`user`, `path`, `tenant`): one `RL.ALL` of three.
    ThreeLimits,
    /// One exhausted limit (`flood`: 1 per hour): every request refused.
    Flood,
}

impl Case {
    pub fn name(self) -> &'static str {
        match self {
            Case::WithoutRedis => "without Redis (no rule matches)",
            Case::OneLimit => "one limit",
            Case::ThreeLimits => "3 descriptors",
            Case::Flood => "flood on an exhausted limit",
        }
    }

    /// The request for user `i` (of 1000).
    pub fn request(self, i: u64) -> RateLimitRequest {
        let entry = |k: &str, v: &str| RateLimitDescriptor {
            entries: vec![Entry {
                key: k.into(),
                value: v.into(),
            }],
            ..Default::default()
        };
        let user = (i % 1000).to_string();
        let descriptors = match self {
            Case::WithoutRedis => vec![entry("none", &user)],
            Case::OneLimit => vec![entry("user", &user)],
            Case::ThreeLimits => vec![
                entry("user", &user),
                entry("path", "/a"),
                entry("tenant", "t"),
            ],
            Case::Flood => vec![entry("flood", "x")],
        };
        RateLimitRequest {
            domain: "bench".into(),
            descriptors,
            hits_addend: 0,
        }
    }
}

/// One run's figures (or the median run of several).
pub struct Figures {
    pub per_second: f64,
    /// The service's threads' CPU time per decision.
    pub service_us: f64,
    /// The whole process's CPU time per decision.
    pub process_us: f64,
    pub p50: Duration,
    pub p99: Duration,
    pub errors: usize,
    /// The service's CPU per decision over the runs, `" (a–b)"`, when several.
    pub range: String,
}

impl Figures {
    /// The run of median service CPU per decision, with the runs' range.
    fn median(runs: &mut [Figures]) -> Figures {
        runs.sort_by(|a, b| a.service_us.total_cmp(&b.service_us));
        let (low, high) = (runs[0].service_us, runs[runs.len() - 1].service_us);
        let m = &runs[runs.len() / 2];
        Figures {
            range: if runs.len() > 1 {
                format!(" ({low:.1}–{high:.1})")
            } else {
                String::new()
            },
            errors: runs.iter().map(|r| r.errors).sum(),
            per_second: m.per_second,
            service_us: m.service_us,
            process_us: m.process_us,
            p50: m.p50,
            p99: m.p99,
        }
    }
}

/// `streams` requests of `case` in flight over `clients` for `seconds`.
pub async fn run(
    clients: &[RateLimitServiceClient<Channel>],
    case: Case,
    streams: u64,
    seconds: u64,
) -> Figures {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let cpu_before = process_cpu_s();
    let service_before = service_cpu_s();
    let mut tasks = Vec::new();
    for s in 0..streams {
        let mut client = clients[(s % clients.len() as u64) as usize].clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut errors = 0usize;
            let mut i = s;
            while Instant::now() < deadline {
                let request = case.request(i);
                let sent = Instant::now();
                errors += usize::from(client.should_rate_limit(request).await.is_err());
                latencies.push(sent.elapsed());
                i += streams;
            }
            (latencies, errors)
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.unwrap();
        latencies.extend(l);
        errors += e;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let decisions = latencies.len().max(1) as f64;
    let process_us = (process_cpu_s() - cpu_before) * 1e6 / decisions;
    let service_us = (service_cpu_s() - service_before) * 1e6 / decisions;
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    Figures {
        per_second: latencies.len() as f64 / elapsed,
        service_us,
        process_us,
        p50: pct(0.5),
        p99: pct(0.99),
        errors,
        range: String::new(),
    }
}

/// This process's CPU time (user + system), in seconds (`/proc/self/stat`).
pub fn process_cpu_s() -> f64 {
    stat_cpu_s(&std::fs::read_to_string("/proc/self/stat").unwrap_or_default())
}

/// The CPU time of the service's threads (named
/// [`ratelimit_rls::runtime::THREAD_NAME`]), in seconds.
pub fn service_cpu_s() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    tasks
        .filter_map(|t| t.ok())
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|c| c.trim_end() == ratelimit_rls::runtime::THREAD_NAME)
        })
        .map(|t| stat_cpu_s(&std::fs::read_to_string(t.path().join("stat")).unwrap_or_default()))
        .sum()
}

/// utime + stime of a `stat` line, in seconds.
fn stat_cpu_s(stat: &str) -> f64 {
    // After the command name's closing parenthesis: fields 3…; utime and
    // stime are fields 14 and 15, in clock ticks (100 per second on Linux).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}
