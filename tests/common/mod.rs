//! Test harness: real `redis-server` processes with the module loaded, each on
//! a free loopback port in its own temporary directory, killed on drop.
//!
//! * `RATELIMIT_MODULE` — path of the module (default: the debug build,
//!   `target/debug/libredis_ratelimit.so`; `make test` builds it first);
//! * `REDIS_SERVER` — the server binary (default: `redis-server` on `PATH`);
//! * `RATELIMIT_TEST_STARTUP_SECS` — how long a server may take to start
//!   (default 10 s; valgrind needs longer);
//! * `RATELIMIT_TEST_STOP_SECS` — when set, a dropped server gets `SIGTERM`
//!   and that long to exit before `SIGKILL` (so that a server under valgrind
//!   writes its error summary); by default it is killed at once;
//! * `RATELIMIT_ENGINE` — `module` (the default) or `functions`: the engine
//!   the tests run against. With `functions`, [`Server::start`] and its
//!   siblings start the server without the module and `FUNCTION LOAD` the
//!   library (`functions/ratelimit.lua`, or `RATELIMIT_LIBRARY`), and
//!   [`query`] (so [`call`], [`call_err`]) and [`cmd`] send `RL.X key …` as
//!   `FCALL rl_x 1 key …` and `RL.ALL n k… …` as `FCALL rl_all n k… …`
//!   ([`translate`]). Module-only tests call [`module_only`] first;
//! * `RATELIMIT_LIBRARY` — path of the Functions library (default:
//!   `functions/ratelimit.lua`).
#![allow(dead_code)] // each test binary uses its own part of the harness

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The module under test.
pub fn module_path() -> PathBuf {
    let path = std::env::var_os("RATELIMIT_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("target/debug/libredis_ratelimit.so")
        });
    assert!(
        path.exists(),
        "module not found at {}: run `make test` (or `cargo build` first)",
        path.display()
    );
    path
}

/// The engine under test (`RATELIMIT_ENGINE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// The module's commands (`--loadmodule`).
    Module,
    /// The Functions library's (`FCALL`), on a server without the module.
    Functions,
}

/// The engine the tests run against: `RATELIMIT_ENGINE=functions` or the
/// module.
pub fn engine() -> Engine {
    match std::env::var("RATELIMIT_ENGINE").as_deref() {
        Ok("functions") => Engine::Functions,
        Ok("module") | Ok("") | Err(_) => Engine::Module,
        Ok(other) => panic!("RATELIMIT_ENGINE={other}: expected module or functions"),
    }
}

/// Whether a test that only makes sense for the module (policies, INFO,
/// configs, module loading, RDB/AOF of module data, debug commands) runs:
/// under `RATELIMIT_ENGINE=functions` it says it is skipped, and why, and
/// the test returns.
pub fn module_only(why: &str) -> bool {
    if engine() == Engine::Functions {
        eprintln!("skipped under RATELIMIT_ENGINE=functions (module-only: {why})");
        return false;
    }
    true
}

/// The Functions library's source: `RATELIMIT_LIBRARY`, or
/// `functions/ratelimit.lua`.
pub fn library_source() -> String {
    let path = std::env::var_os("RATELIMIT_LIBRARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("functions/ratelimit.lua"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("the library at {}: {e}", path.display()))
}

/// Loads (or replaces) the Functions library on a server.
pub fn load_library(con: &mut redis::Connection) {
    let name: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(library_source())
        .query(con)
        .unwrap_or_else(|e| panic!("FUNCTION LOAD of the library: {e}"));
    assert_eq!(name, "ratelimit");
}

/// The library's function for a module command (`RL.GCRA` → `rl_gcra`), for
/// the commands the library offers.
pub fn function_of(command: &str) -> Option<&'static str> {
    const PAIRS: [(&str, &str); 9] = [
        ("RL.GCRA", "rl_gcra"),
        ("RL.TOKENBUCKET", "rl_tokenbucket"),
        ("RL.LEAKYBUCKET", "rl_leakybucket"),
        ("RL.FIXEDWINDOW", "rl_fixedwindow"),
        ("RL.SLIDINGWINDOW", "rl_slidingwindow"),
        ("RL.SLIDINGLOG", "rl_slidinglog"),
        ("RL.CONCURRENCY", "rl_concurrency"),
        ("CL.THROTTLE", "cl_throttle"),
        ("RL.ALL", "rl_all"),
    ];
    PAIRS
        .iter()
        .find(|(c, _)| c.eq_ignore_ascii_case(command))
        .map(|(_, f)| *f)
}

/// A command as the engine under test takes it: unchanged for the module;
/// for the library, `RL.X key …` → `FCALL rl_x 1 key …` and
/// `RL.ALL n k… …` → `FCALL rl_all n k… …` (other commands unchanged).
/// `RL.X` without a key becomes `FCALL rl_x 0` (the library's error then
/// differs from the module's arity error: tests of that skip).
pub fn translate<'a>(args: &[&'a str]) -> Vec<std::borrow::Cow<'a, str>> {
    use std::borrow::Cow;
    let function = match (engine(), args.first().and_then(|c| function_of(c))) {
        (Engine::Functions, Some(f)) => f,
        _ => return args.iter().map(|a| Cow::Borrowed(*a)).collect(),
    };
    let mut out = vec![Cow::Borrowed("FCALL"), Cow::Borrowed(function)];
    if function == "rl_all" {
        // FCALL's own numkeys replaces RL.ALL's.
        out.extend(args[1..].iter().map(|a| Cow::Borrowed(*a)));
    } else {
        out.push(Cow::Borrowed(if args.len() > 1 { "1" } else { "0" }));
        out.extend(args[1..].iter().map(|a| Cow::Borrowed(*a)));
    }
    out
}

/// A `redis::Cmd` for `args`, translated for the engine under test
/// ([`translate`]): for pipelines and for tests that build commands.
pub fn cmd(args: &[&str]) -> redis::Cmd {
    let words = translate(args);
    let mut cmd = redis::cmd(&words[0]);
    for a in &words[1..] {
        cmd.arg(a.as_ref());
    }
    cmd
}

/// [`cmd`] for arguments that may not be UTF-8 (the command name is).
pub fn cmd_bytes(name: &str, args: &[&[u8]]) -> redis::Cmd {
    let head = translate(&[name, "key"]);
    let mut cmd = redis::cmd(&head[0]);
    // `translate` of `[name, "key"]`: the words before the key.
    for a in &head[1..head.len() - 1] {
        if a == "0" || a == "1" {
            // numkeys: 1 when a key follows (RL.ALL is not built here).
            cmd.arg(if args.is_empty() { "0" } else { "1" });
        } else {
            cmd.arg(a.as_ref());
        }
    }
    for a in args {
        cmd.arg(*a);
    }
    cmd
}

/// The server binary.
pub fn server_binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

/// How long a server may take to start: 10 s, or `RATELIMIT_TEST_STARTUP_SECS`
/// (valgrind needs longer).
fn startup_timeout() -> Duration {
    let secs = std::env::var("RATELIMIT_TEST_STARTUP_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    Duration::from_secs(secs)
}

/// How long a dropped server may take to exit after `SIGTERM`; `None`
/// (the default): `SIGKILL` at once.
fn stop_timeout() -> Option<Duration> {
    let secs: u64 = std::env::var("RATELIMIT_TEST_STOP_SECS")
        .ok()?
        .parse()
        .ok()?;
    Some(Duration::from_secs(secs))
}

/// A free loopback port ≤ 55535 (so that a cluster bus at port + 10000 fits).
pub fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = listener.local_addr().expect("local addr").port();
        if port <= 55_535 {
            return port;
        }
    }
}

/// A running `redis-server` with the module loaded.
pub struct Server {
    child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Server {
    /// A server with nothing persisted.
    pub fn start() -> Server {
        Server::start_with(&["--save", "", "--appendonly", "no"])
    }

    /// A server with extra configuration arguments (`--name value` pairs).
    pub fn start_with(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        Server::start_in(dir, extra)
    }

    /// A server whose working directory (RDB / AOF files) is `dir`, with the
    /// engine under test: the module loaded, or (`RATELIMIT_ENGINE=functions`)
    /// the library loaded on a server without the module.
    pub fn start_in(dir: tempfile::TempDir, extra: &[&str]) -> Server {
        if engine() == Engine::Functions {
            let server = Server::launch(dir, &[], extra);
            load_library(&mut server.connect());
            return server;
        }
        let module = module_path();
        let load: [&std::ffi::OsStr; 2] = ["--loadmodule".as_ref(), module.as_os_str()];
        Server::launch(dir, &load, extra)
    }

    /// A server with the module loaded, whatever the engine under test.
    pub fn start_module(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let module = module_path();
        let load: [&std::ffi::OsStr; 2] = ["--loadmodule".as_ref(), module.as_os_str()];
        Server::launch(dir, &load, extra)
    }

    /// A server without the module, the Functions library loaded.
    pub fn start_library(extra: &[&str]) -> Server {
        let server = Server::start_without_module(extra);
        load_library(&mut server.connect());
        server
    }

    /// A server without the module (to `MODULE LOAD` it later).
    pub fn start_without_module(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        Server::launch(dir, &[], extra)
    }

    /// A server without the module, on the files of `dir` (an RDB, say).
    pub fn start_without_module_in(dir: tempfile::TempDir, extra: &[&str]) -> Server {
        Server::launch(dir, &[], extra)
    }

    /// A server that loads the module with `module_args`
    /// (`--loadmodule <path> policies unloadable`).
    pub fn start_with_module_args(module_args: &[&str], extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        Server::start_in_with_module_args(dir, module_args, extra)
    }

    /// A server that loads the module with `module_args`, on the files of
    /// `dir`.
    pub fn start_in_with_module_args(
        dir: tempfile::TempDir,
        module_args: &[&str],
        extra: &[&str],
    ) -> Server {
        let module = module_path();
        let mut load: Vec<&std::ffi::OsStr> = vec!["--loadmodule".as_ref(), module.as_os_str()];
        load.extend(module_args.iter().map(|a| std::ffi::OsStr::new(*a)));
        Server::launch(dir, &load, extra)
    }

    /// A server of another binary (`EVAL_SERVER`, say), without the module.
    pub fn start_binary(binary: &str, extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        Server::launch_binary(binary, dir, &[], extra)
    }

    fn launch(dir: tempfile::TempDir, load: &[&std::ffi::OsStr], extra: &[&str]) -> Server {
        Server::launch_binary(&server_binary(), dir, load, extra)
    }

    fn launch_binary(
        binary: &str,
        dir: tempfile::TempDir,
        load: &[&std::ffi::OsStr],
        extra: &[&str],
    ) -> Server {
        for _attempt in 0..5 {
            let port = free_port();
            let mut child = Command::new(binary)
                .arg("--port")
                .arg(port.to_string())
                .args([
                    "--bind",
                    "127.0.0.1",
                    "--daemonize",
                    "no",
                    "--loglevel",
                    "notice",
                ])
                .arg("--dir")
                .arg(dir.path())
                .arg("--logfile")
                .arg(dir.path().join("server.log"))
                .args(load)
                .args(extra)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start redis-server (is it installed? set REDIS_SERVER)");
            if wait_ready(&mut child, port, startup_timeout()) {
                return Server { child, port, dir };
            }
            // The port was taken in the meantime, or the server failed.
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default();
            if !log.contains("Address already in use") {
                panic!("redis-server did not start:\n{log}");
            }
        }
        panic!("could not start redis-server on a free port");
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).expect("client")
    }

    /// A new connection to this server. A connect a signal interrupted
    /// (`EINTR`: seen once in CI, 2026-11-28) is tried again, up to 3 times.
    pub fn connect(&self) -> redis::Connection {
        let client = self.client();
        let mut tries = 0;
        loop {
            match client.get_connection_with_timeout(Duration::from_secs(5)) {
                Ok(con) => return con,
                Err(e) if tries < 3 && e.to_string().contains("Interrupted system call") => {
                    tries += 1;
                }
                Err(e) => panic!("connect: {e}"),
            }
        }
    }

    /// Whether the process is still running (a module panic would abort it).
    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// Stops the server (SHUTDOWN with the given mode, e.g. "NOSAVE" or "SAVE").
    pub fn shutdown(mut self, mode: &str) -> tempfile::TempDir {
        let mut con = self.connect();
        let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").arg(mode).query(&mut con);
        let _ = self.child.wait();
        std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let (Some(timeout), Ok(None)) = (stop_timeout(), self.child.try_wait()) {
            if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
                // SAFETY: a plain kill(2) on our own child, which has not
                // been reaped (try_wait said it runs), so the pid is its own.
                unsafe { libc::kill(pid, libc::SIGTERM) };
                let deadline = Instant::now() + timeout;
                while Instant::now() < deadline {
                    if !matches!(self.child.try_wait(), Ok(None)) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_ready(child: &mut Child, port: u16, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("client");
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return false; // exited
        }
        if let Ok(mut con) = client.get_connection_with_timeout(Duration::from_millis(200)) {
            if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// The five integers of an `RL.*` / `CL.THROTTLE` reply.
/// Starts a server without the module on the files of `dir`, expecting it
/// to refuse them and exit; returns its log.
pub fn run_without_module_expecting_exit(dir: tempfile::TempDir, extra: &[&str]) -> String {
    let port = free_port();
    let mut child = Command::new(server_binary())
        .arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1", "--daemonize", "no"])
        .arg("--dir")
        .arg(dir.path())
        .arg("--logfile")
        .arg(dir.path().join("server.log"))
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-server");
    let deadline = Instant::now() + startup_timeout();
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server did not refuse the files and exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default()
}

pub type Reply = [i64; 5];

/// Runs a command and returns its five-integer reply.
pub fn call(con: &mut redis::Connection, args: &[&str]) -> Reply {
    let v: Vec<i64> = query(con, args).unwrap_or_else(|e| panic!("{args:?} failed: {e}"));
    v.try_into()
        .unwrap_or_else(|v: Vec<i64>| panic!("{args:?}: expected 5 integers, got {v:?}"))
}

/// Runs a command and returns its error text (`"ERR …"`, `"WRONGTYPE …"`).
pub fn call_err(con: &mut redis::Connection, args: &[&str]) -> String {
    match query::<redis::Value>(con, args) {
        Ok(v) => panic!("{args:?}: expected an error, got {v:?}"),
        Err(e) => error_text(&e),
    }
}

/// The full error text as the server sent it: code, then message.
pub fn error_text(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => e.to_string(),
    }
}

/// Runs any command (a limiter's translated for the engine under test:
/// [`translate`]).
pub fn query<T: redis::FromRedisValue>(
    con: &mut redis::Connection,
    args: &[&str],
) -> redis::RedisResult<T> {
    cmd(args).query(con)
}

/// Each key's `DUMP` (value and encoding) and absolute expiry in ms; panics
/// when a key is missing or has no expiry.
pub fn snapshot(con: &mut redis::Connection, keys: &[String]) -> Vec<(String, Vec<u8>, i64)> {
    keys.iter()
        .map(|k| {
            let dump: Vec<u8> = query(con, &["DUMP", k]).unwrap();
            assert!(!dump.is_empty(), "{k} missing");
            let expire: i64 = query(con, &["PEXPIRETIME", k]).unwrap();
            assert!(expire > 0, "{k} has no expiry");
            (k.clone(), dump, expire)
        })
        .collect()
}

/// Waits (up to 20 s) until a replica's link to its master is up.
pub fn wait_for_sync(replica: &mut redis::Connection) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info: String = query(replica, &["INFO", "replication"]).unwrap();
        if info.contains("master_link_status:up") {
            return;
        }
        assert!(Instant::now() < deadline, "replica did not sync:\n{info}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How many writes the limiters made: the module's own counters
/// (`INFO ratelimit`), or, for the library, the server's changes since the
/// last save (each effect of a function counts).
pub fn writes_counter(con: &mut redis::Connection) -> i64 {
    match engine() {
        Engine::Module => {
            info_int(con, "ratelimit", "ratelimit_writes_propagated")
                + info_int(con, "ratelimit", "ratelimit_writes_unpropagated")
        }
        Engine::Functions => info_int(con, "persistence", "rdb_changes_since_last_save"),
    }
}

/// The sliding log's largest limit: the module's setting (`INFO
/// ratelimit`), or the library's fixed default.
pub fn sliding_log_max_limit(con: &mut redis::Connection) -> String {
    match engine() {
        Engine::Module => info_field(con, "ratelimit", "ratelimit_sliding_log_max_limit"),
        Engine::Functions => "1000".to_string(),
    }
}

/// The AOF's text, upper case, without the Functions library's source (a
/// `FUNCTION LOAD` carries it, and it names the commands): what is left are
/// the effects and any command that was logged.
pub fn aof_text(dir: &std::path::Path) -> String {
    let text = String::from_utf8_lossy(&aof_contents(dir)).to_uppercase();
    text.replace(&library_source().to_uppercase(), "")
}

/// Every AOF file of a server directory, concatenated.
pub fn aof_contents(dir: &std::path::Path) -> Vec<u8> {
    let mut all = Vec::new();
    let aof_dir = dir.join("appendonlydir");
    for entry in std::fs::read_dir(&aof_dir).expect("appendonlydir") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "aof") {
            all.extend(std::fs::read(path).unwrap());
        }
    }
    all
}

/// A field of an `INFO` section, e.g. `info_field(con, "replication",
/// "connected_slaves")`; panics when the server does not report it.
pub fn info_field(con: &mut redis::Connection, section: &str, field: &str) -> String {
    let info: String = query(con, &["INFO", section]).unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("INFO {section} has no {field}:\n{info}"))
        .trim()
        .to_string()
}

/// A numeric field of an `INFO` section; panics when it is missing or not a
/// number.
pub fn info_int(con: &mut redis::Connection, section: &str, field: &str) -> i64 {
    let value = info_field(con, section, field);
    value
        .parse()
        .unwrap_or_else(|_| panic!("INFO {section} {field} is not a number: {value}"))
}

/// Polls `done` every 10 ms until it returns true; panics, naming `what`,
/// after `within`.
pub fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Polls `done` every 10 ms for at most `within`; whether it became true.
pub fn poll_until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    done()
}

/// `SLOWLOG GET` entries (command and µs) of the module's commands, and
/// of the library's calls (`FCALL`, `EVALSHA`): under
/// `RATELIMIT_ENGINE=functions` the same checks hold the library to them.
pub fn slow_module_calls(con: &mut redis::Connection) -> Vec<(String, i64)> {
    slow_calls(con, true)
}

/// [`slow_module_calls`], and the library's (`FCALL`, `EVALSHA`) too.
pub fn slow_calls_of_either_engine(con: &mut redis::Connection) -> Vec<(String, i64)> {
    slow_calls(con, true)
}

fn slow_calls(con: &mut redis::Connection, library_calls: bool) -> Vec<(String, i64)> {
    let entries: Vec<redis::Value> = query(con, &["SLOWLOG", "GET", "1000"]).unwrap();
    let mut slow = Vec::new();
    for entry in entries {
        let redis::Value::Array(fields) = entry else {
            continue;
        };
        let micros = match fields.get(2) {
            Some(redis::Value::Int(us)) => *us,
            _ => -1,
        };
        let command = match fields.get(3) {
            Some(redis::Value::Array(args)) => args
                .iter()
                .map(|a| match a {
                    redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    other => format!("{other:?}"),
                })
                .collect::<Vec<_>>()
                .join(" "),
            _ => String::new(),
        };
        let lower = command.to_ascii_lowercase();
        let library = library_calls && ["fcall", "evalsha"].iter().any(|p| lower.starts_with(p));
        if lower.starts_with("rl.") || lower.starts_with("cl.") || library {
            slow.push((command, micros));
        }
    }
    slow
}

/// Fills `key` with `count` log entries scored one hour before now (long
/// outside any short window), the `i`-th with member `member(i)`, then one
/// valid newest entry (member 0, as old), in batches so that no single ZADD
/// is slow itself. Returns the server's clock in µs.
pub fn fill_stale_log(
    con: &mut redis::Connection,
    key: &str,
    count: usize,
    member: impl Fn(usize) -> String,
) -> i64 {
    let now_us: i64 = {
        let t: Vec<String> = query(con, &["TIME"]).unwrap();
        t[0].parse::<i64>().unwrap() * 1_000_000 + t[1].parse::<i64>().unwrap()
    };
    let old = now_us - 3_600_000_000;
    let batch = 5_000;
    let mut pipe = redis::pipe();
    for start in (0..count).step_by(batch) {
        let mut cmd = redis::cmd("ZADD");
        cmd.arg(key);
        for i in start..(start + batch).min(count) {
            cmd.arg(old + i as i64).arg(member(i));
        }
        pipe.add_command(cmd).ignore();
    }
    pipe.query::<()>(con).unwrap();
    // The newest entry is one the module could have written: member 0.
    let _: i64 = query(con, &["ZADD", key, &(old + count as i64).to_string(), "0"]).unwrap();
    now_us
}
