//! Issue 41: more descriptors than one `RL.ALL` takes (64 keys) are decided,
//! never an error a client can provoke: with one of them exhausted, the
//! request is `OVER_LIMIT` under every failure mode, and the others keep
//! every hit (the calls that took are refunded).

mod common;

use common::*;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::Channel;

/// Five 10-per-hour rules, one per algorithm (the pads cycle through them),
/// and `full`, exhausted first.
const CONFIG: &str = "domain: d
descriptors:
  - key: full
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: fw
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: sw
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: sliding_window}
  - key: sl
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: sliding_log}
  - key: tb
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: token_bucket}
  - key: gcra
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: gcra}
";

const PADS: [&str; 5] = ["fw", "sw", "sl", "tb", "gcra"];

/// The service with `config` under failure mode `mode`, and a client, once
/// its 10-per-hour `full` rule is exhausted for the value `mode`. Requests
/// of a thousand descriptors are 16 calls and the service's own work: tens
/// of ms in a debug build on a loaded machine, so the timeout (2 s) is not
/// what these tests are about.
async fn exhausted(
    redis: &Redis,
    config: &str,
    mode: &str,
) -> (Rls, RateLimitServiceClient<Channel>) {
    let rls = Rls::start(
        &redis.url(),
        config,
        &["--failure-mode", mode, "--redis-timeout-ms", "2000"],
    )
    .await;
    let mut client = rls.client().await;
    for _ in 0..10 {
        let r = call(&mut client, request("d", vec![desc(&[("full", mode)])])).await;
        assert_eq!(r.overall_code, OK, "{mode}");
    }
    (rls, client)
}

/// Every request was decided: none answered by the failure mode, no Redis
/// error counted.
fn assert_no_redis_errors(rls: &Rls, mode: &str) {
    let m = &rls.running.shared.metrics;
    assert_eq!(m.value("ratelimit_rls_failure_mode_answers", &[]), 0);
    assert_eq!(
        m.value(
            "ratelimit_service_should_rate_limit_error",
            &[("err_type", "redis_error")]
        ),
        0,
        "{mode}"
    );
}

#[tokio::test]
async fn more_than_64_descriptors_with_one_exhausted_are_over_limit_and_take_nothing() {
    let redis = Redis::start();
    for mode in ["unavailable", "open", "closed"] {
        let (rls, mut client) = exhausted(&redis, CONFIG, mode).await;
        let full = mode.to_string();
        // The exhausted one last (alone in the second call), first, in the middle.
        for (n, at) in [(65usize, 64usize), (100, 0), (1000, 500)] {
            let pad = |i: usize| (PADS[i % PADS.len()], format!("{mode}-{n}-{i}"));
            let descriptors = |hits: Option<u64>| -> Vec<_> {
                (0..n)
                    .map(|i| {
                        let (key, value) = if i == at {
                            ("full", full.clone())
                        } else {
                            let (k, v) = pad(i);
                            (k, v)
                        };
                        match hits {
                            Some(h) if i != at => desc_hits(&[(key, &value)], h),
                            _ => desc(&[(key, &value)]),
                        }
                    })
                    .collect()
            };
            for round in 0..3 {
                let r = client
                    .should_rate_limit(request("d", descriptors(None)))
                    .await
                    .unwrap_or_else(|e| panic!("{mode} {n} {round}: {e:?}"))
                    .into_inner();
                assert_eq!(r.overall_code, OVER_LIMIT, "{mode} {n} {round}");
                let mut expected = vec![(OK, Some(10), 10); n];
                expected[at] = (OVER_LIMIT, Some(10), 0);
                assert_eq!(statuses(&r), expected, "{mode} {n} {round}");
            }
            // Every pad kept its ten: all ten taken at once are admitted.
            let mut all = descriptors(Some(10));
            all.remove(at);
            let r = call(&mut client, request("d", all)).await;
            assert_eq!(r.overall_code, OK, "{mode} {n}: a pad was charged");
            assert!(
                statuses(&r).iter().all(|&s| s == (OK, Some(10), 0)),
                "{mode} {n}"
            );
        }
        assert_no_redis_errors(&rls, mode);
    }
}

/// A 10-per-hour rule exhausted first, and sliding logs of 1,000 per hour:
/// four of them in one `RL.ALL` would touch 4 × (1,000 + 1) entries, more
/// than one call's `sliding-log-call-budget` (4,000, the module's default
/// and the library's), which the server refuses with an error.
const LOGS: &str = "domain: d
descriptors:
  - key: full
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: sl
    rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: sliding_log}
";

/// Ten sliding logs of 1,000 (the most a log's limit can be at the server's
/// defaults) in one request: decided in calls that each fit the sliding-log
/// budget, never the server's "may touch … entries" error; with one limit
/// exhausted the request is `OVER_LIMIT` under every failure mode and no
/// log keeps a hit.
#[tokio::test]
async fn sliding_logs_past_one_calls_budget_are_decided_not_an_error() {
    let redis = Redis::start();
    for mode in ["unavailable", "open", "closed"] {
        let (rls, mut client) = exhausted(&redis, LOGS, mode).await;
        let full = mode.to_string();
        let logs: Vec<String> = (0..10).map(|i| format!("{mode}-{i}")).collect();
        let mut descriptors: Vec<_> = logs.iter().map(|v| desc(&[("sl", v)])).collect();
        descriptors.insert(5, desc(&[("full", &full)]));
        for round in 0..2 {
            let r = client
                .should_rate_limit(request("d", descriptors.clone()))
                .await
                .unwrap_or_else(|e| panic!("{mode} {round}: {e:?}"))
                .into_inner();
            assert_eq!(r.overall_code, OVER_LIMIT, "{mode} {round}");
            let mut expected = vec![(OK, Some(1000), 1000); 11];
            expected[5] = (OVER_LIMIT, Some(10), 0);
            assert_eq!(statuses(&r), expected, "{mode} {round}");
        }
        // Without the exhausted limit: admitted, one hit in each log.
        descriptors.remove(5);
        let r = call(&mut client, request("d", descriptors)).await;
        assert_eq!(r.overall_code, OK, "{mode}");
        assert_eq!(statuses(&r), vec![(OK, Some(1000), 999); 10], "{mode}");
        assert_no_redis_errors(&rls, mode);
    }
}

/// Sliding logs of 100 per hour.
const SMALL_LOGS: &str = "domain: d
descriptors:
  - key: full
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: sl
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: sliding_log}
  - key: big
    rate_limit: {unit: hour, requests_per_unit: 200, algorithm: sliding_log}
";

/// A server whose `sliding-log-call-budget` was set below the default the
/// service plans by (4,000): ten logs of 100 fit one call by the service's
/// count (1,010 entries) but not the server's 300. The calls the server
/// refuses so are decided again, limit by limit (nothing was written),
/// never answered by the failure mode: with one limit exhausted the
/// request is `OVER_LIMIT` under every failure mode and no log keeps a hit.
/// A log that alone passes the server's budget (200 + 150 hits > 300) is
/// over its limit, as a hit count above any limit is: the request is
/// `OVER_LIMIT`, nothing taken, never the failure mode's answer.
/// (The module only: the library's budget is fixed at 4,000.)
#[tokio::test]
async fn a_server_budget_below_the_default_is_decided_not_an_error() {
    if test_engine() != "module" {
        return; // the library's budget is fixed: nothing to set lower
    }
    let redis = Redis::start_with_module(&[]);
    let _: String = redis.query(&["CONFIG", "SET", "ratelimit.sliding-log-call-budget", "300"]);
    for mode in ["unavailable", "open", "closed"] {
        let (rls, mut client) = exhausted(&redis, SMALL_LOGS, mode).await;
        let full = mode.to_string();
        let logs: Vec<String> = (0..10).map(|i| format!("{mode}-{i}")).collect();
        let mut descriptors: Vec<_> = logs.iter().map(|v| desc(&[("sl", v)])).collect();
        descriptors.insert(5, desc(&[("full", &full)]));
        let r = client
            .should_rate_limit(request("d", descriptors.clone()))
            .await
            .unwrap_or_else(|e| panic!("{mode}: {e:?}"))
            .into_inner();
        assert_eq!(r.overall_code, OVER_LIMIT, "{mode}");
        let mut expected = vec![(OK, Some(100), 100); 11];
        expected[5] = (OVER_LIMIT, Some(10), 0);
        assert_eq!(statuses(&r), expected, "{mode}");
        // Without the exhausted limit: admitted, one hit in each log.
        descriptors.remove(5);
        let r = call(&mut client, request("d", descriptors)).await;
        assert_eq!(r.overall_code, OK, "{mode}");
        assert_eq!(statuses(&r), vec![(OK, Some(100), 99); 10], "{mode}");
        // One log of 200 taking 150: past the server's budget alone.
        let big = [desc_hits(&[("big", &full)], 150), desc(&[("sl", &logs[0])])];
        let r = call(&mut client, request("d", big.to_vec())).await;
        assert_eq!(r.overall_code, OVER_LIMIT, "{mode}");
        assert_eq!(
            statuses(&r),
            vec![(OVER_LIMIT, Some(200), 0), (OK, Some(100), 99)],
            "{mode}"
        );
        // Nothing was taken: 50 hits fit the budget and the limit.
        let r = call(
            &mut client,
            request("d", vec![desc_hits(&[("big", &full)], 50)]),
        )
        .await;
        assert_eq!(r.overall_code, OK, "{mode}");
        assert_eq!(statuses(&r), vec![(OK, Some(200), 150)], "{mode}");
        assert_no_redis_errors(&rls, mode);
    }
}
