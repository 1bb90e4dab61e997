//! A keyspace-event subscriber that changes the key from its callback (as
//! Redis 7.0 allows) must not be able to crash the server through our
//! commands: every command raises its events only after its last use of the
//! key and of any pointer into it.
//!
//! `tests/keyspace_module/evil.c`, compiled here with `cc`, is loaded on the
//! master after our module and, on every event for a key under its prefix,
//! deletes the key, rewrites it (a foreign sorted-set member or a string),
//! expires it in 1 ms or expires it in the past. For each of those modes,
//! every command is called in every shape that reaches a different write:
//! a missing key, an existing one, `TOKENS n`, a limited call, `BLOCK`,
//! `PEEK`, `REFUND` (partial, and back to full: a `DEL`), sliding logs with
//! a few, more than 32 and more than one call removes stale entries. Each
//! case builds its state with the hostile module disarmed, arms it, calls
//! (then calls once more on whatever the module left) and disarms it. Every
//! call must get a reply: its integers or an error (not the module's
//! "internal error"), never a dropped connection. A replica without the
//! hostile module holds exactly what the master propagated: at the end both
//! have the same keys, `DUMP` and `PEXPIRETIME`.
//!
//! A failure lists every case that failed with the server's crash lines; the
//! servers are restarted after a crash so that the later cases still run.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::{module_path, query, wait_for_sync, Server};
use redis::Value;

/// The hostile module acts on keys starting with this (`EVIL.PREFIX`)…
const ARMED: &str = "evil:";
/// …and on none while this is its prefix.
const DISARMED: &str = "-disarmed-";
/// How long any reply may take: a hung server fails the test, never hangs it.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Builds the hostile module once per test binary (the tests run in
/// parallel: the first one builds, the others wait); `None` when there is no
/// C compiler.
fn evil_module() -> Option<PathBuf> {
    static BUILT: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    BUILT.get_or_init(build_evil_module).clone()
}

fn build_evil_module() -> Option<PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/keyspace_module/evil.c");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ratelimit-evil-{}.so", std::process::id()));
    let output = match Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&out)
        .arg(&source)
        .output()
    {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!(
                "SKIPPED: no C compiler `{cc}` to build {} (install build-essential or set CC)",
                source.display()
            );
            return None;
        }
        Err(e) => panic!("running {cc}: {e}"),
    };
    assert!(
        output.status.success(),
        "{cc} failed on {}:\n{}",
        source.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    Some(out)
}

/// One step of building a case's state.
enum Step {
    Call(Vec<String>),
    /// Calls until the limiter refuses.
    UntilLimited(Vec<String>),
    Sleep(u64),
}

struct Case {
    /// `<command>:<shape>`, also the key (under the prefix).
    name: String,
    /// Run with the hostile module disarmed.
    setup: Vec<Step>,
    /// The call under test, armed.
    call: Vec<String>,
    /// Whether `call` writes, so that the hostile module must have acted.
    writes: bool,
    /// A second armed call, on whatever the hostile module left.
    again: Vec<String>,
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn with(base: &[String], extra: &[&str]) -> Vec<String> {
    let mut v = base.to_vec();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// The commands, each as a function of its key: limits that allow 3 tokens
/// and refill slowly (60 s), so that a key lives through the test.
type Base = fn(&str) -> Vec<String>;
const RL_COMMANDS: &[(&str, Base)] = &[
    ("gcra", |k| strings(&["RL.GCRA", k, "2", "1", "60"])),
    ("tokenbucket", |k| {
        strings(&["RL.TOKENBUCKET", k, "3", "1", "60"])
    }),
    ("leakybucket", |k| {
        strings(&["RL.LEAKYBUCKET", k, "3", "1", "60"])
    }),
    ("fixedwindow", |k| {
        strings(&["RL.FIXEDWINDOW", k, "3", "60"])
    }),
    ("slidingwindow", |k| {
        strings(&["RL.SLIDINGWINDOW", k, "3", "60"])
    }),
    ("slidinglog", |k| strings(&["RL.SLIDINGLOG", k, "3", "60"])),
    ("all", |k| {
        let (a, b) = (format!("{k}:a"), format!("{k}:b"));
        strings(&[
            "RL.ALL",
            "2",
            &a,
            &b,
            "GCRA",
            "2",
            "1",
            "60",
            "SLIDINGLOG",
            "3",
            "60",
        ])
    }),
];

/// A sliding log's window in the stale cases: its entries taken at `t0`
/// leave it while the key lives on through one entry taken at `t0 + W/2`.
const STALE_WINDOW: &str = "0.2";
const STALE_HALF_MS: u64 = 120;

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut add = |name: String, setup: Vec<Step>, call: Vec<String>, writes: bool| {
        let again = call.clone();
        cases.push(Case {
            name,
            setup,
            call,
            writes,
            again,
        });
    };
    for (label, base) in RL_COMMANDS {
        let key = |shape: &str| format!("{ARMED}{label}:{shape}");
        let b = |shape: &str| base(&key(shape));
        add(key("new"), vec![], b("new"), true);
        let k = b("existing");
        add(key("existing"), vec![Step::Call(k.clone())], k, true);
        let k = b("tokens");
        add(
            key("tokens"),
            vec![Step::Call(k.clone())],
            with(&k, &["TOKENS", "2"]),
            true,
        );
        let k = b("limited");
        add(
            key("limited"),
            vec![Step::UntilLimited(k.clone())],
            k,
            false,
        );
        let k = b("block");
        add(
            key("block"),
            vec![Step::UntilLimited(k.clone())],
            with(&k, &["BLOCK", "60"]),
            true,
        );
        let k = b("peek");
        add(
            key("peek"),
            vec![Step::Call(k.clone())],
            with(&k, &["PEEK"]),
            false,
        );
        // Back to full: the key is deleted (`del`).
        let k = b("refund-all");
        add(
            key("refund-all"),
            vec![Step::Call(k.clone())],
            with(&k, &["REFUND", "1"]),
            true,
        );
        let k = b("refund-some");
        let setup = vec![Step::Call(with(&k, &["TOKENS", "2"]))];
        add(key("refund-some"), setup, with(&k, &["REFUND", "1"]), true);
    }
    let cell = |shape: &str| {
        strings(&[
            "CL.THROTTLE",
            &format!("{ARMED}cell:{shape}"),
            "2",
            "1",
            "60",
        ])
    };
    add(format!("{ARMED}cell:new"), vec![], cell("new"), true);
    let k = cell("existing");
    add(
        format!("{ARMED}cell:existing"),
        vec![Step::Call(k.clone())],
        k,
        true,
    );
    let k = cell("quantity");
    add(
        format!("{ARMED}cell:quantity"),
        vec![Step::Call(k.clone())],
        with(&k, &["2"]),
        true,
    );
    let k = cell("limited");
    add(
        format!("{ARMED}cell:limited"),
        vec![Step::UntilLimited(k.clone())],
        k,
        false,
    );
    let k = cell("zero");
    add(
        format!("{ARMED}cell:zero"),
        vec![Step::Call(k.clone())],
        with(&k, &["0"]),
        false,
    );
    // Sliding logs with stale entries: `n` entries at t0, one more at t0 +
    // W/2, the call at t0 + W + a bit (the n entries stale, the key alive).
    // More than 32 once took another removal path; more than `1 + 128` are
    // more than one call removes. The second call uses a long window, so the
    // key (whatever the hostile module made of it) lives to the comparison
    // with the replica.
    for (shape, n, tokens) in [
        ("stale-5", "5", "1"),
        ("stale-40", "40", "1"),
        ("stale-40-tokens", "40", "3"),
        ("stale-300", "300", "1"),
    ] {
        let name = format!("{ARMED}slidinglog:{shape}");
        let log = strings(&["RL.SLIDINGLOG", &name, "1000", STALE_WINDOW]);
        let setup = vec![
            Step::Call(with(&log, &["TOKENS", n])),
            Step::Sleep(STALE_HALF_MS),
            Step::Call(log.clone()),
            Step::Sleep(STALE_HALF_MS),
        ];
        let again = strings(&["RL.SLIDINGLOG", &name, "1000", "60"]);
        cases.push(Case {
            name,
            setup,
            call: with(&log, &["TOKENS", tokens]),
            writes: true,
            again,
        });
    }
    let name = format!("{ARMED}all:stale-40");
    let (a, b) = (format!("{name}:a"), format!("{name}:b"));
    let log = strings(&["RL.SLIDINGLOG", &b, "1000", STALE_WINDOW]);
    let all = |window: &str| {
        let limits = ["GCRA", "2", "1", "60", "SLIDINGLOG", "1000", window];
        with(&strings(&["RL.ALL", "2", &a, &b]), &limits)
    };
    cases.push(Case {
        name: name.clone(),
        setup: vec![
            Step::Call(with(&log, &["TOKENS", "40"])),
            Step::Sleep(STALE_HALF_MS),
            Step::Call(log.clone()),
            Step::Sleep(STALE_HALF_MS),
        ],
        call: all(STALE_WINDOW),
        writes: true,
        again: all("60"),
    });
    cases
}

/// A master with our module and the hostile one, and a replica (our module
/// only) that holds exactly what the master propagated.
struct Pair {
    master: Server,
    replica: Server,
    m: redis::Connection,
    r: redis::Connection,
}

fn connect(server: &Server) -> redis::Connection {
    let con = server.connect();
    con.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
    con.set_write_timeout(Some(REPLY_TIMEOUT)).unwrap();
    con
}

fn start_pair(evil: &std::path::Path, mode: &str) -> Pair {
    let module = module_path();
    let master = Server::start_without_module(&[
        "--save",
        "",
        "--appendonly",
        "no",
        // The replica's full sync at once (no diskless delay).
        "--repl-diskless-sync-delay",
        "0",
        "--loadmodule",
        module.to_str().unwrap(),
        "--loadmodule",
        evil.to_str().unwrap(),
        mode,
        DISARMED,
    ]);
    let replica = Server::start();
    let mut r = connect(&replica);
    let _: () = query(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    )
    .unwrap();
    wait_for_sync(&mut r);
    let m = connect(&master);
    Pair {
        master,
        replica,
        m,
        r,
    }
}

/// The lines of a server log that say why it died.
fn crash_lines(log: &str) -> String {
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| {
            [
                "ASSERTION FAILED",
                "Assertion",
                "crashed by signal",
                "panicked",
                "Guru Meditation",
            ]
            .iter()
            .any(|p| l.contains(p))
        })
        .take(6)
        .collect();
    if lines.is_empty() {
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(15)..].join("\n")
    } else {
        lines.join("\n")
    }
}

/// How many integers `args[0]` replies with: five, and `RL.ALL` a sixth
/// (the binding limit's position).
fn reply_len(args: &[String]) -> usize {
    if args[0] == "RL.ALL" {
        6
    } else {
        5
    }
}

/// `Ok` for the command's integers or an error reply other than a caught
/// panic.
fn check_reply(args: &[String], reply: redis::RedisResult<Value>) -> Result<(), String> {
    match reply {
        Ok(Value::Array(items))
            if items.len() == reply_len(args)
                && items.iter().all(|v| matches!(v, Value::Int(_))) =>
        {
            Ok(())
        }
        Ok(other) => Err(format!("{args:?} replied {other:?}")),
        Err(e) if e.code().is_some() && !e.to_string().contains("internal error") => Ok(()),
        Err(e) => Err(format!("{args:?}: {e}")),
    }
}

fn call<T: redis::FromRedisValue>(
    con: &mut redis::Connection,
    args: &[String],
) -> redis::RedisResult<T> {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    query(con, &refs)
}

/// Builds a case's state (disarmed): every call must be an ordinary reply.
fn setup(con: &mut redis::Connection, steps: &[Step]) -> Result<(), String> {
    for step in steps {
        match step {
            Step::Call(args) => {
                let v: Vec<i64> =
                    call::<Vec<i64>>(con, args).map_err(|e| format!("setup {args:?}: {e}"))?;
                if v.len() != reply_len(args) {
                    return Err(format!("setup {args:?} replied {v:?}"));
                }
            }
            Step::UntilLimited(args) => {
                let limited = (0..20).any(|_| {
                    let v: Vec<i64> = call::<Vec<i64>>(con, args).unwrap_or_default();
                    v.first() == Some(&1)
                });
                if !limited {
                    return Err(format!("setup {args:?} never refused"));
                }
            }
            Step::Sleep(ms) => std::thread::sleep(Duration::from_millis(*ms)),
        }
    }
    Ok(())
}

fn prefix(con: &mut redis::Connection, p: &str) -> redis::RedisResult<()> {
    query(con, &["EVIL.PREFIX", p])
}

fn acts(con: &mut redis::Connection) -> redis::RedisResult<i64> {
    query(con, &["EVIL.ACTS"])
}

/// Runs one case; `Err` names what went wrong.
fn run_case(m: &mut redis::Connection, case: &Case) -> Result<(), String> {
    prefix(m, DISARMED).map_err(|e| format!("EVIL.PREFIX: {e}"))?;
    setup(m, &case.setup)?;
    let before = acts(m).map_err(|e| format!("EVIL.ACTS: {e}"))?;
    prefix(m, ARMED).map_err(|e| format!("EVIL.PREFIX: {e}"))?;
    check_reply(&case.call, call(m, &case.call))?;
    let after = acts(m).map_err(|e| format!("EVIL.ACTS after the call: {e}"))?;
    check_reply(&case.again, call(m, &case.again)).map_err(|e| format!("the second call: {e}"))?;
    prefix(m, DISARMED).map_err(|e| format!("EVIL.PREFIX: {e}"))?;
    if case.writes && after == before {
        return Err(format!(
            "{:?} raised no event the hostile module acted on (the case tests nothing)",
            case.call
        ));
    }
    Ok(())
}

/// Each key's `DUMP` and `PEXPIRETIME`, read in one script.
fn snapshot(con: &mut redis::Connection, key: &str) -> redis::RedisResult<Value> {
    redis::cmd("EVAL")
        .arg("return {redis.call('DUMP', KEYS[1]), redis.call('PEXPIRETIME', KEYS[1])}")
        .arg(1)
        .arg(key)
        .query(con)
}

/// The replica holds what the master holds: same keys, values, expiries.
fn compare(pair: &mut Pair) -> Vec<String> {
    let mut problems = Vec::new();
    if !pair.replica.is_alive() {
        return vec![format!("the replica died:\n{}", pair.replica.log())];
    }
    // Keys expiring in 1 ms or within a short window are gone by now; reading
    // every key on the master expires (and propagates) what is due.
    std::thread::sleep(Duration::from_millis(500));
    let mut keys: Vec<String> = query(&mut pair.m, &["KEYS", "*"]).unwrap();
    for k in &keys {
        let _: i64 = query(&mut pair.m, &["EXISTS", k]).unwrap();
    }
    let acked: i64 = query(&mut pair.m, &["WAIT", "1", "5000"]).unwrap();
    if acked != 1 {
        problems.push("the replica did not acknowledge WAIT".to_string());
    }
    let replica_keys: Vec<String> = query(&mut pair.r, &["KEYS", "*"]).unwrap();
    keys.extend(replica_keys);
    keys.sort();
    keys.dedup();
    let size_m: i64 = query(&mut pair.m, &["DBSIZE"]).unwrap();
    let size_r: i64 = query(&mut pair.r, &["DBSIZE"]).unwrap();
    if size_m != size_r {
        problems.push(format!(
            "DBSIZE: {size_m} on the master, {size_r} on the replica"
        ));
    }
    for k in &keys {
        let a = snapshot(&mut pair.m, k).unwrap();
        let b = snapshot(&mut pair.r, k).unwrap();
        if a != b {
            problems.push(format!("{k} differs: master {a:?}, replica {b:?}"));
        }
    }
    problems
}

fn run_mode(mode: &str) {
    let Some(evil) = evil_module() else {
        return;
    };
    let mut pair = start_pair(&evil, mode);
    let mut failures: Vec<String> = Vec::new();
    let mut compared_from = 0;
    let all = cases();
    for (i, case) in all.iter().enumerate() {
        let Err(why) = run_case(&mut pair.m, case) else {
            continue;
        };
        if pair.master.is_alive() {
            failures.push(format!("{}: {why}", case.name));
            continue;
        }
        failures.push(format!(
            "{}: THE SERVER DIED: {why}\n    {}",
            case.name,
            crash_lines(&pair.master.log()).replace('\n', "\n    ")
        ));
        // The later cases still run, on new servers.
        pair = start_pair(&evil, mode);
        compared_from = i + 1;
    }
    for problem in compare(&mut pair) {
        failures.push(format!("replica: {problem}"));
    }
    let compared = all.len() - compared_from;
    assert!(
        failures.is_empty(),
        "mode {mode}: {} of {} cases or checks failed (the replica compared over the last {compared} cases):\n  {}",
        failures.len(),
        all.len(),
        failures.join("\n  ")
    );
    let total = acts(&mut pair.m).unwrap();
    eprintln!(
        "mode {mode}: {} cases, the hostile module wrote {total} times",
        all.len()
    );
}

#[test]
fn a_subscriber_deleting_the_key_in_its_callback_cannot_hurt() {
    if !common::module_only("the module's key pointers around keyspace-event subscribers") {
        return;
    }
    run_mode("del");
}

#[test]
fn a_subscriber_rewriting_the_key_in_its_callback_cannot_hurt() {
    if !common::module_only("the module's key pointers around keyspace-event subscribers") {
        return;
    }
    run_mode("rewrite");
}

#[test]
fn a_subscriber_expiring_the_key_in_its_callback_cannot_hurt() {
    if !common::module_only("the module's key pointers around keyspace-event subscribers") {
        return;
    }
    run_mode("expire");
}

#[test]
fn a_subscriber_expiring_the_key_in_the_past_in_its_callback_cannot_hurt() {
    if !common::module_only("the module's key pointers around keyspace-event subscribers") {
        return;
    }
    run_mode("expire-past");
}
