//! Issue 47: the local over-limit cache against a real server, on each
//! engine: a flood on an exhausted limit reaches Redis once per retry
//! period, and a 2-per-second limit admits again as soon as its retry is
//! over.

mod common;

use std::time::{Duration, Instant};

use common::*;

const CONFIG: &str = "domain: d
descriptors:
  - key: hour
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: second
    rate_limit: {unit: second, requests_per_unit: 2}
";

const CACHE: [&str; 2] = ["--local-cache-size-in-bytes", "1000000"];

/// The decisions the server was asked for: `RL.ALL`, `FCALL` or `EVALSHA`
/// / `EVAL` calls (not the commands a script runs inside).
fn commands(redis: &Redis) -> u64 {
    let info: String = redis.query(&["INFO", "commandstats"]);
    let entry = ["rl.all", "fcall", "evalsha", "eval"];
    info.lines()
        .filter(|l| {
            l.strip_prefix("cmdstat_")
                .and_then(|l| l.split(':').next())
                .is_some_and(|c| entry.contains(&c))
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

fn remaining_ms(r: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse) -> u64 {
    let d = r.statuses[0].duration_until_reset.as_ref().unwrap();
    (d.seconds * 1000 + i64::from(d.nanos) / 1_000_000) as u64
}

#[tokio::test]
async fn a_flood_on_an_exhausted_limit_reaches_redis_once_per_retry_period() {
    let redis = Redis::start();
    for (flags, cached) in [(&[][..], false), (&CACHE[..], true)] {
        let rls = Rls::start(&redis.url(), CONFIG, flags).await;
        assert!(rls.engine().await.is_some());
        let mut client = rls.client().await;
        let user = format!("u{cached}");
        let req = || request("d", vec![desc(&[("hour", &user)])]);
        for _ in 0..10 {
            assert_eq!(call(&mut client, req()).await.overall_code, OK);
        }
        let before = commands(&redis);
        // The first refusal, then the flood from 16 streams.
        let first = call(&mut client, req()).await;
        assert_eq!(first.overall_code, OVER_LIMIT);
        let flood = if cached { 1_999 } else { 199 };
        let tasks: Vec<_> = (0..16)
            .map(|s| {
                let mut client = client.clone();
                let req = req();
                tokio::spawn(async move {
                    for _ in (s..flood).step_by(16) {
                        let r = call(&mut client, req.clone()).await;
                        assert_eq!(r.overall_code, OVER_LIMIT);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let calls = commands(&redis) - before;
        if !cached {
            assert_eq!(calls, 200, "without the cache, every request");
            continue;
        }
        // The hour's window may end during the flood: one more period.
        let most = if remaining_ms(&first) > 10_000 { 1 } else { 2 };
        assert!(calls <= most, "{calls} calls for 2,000 requests");
        let m = &rls.running.shared.metrics;
        assert_eq!(
            m.value("ratelimit_service_over_limit_with_local_cache", &[]),
            2_000 - calls
        );
        let stat = m.rule(&format!("d.hour_{user}"));
        assert_eq!(stat.over_limit_with_local_cache, 0, "a static rule: d.hour");
        assert_eq!(m.rule("d.hour").over_limit_with_local_cache, 2_000 - calls);
    }
}

#[tokio::test]
async fn a_2_per_second_limit_admits_again_as_soon_as_its_retry_is_over() {
    let redis = Redis::start();
    let rls = Rls::start(&redis.url(), CONFIG, &CACHE).await;
    let mut client = rls.client().await;
    let req = || request("d", vec![desc(&[("second", "s")])]);
    for round in 0..3 {
        // Until refused (a window may begin between the first calls).
        let (sent, refusal) = loop {
            let sent = Instant::now();
            let r = call(&mut client, req()).await;
            if r.overall_code == OVER_LIMIT {
                break (sent, r);
            }
        };
        let retry = Duration::from_millis(remaining_ms(&refusal));
        assert!(retry <= Duration::from_secs(1), "{retry:?}");
        let admitted = loop {
            let r = call(&mut client, req()).await;
            if r.overall_code == OK {
                break Instant::now();
            }
            assert!(
                sent.elapsed() < Duration::from_secs(3),
                "never admitted again"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        let after = admitted.duration_since(sent);
        assert!(
            after <= retry + Duration::from_millis(150),
            "round {round}: admitted {after:?} after a refusal of {retry:?}"
        );
    }
    let m = &rls.running.shared.metrics;
    assert!(m.value("ratelimit_service_over_limit_with_local_cache", &[]) > 0);
}
