//! The service on a 3-master Redis Cluster: a user's limits share a slot
//! (hash tag), others are decided in their own call, and a refusal in a
//! later call gives back what an earlier one took; on every engine
//! (`RATELIMIT_TEST_ENGINE`), the library flushed mid-run on every node.

mod common;

use common::*;
use ratelimit_rls::backend::engine::LIBRARY_VERSION;

const YAML: &str = "domain: c
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 10}
    descriptors:
      - key: path
        rate_limit: {unit: day, requests_per_unit: 4}
  - key: ip
    rate_limit: {unit: day, requests_per_unit: 6}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_splits_by_slot_and_refunds_on_a_later_refusal() {
    let nodes = cluster();
    let urls: Vec<String> = nodes.iter().map(|n| n.url()).collect();
    let rls = Rls::start(
        &urls.join(","),
        YAML,
        &[
            "--redis-cluster",
            "--hash-tag-keys",
            "user",
            "--redis-timeout-ms",
            "2000",
        ],
    )
    .await;
    assert_eq!(rls.engine().await.as_deref(), Some(test_engine()));
    let mut client = rls.client().await;
    let full = |user: &str| {
        request(
            "c",
            vec![
                desc(&[("user", user)]),
                desc(&[("user", user), ("path", "/x")]),
                desc(&[("ip", "1.2.3.4")]),
            ],
        )
    };
    for i in 0..4u32 {
        let r = call(&mut client, full("alice")).await;
        assert_eq!(
            (r.overall_code, statuses(&r)),
            (
                OK,
                vec![
                    (OK, Some(10), 9 - i),
                    (OK, Some(4), 3 - i),
                    (OK, Some(6), 5 - i)
                ]
            )
        );
    }
    // Without the module, the library (or the script cache) is flushed on
    // every node: the next calls load it again where they meet its absence,
    // and no request fails.
    for node in &nodes {
        match test_engine() {
            "functions" => node.query::<()>(&["FUNCTION", "FLUSH"]),
            "eval" => node.query::<()>(&["SCRIPT", "FLUSH"]),
            _ => {}
        }
    }
    // The path limit refuses: the ip limit (another slot) takes nothing.
    let r = call(&mut client, full("alice")).await;
    assert_eq!(
        (r.overall_code, statuses(&r)),
        (
            OVER_LIMIT,
            vec![
                (OK, Some(10), 6),
                (OVER_LIMIT, Some(4), 0),
                (OK, Some(6), 2)
            ]
        )
    );
    // Exhaust the ip limit; then bob's call takes from his limits first and
    // gives it back when the ip limit refuses.
    for _ in 0..2 {
        let r = call(&mut client, request("c", vec![desc(&[("ip", "1.2.3.4")])])).await;
        assert_eq!(r.overall_code, OK);
    }
    let r = call(&mut client, full("bob")).await;
    assert_eq!(
        (r.overall_code, statuses(&r)),
        (
            OVER_LIMIT,
            vec![
                (OK, Some(10), 10),
                (OK, Some(4), 4),
                (OVER_LIMIT, Some(6), 0)
            ]
        )
    );
    let check = request(
        "c",
        vec![
            desc_hits(&[("user", "bob")], 0),
            desc_hits(&[("user", "bob"), ("path", "/x")], 0),
        ],
    );
    let r = call(&mut client, check).await;
    assert_eq!(
        statuses(&r),
        vec![(OK, Some(10), 10), (OK, Some(4), 4)],
        "refunded"
    );
    // Each key lives on the node that owns its slot.
    let mut found = 0;
    for node in &nodes {
        let keys: Vec<String> = node.query(&["KEYS", "rls:*"]);
        for key in keys {
            let slot: i64 = node.query(&["CLUSTER", "KEYSLOT", &key]);
            assert_eq!(slot as u16, ratelimit_rls::keys::slot(key.as_bytes()));
            found += 1;
        }
    }
    assert!(found >= 3, "alice's two keys and the ip's");
    // The library is back on every primary (loaded on each, not only where
    // a call met its absence); nothing is loaded for the other engines.
    for node in &nodes {
        let version: Option<i64> = redis::cmd("FCALL_RO")
            .arg("rl_version")
            .arg(0)
            .query(&mut node.connection())
            .ok();
        let expected = (test_engine() == "functions").then_some(*LIBRARY_VERSION);
        assert_eq!(version, expected, "node {}", node.port);
    }
}
