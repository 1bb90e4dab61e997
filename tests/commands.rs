//! Every command, reply and error of RL.GCRA, RL.TOKENBUCKET and CL.THROTTLE
//! against a real redis-server with the module loaded.

mod common;

use std::time::Duration;

use common::{call, call_err, query, Server};

/// `(limited, limit, remaining, retry_after, reset_after)` within a tolerance
/// for the few ms of real time a test takes between calls.
fn assert_near(got: [i64; 5], want: [i64; 5], slack_ms: i64, what: &str) {
    assert_eq!(
        got[..3],
        want[..3],
        "{what}: limited/limit/remaining of {got:?}"
    );
    for i in 3..5 {
        if want[i] == -1 {
            assert_eq!(got[i], -1, "{what}: element {i} of {got:?}");
        } else {
            assert!(
                got[i] <= want[i] && got[i] >= want[i] - slack_ms,
                "{what}: element {i} of {got:?}, want ≈{}",
                want[i]
            );
        }
    }
}

#[test]
fn gcra_allows_a_burst_of_five_then_limits_with_retry_after() {
    let server = Server::start();
    let mut con = server.connect();
    for k in 0..5 {
        let r = call(&mut con, &["RL.GCRA", "user:42", "4", "10", "1"]);
        assert_near(r, [0, 5, 4 - k, -1, 100 * (k + 1)], 50, "burst");
    }
    let limited = call(&mut con, &["RL.GCRA", "user:42", "4", "10", "1"]);
    assert_near(limited, [1, 5, 0, 100, 500], 50, "sixth");
    // Waiting the returned time is enough.
    std::thread::sleep(Duration::from_millis(limited[3] as u64));
    let after = call(&mut con, &["RL.GCRA", "user:42", "4", "10", "1"]);
    assert_eq!(after[0], 0, "allowed after retry_after_ms: {after:?}");
}

#[test]
fn gcra_stores_the_tat_in_microseconds_and_expires_at_it() {
    let server = Server::start();
    let mut con = server.connect();
    let before_ms: i64 = query::<Vec<i64>>(&mut con, &["TIME"])
        .map(|t| t[0] * 1000 + t[1] / 1000)
        .unwrap();
    call(&mut con, &["RL.GCRA", "k", "0", "1", "10"]);
    let tat_us: i64 = query(&mut con, &["GET", "k"]).unwrap();
    let expire_ms: i64 = query(&mut con, &["PEXPIRETIME", "k"]).unwrap();
    // One token of a 1 per 10 s limiter: the TAT is now + 10 s.
    assert!(
        tat_us >= (before_ms + 10_000) * 1000 && tat_us < (before_ms + 10_100) * 1000,
        "tat {tat_us}"
    );
    assert_eq!(
        expire_ms,
        (tat_us + 999) / 1000,
        "the key expires at the TAT, rounded up to the ms"
    );
}

#[test]
fn a_limited_request_changes_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    for cmd in [
        &["RL.GCRA", "k1", "0", "1", "100"][..],
        &["RL.TOKENBUCKET", "k2", "1", "1", "100"],
        &["CL.THROTTLE", "k3", "0", "1", "100"],
    ] {
        assert_eq!(call(&mut con, cmd)[0], 0);
        let key = cmd[1];
        let value: Vec<u8> = query(&mut con, &["GET", key]).unwrap();
        let expiry: i64 = query(&mut con, &["PEXPIRETIME", key]).unwrap();
        let dirty_before = stat(&mut con, "rdb_changes_since_last_save");
        let limited = call(&mut con, cmd);
        assert_eq!(limited[0], 1, "{cmd:?}");
        assert_eq!(
            query::<Vec<u8>>(&mut con, &["GET", key]).unwrap(),
            value,
            "{cmd:?}"
        );
        assert_eq!(
            query::<i64>(&mut con, &["PEXPIRETIME", key]).unwrap(),
            expiry,
            "{cmd:?}"
        );
        assert_eq!(
            stat(&mut con, "rdb_changes_since_last_save"),
            dirty_before,
            "{cmd:?} dirtied the dataset"
        );
    }
}

fn stat(con: &mut redis::Connection, field: &str) -> i64 {
    let info: String = query(con, &["INFO", "persistence"]).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} not in INFO"))
}

#[test]
fn tokens_sets_the_cost_and_a_cost_above_the_limit_is_never_allowed() {
    let server = Server::start();
    let mut con = server.connect();
    // Never allowed: limited, retry -1, nothing written.
    assert_eq!(
        call(&mut con, &["RL.GCRA", "g", "4", "10", "1", "TOKENS", "6"]),
        [1, 5, 5, -1, 0]
    );
    assert_eq!(
        call(
            &mut con,
            &["RL.TOKENBUCKET", "t", "5", "10", "1", "tokens", "6"]
        ),
        [1, 5, 5, -1, 0]
    );
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "g", "t"]).unwrap(), 0);
    // A cost within the limit takes that many tokens at once.
    assert_near(
        call(&mut con, &["RL.GCRA", "g", "4", "10", "1", "TOKENS", "3"]),
        [0, 5, 2, -1, 300],
        50,
        "gcra",
    );
    assert_near(
        call(
            &mut con,
            &["RL.TOKENBUCKET", "t", "5", "10", "1", "TOKENS", "3"],
        ),
        [0, 5, 2, -1, 300],
        50,
        "tb",
    );
    assert_near(
        call(&mut con, &["RL.GCRA", "g", "4", "10", "1", "TOKENS", "3"]),
        [1, 5, 2, 100, 300],
        50,
        "gcra",
    );
    assert_near(
        call(
            &mut con,
            &["RL.TOKENBUCKET", "t", "5", "10", "1", "TOKENS", "3"],
        ),
        [1, 5, 2, 100, 300],
        50,
        "tb",
    );
    assert_near(
        call(&mut con, &["RL.GCRA", "g", "4", "10", "1", "TOKENS", "6"]),
        [1, 5, 2, -1, 300],
        50,
        "gcra",
    );
}

#[test]
fn token_bucket_starts_full_and_refills_continuously() {
    let server = Server::start();
    let mut con = server.connect();
    for k in 0..5 {
        let r = call(&mut con, &["RL.TOKENBUCKET", "tb", "5", "10", "1"]);
        assert_near(r, [0, 5, 4 - k, -1, 100 * (k + 1)], 50, "burst");
    }
    let limited = call(&mut con, &["RL.TOKENBUCKET", "tb", "5", "10", "1"]);
    assert_near(limited, [1, 5, 0, 100, 500], 50, "sixth");
    std::thread::sleep(Duration::from_millis(limited[3] as u64));
    assert_eq!(
        call(&mut con, &["RL.TOKENBUCKET", "tb", "5", "10", "1"])[0],
        0
    );
    // The stored state is documented: `<full_at_us>[:<remainder>]`, expiring when full.
    // With a remainder, the exact instant is a fraction of a µs after full_at_us.
    let value: String = query(&mut con, &["GET", "tb"]).unwrap();
    let (full_at_us, fraction) = match value.split_once(':') {
        Some((us, rem)) => (us.parse::<i64>().unwrap(), rem.parse::<i64>().unwrap() > 0),
        None => (value.parse::<i64>().unwrap(), false),
    };
    let exact_ceil_ms = if fraction {
        full_at_us / 1000 + 1
    } else {
        (full_at_us + 999) / 1000
    };
    assert_eq!(
        query::<i64>(&mut con, &["PEXPIRETIME", "tb"]).unwrap(),
        exact_ceil_ms
    );
}

#[test]
fn fractional_periods_are_seconds_with_microsecond_resolution() {
    let server = Server::start();
    let mut con = server.connect();
    assert_near(
        call(&mut con, &["RL.GCRA", "a", "0", "1", "0.5"]),
        [0, 1, 0, -1, 500],
        20,
        "0.5 s",
    );
    assert_near(
        call(&mut con, &["RL.TOKENBUCKET", "b", "2", "1", ".25"]),
        [0, 2, 1, -1, 250],
        20,
        ".25 s",
    );
    assert_near(
        call(&mut con, &["RL.GCRA", "c", "0", "1", "1e-3"]),
        [0, 1, 0, -1, 1],
        1,
        "1 ms",
    );
    assert_near(
        call(&mut con, &["RL.GCRA", "d", "0", "3", "1"]),
        [0, 1, 0, -1, 334],
        20,
        "1/3 s",
    );
}

#[test]
fn keys_expire_when_the_limiter_is_full_again() {
    let server = Server::start();
    let mut con = server.connect();
    // Full again 0.2 s after: time enough for the PTTLs below to find the
    // keys alive on a busy machine too (with 0.02 s, a PTTL three calls
    // later found none if the server lost the CPU for 20 ms).
    call(&mut con, &["RL.GCRA", "g", "1", "1", "0.2"]);
    call(&mut con, &["RL.TOKENBUCKET", "t", "2", "1", "0.2"]);
    call(&mut con, &["CL.THROTTLE", "c", "1", "1", "1"]);
    for key in ["g", "t", "c"] {
        let pttl: i64 = query(&mut con, &["PTTL", key]).unwrap();
        assert!(pttl > 0, "{key} has no expiry ({pttl})");
    }
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "g", "t"]).unwrap(), 0);
}

#[test]
fn cl_throttle_gives_redis_cell_replies() {
    let server = Server::start();
    let mut con = server.connect();
    // redis-cell's README: 15 burst, 30 per 60 s.
    assert_eq!(
        call(&mut con, &["CL.THROTTLE", "user123", "15", "30", "60", "1"]),
        [0, 16, 15, -1, 2]
    );
    // quantity 0 reads without consuming.
    assert_eq!(
        call(&mut con, &["CL.THROTTLE", "user123", "15", "30", "60", "0"]),
        [0, 16, 15, -1, 2]
    );
    assert_eq!(
        call(&mut con, &["cl.throttle", "user123", "15", "30", "60"]),
        [0, 16, 14, -1, 4]
    );
    assert_eq!(
        call(
            &mut con,
            &["CL.THROTTLE", "user123", "15", "30", "60", "14"]
        ),
        [0, 16, 0, -1, 32]
    );
    // Limited: retry after one emission interval (2 s), reset after 32 s.
    assert_eq!(
        call(&mut con, &["CL.THROTTLE", "user123", "15", "30", "60"]),
        [1, 16, 0, 2, 32]
    );
    assert_eq!(
        call(
            &mut con,
            &["CL.THROTTLE", "user123", "15", "30", "60", "17"]
        ),
        [1, 16, 0, -1, 32]
    );
    // A read of a key that does not exist creates nothing.
    assert_eq!(
        call(&mut con, &["CL.THROTTLE", "fresh", "15", "30", "60", "0"]),
        [0, 16, 16, -1, 0]
    );
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "fresh"]).unwrap(), 0);
}

#[test]
fn bad_arguments_get_an_err_naming_the_argument_and_write_nothing() {
    let server = Server::start();
    let mut con = server.connect();
    let cases: &[(&[&str], &str)] = &[
        (
            &["RL.GCRA", "k", "x", "10", "1"],
            "ERR max_burst is not an integer or out of range",
        ),
        (
            &["RL.GCRA", "k", "1.5", "10", "1"],
            "ERR max_burst is not an integer or out of range",
        ),
        (
            &["RL.GCRA", "k", "+1", "10", "1"],
            "ERR max_burst is not an integer or out of range",
        ),
        (
            &["RL.GCRA", "k", " 1", "10", "1"],
            "ERR max_burst is not an integer or out of range",
        ),
        (
            &["RL.GCRA", "k", "9223372036854775808", "10", "1"],
            "ERR max_burst is not an integer or out of range",
        ),
        (
            &["RL.GCRA", "k", "-1", "10", "1"],
            "ERR max_burst must be >= 0",
        ),
        (
            &["RL.GCRA", "k", "4", "0", "1"],
            "ERR tokens_per_period must be >= 1",
        ),
        (
            &["RL.GCRA", "k", "4", "-10", "1"],
            "ERR tokens_per_period must be >= 1",
        ),
        (
            &["RL.GCRA", "k", "4", "10", "x"],
            "ERR period is not a valid float",
        ),
        (
            &["RL.GCRA", "k", "4", "10", "nan"],
            "ERR period is not a valid float",
        ),
        (&["RL.GCRA", "k", "4", "10", "0"], "ERR period must be"),
        (&["RL.GCRA", "k", "4", "10", "-1"], "ERR period must be"),
        (&["RL.GCRA", "k", "4", "10", "inf"], "ERR period must be"),
        (&["RL.GCRA", "k", "4", "10", "1e-9"], "ERR period must be"),
        (&["RL.GCRA", "k", "4", "10", "1e300"], "ERR period must be"),
        (&["RL.GCRA", "k", "4", "2000000", "1"], "ERR rate too high"),
        (
            &["RL.GCRA", "k", "9223372036854775807", "1", "1"],
            "ERR parameters too large",
        ),
        (
            &["RL.GCRA", "k", "4", "10", "1", "TOKENS"],
            "ERR syntax error",
        ),
        (
            &["RL.GCRA", "k", "4", "10", "1", "TOKENS", "0"],
            "ERR TOKENS must be >= 1",
        ),
        (
            &["RL.GCRA", "k", "4", "10", "1", "TOKENS", "-3"],
            "ERR TOKENS must be >= 1",
        ),
        (
            &["RL.GCRA", "k", "4", "10", "1", "TOKENS", "two"],
            "ERR TOKENS is not an integer or out of range",
        ),
        (
            &["RL.GCRA", "k", "4", "10", "1", "COST", "2"],
            "ERR syntax error",
        ),
        (
            &["RL.GCRA", "k", "4", "10", "1", "TOKENS", "2", "TOKENS", "2"],
            "ERR syntax error",
        ),
        (
            &["RL.TOKENBUCKET", "k", "0", "10", "1"],
            "ERR capacity must be >= 1",
        ),
        (
            &["RL.TOKENBUCKET", "k", "5", "0", "1"],
            "ERR refill_tokens must be >= 1",
        ),
        (
            &["RL.TOKENBUCKET", "k", "5", "10", "0"],
            "ERR refill_period must be",
        ),
        (
            &["RL.TOKENBUCKET", "k", "5", "10", "soon"],
            "ERR refill_period is not a valid float",
        ),
        (
            &["RL.TOKENBUCKET", "k", "5", "2000000", "1"],
            "ERR rate too high",
        ),
        (
            &["RL.TOKENBUCKET", "k", "9223372036854775807", "1", "9e12"],
            "ERR refill_period must be a finite number of seconds, at least 0.000001 and at most 31622400 (366 days)",
        ),
        (
            &["RL.TOKENBUCKET", "k", "9223372036854775807", "1", "1"],
            "ERR the time to refill from empty",
        ),
        (
            &["RL.TOKENBUCKET", "k", "5", "10", "1", "TOKENS", "0"],
            "ERR TOKENS must be >= 1",
        ),
        (
            &["CL.THROTTLE", "k", "-1", "30", "60"],
            "ERR max_burst must be >= 0",
        ),
        (
            &["CL.THROTTLE", "k", "15", "0", "60"],
            "ERR count_per_period must be >= 1",
        ),
        (
            &["CL.THROTTLE", "k", "15", "30", "0"],
            "ERR period must be >= 1",
        ),
        (
            &["CL.THROTTLE", "k", "15", "30", "1.5"],
            "ERR period is not an integer or out of range",
        ),
        (
            &["CL.THROTTLE", "k", "15", "30", "9223372036854775807"],
            "ERR period must be >= 1 and <= 31622400 (366 days)",
        ),
        (
            &["CL.THROTTLE", "k", "15", "30", "60", "-1"],
            "ERR quantity must be >= 0",
        ),
        (
            &["CL.THROTTLE", "k", "18446744073709551615", "30", "60"],
            "ERR max_burst is not an integer or out of range",
        ),
    ];
    for (args, want) in cases {
        let err = call_err(&mut con, args);
        assert!(
            err.starts_with(want),
            "{args:?}: got {err:?}, want {want:?}…"
        );
    }
    assert_eq!(
        query::<i64>(&mut con, &["DBSIZE"]).unwrap(),
        0,
        "an erring call wrote something"
    );
}

#[test]
fn wrong_arity_gets_the_standard_error() {
    let server = Server::start();
    let mut con = server.connect();
    // `FCALL rl_gcra 0` has no key: the library's error says it needs one
    // (`FCALL`'s numkeys is not the module's arity).
    let keyless: &[&str] = if common::engine() == common::Engine::Module {
        &["RL.GCRA"]
    } else {
        &["RL.GCRA", "k", "4"]
    };
    for args in [
        keyless,
        &["RL.GCRA", "k", "4", "10"],
        &["RL.TOKENBUCKET", "k"],
        &["CL.THROTTLE", "k", "15", "30"],
        &["CL.THROTTLE", "k", "15", "30", "60", "1", "1"],
    ] {
        let err = call_err(&mut con, args);
        let want = format!(
            "ERR wrong number of arguments for '{}' command",
            args[0].to_lowercase()
        );
        assert_eq!(err, want, "{args:?}");
    }
}

#[test]
fn keys_of_other_types_get_wrongtype() {
    let server = Server::start();
    let mut con = server.connect();
    let _: () = query(&mut con, &["LPUSH", "list", "a"]).unwrap();
    let _: () = query(&mut con, &["HSET", "hash", "f", "v"]).unwrap();
    let _: () = query(&mut con, &["SADD", "set", "a"]).unwrap();
    let _: () = query(&mut con, &["ZADD", "zset", "1", "a"]).unwrap();
    let _: () = query(&mut con, &["XADD", "stream", "*", "f", "v"]).unwrap();
    for key in ["list", "hash", "set", "zset", "stream"] {
        for cmd in [
            &["RL.GCRA", key, "4", "10", "1"][..],
            &["RL.TOKENBUCKET", key, "5", "10", "1"],
            &["CL.THROTTLE", key, "15", "30", "60"],
        ] {
            assert_eq!(
                call_err(&mut con, cmd),
                "WRONGTYPE Operation against a key holding the wrong kind of value",
                "{cmd:?}"
            );
        }
    }
}

#[test]
fn foreign_string_values_get_an_err_and_are_left_alone() {
    let mut server = Server::start();
    let mut con = server.connect();
    let foreign: &[&[u8]] = &[
        b"foo",
        b"-5",
        b"99999999999999999999",
        b"",
        b"1.5",
        b"\xff\xfe\x00binary",
        b"12:x",
    ];
    for (i, value) in foreign.iter().enumerate() {
        let key = format!("foreign:{i}");
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(*value)
            .query(&mut con)
            .unwrap();
        for (cmd, name) in [
            ("RL.GCRA", "RL.GCRA"),
            ("RL.TOKENBUCKET", "RL.TOKENBUCKET"),
            ("CL.THROTTLE", "CL.THROTTLE"),
        ] {
            let err = call_err(&mut con, &[cmd, &key, "4", "10", "1"]);
            assert_eq!(err, format!("ERR the value at this key is not {name} state (it was written by something else)"), "{value:?}");
        }
        let stored: Vec<u8> = query(&mut con, &["GET", &key]).unwrap();
        assert_eq!(stored, *value, "the foreign value was changed");
        assert_eq!(
            query::<i64>(&mut con, &["PTTL", &key]).unwrap(),
            -1,
            "an expiry was added"
        );
    }
    assert!(server.is_alive());
}

#[test]
fn binary_and_non_utf8_arguments_are_errors_not_crashes() {
    let mut server = Server::start();
    let mut con = server.connect();
    let junk: &[&[u8]] = &[b"\xff", b"\x00", b"1\x00", b"\xc3\x28", &[b'9'; 10_000]];
    for j in junk {
        for pos in 2..6 {
            let mut args: Vec<&[u8]> = vec![b"RL.GCRA", b"k", b"4", b"10", b"1"];
            if pos < 5 {
                args[pos] = j;
            } else {
                args.extend_from_slice(&[b"TOKENS", j]);
            }
            let r: redis::RedisResult<redis::Value> =
                common::cmd_bytes("RL.GCRA", &args[1..]).query(&mut con);
            let e = r.expect_err("junk must be refused");
            assert_eq!(e.code(), Some("ERR"), "{e}");
        }
    }
    // A binary key name is fine.
    let r: Vec<i64> = common::cmd_bytes("RL.GCRA", &[b"\xff\x00key", b"4", b"10", b"1"])
        .query(&mut con)
        .unwrap();
    assert_eq!(r[..3], [0, 5, 4]);
    assert!(server.is_alive());
}

#[test]
fn commands_are_registered_as_writes_with_the_key_at_position_one() {
    if !common::module_only("COMMAND INFO/GETKEYS of the module's commands") {
        return;
    }
    let server = Server::start();
    let mut con = server.connect();
    for name in ["rl.gcra", "rl.tokenbucket", "cl.throttle"] {
        let keys: Vec<String> = query(
            &mut con,
            &["COMMAND", "GETKEYS", name, "the-key", "1", "1", "1"],
        )
        .unwrap();
        assert_eq!(keys, ["the-key"], "{name}");
        let info: redis::Value = query(&mut con, &["COMMAND", "INFO", name]).unwrap();
        let text = format!("{info:?}");
        for flag in ["write", "denyoom", "fast"] {
            assert!(text.contains(flag), "{name} lacks flag {flag}: {text}");
        }
    }
}

#[test]
fn cl_throttle_keeps_the_state_of_keys_written_by_redis_cell() {
    let server = Server::start();
    let mut con = server.connect();
    // redis-cell stores the TAT in nanoseconds: here 3.9 s ahead of now, as
    // after two requests of a 15 burst / 30 per 60 s limiter.
    let t: Vec<i64> = query(&mut con, &["TIME"]).unwrap();
    let tat_ns = (t[0] * 1_000_000 + t[1]) * 1000 + 3_900_000_000;
    let _: () = query(
        &mut con,
        &["SET", "cell", &tat_ns.to_string(), "PX", "4000"],
    )
    .unwrap();
    assert_eq!(
        call(&mut con, &["CL.THROTTLE", "cell", "15", "30", "60", "0"]),
        [0, 16, 14, -1, 4]
    );
    assert_eq!(
        call(&mut con, &["CL.THROTTLE", "cell", "15", "30", "60"]),
        [0, 16, 13, -1, 6]
    );
    // The key keeps redis-cell's nanoseconds: one T (2 s) further.
    let new_tat_ns: i64 = query(&mut con, &["GET", "cell"]).unwrap();
    assert_eq!(
        new_tat_ns - tat_ns,
        2_000_000_000,
        "{new_tat_ns} vs {tat_ns}"
    );
    // A TAT in µs (what CL.THROTTLE wrote before) is still read as µs.
    let tat_us = tat_ns / 1000;
    let _: () = query(&mut con, &["SET", "old", &tat_us.to_string(), "PX", "4000"]).unwrap();
    assert_eq!(
        call(&mut con, &["CL.THROTTLE", "old", "15", "30", "60", "0"]),
        [0, 16, 14, -1, 4]
    );
    // Limiters longer than 366 days are refused.
    let err = call_err(&mut con, &["CL.THROTTLE", "k", "0", "1", "100000000000"]);
    assert!(
        err.starts_with("ERR period must be >= 1 and <= 31622400"),
        "{err}"
    );
    let err = call_err(&mut con, &["CL.THROTTLE", "k", "1", "1", "31622400"]);
    assert!(
        err.starts_with("ERR the time to refill from empty"),
        "{err}"
    );
}
