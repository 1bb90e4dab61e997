//! The service against a real redis-server with the module: envoy's README
//! examples, all-or-nothing under concurrency, shadow mode, hits_addend,
//! hot reload, Redis down or hung, metrics and health.
//!
//! The examples' units are hours or days instead of seconds or minutes so
//! that no test crosses a window boundary while it runs.

mod common;

use std::time::{Duration, Instant};

use common::*;

const MESSAGING: &str = "domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
";

/// envoy README example 2: both descriptors limit; the request is over the
/// limit when either is. envoy counts the refused 6th request against the
/// 100/day limit too (remaining 94); here a refused request takes nothing
/// (remaining stays 95).
#[tokio::test]
async fn example_2_marketing_messages_are_limited_and_refusals_take_nothing() {
    let redis = Redis::start();
    let rls = Rls::start(&redis.url(), MESSAGING, &[]).await;
    let mut client = rls.client().await;
    let both = || {
        request(
            "messaging",
            vec![
                desc(&[("message_type", "marketing"), ("to_number", "2061111111")]),
                desc(&[("to_number", "2061111111")]),
            ],
        )
    };
    for i in 0..5u32 {
        let r = call(&mut client, both()).await;
        assert_eq!(r.overall_code, OK);
        assert_eq!(
            statuses(&r),
            vec![(OK, Some(5), 4 - i), (OK, Some(100), 99 - i)]
        );
        let reset = r.statuses[0].duration_until_reset.as_ref().unwrap();
        assert!(reset.seconds > 0 && reset.seconds <= 86_400, "{reset:?}");
        assert_eq!(r.statuses[0].current_limit.as_ref().unwrap().unit, 4, "DAY");
    }
    let r = call(&mut client, both()).await;
    assert_eq!(r.overall_code, OVER_LIMIT);
    assert_eq!(
        statuses(&r),
        vec![(OVER_LIMIT, Some(5), 0), (OK, Some(100), 95)]
    );
    // The refused request took nothing from the 100/day limit.
    let r = call(
        &mut client,
        request("messaging", vec![desc(&[("to_number", "2061111111")])]),
    )
    .await;
    assert_eq!(statuses(&r), vec![(OK, Some(100), 94)]);
    // Another number has its own limits.
    let r = call(
        &mut client,
        request(
            "messaging",
            vec![desc(&[
                ("message_type", "marketing"),
                ("to_number", "2062222222"),
            ])],
        ),
    )
    .await;
    assert_eq!(statuses(&r), vec![(OK, Some(5), 4)]);
    // Unmatched descriptors and unknown domains: OK, no limit (as envoy).
    let r = call(
        &mut client,
        request("messaging", vec![desc(&[("message_type", "marketing")])]),
    )
    .await;
    assert_eq!((r.overall_code, statuses(&r)), (OK, vec![(OK, None, 0)]));
    let r = call(
        &mut client,
        request("nowhere", vec![desc(&[("to_number", "1")])]),
    )
    .await;
    assert_eq!((r.overall_code, statuses(&r)), (OK, vec![(OK, None, 0)]));
}

/// envoy README examples 3, 4, 5 and 7: value before key, a 0 limit, depth,
/// unlimited, replaces.
#[tokio::test]
async fn examples_3_4_5_7_matching_unlimited_and_replaces() {
    let redis = Redis::start();
    let yaml = "domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: hour
      requests_per_unit: 0
";
    let rls = Rls::start(&redis.url(), yaml, &[]).await;
    let mut client = rls.client().await;
    let ip = |addr: &str| request("edge_proxy_per_ip", vec![desc(&[("remote_address", addr)])]);
    let r = call(&mut client, ip("50.0.0.1")).await;
    assert_eq!(
        (r.overall_code, statuses(&r)),
        (OK, vec![(OK, Some(10), 9)])
    );
    let r = call(&mut client, ip("50.0.0.5")).await;
    assert_eq!(
        (r.overall_code, statuses(&r)),
        (OVER_LIMIT, vec![(OVER_LIMIT, Some(0), 0)])
    );
    // The blacklisted address in the same request as another: nothing taken.
    let r = call(
        &mut client,
        request(
            "edge_proxy_per_ip",
            vec![
                desc(&[("remote_address", "50.0.0.1")]),
                desc(&[("remote_address", "50.0.0.5")]),
            ],
        ),
    )
    .await;
    assert_eq!(
        (r.overall_code, statuses(&r)),
        (
            OVER_LIMIT,
            vec![(OK, Some(10), 9), (OVER_LIMIT, Some(0), 0)]
        )
    );
    drop(rls);

    // Example 4: the request's depth must equal the configuration's.
    let yaml = "domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: hour
";
    let rls = Rls::start(&redis.url(), yaml, &[]).await;
    let mut client = rls.client().await;
    let r = call(
        &mut client,
        request(
            "example4",
            vec![
                desc(&[("key", "value"), ("subkey", "subvalue")]),
                desc(&[("key", "value")]),
            ],
        ),
    )
    .await;
    assert_eq!(statuses(&r), vec![(OK, Some(300), 299), (OK, None, 0)]);
    drop(rls);

    // Example 5: unlimited answers OK with remaining u32::MAX, no limit.
    let yaml = "domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: hour
      requests_per_unit: 100
";
    let rls = Rls::start(&redis.url(), yaml, &[]).await;
    let mut client = rls.client().await;
    let r = call(
        &mut client,
        request(
            "internal",
            vec![desc(&[("ldap", "x")]), desc(&[("azure", "x")])],
        ),
    )
    .await;
    assert_eq!(
        statuses(&r),
        vec![(OK, None, u32::MAX), (OK, Some(100), 99)]
    );
    drop(rls);

    // Example 7: the replaced rule is not applied (nor changed).
    let yaml = "domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: hour
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: hour
";
    let rls = Rls::start(&redis.url(), yaml, &[]).await;
    let mut client = rls.client().await;
    let one = || desc(&[("key_1", "value_1"), ("user", "bkthomps")]);
    let two = || desc(&[("key_2", "value_2"), ("user", "bkthomps")]);
    let r = call(&mut client, request("example7", vec![one(), two()])).await;
    assert_eq!(statuses(&r), vec![(OK, None, 0), (OK, Some(10), 9)]);
    let r = call(&mut client, request("example7", vec![one()])).await;
    assert_eq!(
        statuses(&r),
        vec![(OK, Some(5), 4)],
        "not changed by the replaced call"
    );
}

/// Three descriptors, 16 concurrent clients: exactly the binding limit's
/// requests are admitted, and every limit took exactly those (a refused
/// request takes nothing anywhere).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn all_or_nothing_across_three_descriptors_under_16_clients() {
    let redis = Redis::start();
    let yaml = "domain: api
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 50}
  - key: path
    rate_limit: {unit: day, requests_per_unit: 30, algorithm: sliding_window}
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 100, algorithm: gcra}
";
    let rls = Rls::start(&redis.url(), yaml, &[]).await;
    let req = || {
        request(
            "api",
            vec![
                desc(&[("user", "u1")]),
                desc(&[("path", "/a")]),
                desc(&[("tenant", "t1")]),
            ],
        )
    };
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let mut client = rls.client().await;
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..10 {
                if call(&mut client, req()).await.overall_code == OK {
                    admitted += 1;
                }
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap();
    }
    assert_eq!(admitted, 30, "the 30/day limit binds: 0 over-admission");
    // Check only (hits_addend 0): every limit was charged exactly 30.
    let mut client = rls.client().await;
    let r = call(
        &mut client,
        request(
            "api",
            vec![
                desc_hits(&[("user", "u1")], 0),
                desc_hits(&[("path", "/a")], 0),
                desc_hits(&[("tenant", "t1")], 0),
            ],
        ),
    )
    .await;
    assert_eq!(
        statuses(&r),
        vec![
            (OK, Some(50), 20),
            (OVER_LIMIT, Some(30), 0),
            (OK, Some(100), 70)
        ]
    );
    let m = &rls.running.shared.metrics;
    assert_eq!(m.rule("api.user").total_hits, 160);
    assert_eq!(m.rule("api.path").over_limit, 130);
}

/// envoy README example 6: a shadow rule never refuses, and counts what it
/// would have refused.
#[tokio::test]
async fn example_6_shadow_mode_answers_ok_and_counts() {
    let redis = Redis::start();
    let yaml = "domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: hour
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: hour
";
    let rls = Rls::start(&redis.url(), yaml, &[]).await;
    let mut client = rls.client().await;
    let a = || {
        request(
            "example6",
            vec![desc(&[("service", "auth"), ("user", "user-a")])],
        )
    };
    for _ in 0..12 {
        let r = call(&mut client, a()).await;
        assert_eq!(r.overall_code, OK);
        assert_eq!(r.statuses[0].code, OK);
    }
    let m = rls
        .running
        .shared
        .metrics
        .rule("example6.service.user_user-a");
    assert_eq!((m.total_hits, m.over_limit, m.shadow_mode), (12, 2, 2));
    // user-b is enforced: 20, then refused.
    let b = || {
        request(
            "example6",
            vec![desc(&[("service", "auth"), ("user", "user-b")])],
        )
    };
    for _ in 0..20 {
        assert_eq!(call(&mut client, b()).await.overall_code, OK);
    }
    assert_eq!(call(&mut client, b()).await.overall_code, OVER_LIMIT);
    // With both in one request, the shadow rule never refuses it.
    let both = request(
        "example6",
        vec![
            desc(&[("service", "auth"), ("user", "user-a")]),
            desc(&[("service", "auth"), ("user", "user-b")]),
        ],
    );
    let r = call(&mut client, both).await;
    assert_eq!(r.overall_code, OVER_LIMIT, "user-b refuses");
    assert_eq!(r.statuses[0].code, OK);
    // The global shadow mode answers OK to everything.
    drop(rls);
    let rls = Rls::start(&redis.url(), yaml, &["--global-shadow-mode"]).await;
    let mut client = rls.client().await;
    assert_eq!(call(&mut client, b()).await.overall_code, OK);
}

/// hits_addend: the request's, a descriptor's own, 0 = check only; with
/// different addends (two calls) a refusal gives back what the first took.
#[tokio::test]
async fn hits_addend_request_descriptor_and_check_only() {
    let redis = Redis::start();
    let yaml = "domain: d
descriptors:
  - key: a
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: b
    rate_limit: {unit: day, requests_per_unit: 10}
";
    let rls = Rls::start(&redis.url(), yaml, &[]).await;
    let mut client = rls.client().await;
    let mut req = request("d", vec![desc(&[("a", "1")]), desc(&[("b", "1")])]);
    req.hits_addend = 4;
    let r = call(&mut client, req.clone()).await;
    assert_eq!(statuses(&r), vec![(OK, Some(10), 6), (OK, Some(10), 6)]);
    // Check only: nothing taken.
    let check = request(
        "d",
        vec![desc_hits(&[("a", "1")], 0), desc_hits(&[("b", "1")], 0)],
    );
    let r = call(&mut client, check.clone()).await;
    assert_eq!(statuses(&r), vec![(OK, Some(10), 6), (OK, Some(10), 6)]);
    // a takes 2, b takes 5: two calls; b refuses (6 - 5 ... 1 left after), fine.
    let mixed = request(
        "d",
        vec![desc_hits(&[("a", "1")], 2), desc_hits(&[("b", "1")], 5)],
    );
    let r = call(&mut client, mixed.clone()).await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(statuses(&r), vec![(OK, Some(10), 4), (OK, Some(10), 1)]);
    // Again: b (1 left) refuses 5, a's 2 are given back.
    let r = call(&mut client, mixed).await;
    assert_eq!(r.overall_code, OVER_LIMIT);
    assert_eq!(
        statuses(&r),
        vec![(OK, Some(10), 4), (OVER_LIMIT, Some(10), 1)]
    );
    let r = call(&mut client, check).await;
    assert_eq!(statuses(&r), vec![(OK, Some(10), 4), (OK, Some(10), 1)]);
}

/// A changed file is loaded; a bad one keeps the old configuration.
#[tokio::test]
async fn hot_reload_and_a_bad_file_keeps_the_old_config() {
    let redis = Redis::start();
    let v1 =
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 2}\n";
    let rls = Rls::start(&redis.url(), v1, &[]).await;
    let mut client = rls.client().await;
    let req = || request("d", vec![desc_hits(&[("k", "x")], 0)]);
    assert_eq!(
        statuses(&call(&mut client, req()).await),
        vec![(OK, Some(2), 2)]
    );
    let v2 = v1.replace("requests_per_unit: 2", "requests_per_unit: 7");
    std::fs::write(&rls.config_path, v2).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = statuses(&call(&mut client, req()).await);
        if s == vec![(OK, Some(7), 7)] {
            break;
        }
        assert!(Instant::now() < deadline, "not reloaded: {s:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::write(
        &rls.config_path,
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n",
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while rls
        .running
        .shared
        .metrics
        .value("ratelimit_service_config_load_error", &[])
        == 0
    {
        assert!(Instant::now() < deadline, "the bad file was not noticed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        statuses(&call(&mut client, req()).await),
        vec![(OK, Some(7), 7)]
    );
    let (code, body) = rls.http_get("/metrics").await;
    assert_eq!(code, 200);
    assert!(
        body.contains("ratelimit_service_config_load_error 1"),
        "{body}"
    );
}

/// Redis down: fail open (OK) or closed (OVER_LIMIT); a hung Redis answers
/// within the timeout.
#[tokio::test]
async fn redis_down_or_hung_answers_the_failure_mode_within_the_timeout() {
    let yaml =
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 2}\n";
    let req = || request("d", vec![desc(&[("k", "x")])]);
    // Nothing listens there.
    let down = format!("redis://127.0.0.1:{}", free_port());
    let rls = Rls::start(&down, yaml, &[]).await;
    let mut client = rls.client().await;
    let r = call(&mut client, req()).await;
    assert_eq!((r.overall_code, r.statuses[0].code), (OK, OK));
    let (code, body) = rls.http_get("/healthcheck").await;
    assert_eq!(code, 503, "{body}");
    drop(rls);
    let rls = Rls::start(&down, yaml, &["--failure-mode", "closed"]).await;
    let mut client = rls.client().await;
    assert_eq!(call(&mut client, req()).await.overall_code, OVER_LIMIT);
    drop(rls);

    // Hung: a listener that accepts and never answers.
    let hung = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hung_url = format!("redis://{}", hung.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut streams = Vec::new();
        while let Ok((s, _)) = hung.accept().await {
            streams.push(s);
        }
    });
    for (mode, expected) in [("open", OK), ("closed", OVER_LIMIT)] {
        let rls = Rls::start(
            &hung_url,
            yaml,
            &["--failure-mode", mode, "--redis-timeout-ms", "100"],
        )
        .await;
        let mut client = rls.client().await;
        for _ in 0..3 {
            let started = Instant::now();
            let r = call(&mut client, req()).await;
            let took = started.elapsed();
            assert_eq!(r.overall_code, expected, "{mode}");
            assert!(took < Duration::from_secs(1), "{mode}: took {took:?}");
        }
        let m = &rls.running.shared.metrics;
        assert!(m.value("ratelimit_service_should_rate_limit_redis_timeout", &[]) >= 3);
    }
    held.abort();
}

/// /metrics in envoy's names, /healthcheck, and the IETF headers.
#[tokio::test]
async fn metrics_health_and_ietf_headers() {
    let redis = Redis::start();
    let rls = Rls::start(&redis.url(), MESSAGING, &["--response-headers"]).await;
    let mut client = rls.client().await;
    let req = || request("messaging", vec![desc(&[("to_number", "1")])]);
    let r = call(&mut client, req()).await;
    let headers: Vec<(String, String)> = r
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    assert_eq!(
        headers[0],
        (
            "RateLimit-Policy".into(),
            "\"messaging.to_number\";q=100;w=86400".into()
        )
    );
    assert_eq!(headers[1].0, "RateLimit");
    assert!(
        headers[1].1.starts_with("\"messaging.to_number\";r=99;t="),
        "{headers:?}"
    );
    let (code, body) = rls.http_get("/metrics").await;
    assert_eq!(code, 200);
    assert!(
        body.contains(
            "ratelimit_service_rate_limit_total_hits{domain=\"messaging\",key1=\"to_number\"} 1"
        ),
        "{body}"
    );
    assert!(body.contains(
        "ratelimit_service_rate_limit_within_limit{domain=\"messaging\",key1=\"to_number\"} 1"
    ));
    let (code, body) = rls.http_get("/healthcheck").await;
    assert_eq!((code, body.as_str()), (200, "OK\n"));
    // HEAD as GET without a body; unknown paths 404; other methods 405.
    assert_eq!(rls.http("HEAD", "/metrics").await, (200, String::new()));
    assert_eq!(rls.http_get("/nope").await.0, 404);
    assert_eq!(rls.http("POST", "/metrics").await.0, 405);
    // gRPC health checking (grpc.health.v1), overall and for the service.
    let channel =
        tonic::transport::Channel::from_shared(format!("http://{}", rls.running.grpc_addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    for service in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
        let status = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(
            status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32
        );
    }
    // Empty domain or no descriptors: an error, as envoy.
    let err = client
        .should_rate_limit(request("", vec![desc(&[("a", "b")])]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}

/// A descriptor's `limit` override applies as a fixed window, as in envoy,
/// even where the configuration has no rule.
#[tokio::test]
async fn a_descriptors_limit_override_applies_as_a_fixed_window() {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
    let redis = Redis::start();
    let rls = Rls::start(&redis.url(), MESSAGING, &[]).await;
    let mut client = rls.client().await;
    let with_override = || {
        let mut d = desc(&[("anything", "x")]);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: 2,
            unit: 4, // DAY
        });
        request("messaging", vec![d])
    };
    assert_eq!(
        statuses(&call(&mut client, with_override()).await),
        vec![(OK, Some(2), 1)]
    );
    assert_eq!(
        statuses(&call(&mut client, with_override()).await),
        vec![(OK, Some(2), 0)]
    );
    let r = call(&mut client, with_override()).await;
    assert_eq!(
        (r.overall_code, statuses(&r)),
        (OVER_LIMIT, vec![(OVER_LIMIT, Some(2), 0)])
    );
    assert_eq!(
        rls.running
            .shared
            .metrics
            .rule("messaging.anything_x")
            .over_limit,
        1
    );
}

/// The same key twice in one request (the same descriptor twice, or two
/// values sharing a wildcard's threshold) takes its hits twice, as envoy's
/// two INCRBYs do.
#[tokio::test]
async fn a_key_named_twice_takes_twice() {
    let redis = Redis::start();
    let yaml = "domain: d
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: user
    rate_limit: {unit: day, requests_per_unit: 10}
";
    let rls = Rls::start(&redis.url(), yaml, &[]).await;
    let mut client = rls.client().await;
    let r = call(
        &mut client,
        request("d", vec![desc(&[("user", "u")]), desc(&[("user", "u")])]),
    )
    .await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(statuses(&r), vec![(OK, Some(10), 9), (OK, Some(10), 8)]);
    let two_files = || {
        request(
            "d",
            vec![
                desc(&[("files", "files/a.pdf")]),
                desc(&[("files", "files/b.csv")]),
            ],
        )
    };
    let r = call(&mut client, two_files()).await;
    assert_eq!(statuses(&r), vec![(OK, Some(3), 2), (OK, Some(3), 1)]);
    // One left: the second refuses, the first is given back.
    let r = call(&mut client, two_files()).await;
    assert_eq!(r.overall_code, OVER_LIMIT);
    let r = call(
        &mut client,
        request("d", vec![desc_hits(&[("files", "files/c.txt")], 0)]),
    )
    .await;
    assert_eq!(statuses(&r), vec![(OK, Some(3), 1)], "shared, and refunded");
}

/// `near_limit` is measured against the limit the reply gives: a rule's
/// `burst` (10 per minute, bursts of 20), not its `requests_per_unit`.
#[tokio::test]
async fn near_limit_counts_against_the_burst() {
    let redis = Redis::start();
    let yaml = "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: token_bucket, burst: 20}
";
    let rls = Rls::start(&redis.url(), yaml, &[]).await;
    let mut client = rls.client().await;
    // 18 of 20 taken: past 80% (16) by 2.
    let r = call(
        &mut client,
        request("d", vec![desc_hits(&[("k", "x")], 18)]),
    )
    .await;
    assert_eq!(r.overall_code, OK);
    let (_, body) = rls.http_get("/metrics").await;
    assert!(
        body.contains("ratelimit_service_rate_limit_near_limit{domain=\"d\",key1=\"k\"} 2"),
        "{body}"
    );
}
