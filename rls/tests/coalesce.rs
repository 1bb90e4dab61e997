//! Issue 47: the connection to one server sends the commands of the
//! requests that run at once in one write, not one write per command (each
//! write costs the service, and Redis, a trip through the kernel).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;

/// Redis's `total_reads_processed`: the reads it made from its clients'
/// sockets (this query's own included).
fn reads(redis: &Redis) -> u64 {
    let info: String = redis.query(&["INFO", "stats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("total_reads_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("total_reads_processed in INFO stats")
}

/// One worker, as on a small machine: tokio runs a task woken by another
/// right after it, so without the gathering the connection's task wrote
/// each request's command alone (50 writes, about 50 reads for Redis).
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn concurrent_commands_reach_redis_in_a_few_writes() {
    let redis = Redis::start();
    let backend = Arc::new(
        ratelimit_rls::backend::Redis::new(&redis.url(), false, Duration::from_secs(5)).unwrap(),
    );
    backend.query(redis::cmd("PING"), 0).await.unwrap();
    let before = reads(&redis);
    let replies = tokio::spawn({
        let backend = backend.clone();
        async move {
            let tasks: Vec<_> = (0..50)
                .map(|i| {
                    let backend = backend.clone();
                    tokio::spawn(async move {
                        let mut cmd = redis::cmd("INCR");
                        cmd.arg(format!("coalesce:{i}"));
                        backend.query(cmd, 0).await
                    })
                })
                .collect();
            let mut replies = Vec::new();
            for t in tasks {
                replies.push(t.await.unwrap().unwrap());
            }
            replies
        }
    })
    .await
    .unwrap();
    assert!(
        replies.iter().all(|r| *r == redis::Value::Int(1)),
        "{replies:?}"
    );
    // The 50 commands, and INFO's own read.
    let reads = reads(&redis) - before;
    assert!(reads <= 5, "Redis read 50 commands in {reads} reads");
}
