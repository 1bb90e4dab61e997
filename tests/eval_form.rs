//! The library's EVAL form (docs/functions.md, "Source and forms"), for
//! servers without `FUNCTION` (Redis 6.2) or providers that allow only
//! `EVAL`: `functions/ratelimit.lua` without its first line and its fast
//! paths, run through
//! `EVALSHA <sha> numkeys key… <function> args…`, answers as the module.
//!
//! The server is `EVAL_SERVER` (`make test-functions` runs this with Redis
//! 6.2.14, `scripts/servers.sh redis-6.2`), by default the server under test.
//! A client that knows only the script's SHA1 calls it with `EVALSHA` and,
//! on `NOSCRIPT`, loads it with `SCRIPT LOAD` and calls again, as the client
//! packages do. Random calls of every function (`rl_concurrency` and
//! `CONCURRENCY` in `rl_all` too; and the `_ro` twins, named
//! `rl_x_ro` in the first argument) go to that server with `NOW`, and to a
//! server with the module with `RL.DEBUGCLOCK` at the same instant: the
//! replies, the stored values (`GET`, `ZRANGE … WITHSCORES`) and the absolute
//! expiries must be equal. Halfway through, `SCRIPT FLUSH` (what a failover
//! or a restart does to the script cache): the next call meets `NOSCRIPT`,
//! reloads once, and every later reply still matches.

mod common;

use common::{library_source, Server};
use redis::Value;

/// A client of the EVAL form: `EVALSHA`, reloaded on `NOSCRIPT`.
struct EvalClient {
    script: String,
    sha: String,
    reloads: u32,
}

impl EvalClient {
    fn new() -> EvalClient {
        let source = library_source();
        let first = source
            .lines()
            .next()
            .expect("a library with a shebang line");
        assert!(first.starts_with("#!lua"), "first line: {first}");
        // Without its first line and its fast paths (the lines from
        // `-- fast paths: begin` to `-- fast paths: end`), as the clients
        // build it.
        let mut script = String::new();
        let mut skipping = false;
        for line in source.split_inclusive('\n').skip(1) {
            let bare = line.trim_end_matches('\n');
            skipping |= bare == "-- fast paths: begin";
            if !skipping {
                script.push_str(line);
            }
            skipping &= bare != "-- fast paths: end";
        }
        assert!(
            !script.contains("need_fast = ") && script.contains("local FAST, need_fast\n"),
            "the fast paths left out, nothing else"
        );
        EvalClient {
            sha: sha1_hex(script.as_bytes()),
            script,
            reloads: 0,
        }
    }

    fn call(
        &mut self,
        con: &mut redis::Connection,
        function: &str,
        keys: &[String],
        args: &[String],
    ) -> Value {
        loop {
            let reply: redis::RedisResult<Value> = redis::cmd("EVALSHA")
                .arg(&self.sha)
                .arg(keys.len())
                .arg(keys)
                .arg(function)
                .arg(args)
                .query(con);
            match reply {
                Err(e) if e.code() == Some("NOSCRIPT") => {
                    let sha: String = redis::cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(&self.script)
                        .query(con)
                        .expect("SCRIPT LOAD");
                    assert_eq!(sha, self.sha, "the server's SHA1 of the script");
                    self.reloads += 1;
                }
                other => return value(other),
            }
        }
    }
}

/// An error reply as a `Value` (so replies compare whatever they are).
fn value(r: redis::RedisResult<Value>) -> Value {
    r.unwrap_or_else(|e| Value::SimpleString(format!("error: {}", common::error_text(&e))))
}

/// The script's SHA1, as `EVALSHA` names it.
fn sha1_hex(data: &[u8]) -> String {
    sha1_smol::Sha1::from(data).digest().to_string()
}

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// One random call: the module's command, the library's function, keys and
/// the arguments after them (`RL.ALL`'s limits and options).
fn random_call(rng: &mut Rng) -> (String, String, Vec<String>, Vec<String>) {
    const SECS: &[&str] = &["0.001", "0.01", "0.1", "0.5", "1", "2.5", "60", "3600"];
    const COUNTS: &[&str] = &["1", "2", "3", "5", "10"];
    let kinds = [
        ("RL.GCRA", "rl_gcra", 3),
        ("RL.TOKENBUCKET", "rl_tokenbucket", 3),
        ("RL.LEAKYBUCKET", "rl_leakybucket", 3),
        ("CL.THROTTLE", "cl_throttle", 3),
        ("RL.FIXEDWINDOW", "rl_fixedwindow", 2),
        ("RL.SLIDINGWINDOW", "rl_slidingwindow", 2),
        ("RL.SLIDINGLOG", "rl_slidinglog", 2),
        ("RL.CONCURRENCY", "rl_concurrency", 2),
        ("RL.ALL", "rl_all", 0),
    ];
    const LEASES: &[&str] = &["a", "b", "c"];
    let (command, function, params) = kinds[rng.below(kinds.len())];
    let mut args = Vec::new();
    let keys;
    if command == "RL.ALL" {
        let n = 1 + rng.below(3);
        keys = (0..n)
            .map(|i| format!("e:all:{}:{i}", rng.below(3)))
            .collect();
        for _ in 0..n {
            match rng.below(6) {
                0 => args.extend(["GCRA", rng.pick(COUNTS), rng.pick(COUNTS), rng.pick(SECS)]),
                1 => args.extend([
                    "TOKENBUCKET",
                    rng.pick(COUNTS),
                    rng.pick(COUNTS),
                    rng.pick(SECS),
                ]),
                2 => args.extend(["FIXEDWINDOW", rng.pick(COUNTS), rng.pick(SECS)]),
                3 => args.extend(["SLIDINGWINDOW", rng.pick(COUNTS), rng.pick(SECS)]),
                4 => args.extend([
                    "CONCURRENCY",
                    rng.pick(COUNTS),
                    rng.pick(SECS),
                    "ACQUIRE",
                    rng.pick(LEASES),
                ]),
                _ => args.extend(["SLIDINGLOG", rng.pick(COUNTS), rng.pick(SECS)]),
            }
        }
    } else {
        keys = vec![format!("e:{function}:{}", rng.below(4))];
        for i in 0..params {
            args.push(if command == "CL.THROTTLE" && i == 2 {
                rng.pick(&["1", "2", "60"])
            } else if i == params - 1 {
                rng.pick(SECS)
            } else {
                rng.pick(COUNTS)
            });
        }
    }
    if command == "RL.CONCURRENCY" {
        // ACQUIRE id [TOKENS n] [PEEK] [BLOCK d] | RENEW id [PEEK] |
        // RELEASE id [PEEK]; now and then an option the operation refuses.
        let op = rng.pick(&["ACQUIRE", "ACQUIRE", "RENEW", "RELEASE"]);
        args.extend([op, rng.pick(LEASES)]);
        if op == "ACQUIRE" {
            if rng.below(4) == 0 {
                args.extend(["TOKENS", rng.pick(COUNTS)]);
            }
            if rng.below(8) == 0 {
                args.push("BLOCK");
                args.push(rng.pick(SECS));
            }
        }
        if rng.below(8) == 0 {
            args.push("PEEK");
        }
        if rng.below(20) == 0 {
            args.push(rng.pick(&["BOGUS", "REFUND"]));
        }
        let args = args.into_iter().map(String::from).collect();
        return (command.into(), function.into(), keys, args);
    }
    let mut args: Vec<String> = args.into_iter().map(String::from).collect();
    if command == "CL.THROTTLE" {
        if rng.below(3) == 0 {
            args.push(rng.pick(&["0", "1", "2"]).to_string());
        }
    } else {
        match rng.below(6) {
            0 => args.extend(["TOKENS".to_string(), rng.pick(COUNTS).to_string()]),
            1 => args.extend(["REFUND".to_string(), rng.pick(COUNTS).to_string()]),
            _ => {}
        }
        if rng.below(8) == 0 {
            args.push("PEEK".into());
        }
        if rng.below(10) == 0 {
            args.extend(["BLOCK".to_string(), rng.pick(SECS).to_string()]);
        }
        if rng.below(20) == 0 {
            args.push("BOGUS".into());
        }
    }
    (command.into(), function.into(), keys, args)
}

/// A key's value (`GET`, or `ZRANGE … WITHSCORES`) and absolute expiry in ms
/// (`PEXPIRETIME` is 7.0+: `PTTL` plus the server's time, ±2 ms).
fn stored(con: &mut redis::Connection, key: &str) -> (Value, i64) {
    let kind: String = redis::cmd("TYPE").arg(key).query(con).unwrap();
    let v: Value = match kind.as_str() {
        "zset" => redis::cmd("ZRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(con)
            .unwrap(),
        "none" => Value::Nil,
        _ => redis::cmd("GET").arg(key).query(con).unwrap(),
    };
    let (pttl, time): (i64, Vec<i64>) = redis::pipe()
        .cmd("PTTL")
        .arg(key)
        .cmd("TIME")
        .query(con)
        .unwrap();
    let at = if pttl < 0 {
        pttl
    } else {
        pttl + time[0] * 1000 + time[1] / 1000
    };
    (v, at)
}

#[test]
fn the_eval_form_answers_as_the_module_through_evalsha_reloaded_on_noscript() {
    let binary = std::env::var("EVAL_SERVER").unwrap_or_else(|_| common::server_binary());
    let extra = ["--save", "", "--appendonly", "no"];
    let module = Server::start_module(&extra);
    let mut m = module.connect();
    let clock: redis::RedisResult<Value> = redis::cmd("RL.DEBUGCLOCK").arg("OFF").query(&mut m);
    if clock.is_err() {
        eprintln!("skipped: the module under test is a release build without RL.DEBUGCLOCK");
        return;
    }
    let eval = Server::start_binary(&binary, &extra);
    let mut e = eval.connect();
    let version: String = {
        let info: String = redis::cmd("INFO").arg("server").query(&mut e).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("?")
            .trim()
            .to_string()
    };
    let mut client = EvalClient::new();
    let mut rng = Rng(0x3030_3030_3030_3031);
    let t: Vec<i64> = redis::cmd("TIME").query(&mut m).unwrap();
    let mut now_us = (t[0] + 86_400) * 1_000_000;
    const CALLS: usize = 3000;
    let mut limited = 0;
    for i in 0..CALLS {
        if i == CALLS / 2 {
            let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut e).unwrap();
        }
        now_us += [0, 137, 1_000, 45_000, 700_000, 30_000_000][rng.below(6)];
        let (command, function, keys, args) = random_call(&mut rng);
        // The read-only twin for some PEEK calls: `rl_x_ro`, PEEK dropped.
        let peek_only = args.iter().any(|a| a == "PEEK") && !args.iter().any(|a| a == "BLOCK");
        let (function, lib_args) = if peek_only && rng.below(2) == 0 {
            let kept: Vec<String> = args.iter().filter(|a| *a != "PEEK").cloned().collect();
            (format!("{function}_ro"), kept)
        } else {
            (function, args.clone())
        };
        let mut lib_args = lib_args;
        lib_args.extend(["NOW".to_string(), now_us.to_string()]);
        let mut module_cmd = redis::cmd(&command);
        if command == "RL.ALL" {
            module_cmd.arg(keys.len());
        }
        module_cmd.arg(&keys).arg(&args);
        let (_, want): (Value, redis::RedisResult<Value>) = (
            redis::cmd("RL.DEBUGCLOCK")
                .arg(now_us)
                .query(&mut m)
                .unwrap(),
            module_cmd.query(&mut m),
        );
        let want = value(want);
        let got = client.call(&mut e, &function, &keys, &lib_args);
        let call = format!("{command} {} {}", keys.join(" "), args.join(" "));
        assert_eq!(got, want, "call {i} on {version}: {call} (as {function})");
        if matches!(&want, Value::Array(v) if v.first() == Some(&Value::Int(1))) {
            limited += 1;
        }
        for key in &keys {
            let (mv, mat) = stored(&mut m, key);
            let (ev, eat) = stored(&mut e, key);
            assert_eq!(ev, mv, "call {i} on {version}: {call}: the value of {key}");
            assert!(
                (eat - mat).abs() <= 2,
                "call {i} on {version}: {call}: {key} expires at {eat} vs the module's {mat}"
            );
        }
    }
    assert_eq!(
        client.reloads, 2,
        "loaded at the first call and after SCRIPT FLUSH"
    );
    assert!(
        limited > CALLS / 20,
        "the calls must reach limits: {limited}"
    );
    eprintln!("the EVAL form on redis {version}: {CALLS} calls as the module's, {limited} limited, reloaded after SCRIPT FLUSH");
}

/// With `NOW`, the library never reads the server's clock (issue 41): a
/// user whose ACL refuses `TIME` (and, from Redis 7.0, one refused
/// `PEXPIRETIME` too, which makes the library take Redis 6.2's path) gets
/// every refusal that starts a `BLOCK` answered and written as the module
/// does at that instant: the reply, the value and the key's expiry (kept
/// when later than the block's end, or the block's end). The caller's clock
/// runs a day ahead of the server's, so an expiry read against the wrong
/// clock shows. Without `NOW`, the refused `TIME` is an `ERR` reply without
/// a script's location. Through `EVALSHA`, and `FCALL` where the server has
/// it.
#[test]
fn with_now_no_path_reads_the_servers_clock() {
    let binary = std::env::var("EVAL_SERVER").unwrap_or_else(|_| common::server_binary());
    let extra = ["--save", "", "--appendonly", "no"];
    let module = Server::start_module(&extra);
    let mut m = module.connect();
    let clock: redis::RedisResult<Value> = redis::cmd("RL.DEBUGCLOCK").arg("OFF").query(&mut m);
    if clock.is_err() {
        eprintln!("skipped: the module under test is a release build without RL.DEBUGCLOCK");
        return;
    }
    let eval = Server::start_binary(&binary, &extra);
    let mut admin = eval.connect();
    let has_functions = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(library_source())
        .query::<String>(&mut admin)
        .is_ok();
    let mut users = vec![("no-time", vec!["-time"])];
    if has_functions {
        users.push(("no-clock", vec!["-time", "-pexpiretime"]));
    }
    let t: Vec<i64> = redis::cmd("TIME").query(&mut m).unwrap();
    let mut now_us = (t[0] + 86_400) * 1_000_000;
    let mut client = EvalClient::new();
    // (module command, function, keys, parameters, the id of each step).
    type Case = (
        &'static str,
        &'static str,
        &'static [&'static str],
        &'static [&'static str],
    );
    let cases: &[Case] = &[
        ("RL.GCRA", "rl_gcra", &["g1"], &["0", "1", "3600"]),
        ("RL.GCRA", "rl_gcra", &["g2"], &["0", "1", "1"]),
        (
            "RL.TOKENBUCKET",
            "rl_tokenbucket",
            &["t"],
            &["1", "1", "3600"],
        ),
        (
            "RL.LEAKYBUCKET",
            "rl_leakybucket",
            &["l"],
            &["1", "1", "3600"],
        ),
        ("RL.FIXEDWINDOW", "rl_fixedwindow", &["f"], &["1", "3600"]),
        (
            "RL.SLIDINGWINDOW",
            "rl_slidingwindow",
            &["w"],
            &["1", "3600"],
        ),
        ("RL.SLIDINGLOG", "rl_slidinglog", &["s1"], &["1", "3600"]),
        ("RL.SLIDINGLOG", "rl_slidinglog", &["s2"], &["1", "1"]),
        (
            "RL.CONCURRENCY",
            "rl_concurrency",
            &["c1"],
            &["1", "3600", "ACQUIRE"],
        ),
        (
            "RL.CONCURRENCY",
            "rl_concurrency",
            &["c2"],
            &["1", "1", "ACQUIRE"],
        ),
        (
            "RL.ALL",
            "rl_all",
            &["a1", "a2"],
            &["GCRA", "0", "1", "3600", "SLIDINGLOG", "1", "1"],
        ),
    ];
    for (user, rules) in &users {
        let mut acl = redis::cmd("ACL");
        acl.arg("SETUSER")
            .arg(*user)
            .arg("on")
            .arg("nopass")
            .arg("~*")
            .arg("+@all");
        for rule in rules {
            acl.arg(*rule);
        }
        let _: () = acl.query(&mut admin).unwrap();
        let mut e = eval.connect();
        let _: () = redis::cmd("AUTH")
            .arg(*user)
            .arg("x")
            .query(&mut e)
            .unwrap();
        // Without NOW: the refused TIME, as an ERR without a location.
        let keys = vec!["nonow".to_string()];
        let args = ["0", "1", "1"].map(String::from).to_vec();
        // Each server words it its own way (Redis: "The user executing the
        // script can't run this command or subcommand"; Valkey: "ACL failure
        // in script: …"); none may carry a script's location.
        let got = client.call(&mut e, "rl_gcra", &keys, &args);
        let Value::SimpleString(text) = &got else {
            panic!("{user}: {got:?}");
        };
        assert!(text.starts_with("error: ERR "), "{user}: {text}");
        assert!(
            !text.contains("user_script") && !text.contains("user_function"),
            "{user}: {text}"
        );
        assert!(
            text.contains("can't run this command") || text.contains("no permissions"),
            "{user}: {text}"
        );
        let forms: &[bool] = if has_functions {
            &[false, true]
        } else {
            &[false]
        };
        for &fcall in forms {
            for (step, (block, id, later)) in [
                (None, "a", 0),
                (Some("5"), "b", 1_000),
                (None, "c", 1_000),
                (Some("2"), "d", 6_000_000),
                (None, "e", 6_000_000),
            ]
            .into_iter()
            .enumerate()
            {
                now_us += later;
                for &(command, function, keys, params) in cases {
                    let keys: Vec<String> =
                        keys.iter().map(|k| format!("{user}:{fcall}:{k}")).collect();
                    let mut args: Vec<String> = params.iter().map(|p| p.to_string()).collect();
                    if command == "RL.CONCURRENCY" {
                        args.push(id.into());
                    }
                    if let Some(block) = block {
                        args.extend(["BLOCK".to_string(), block.to_string()]);
                    }
                    let mut module_cmd = redis::cmd(command);
                    if command == "RL.ALL" {
                        module_cmd.arg(keys.len());
                    }
                    module_cmd.arg(&keys).arg(&args);
                    let _: Value = redis::cmd("RL.DEBUGCLOCK")
                        .arg(now_us)
                        .query(&mut m)
                        .unwrap();
                    let want = value(module_cmd.query(&mut m));
                    args.extend(["NOW".to_string(), now_us.to_string()]);
                    let got = if fcall {
                        let mut c = redis::cmd("FCALL");
                        c.arg(function).arg(keys.len()).arg(&keys).arg(&args);
                        value(c.query(&mut e))
                    } else {
                        client.call(&mut e, function, &keys, &args)
                    };
                    let what =
                        format!("{user}, step {step}, fcall {fcall}: {command} {keys:?} {args:?}");
                    assert_eq!(got, want, "{what}");
                    for key in &keys {
                        let (mv, mat) = stored(&mut m, key);
                        let (ev, eat) = stored(&mut admin, key);
                        assert_eq!(ev, mv, "{what}: the value of {key}");
                        assert!(
                            (eat - mat).abs() <= 2,
                            "{what}: {key} expires at {eat} vs the module's {mat}"
                        );
                    }
                    if step == 1 {
                        assert!(
                            matches!(&want, Value::Array(v) if v.first() == Some(&Value::Int(1))),
                            "{what}: {want:?}"
                        );
                    }
                }
            }
        }
    }
}
