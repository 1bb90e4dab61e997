//! Issue 43, point 4: `charge: always`, costs recorded after the response
//! (Envoy's `apply_on_stream_done`, Envoy AI Gateway's token budgets): each
//! request is checked with `hits_addend: 0`, then charged its tokens with
//! `FORCE`, past the limit too (a debt the next checks wait for). On each
//! engine.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;

const CONFIG: &str = "domain: ai
descriptors:
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 1000, charge: always}
  - key: admitted_tokens
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: hourly
    rate_limit: {unit: hour, requests_per_unit: 1000, charge: always}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
";

/// `duration_until_reset` of status `i`, in ms.
fn reset_ms(r: &RateLimitResponse, i: usize) -> u64 {
    let d = r.statuses[i].duration_until_reset.as_ref().unwrap();
    (d.seconds * 1000 + i64::from(d.nanos) / 1_000_000) as u64
}

/// Waits until the next `period_s` window is at least 2 s away, so that a
/// short test stays in one window.
async fn away_from_a_window_end(period_s: u64) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let left = period_s * 1000 - (now.as_millis() as u64 % (period_s * 1000));
    if left < 2_000 {
        tokio::time::sleep(Duration::from_millis(left + 50)).await;
    }
}

/// A fixed window's count in Redis (`start:count`, `:D` when in debt; the
/// same bytes on every engine).
fn stored_count(redis: &Redis, key: &str) -> u64 {
    let value: Option<String> = redis.query(&["GET", key]);
    value.map_or(0, |v| v.split(':').nth(1).unwrap().parse().unwrap())
}

/// The decisions the server was asked for: `RL.ALL`, `FCALL` or `EVALSHA`
/// / `EVAL` calls.
fn commands(redis: &Redis) -> u64 {
    let info: String = redis.query(&["INFO", "commandstats"]);
    info.lines()
        .filter(|l| {
            ["rl.all", "fcall", "evalsha", "eval"]
                .iter()
                .any(|c| l.starts_with(&format!("cmdstat_{c}:")))
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

/// The scenario: 1,000 tokens a minute, each request checked with
/// `hits_addend: 0`, then charged its 600 tokens. With `charge: always` the
/// second charge goes past the limit (a debt of 200), and every later check
/// is refused: 2 requests served of 10. With `charge: admitted` (today's
/// behaviour), the second charge is refused and takes nothing, 400 stay
/// free, and every check passes: 10 of 10.
#[tokio::test]
async fn a_token_budget_checked_then_charged_serves_two_requests() {
    let redis = Redis::start();
    let rls = Rls::start(&redis.url(), CONFIG, &[]).await;
    let mut client = rls.client().await;
    away_from_a_window_end(60).await;
    for (rule, served) in [("tokens", 2), ("admitted_tokens", 10)] {
        let mut admitted = 0;
        let mut charges = Vec::new();
        for _ in 0..10 {
            let check = call(
                &mut client,
                request("ai", vec![desc_hits(&[(rule, "u")], 0)]),
            )
            .await;
            if check.overall_code != OK {
                assert_eq!(check.statuses[0].code, OVER_LIMIT, "{rule}");
                // Refused until the debt is repaid: the next minute's window.
                assert!(reset_ms(&check, 0) <= 60_000, "{rule}");
                continue;
            }
            admitted += 1;
            // After the response: Envoy sends the usage, and ignores the answer.
            let charge = call(
                &mut client,
                request("ai", vec![desc_hits(&[(rule, "u")], 600)]),
            )
            .await;
            charges.push((charge.overall_code, statuses(&charge)[0]));
        }
        assert_eq!(admitted, served, "{rule}: requests served of 10");
        if rule == "tokens" {
            assert_eq!(
                charges,
                vec![
                    (OK, (OK, Some(1000), 400)),
                    (OVER_LIMIT, (OVER_LIMIT, Some(1000), 0)),
                ],
                "the second charge goes past the limit"
            );
            assert_eq!(stored_count(&redis, "rls:ai_tokens_u_fw60"), 1200);
        } else {
            assert_eq!(charges[1], (OVER_LIMIT, (OVER_LIMIT, Some(1000), 400)));
            assert_eq!(stored_count(&redis, "rls:ai_admitted_tokens_u_fw60"), 600);
        }
    }
}

/// 32 streams, each checking (`hits_addend: 0`) then charging 600 tokens of
/// a 1,000-token budget, until its check is refused. A check is admitted
/// only while the count is below the limit (≤ 999): charges recorded
/// before it number at most ⌊999 / 600⌋ = 1, and at most the 31 other
/// streams hold an admitted check whose charge is not recorded yet. So at
/// most 1 + 31 + 1 = 33 checks are admitted, and the budget is overspent by
/// 33 × 600 − 1,000 = 18,800 at most, less than 32 × 600. The debt is
/// carried: the next check waits for the first window whose carried count
/// leaves room.
#[tokio::test]
async fn thirty_two_concurrent_streams_overspend_by_at_most_their_charges() {
    let redis = Redis::start();
    let rls = Rls::start(&redis.url(), CONFIG, &[]).await;
    let client = rls.client().await;
    away_from_a_window_end(3600).await;
    let admitted = Arc::new(AtomicU64::new(0));
    let streams: Vec<_> = (0..32)
        .map(|_| {
            let mut client = client.clone();
            let admitted = admitted.clone();
            tokio::spawn(async move {
                loop {
                    let check = call(
                        &mut client,
                        request("ai", vec![desc_hits(&[("hourly", "u")], 0)]),
                    )
                    .await;
                    if check.overall_code != OK {
                        return;
                    }
                    admitted.fetch_add(1, Ordering::SeqCst);
                    call(
                        &mut client,
                        request("ai", vec![desc_hits(&[("hourly", "u")], 600)]),
                    )
                    .await;
                }
            })
        })
        .collect();
    for s in streams {
        s.await.unwrap();
    }
    let admitted = admitted.load(Ordering::SeqCst);
    assert!((2..=33).contains(&admitted), "{admitted} checks admitted");
    let total = stored_count(&redis, "rls:ai_hourly_u_fw3600");
    assert_eq!(total, admitted * 600, "every charge recorded");
    assert!(total - 1000 <= 32 * 600, "overspent by {}", total - 1000);
    // Refused until the first window whose carried count leaves room: the
    // k-th window from now, k = ⌈(total − 999) / 1000⌉ (≥ 2: the next
    // window starts in debt).
    let check = call(
        &mut client.clone(),
        request("ai", vec![desc_hits(&[("hourly", "u")], 0)]),
    )
    .await;
    assert_eq!(statuses(&check), vec![(OVER_LIMIT, Some(1000), 0)]);
    let k = (total - 999).div_ceil(1000);
    let wait = reset_ms(&check, 0);
    assert!(
        wait > (k - 1) * 3_600_000 && wait <= k * 3_600_000,
        "{total} tokens: refused for {wait} ms, k = {k}"
    );
}

/// With the local over-limit cache on: a check of a limit in debt is
/// answered from memory, but a charge always reaches Redis, alone or with
/// a limit the cache refuses.
#[tokio::test]
async fn a_charge_reaches_redis_with_the_local_cache_on() {
    let redis = Redis::start();
    let rls = Rls::start(
        &redis.url(),
        CONFIG,
        &["--local-cache-size-in-bytes", "1000000"],
    )
    .await;
    let mut client = rls.client().await;
    let key = "rls:ai_hourly_c_fw3600";
    let check = || request("ai", vec![desc_hits(&[("hourly", "c")], 0)]);
    let charge = |n| request("ai", vec![desc_hits(&[("hourly", "c")], n)]);
    let r = call(&mut client, charge(1500)).await;
    assert_eq!(statuses(&r), vec![(OVER_LIMIT, Some(1000), 0)]);
    let before = commands(&redis);
    // The overshoot went to the cache: a check is answered from memory.
    assert_eq!(call(&mut client, check()).await.overall_code, OVER_LIMIT);
    assert_eq!(commands(&redis), before, "a check answered from memory");
    let r = call(&mut client, charge(600)).await;
    assert_eq!(statuses(&r), vec![(OVER_LIMIT, Some(1000), 0)]);
    assert_eq!(commands(&redis), before + 1);
    assert_eq!(stored_count(&redis, key), 2100, "the charge reached Redis");
    // With a limit the cache refuses: the request is refused from memory,
    // the other `admitted` limit takes nothing, the charge is recorded.
    for _ in 0..10 {
        call(&mut client, request("ai", vec![desc(&[("user", "c")])])).await;
    }
    assert_eq!(
        call(&mut client, request("ai", vec![desc(&[("user", "c")])]))
            .await
            .overall_code,
        OVER_LIMIT
    );
    let r = call(
        &mut client,
        request(
            "ai",
            vec![
                desc_hits(&[("user", "c")], 1),
                desc_hits(&[("hourly", "c")], 100),
            ],
        ),
    )
    .await;
    assert_eq!(r.overall_code, OVER_LIMIT);
    assert_eq!(
        statuses(&r),
        vec![(OVER_LIMIT, Some(10), 0), (OVER_LIMIT, Some(1000), 0)]
    );
    assert_eq!(
        stored_count(&redis, key),
        2200,
        "recorded past the cache's refusal"
    );
    assert_eq!(stored_count(&redis, "rls:ai_user_c_fw3600"), 10);
}

/// What stays atomic when `always` and `admitted` limits meet in one
/// request (rls/README.md): in one `RL.ALL` (the same hits) and in two (other
/// hits), an `admitted` refusal refuses the request and the forced limit is
/// recorded all the same; a forced overshoot refuses the request and the
/// `admitted` limits take nothing (given back).
#[tokio::test]
async fn always_and_admitted_limits_in_one_request() {
    let redis = Redis::start();
    let rls = Rls::start(&redis.url(), CONFIG, &[]).await;
    let mut client = rls.client().await;
    let user = |u: &str| format!("rls:ai_user_{u}_fw3600");
    let tokens = |u: &str| format!("rls:ai_hourly_{u}_fw3600");
    for (case, user_hits) in [("same", None), ("other", Some(1))] {
        let req = |u: &str, hits: u64| {
            request(
                "ai",
                vec![
                    desc_hits(&[("user", u)], user_hits.unwrap_or(hits)),
                    desc_hits(&[("hourly", u)], hits),
                ],
            )
        };
        let user_hits = user_hits.unwrap_or(5);
        // Both fit: both take.
        let a = format!("{case}-a");
        let r = call(&mut client, req(&a, 5)).await;
        assert_eq!(r.overall_code, OK, "{case}");
        assert_eq!(stored_count(&redis, &user(&a)), user_hits, "{case}");
        assert_eq!(stored_count(&redis, &tokens(&a)), 5, "{case}");
        // The `admitted` limit refuses: the charge is recorded anyway.
        let b = format!("{case}-b");
        for _ in 0..10 {
            call(&mut client, request("ai", vec![desc(&[("user", &b)])])).await;
        }
        let r = call(&mut client, req(&b, 5)).await;
        assert_eq!(r.overall_code, OVER_LIMIT, "{case}");
        assert_eq!(
            statuses(&r),
            vec![(OVER_LIMIT, Some(10), 0), (OK, Some(1000), 995)],
            "{case}"
        );
        assert_eq!(stored_count(&redis, &user(&b)), 10, "{case}");
        assert_eq!(stored_count(&redis, &tokens(&b)), 5, "{case}");
        // The forced limit overshoots: the request is refused and the
        // `admitted` limit keeps nothing.
        let c = format!("{case}-c");
        let hits = if user_hits == 1 { 1500 } else { 5 };
        call(
            &mut client,
            request("ai", vec![desc_hits(&[("hourly", &c)], 998)]),
        )
        .await;
        let r = call(&mut client, req(&c, hits)).await;
        assert_eq!(r.overall_code, OVER_LIMIT, "{case}");
        assert_eq!(
            statuses(&r),
            vec![(OK, Some(10), 10), (OVER_LIMIT, Some(1000), 0)],
            "{case}"
        );
        assert_eq!(stored_count(&redis, &user(&c)), 0, "{case}: given back");
        assert_eq!(stored_count(&redis, &tokens(&c)), 998 + hits, "{case}");
    }
}

/// A charge the limit cannot hold as a debt (past the module's bounds: 366
/// days of debt, a count of 2^53, a sliding log at twice its limit) is
/// never an error: the limit takes what is left of it, and is OVER_LIMIT.
#[tokio::test]
async fn a_charge_past_the_module_bounds_exhausts_the_limit() {
    let redis = Redis::start();
    let yaml = "domain: d
descriptors:
  - key: fixed_window
    rate_limit: {unit: hour, requests_per_unit: 10, charge: always}
  - key: sliding_window
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: sliding_window, charge: always}
  - key: sliding_log
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: sliding_log, charge: always}
  - key: token_bucket
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: token_bucket, charge: always}
  - key: gcra
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: gcra, charge: always}
  - key: other
    rate_limit: {unit: hour, requests_per_unit: 100}
";
    let rls = Rls::start(&redis.url(), yaml, &[]).await;
    let mut client = rls.client().await;
    for algorithm in [
        "fixed_window",
        "sliding_window",
        "sliding_log",
        "token_bucket",
        "gcra",
    ] {
        for (i, hits) in [25, i64::MAX as u64, u64::MAX].into_iter().enumerate() {
            let value = format!("v{i}");
            // 3 taken first: the charge leaves 7, then the rest as debt or not.
            let r = call(
                &mut client,
                request("d", vec![desc_hits(&[(algorithm, &value)], 3)]),
            )
            .await;
            assert_eq!(r.overall_code, OK, "{algorithm}");
            let r = call(
                &mut client,
                request(
                    "d",
                    vec![
                        desc(&[("other", &value)]),
                        desc_hits(&[(algorithm, &value)], hits),
                    ],
                ),
            )
            .await;
            assert_eq!(r.overall_code, OVER_LIMIT, "{algorithm} {hits}");
            assert_eq!(
                statuses(&r),
                vec![(OK, Some(100), 100), (OVER_LIMIT, Some(10), 0)],
                "{algorithm} {hits}: the other limit takes nothing"
            );
            let check = call(
                &mut client,
                request("d", vec![desc_hits(&[(algorithm, &value)], 0)]),
            )
            .await;
            assert_eq!(
                statuses(&check),
                vec![(OVER_LIMIT, Some(10), 0)],
                "{algorithm} {hits}: exhausted"
            );
        }
    }
    let m = &rls.running.shared.metrics;
    assert_eq!(
        m.value(
            "ratelimit_service_should_rate_limit_error",
            &[("err_type", "redis_error")]
        ),
        0
    );
}

/// `--charge always` makes the rules without `charge:` always; a rule's
/// `charge: admitted` still wins. Three hits on a limit of 2: an `always`
/// rule records them (a debt: the next check is refused), an `admitted`
/// one takes nothing (the next check passes).
#[tokio::test]
async fn the_service_default_and_the_rule_override() {
    let yaml = "domain: d
descriptors:
  - key: default
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: admitted
    rate_limit: {unit: hour, requests_per_unit: 2, charge: admitted}
  - key: always
    rate_limit: {unit: hour, requests_per_unit: 2, charge: always}
";
    let redis = Redis::start();
    for (flags, in_debt) in [
        (&[][..], [false, false, true]),
        (&["--charge", "always"][..], [true, false, true]),
        (&["--charge", "admitted"][..], [false, false, true]),
    ] {
        let rls = Rls::start(&redis.url(), yaml, flags).await;
        let mut client = rls.client().await;
        let value = flags.join("");
        for (rule, in_debt) in ["default", "admitted", "always"].into_iter().zip(in_debt) {
            let r = call(
                &mut client,
                request("d", vec![desc_hits(&[(rule, &value)], 3)]),
            )
            .await;
            assert_eq!(r.overall_code, OVER_LIMIT, "{flags:?} {rule}");
            let check = call(
                &mut client,
                request("d", vec![desc_hits(&[(rule, &value)], 0)]),
            )
            .await;
            let expected = if in_debt {
                (OVER_LIMIT, Some(2), 0)
            } else {
                (OK, Some(2), 2)
            };
            assert_eq!(statuses(&check), vec![expected], "{flags:?} {rule}");
            let stored = stored_count(&redis, &format!("rls:d_{rule}_{value}_fw3600"));
            assert_eq!(stored, if in_debt { 3 } else { 0 }, "{flags:?} {rule}");
        }
    }
}
