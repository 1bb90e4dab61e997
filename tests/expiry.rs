//! Idle limiters take no memory: a workload over 100,000 distinct keys, with
//! every command and periods of 0.05–0.3 s, leaves an empty database once the
//! periods have passed; and no key the module writes is ever without an
//! expiry (`PTTL` is never -1), neither right after each call nor in what a
//! concurrent sampler finds while the workload runs.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{query, Server};
use redis::Value;

const KEYS: usize = 100_000;
const CHUNK: usize = 2_000;

/// The commands, by key prefix.
const PREFIXES: [&str; 7] = ["gcra", "tb", "cell", "fw", "sw", "log", "leaky"];

/// Small, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The calls for key number `i` and the longest its key may live after any
/// of them, in ms: the documented bound for these parameters (one period; two
/// windows for the sliding window counter) plus 2 ms of rounding.
fn calls_for(i: usize, rng: &mut Rng) -> (Vec<Vec<String>>, i64) {
    let prefix = PREFIXES[i % PREFIXES.len()];
    let key = format!("{prefix}:{i}");
    let ms = 50 + rng.below(251) as i64; // 0.05–0.3 s
    let p = format!("0.{ms:03}");
    let n = 1 + rng.below(4); // tokens per period / limit
    let n_s = n.to_string();
    let cost = (1 + rng.below(n + 1)).to_string(); // sometimes > the limit
    let burst = (n - 1).to_string();
    let mut calls: Vec<Vec<&str>> = Vec::new();
    let max_ms = match prefix {
        // max_burst + 1 = tokens_per_period: τ is one period.
        "gcra" => {
            calls.push(vec!["RL.GCRA", &key, &burst, &n_s, &p]);
            calls.push(vec!["RL.GCRA", &key, &burst, &n_s, &p, "TOKENS", &cost]);
            ms
        }
        // capacity = refill_tokens: empty to full in one period.
        "tb" => {
            calls.push(vec!["RL.TOKENBUCKET", &key, &n_s, &n_s, &p]);
            calls.push(vec![
                "RL.TOKENBUCKET",
                &key,
                &n_s,
                &n_s,
                &p,
                "TOKENS",
                &cost,
            ]);
            ms
        }
        // Whole seconds only: 10 per second, a burst of n ≤ 3 → τ = n × 100 ms.
        "cell" => {
            calls.push(vec!["CL.THROTTLE", &key, &burst, "10", "1"]);
            calls.push(vec!["CL.THROTTLE", &key, &burst, "10", "1", &cost]);
            calls.push(vec!["CL.THROTTLE", &key, &burst, "10", "1", "0"]);
            100 * n as i64
        }
        "fw" => {
            calls.push(vec!["RL.FIXEDWINDOW", &key, &n_s, &p, "TOKENS", &cost]);
            calls.push(vec!["RL.FIXEDWINDOW", &key, &n_s, &p]);
            ms
        }
        "sw" => {
            calls.push(vec!["RL.SLIDINGWINDOW", &key, &n_s, &p, "TOKENS", &cost]);
            calls.push(vec!["RL.SLIDINGWINDOW", &key, &n_s, &p]);
            2 * ms
        }
        "log" => {
            calls.push(vec!["RL.SLIDINGLOG", &key, &n_s, &p, "TOKENS", &cost]);
            calls.push(vec!["RL.SLIDINGLOG", &key, &n_s, &p]);
            ms
        }
        // capacity = leak_tokens: a full queue drains in one period.
        _ => {
            calls.push(vec![
                "RL.LEAKYBUCKET",
                &key,
                &n_s,
                &n_s,
                &p,
                "TOKENS",
                &cost,
            ]);
            calls.push(vec!["RL.LEAKYBUCKET", &key, &n_s, &n_s, &p]);
            ms
        }
    };
    let calls = calls
        .into_iter()
        .map(|c| c.into_iter().map(String::from).collect())
        .collect();
    (calls, max_ms + 2)
}

/// While `stop` is false: walks the keyspace with SCAN and asserts that no
/// key lacks an expiry. Returns how many keys had one, by prefix.
fn sample(server_port: u16, stop: Arc<AtomicBool>) -> HashMap<String, u64> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{server_port}/")).unwrap();
    let mut con = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    con.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut cursor = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(200)
            .query(&mut con)
            .expect("SCAN");
        cursor = next;
        if keys.is_empty() {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let mut pipe = redis::pipe();
        for k in &keys {
            pipe.cmd("PTTL").arg(k);
        }
        let ttls: Vec<i64> = pipe.query(&mut con).expect("PTTL");
        for (k, ttl) in keys.iter().zip(ttls) {
            assert_ne!(ttl, -1, "{k} has no expiry");
            if ttl >= 0 {
                let prefix = k.split(':').next().unwrap_or("").to_string();
                *seen.entry(prefix).or_default() += 1;
            }
        }
        // Leave most of the server (and the two cores) to the workload.
        std::thread::sleep(Duration::from_millis(3));
    }
    seen
}

#[test]
fn a_hundred_thousand_short_lived_limiters_all_expire_and_never_lack_an_expiry() {
    let server = Server::start_with(&["--save", "", "--appendonly", "no", "--hz", "100"]);
    let mut con = server.connect();
    con.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (port, stop) = (server.port, stop.clone());
        std::thread::spawn(move || sample(port, stop))
    };
    let started = Instant::now();
    let mut rng = Rng(0x0E_C0DE_5EED);
    let (mut allowed, mut limited, mut max_dbsize) = (0u64, 0u64, 0i64);
    for chunk in 0..KEYS / CHUNK {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        let mut expected = Vec::new();
        for i in chunk * CHUNK..(chunk + 1) * CHUNK {
            let (calls, max_ms) = calls_for(i, &mut rng);
            for c in calls {
                let words: Vec<&str> = c.iter().map(String::as_str).collect();
                pipe.add_command(common::cmd(&words)).cmd("PTTL").arg(&c[1]);
                expected.push((c, max_ms));
            }
        }
        pipe.cmd("DBSIZE");
        let replies: Vec<Value> = pipe.query(&mut con).expect("workload");
        for ((call, max_ms), pair) in expected.iter().zip(replies.chunks(2)) {
            let reply: Vec<i64> = redis::from_redis_value(pair[0].clone())
                .unwrap_or_else(|e| panic!("{call:?} → {:?} ({e})", pair[0]));
            assert_eq!(reply.len(), 5, "{call:?} → {reply:?}");
            if reply[0] == 0 {
                allowed += 1;
            } else {
                limited += 1;
            }
            let pttl: i64 = redis::from_redis_value(pair[1].clone()).unwrap();
            assert!(
                pttl == -2 || (0..=*max_ms).contains(&pttl),
                "{call:?} → {reply:?}: PTTL {pttl}, want -2 (gone) or 0..={max_ms}"
            );
        }
        let dbsize: i64 = redis::from_redis_value(replies.last().unwrap().clone()).unwrap();
        max_dbsize = max_dbsize.max(dbsize);
    }
    let workload = started.elapsed();
    assert!(
        allowed > 100_000 && limited > 10_000,
        "allowed {allowed}, limited {limited}"
    );
    assert!(max_dbsize > 1_000, "the keys never piled up ({max_dbsize})");

    // Every key expires within 0.6 s of its last write; active expiry then
    // reclaims them (hz 100).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let dbsize: i64 = query(&mut con, &["DBSIZE"]).unwrap();
        if dbsize == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{dbsize} keys still exist 15 s after the workload"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let emptied = started.elapsed() - workload;
    stop.store(true, Ordering::Relaxed);
    let seen = sampler
        .join()
        .expect("the sampler found a key without expiry");
    let total: u64 = seen.values().sum();
    assert!(total >= 1_000, "the sampler saw too few keys: {seen:?}");
    for prefix in PREFIXES {
        assert!(
            seen.get(prefix).copied().unwrap_or(0) > 0,
            "no {prefix} key sampled: {seen:?}"
        );
    }
    let info: String = query(&mut con, &["INFO", "stats"]).unwrap();
    let expired: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("expired_keys:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        expired >= KEYS as u64 - 1_000,
        "only {expired} keys expired"
    );
    eprintln!(
        "{KEYS} keys: workload {workload:.1?}, empty {emptied:.1?} later; \
         allowed {allowed}, limited {limited}; peak DBSIZE {max_dbsize}; sampled {seen:?}"
    );
}
