//! The decision without Redis: matching, grouping, statuses, headers and
//! statistics against [`Mock`], an in-memory `RL.ALL` (counters that a call
//! takes from all or none), as envoy's service tests against mocks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

use super::Shared;
use crate::backend::{BackendError, LimitReply, Limiter, Limits, Op, MAX_TOKENS};
use crate::config::Config;
use crate::settings::Settings;

/// An in-memory `RL.ALL`: per key the hits taken, a limit from its
/// arguments (`GCRA`'s is `max_burst + 1`); optionally failing, slow, or a
/// cluster. Counts the calls in flight at once.
#[derive(Default)]
struct Mock {
    taken: Mutex<HashMap<String, u64>>,
    calls: Mutex<Vec<(Vec<String>, Op, u16)>>,
    fail: bool,
    cluster: bool,
    delay: Duration,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
}

#[tonic::async_trait]
impl Limiter for Mock {
    async fn rl_all(
        &self,
        limits: &Limits<'_>,
        op: Op,
        slot: u16,
    ) -> Result<(bool, Vec<LimitReply>), BackendError> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let keys: Vec<String> = limits.iter().map(|(k, _)| k.to_string()).collect();
        self.calls.lock().unwrap().push((keys, op, slot));
        if self.fail {
            return Err(BackendError::Reply("connection refused".into()));
        }
        // The module's (and the library's) bound on one call's keys.
        if limits.is_empty() || limits.len() > 64 {
            return Err(BackendError::Reply(
                "ERR numkeys must be >= 1 and <= 64".into(),
            ));
        }
        // The module refuses TOKENS it cannot parse (> 2^63 - 1).
        if matches!(op, Op::Take(n) | Op::Refund(n) if n > MAX_TOKENS) {
            return Err(BackendError::Reply(
                "ERR TOKENS is not an integer or out of range".into(),
            ));
        }
        let mut taken = self.taken.lock().unwrap();
        let limit_of = |args: &[String]| -> u64 {
            let n: u64 = args[1].parse().unwrap();
            if args[0] == "GCRA" {
                n + 1
            } else {
                n
            }
        };
        let need = match op {
            Op::Take(n) => n,
            Op::Peek => 1,
            Op::Refund(_) => 0,
        };
        let refused = limits
            .iter()
            .any(|(k, a)| taken.get(*k).copied().unwrap_or(0).saturating_add(need) > limit_of(a));
        let mut each = Vec::new();
        for (k, a) in limits {
            let limit = limit_of(a);
            let t = taken.entry(k.to_string()).or_default();
            let limited = t.saturating_add(need) > limit;
            match op {
                Op::Take(n) if !refused => *t += n,
                Op::Refund(n) => *t = t.saturating_sub(n),
                _ => {}
            }
            let shown = if matches!(op, Op::Peek) && !limited {
                *t + 1
            } else {
                *t
            };
            each.push(LimitReply {
                limited,
                limit: limit as i64,
                remaining: limit.saturating_sub(shown) as i64,
                retry_after_ms: if limited { 1_000 } else { -1 },
                reset_after_ms: 60_000,
            });
        }
        Ok((refused, each))
    }

    async fn ping(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn is_cluster(&self) -> bool {
        self.cluster
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(5)
    }
}

const CONFIG: &str = "domain: d
descriptors:
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
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3}
";

fn shared_with(mock: Mock, flags: &[&str]) -> (Shared, Arc<Mock>) {
    let mut args = vec![
        "ratelimit-rls",
        "--config",
        "unused.yaml",
        "--response-headers",
    ];
    args.extend(flags);
    let settings = Settings::parse_from(args);
    let config = Config::from_yaml(&[("t.yaml".into(), CONFIG.into())]).unwrap();
    let mock = Arc::new(mock);
    (Shared::new(&settings, config, mock.clone()), mock)
}

fn desc(key: &str, value: &str, hits: Option<u64>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: key.into(),
            value: value.into(),
        }],
        hits_addend: hits.map(|value| envoy_types::pb::google::protobuf::UInt64Value { value }),
        ..Default::default()
    }
}

fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

const OK: i32 = 1;
const OVER_LIMIT: i32 = 2;

/// (code, remaining) per status.
fn codes(r: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse) -> Vec<(i32, u32)> {
    r.statuses
        .iter()
        .map(|s| (s.code, s.limit_remaining))
        .collect()
}

/// Issue 29: a hit count the module cannot take (≥ 2^63) is over the limit
/// on every algorithm, counted in over_limit, never a Redis error; with
/// other descriptors, they take nothing.
#[tokio::test]
async fn a_huge_hits_addend_is_over_the_limit_never_an_error() {
    for key in ["fw", "sw", "sl", "tb", "gcra"] {
        for hits in [i64::MAX as u64, 1 << 63, u64::MAX] {
            let (shared, mock) = shared_with(Mock::default(), &[]);
            let r = shared
                .should_rate_limit(&request("d", vec![desc(key, "x", Some(hits))]))
                .await
                .unwrap();
            assert_eq!(
                (r.overall_code, codes(&r)),
                (OVER_LIMIT, vec![(OVER_LIMIT, 10)]),
                "{key} {hits}"
            );
            let stat = shared.metrics.rule(&format!("d.{key}"));
            assert_eq!(
                (stat.over_limit, stat.total_hits),
                (hits, hits),
                "{key} {hits}"
            );
            let m = &shared.metrics;
            let redis_errors = m.value(
                "ratelimit_service_should_rate_limit_error",
                &[("err_type", "redis_error")],
            );
            assert_eq!(redis_errors, 0, "{key} {hits}");
            // With another descriptor (another call): it is given back.
            let r = shared
                .should_rate_limit(&request(
                    "d",
                    vec![desc("user", "u", Some(1)), desc(key, "y", Some(hits))],
                ))
                .await
                .unwrap();
            assert_eq!(r.overall_code, OVER_LIMIT);
            assert_eq!(codes(&r), vec![(OK, 3), (OVER_LIMIT, 10)], "{key} {hits}");
            assert_eq!(mock.taken.lock().unwrap().values().sum::<u64>(), 0);
        }
    }
}

/// Issue 34: three slots, three calls, all in flight at once (one round
/// trip); a refusal in one refunds the others (all or nothing kept).
#[tokio::test]
async fn slot_groups_are_sent_at_once_and_refunded_together() {
    let (shared, mock) = shared_with(
        Mock {
            cluster: true,
            delay: Duration::from_millis(20),
            ..Default::default()
        },
        &[],
    );
    let three = || {
        request(
            "d",
            vec![
                desc("fw", "a", None),
                desc("sw", "b", None),
                desc("user", "c", None),
            ],
        )
    };
    let slots: std::collections::HashSet<u16> = [
        "rls:d_fw_a_fw3600",
        "rls:d_sw_b_sw3600",
        "rls:d_user_c_fw3600",
    ]
    .iter()
    .map(|k| crate::keys::slot(k.as_bytes()))
    .collect();
    assert_eq!(slots.len(), 3, "three slots");
    for i in 0..3u32 {
        let r = shared.should_rate_limit(&three()).await.unwrap();
        assert_eq!(codes(&r), vec![(OK, 9 - i), (OK, 9 - i), (OK, 2 - i)]);
    }
    assert_eq!(mock.calls.lock().unwrap().len(), 9, "one call per slot");
    assert_eq!(
        mock.most_in_flight.load(Ordering::SeqCst),
        3,
        "sent at once"
    );
    // user (3/hour) refuses: the two others are refunded.
    let r = shared.should_rate_limit(&three()).await.unwrap();
    assert_eq!(r.overall_code, OVER_LIMIT);
    assert_eq!(codes(&r), vec![(OK, 7), (OK, 7), (OVER_LIMIT, 0)]);
    let taken = mock.taken.lock().unwrap();
    assert_eq!(taken["rls:d_fw_a_fw3600"], 3);
    assert_eq!(taken["rls:d_sw_b_sw3600"], 3);
}

/// Issue 34: Redis down is gRPC UNAVAILABLE by default (Envoy's
/// failure_mode_deny decides); open and closed answer ourselves.
#[tokio::test]
async fn redis_down_is_unavailable_unless_a_failure_mode_answers() {
    let req = request("d", vec![desc("fw", "a", None), desc("user", "b", None)]);
    let (shared, _) = shared_with(
        Mock {
            fail: true,
            ..Default::default()
        },
        &[],
    );
    let status = shared.should_rate_limit(&req).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    let m = &shared.metrics;
    assert_eq!(
        m.value(
            "ratelimit_service_should_rate_limit_error",
            &[("err_type", "redis_error")]
        ),
        1
    );
    assert_eq!(m.value("ratelimit_rls_failure_mode_answers", &[]), 0);
    for (mode, code) in [("open", OK), ("closed", OVER_LIMIT)] {
        let (shared, _) = shared_with(
            Mock {
                fail: true,
                ..Default::default()
            },
            &["--failure-mode", mode],
        );
        let r = shared.should_rate_limit(&req).await.unwrap();
        assert_eq!(
            (r.overall_code, codes(&r)),
            (code, vec![(code, 0), (code, 0)]),
            "{mode}"
        );
        assert_eq!(
            shared
                .metrics
                .value("ratelimit_rls_failure_mode_answers", &[]),
            1
        );
    }
}

/// Issue 29: an override on a domain the configuration lacks is not applied
/// (envoy's TestConfigLimitOverride), and counts domain_not_found; an
/// override with an undefined unit is INVALID_ARGUMENT.
#[tokio::test]
async fn overrides_on_unknown_domains_and_undefined_units() {
    let (shared, mock) = shared_with(Mock::default(), &[]);
    let with_override = |domain: &str, unit: i32| {
        let mut d = desc("k", "v", None);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: 10,
            unit,
        });
        request(domain, vec![d])
    };
    let r = shared
        .should_rate_limit(&with_override("foo_domain", 4))
        .await
        .unwrap();
    assert_eq!(r.overall_code, OK);
    assert_eq!(r.statuses.len(), 1);
    assert!(r.statuses[0].current_limit.is_none(), "{r:?}");
    assert!(mock.calls.lock().unwrap().is_empty());
    assert_eq!(
        shared.metrics.value(
            "ratelimit_service_rate_limit_foo_domain_domain_not_found",
            &[]
        ),
        1
    );
    for unit in [0, 99] {
        let status = shared
            .should_rate_limit(&with_override("d", unit))
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{unit}");
    }
    assert_eq!(
        shared.metrics.value(
            "ratelimit_service_should_rate_limit_error",
            &[("err_type", "service_error")]
        ),
        2
    );
    // A defined unit on a known domain applies, as a fixed window.
    let r = shared
        .should_rate_limit(&with_override("d", 4))
        .await
        .unwrap();
    assert_eq!(codes(&r), vec![(OK, 9)]);
    assert_eq!(
        mock.calls.lock().unwrap()[0].0,
        vec!["rls:d_k_v_fw86400".to_string()]
    );
}

/// Statuses, the headers of the descriptor closest to its limit, the
/// statistics, and the rule's counters looked up once per load.
#[tokio::test]
async fn statuses_headers_and_statistics() {
    let (shared, mock) = shared_with(Mock::default(), &[]);
    let req = request(
        "d",
        vec![
            desc("fw", "a", None),
            desc("user", "b", Some(2)),
            desc("none", "x", None),
        ],
    );
    let r = shared.should_rate_limit(&req).await.unwrap();
    assert_eq!(codes(&r), vec![(OK, 9), (OK, 1), (OK, 0)]);
    assert_eq!(
        mock.calls.lock().unwrap().len(),
        2,
        "hits 1 and 2: two calls"
    );
    let headers: Vec<(String, String)> = r
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    assert_eq!(
        headers[0],
        ("RateLimit-Policy".into(), "\"d.user\";q=3;w=3600".into())
    );
    assert_eq!(
        headers[1],
        ("RateLimit".into(), "\"d.user\";r=1;t=60".into())
    );
    let user = shared.metrics.rule("d.user");
    assert_eq!(
        (user.total_hits, user.within_limit, user.near_limit),
        (2, 2, 0)
    );
    let loaded = shared.config.load();
    let id = loaded
        .config
        .rules()
        .iter()
        .position(|r| r.full_key == "d.user")
        .unwrap();
    assert!(loaded.stats[id].get().is_some(), "kept after the first hit");
    // Refused: over_limit, and nothing taken from fw.
    let r = shared.should_rate_limit(&req).await.unwrap();
    assert_eq!(r.overall_code, OVER_LIMIT);
    assert_eq!(codes(&r), vec![(OK, 9), (OVER_LIMIT, 1), (OK, 0)]);
    assert_eq!(shared.metrics.rule("d.user").over_limit, 2);
    assert_eq!(mock.taken.lock().unwrap()["rls:d_fw_a_fw3600"], 1);
}

/// Issue 41: more than 64 matched descriptors are decided in calls of at
/// most 64 keys (the module's bound), never an error whatever the failure
/// mode: one exhausted limit refuses the request wherever it stands, and
/// the other calls give back what they took.
#[tokio::test]
async fn more_than_64_descriptors_are_decided_in_calls_of_at_most_64() {
    for mode in ["unavailable", "open", "closed"] {
        for n in [65usize, 100, 1000] {
            for at in [0, n / 2, n - 1] {
                let (shared, mock) = shared_with(Mock::default(), &["--failure-mode", mode]);
                mock.taken
                    .lock()
                    .unwrap()
                    .insert("rls:d_user_x_fw3600".into(), 3);
                let descriptors = (0..n)
                    .map(|i| {
                        if i == at {
                            desc("user", "x", None)
                        } else {
                            desc("fw", &format!("pad{i}"), None)
                        }
                    })
                    .collect();
                let r = shared
                    .should_rate_limit(&request("d", descriptors))
                    .await
                    .unwrap_or_else(|e| panic!("{mode} {n} {at}: {e}"));
                let mut expected = vec![(OK, 10); n];
                expected[at] = (OVER_LIMIT, 0);
                assert_eq!(r.overall_code, OVER_LIMIT, "{mode} {n} {at}");
                assert_eq!(codes(&r), expected, "{mode} {n} {at}");
                let calls = mock.calls.lock().unwrap();
                assert!(calls.iter().all(|(keys, _, _)| keys.len() <= 64));
                let takes = calls.iter().filter(|(_, op, _)| *op == Op::Take(1)).count();
                assert_eq!(takes, n.div_ceil(64), "{mode} {n} {at}: one call per 64");
                let taken = mock.taken.lock().unwrap();
                let pads: u64 = taken
                    .iter()
                    .filter(|(k, _)| k.contains("_fw_pad"))
                    .map(|(_, v)| v)
                    .sum();
                assert_eq!(pads, 0, "{mode} {n} {at}: refunded");
                assert_eq!(taken["rls:d_user_x_fw3600"], 3);
                let m = &shared.metrics;
                assert_eq!(m.value("ratelimit_rls_failure_mode_answers", &[]), 0);
            }
        }
    }
}

/// Issue 47: with the local cache, a flood on an exhausted limit reaches
/// Redis once (the refusal's retry, 1 s in the mock, is not over), counted
/// in over_limit_with_local_cache per rule and in total; the other
/// descriptors of a cached refusal take nothing. Off by default.
#[tokio::test]
async fn the_local_cache_answers_a_flood_on_an_exhausted_limit() {
    for (flags, calls) in [
        (&[][..], 2_000),
        (&["--local-cache-size-in-bytes", "100000"][..], 1),
    ] {
        let (shared, mock) = shared_with(Mock::default(), flags);
        assert_eq!(shared.local_cache.is_some(), !flags.is_empty());
        mock.taken
            .lock()
            .unwrap()
            .insert("rls:d_user_x_fw3600".into(), 3);
        for _ in 0..2_000 {
            let req = request("d", vec![desc("user", "x", None), desc("fw", "y", None)]);
            let r = shared.should_rate_limit(&req).await.unwrap();
            assert_eq!(r.overall_code, OVER_LIMIT);
            assert_eq!(r.statuses[0].code, OVER_LIMIT);
            assert_eq!(r.statuses[1].code, OK);
        }
        let takes = mock.calls.lock().unwrap().len();
        assert_eq!(takes, calls, "{flags:?}");
        let fw = mock.taken.lock().unwrap().get("rls:d_fw_y_fw3600").copied();
        assert_eq!(fw.unwrap_or(0), 0, "nothing taken");
        let cached = 2_000 - calls as u64;
        let user = shared.metrics.rule("d.user");
        assert_eq!(
            (user.over_limit, user.over_limit_with_local_cache),
            (2_000, cached)
        );
        let total = shared
            .metrics
            .value("ratelimit_service_over_limit_with_local_cache", &[]);
        assert_eq!(total, cached);
    }
}
