//! Part 3: as many requests in flight as streams (closed loop: each stream
//! sends its next request when its last is answered), and the CPU time per
//! decision of this process (the service and the load generator together),
//! for several requests: one the service answers without Redis (its
//! baseline), one limit, three, and a flood on an exhausted limit with the
//! local over-limit cache off and on.

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tonic::transport::Channel;

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

/// One run's figures.
pub struct Figures {
    pub per_second: f64,
    pub cpu_us: f64,
    pub p50: Duration,
    pub p99: Duration,
    pub errors: usize,
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
    let cpu_us = (process_cpu_s() - cpu_before) * 1e6 / latencies.len().max(1) as f64;
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    Figures {
        per_second: latencies.len() as f64 / elapsed,
        cpu_us,
        p50: pct(0.5),
        p99: pct(0.99),
        errors,
    }
}

/// This process's CPU time (user + system), in seconds (`/proc/self/stat`).
pub fn process_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
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
