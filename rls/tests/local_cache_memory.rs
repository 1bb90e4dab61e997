//! Issue 47: the local over-limit cache stays within its size in memory
//! under 100,000 distinct refused keys (alone in its test binary, so that
//! the process's resident size is this test's).

use std::time::{Duration, Instant};

use ratelimit_rls::cache::{LocalCache, Refusal};

/// The process's resident set, in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn fill(cache: &LocalCache, n: usize) {
    let until = Instant::now() + Duration::from_secs(600);
    for i in 0..n {
        let key = format!("rls:edge_user_{i:012}_remote_address_fw60");
        cache.insert(
            &key,
            Refusal {
                until,
                hits: 1,
                limit: 10,
            },
        );
    }
}

#[test]
fn memory_stays_within_the_size_under_100000_refused_keys() {
    let size: u64 = 4 << 20;
    let cache = LocalCache::new(size).unwrap();
    let before = rss();
    fill(&cache, 100_000);
    let weighted = cache.weighted_size();
    let grown = rss().saturating_sub(before);
    eprintln!(
        "weighted {weighted}, entries {}, rss grown {grown}",
        cache.entry_count()
    );
    assert!(weighted <= size, "{weighted}");
    assert!(cache.entry_count() < 100_000);
    assert!(grown <= size, "grown {grown} for {size}");
}

#[test]
#[ignore]
fn measure_overhead() {
    let cache = LocalCache::new(u64::MAX).unwrap();
    let before = rss();
    fill(&cache, 100_000);
    let n = cache.entry_count();
    let grown = rss().saturating_sub(before);
    eprintln!("entries {n}, rss grown {grown}, per entry {}", grown / n);
}
