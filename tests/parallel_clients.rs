//! Many clients hitting one key at once get exactly the limit: each call
//! reads, decides and writes atomically inside the server.

mod common;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use common::{call, Server};

const CONNECTIONS: usize = 20;
const CALLS_PER_CONNECTION: usize = 25;

/// Runs `cmd` from 20 connections at once, 25 times each, and returns how
/// many calls were allowed.
fn allowed_from_twenty_connections(server: &Server, cmd: &'static [&'static str]) -> i64 {
    let allowed = Arc::new(AtomicI64::new(0));
    let barrier = Arc::new(std::sync::Barrier::new(CONNECTIONS));
    let threads: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let mut con = server.connect();
            let (allowed, barrier) = (allowed.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for _ in 0..CALLS_PER_CONNECTION {
                    if call(&mut con, cmd)[0] == 0 {
                        allowed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client thread");
    }
    allowed.load(Ordering::Relaxed)
}

#[test]
fn twenty_connections_on_one_key_get_exactly_the_limit() {
    let server = Server::start();
    // Periods of an hour: no token refills during the test, so exactly the
    // limit of the 500 calls may pass.
    let cases: [(&'static [&'static str], i64); 8] = [
        (&["RL.GCRA", "hot:gcra", "99", "1", "3600"], 100),
        (&["RL.TOKENBUCKET", "hot:tb", "100", "1", "3600"], 100),
        (&["CL.THROTTLE", "hot:cell", "99", "1", "3600"], 100),
        (
            &["RL.GCRA", "hot:cost", "99", "1", "3600", "TOKENS", "7"],
            14,
        ),
        (&["RL.SLIDINGWINDOW", "hot:sw", "100", "3600"], 100),
        (&["RL.SLIDINGLOG", "hot:log", "100", "3600"], 100),
        (&["RL.LEAKYBUCKET", "hot:queue", "100", "1", "3600"], 100),
        (
            &[
                "RL.SLIDINGLOG",
                "hot:log-cost",
                "100",
                "3600",
                "TOKENS",
                "3",
            ],
            33,
        ),
    ];
    for (cmd, limit) in cases {
        assert_eq!(
            allowed_from_twenty_connections(&server, cmd),
            limit,
            "{cmd:?}"
        );
    }
}

#[test]
fn twenty_connections_on_one_fixed_window_get_exactly_the_limit() {
    let server = Server::start();
    let mut con = server.connect();
    // A window boundary during the run would admit up to 2 × limit: make sure
    // none is near (hour windows are aligned to the epoch).
    let t: Vec<i64> = common::query(&mut con, &["TIME"]).unwrap();
    if 3600 - t[0] % 3600 < 5 {
        std::thread::sleep(std::time::Duration::from_secs(6));
    }
    let cmd = &["RL.FIXEDWINDOW", "hot:fw", "100", "3600"];
    assert_eq!(allowed_from_twenty_connections(&server, cmd), 100);
}
