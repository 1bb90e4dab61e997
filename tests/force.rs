//! `FORCE` (issue 43): a cost recorded whatever the limit says. Every
//! limiter records it past its limit (debt), answers `limited` 1,
//! `remaining` 0, `retry_after` exactly until one more hit is admitted and
//! `reset_after` until it is full (when the key expires); later calls are
//! refused with that same retry; `RL.ALL` records its forced limits and
//! keeps the others all-or-nothing; the bounds are clear errors that write
//! nothing. At a fixed clock in both engines (`RL.DEBUGCLOCK`, the
//! library's `NOW`).

mod common;

use common::{engine, error_text, query, Engine, Server};

/// A whole second a little ahead of the server's clock (keys written at it
/// live as long as they would at the real clock, or a little longer).
fn base_us() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    (now + 2) * 1_000_000
}

/// Runs `args` at `now_us` (µs) in the engine under test.
fn at(con: &mut redis::Connection, now_us: i64, args: &[&str]) -> redis::RedisResult<Vec<i64>> {
    let now = now_us.to_string();
    match engine() {
        Engine::Module => {
            let _: () = redis::cmd("RL.DEBUGCLOCK").arg(&now).query(con)?;
            query(con, args)
        }
        Engine::Functions => {
            let mut words = args.to_vec();
            words.extend(["NOW", &now]);
            query(con, &words)
        }
    }
}

fn ok(con: &mut redis::Connection, now_us: i64, args: &[&str]) -> Vec<i64> {
    at(con, now_us, args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn err(con: &mut redis::Connection, now_us: i64, args: &[&str]) -> String {
    match at(con, now_us, args) {
        Ok(v) => panic!("{args:?}: expected an error, got {v:?}"),
        Err(e) => error_text(&e),
    }
}

fn bytes(con: &mut redis::Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

/// The key's absolute expiry, ms.
fn expire_at_ms(con: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(con).unwrap()
}

/// A server with the engine under test; `None` where a release build has
/// no `RL.DEBUGCLOCK`.
fn server() -> Option<(Server, redis::Connection)> {
    let server = Server::start();
    let mut con = server.connect();
    if engine() == Engine::Module
        && redis::cmd("RL.DEBUGCLOCK")
            .arg("OFF")
            .query::<()>(&mut con)
            .is_err()
    {
        eprintln!("skipped: a release build has no RL.DEBUGCLOCK");
        return None;
    }
    Some((server, con))
}

#[test]
fn every_limiter_records_a_forced_cost_past_its_limit() {
    let Some((_server, mut con)) = server() else {
        return;
    };
    let t = base_us();
    let ms = |us: i64| us / 1_000;
    // (call, forced reply, the next ordinary call's reply 1 ms later)
    let cases: [(&[&str], [i64; 5], [i64; 5]); 8] = [
        // Limit 5, 10 per second: 8 forced, the TAT 800 ms ahead; one more
        // fits when it is 400 ms ahead.
        (
            &["RL.GCRA", "g", "4", "10", "1"],
            [1, 5, 0, 400, 800],
            [1, 5, 0, 399, 799],
        ),
        (
            &["RL.TOKENBUCKET", "t", "5", "10", "1"],
            [1, 5, 0, 400, 800],
            [1, 5, 0, 399, 799],
        ),
        (
            &["RL.LEAKYBUCKET", "q", "5", "10", "1"],
            [1, 5, 0, 400, 800],
            [1, 5, 0, 399, 799],
        ),
        // 8 of 3 per second: 5 past the limit, repaid by the next two
        // windows; one more fits in the third.
        (
            &["RL.FIXEDWINDOW", "f", "3", "1"],
            [1, 3, 0, 2000, 3000],
            [1, 3, 0, 1999, 2999],
        ),
        (
            &["RL.FIXEDWINDOW", "ff", "3", "1", "ALIGN", "FIRST"],
            [1, 3, 0, 2000, 3000],
            [1, 3, 0, 1999, 2999],
        ),
        // 8 in this window of a limit of 3: they weigh 2 at 75 % into the
        // next one.
        (
            &["RL.SLIDINGWINDOW", "s", "3", "1"],
            [1, 3, 0, 1750, 2000],
            [1, 3, 0, 1749, 1999],
        ),
        (
            &["RL.SLIDINGWINDOW", "b", "3", "1", "BUCKETS", "4"],
            [1, 3, 0, 1000, 1000],
            [1, 3, 0, 999, 999],
        ),
        // A log of 4: 8 entries (twice its limit, its most).
        (
            &["RL.SLIDINGLOG", "l", "4", "1"],
            [1, 4, 0, 1000, 1000],
            [1, 4, 0, 999, 999],
        ),
    ];
    for (call, forced, next) in cases {
        let key = call[1];
        let mut with = call.to_vec();
        with.extend(["FORCE", "TOKENS", "8"]);
        assert_eq!(ok(&mut con, t, &with), forced, "{with:?}");
        // The key expires when the limiter is full again.
        assert_eq!(expire_at_ms(&mut con, key), ms(t) + forced[4], "{key}");
        // The next ordinary call: refused with the same honest retry, and
        // so is PEEK.
        assert_eq!(ok(&mut con, t + 1_000, call), next, "{call:?}");
        let mut peek = call.to_vec();
        peek.push("PEEK");
        assert_eq!(ok(&mut con, t + 1_000, &peek), next, "{peek:?}");
        // Admitted exactly at the retry, not a millisecond earlier.
        let retry = forced[3] * 1_000;
        assert_eq!(ok(&mut con, t + retry - 1_000, call)[0], 1, "{call:?}");
        assert_eq!(ok(&mut con, t + retry, call)[0], 0, "{call:?}");
    }
    // The stored bytes: a debt is the state's own encoding, further ahead.
    assert_eq!(
        bytes(&mut con, "g").unwrap(),
        (t + 900_000).to_string().into_bytes(),
        "the TAT after the forced 8 and one more at +400 ms"
    );
    assert_eq!(
        bytes(&mut con, "f").unwrap(),
        format!("{}:3", t + 2_000_000).into_bytes(),
        "the third window: 2 of the 8 still owed, and one taken"
    );
}

#[test]
fn a_forced_cost_that_fits_is_an_ordinary_admission() {
    let Some((_server, mut con)) = server() else {
        return;
    };
    let t = base_us();
    assert_eq!(
        ok(
            &mut con,
            t,
            &["RL.GCRA", "a", "4", "10", "1", "TOKENS", "3", "FORCE"]
        ),
        [0, 5, 2, -1, 300]
    );
    assert_eq!(
        ok(&mut con, t, &["RL.FIXEDWINDOW", "b", "5", "1", "force"]),
        [0, 5, 4, -1, 1000]
    );
}

#[test]
fn check_then_charge_serves_at_most_two_requests() {
    // The scenario: 1,000 tokens a minute, each request checked
    // before (one hit, PEEK) and charged its 600 tokens after, forced.
    let Some((_server, mut con)) = server() else {
        return;
    };
    let t = base_us() / 60_000_000 * 60_000_000 + 60_000_000;
    let rule = ["RL.FIXEDWINDOW", "budget", "1000", "60"];
    let mut served = 0;
    for i in 0..10 {
        let now = t + i * 1_000_000;
        let mut check = rule.to_vec();
        check.push("PEEK");
        if ok(&mut con, now, &check)[0] == 1 {
            continue;
        }
        served += 1;
        let mut charge = rule.to_vec();
        charge.extend(["TOKENS", "600", "FORCE"]);
        ok(&mut con, now + 500_000, &charge);
    }
    assert_eq!(served, 2);
    // 1,200 of 1,000: the next minute starts 200 in debt.
    let next = ok(
        &mut con,
        t + 60_000_000,
        &["RL.FIXEDWINDOW", "budget", "1000", "60", "PEEK"],
    );
    assert_eq!(next, [0, 1000, 799, -1, 60_000]);
}

#[test]
fn force_with_block_locks_the_limiter_with_its_debt() {
    let Some((_server, mut con)) = server() else {
        return;
    };
    let t = base_us();
    // The debt's retry (400 ms) is shorter than the block: the block's.
    let r = ok(
        &mut con,
        t,
        &[
            "RL.GCRA", "k", "4", "10", "1", "FORCE", "TOKENS", "8", "BLOCK", "5",
        ],
    );
    assert_eq!(r, [1, 5, 0, 5000, 5000]);
    assert_eq!(
        bytes(&mut con, "k").unwrap(),
        format!("B{};{}", t + 5_000_000, t + 800_000).into_bytes()
    );
    assert_eq!(expire_at_ms(&mut con, "k"), (t + 5_000_000) / 1_000);
    // During the block a forced cost is recorded behind it.
    let r = ok(
        &mut con,
        t + 1_000_000,
        &["RL.GCRA", "k", "4", "10", "1", "FORCE"],
    );
    assert_eq!(r, [1, 5, 0, 4000, 4000]);
    assert_eq!(
        bytes(&mut con, "k").unwrap(),
        format!("B{};{}", t + 5_000_000, t + 1_100_000).into_bytes()
    );
    // A debt longer than the block: its retry.
    let r = ok(
        &mut con,
        t,
        &[
            "RL.GCRA", "j", "4", "10", "1", "FORCE", "TOKENS", "100", "BLOCK", "1",
        ],
    );
    assert_eq!(r, [1, 5, 0, 9600, 10_000]);
    // A sliding log's block member beside its forced entries.
    let r = ok(
        &mut con,
        t,
        &[
            "RL.SLIDINGLOG",
            "lb",
            "2",
            "1",
            "FORCE",
            "TOKENS",
            "3",
            "BLOCK",
            "5",
        ],
    );
    assert_eq!(r, [1, 2, 0, 5000, 5000]);
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg("lb")
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    assert_eq!(members.len(), 4, "{members:?}");
    assert_eq!(expire_at_ms(&mut con, "lb"), (t + 5_000_000) / 1_000);
}

#[test]
fn all_records_its_forced_limits_and_keeps_the_others_all_or_nothing() {
    let Some((_server, mut con)) = server() else {
        return;
    };
    let t = base_us();
    let call = |forced: &str, tokens: &str| -> Vec<String> {
        let mut v: Vec<String> = ["RL.ALL", "2", "x", "y", "GCRA", "4", "10", "1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        if forced == "x" {
            v.push("FORCE".into());
        }
        v.extend(["FIXEDWINDOW", "10", "1"].iter().map(|s| s.to_string()));
        if forced == "y" {
            v.push("FORCE".into());
        }
        v.extend(["TOKENS".into(), tokens.to_string(), "WITHLIMITS".into()]);
        v
    };
    let run = |con: &mut redis::Connection, forced: &str, tokens: &str| {
        let words = call(forced, tokens);
        let refs: Vec<&str> = words.iter().map(String::as_str).collect();
        ok(con, t, &refs)
    };
    // x forced past its limit; y fits and takes: limited all the same.
    let r = run(&mut con, "x", "7");
    assert_eq!(r[..6], [1, 5, 0, 300, 700, 1]);
    assert_eq!(r[6..], [1, 5, 0, 300, 700, 0, 10, 3, -1, 1000]);
    assert_eq!(
        bytes(&mut con, "x").unwrap(),
        (t + 700_000).to_string().into_bytes()
    );
    assert_eq!(bytes(&mut con, "y").unwrap(), format!("{t}:7").into_bytes());
    // Again: x records, y refuses and takes nothing.
    let r = run(&mut con, "x", "7");
    assert_eq!(r[..6], [1, 5, 0, 1000, 1400, 1]);
    assert_eq!(
        bytes(&mut con, "x").unwrap(),
        (t + 1_400_000).to_string().into_bytes()
    );
    assert_eq!(bytes(&mut con, "y").unwrap(), format!("{t}:7").into_bytes());
    // y forced while x refuses: y records.
    let r = run(&mut con, "y", "2");
    assert_eq!(r[..6], [1, 5, 0, 1100, 1400, 1]);
    assert_eq!(bytes(&mut con, "y").unwrap(), format!("{t}:9").into_bytes());
    assert_eq!(
        bytes(&mut con, "x").unwrap(),
        (t + 1_400_000).to_string().into_bytes()
    );
}

#[test]
fn force_bounds_are_clear_errors_that_write_nothing() {
    let Some((_server, mut con)) = server() else {
        return;
    };
    let t = base_us();
    let syntax = "ERR syntax error: FORCE records TOKENS n whatever the limit says; it does not go with PEEK or REFUND";
    for call in [
        &["RL.GCRA", "e", "4", "10", "1", "FORCE", "PEEK"][..],
        &[
            "RL.TOKENBUCKET",
            "e",
            "4",
            "10",
            "1",
            "REFUND",
            "2",
            "FORCE",
        ],
        &["RL.ALL", "1", "e", "GCRA", "4", "10", "1", "FORCE", "PEEK"],
        &[
            "RL.ALL", "1", "e", "GCRA", "4", "10", "1", "FORCE", "REFUND", "1",
        ],
    ] {
        assert_eq!(err(&mut con, t, call), syntax, "{call:?}");
    }
    assert_eq!(
        err(&mut con, t, &["RL.GCRA", "e", "4", "10", "1", "FORCE", "FORCE"]),
        "ERR syntax error: expected [TOKENS n | REFUND n] [PEEK] [BLOCK duration] after the parameters"
    );
    assert_eq!(
        err(
            &mut con,
            t,
            &["RL.CONCURRENCY", "e", "4", "10", "ACQUIRE", "w", "FORCE"]
        ),
        "ERR FORCE does not apply to RL.CONCURRENCY: a slot is held and released, not a cost"
    );
    assert_eq!(
        err(
            &mut con,
            t,
            &[
                "RL.ALL",
                "1",
                "e",
                "CONCURRENCY",
                "4",
                "10",
                "ACQUIRE",
                "w",
                "FORCE"
            ]
        ),
        "ERR FORCE does not apply to RL.CONCURRENCY: a slot is held and released, not a cost"
    );
    assert_eq!(
        err(
            &mut con,
            t,
            &["RL.ALL", "1", "e", "GCRA", "4", "10", "1", "TOKENS", "2", "FORCE"]
        ),
        "ERR FORCE belongs to a limit of RL.ALL: write it right after that limit's parameters"
    );
    // Past the 366-day horizon: a yearly limit of 1 cannot owe a year more.
    assert_eq!(
        err(&mut con, t, &["RL.GCRA", "e", "0", "1", "31622400", "FORCE", "TOKENS", "2"]),
        "ERR FORCE cannot record this cost: the debt would take more than 366 days to repay; nothing was recorded"
    );
    assert_eq!(
        err(&mut con, t, &["RL.FIXEDWINDOW", "e", "1", "31622400", "FORCE", "TOKENS", "2"]),
        "ERR FORCE cannot record this cost: the debt would take more than 366 days to repay; nothing was recorded"
    );
    // A sliding log holds at most twice its limit in its window.
    assert_eq!(
        err(&mut con, t, &["RL.SLIDINGLOG", "e", "2", "1", "FORCE", "TOKENS", "5"]),
        "ERR FORCE cannot record this cost: the log would hold more than twice its limit in its window; nothing was recorded"
    );
    let exists: i64 = redis::cmd("EXISTS").arg("e").query(&mut con).unwrap();
    assert_eq!(exists, 0, "nothing written");
}
