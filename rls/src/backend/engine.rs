//! The engine that decides (issue 31): the module's `RL.ALL` when the server
//! has the module, else the Functions library (`functions/ratelimit.lua`,
//! embedded here, contract in `docs/functions.md`) through `FCALL rl_all`,
//! else the same code through `EVALSHA` (`EVAL` on `NOSCRIPT`). The same
//! order, detection and recovery rules as the Python and Node clients
//! (`clients/python/src/redis_ratelimit/_engine.py`,
//! `clients/node/lib/engine.js`), with their option names: `RLS_ENGINE`
//! (`auto|module|functions|eval`) and `RLS_CLOCK` (`auto|server|caller`).

use std::sync::LazyLock;

use regex_lite::Regex;

use super::BackendError;

/// The library as `FUNCTION LOAD` takes it (first line `#!lua name=ratelimit`):
/// the repository's one source, embedded at build time.
pub const LIBRARY_CODE: &str = include_str!("../../../functions/ratelimit.lua");

/// The `EVAL` form: the library without its first line and without its
/// fast paths (the lines from `-- fast paths: begin` to `-- fast paths:
/// end`, which the EVAL form never runs); it dispatches on its first
/// argument, the function name.
pub fn eval_body() -> &'static str {
    static BODY: LazyLock<String> = LazyLock::new(|| eval_form(LIBRARY_CODE));
    &BODY
}

/// `library` as the `EVAL` form ([`eval_body`]).
fn eval_form(library: &str) -> String {
    let mut body = String::with_capacity(library.len());
    let mut skipping = false;
    for line in library.split_inclusive('\n').skip(1) {
        let bare = line.trim_end_matches('\n');
        if bare == "-- fast paths: begin" {
            skipping = true;
        }
        if !skipping {
            body.push_str(line);
        }
        if bare == "-- fast paths: end" {
            skipping = false;
        }
    }
    body
}

/// The SHA1 of [`eval_body`] (what `EVALSHA` names).
pub static EVAL_SHA: LazyLock<String> =
    LazyLock::new(|| redis::Script::new(eval_body()).get_hash().to_string());

/// The embedded copy's version: its `local VERSION = n` line, what
/// `FCALL_RO rl_version 0` answers once it is loaded (0: no such line, which
/// a unit test rules out).
pub static LIBRARY_VERSION: LazyLock<i64> = LazyLock::new(|| {
    LIBRARY_CODE
        .lines()
        .find_map(|l| l.strip_prefix("local VERSION = ")?.trim().parse().ok())
        .unwrap_or(0)
});

/// The engine in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// The module's `RL.ALL`.
    Module,
    /// The Functions library: `FCALL rl_all`.
    Functions,
    /// The library's code through `EVALSHA … rl_all` (`EVAL` on `NOSCRIPT`).
    Eval,
}

impl Engine {
    /// Every engine, in the order `auto` tries them.
    pub const ALL: [Engine; 3] = [Engine::Module, Engine::Functions, Engine::Eval];

    /// `module`, `functions` or `eval` (the metric's label, the logs' value).
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Module => "module",
            Engine::Functions => "functions",
            Engine::Eval => "eval",
        }
    }

    pub(super) fn code(self) -> u8 {
        match self {
            Engine::Module => 1,
            Engine::Functions => 2,
            Engine::Eval => 3,
        }
    }

    pub(super) fn from_code(code: u8) -> Option<Engine> {
        match code {
            1 => Some(Engine::Module),
            2 => Some(Engine::Functions),
            3 => Some(Engine::Eval),
            _ => None,
        }
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `FCALL`: the library is not loaded (on this node).
pub(super) static FUNCTION_NOT_FOUND: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)function not found").expect("a valid regex"));

/// The module's command is unknown: the module went away (a failover to a
/// server without it).
pub(super) static UNKNOWN_COMMAND: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)^ERR unknown command").expect("a valid regex"));

/// What a server answers when a script may not call `TIME`: ElastiCache
/// Serverless ("ERR This Redis command is not allowed from script"), an ACL
/// user without `+time` ("ERR The user executing the script can't run this
/// command or subcommand"), other versions' wordings. The clients' regex.
pub(super) static TIME_REFUSED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)not allowed from scripts?|can't run this command|no permissions to run the 'time' command",
    )
    .expect("a valid regex")
});

/// Replies that say "not now" rather than "not allowed": the engine is
/// looked for again on the next call.
pub(super) static NOT_NOW: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(LOADING|MASTERDOWN|TRYAGAIN|CLUSTERDOWN|BUSY|READONLY|NOREPLICAS|OOM)\b")
        .expect("a valid regex")
});

/// A server's error reply as it was sent (`CODE detail`); `None` for
/// anything else (I/O, a timeout, a parse error).
pub(super) fn reply_error(e: &redis::RedisError) -> Option<String> {
    let code = e.code()?;
    Some(match e.detail() {
        Some(detail) => format!("{code} {detail}"),
        None => code.to_string(),
    })
}

/// A server's error reply in `e`, as sent.
pub(super) fn backend_reply_error(e: &BackendError) -> Option<String> {
    match e {
        BackendError::Redis(e) => reply_error(e),
        _ => None,
    }
}

/// Whether `e` is a server's refusal (an error reply that is not "not now").
pub(super) fn refused(e: &BackendError) -> bool {
    backend_reply_error(e).is_some_and(|m| !NOT_NOW.is_match(&m))
}

/// The caller's clock in µs since the Unix epoch (`NOW`).
pub(super) fn caller_clock_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_library_has_a_version_and_an_eval_form() {
        assert!(LIBRARY_CODE.starts_with("#!lua name=ratelimit\n"));
        assert!(*LIBRARY_VERSION >= 1);
        // The library less its first line and its fast paths, nothing else.
        let (_, rest) = LIBRARY_CODE.split_once('\n').unwrap();
        let begin = rest.find("-- fast paths: begin\n").unwrap();
        let end = rest.find("-- fast paths: end\n").unwrap() + "-- fast paths: end\n".len();
        assert!(begin < end && rest[begin..end].contains("need_fast = "));
        assert_eq!(eval_body(), format!("{}{}", &rest[..begin], &rest[end..]));
        assert!(eval_body().contains("local FAST, need_fast\n"));
        assert_eq!(EVAL_SHA.len(), 40);
    }

    /// Each engine's words for the same `RL.ALL`.
    #[test]
    fn rl_all_through_each_engine() {
        use crate::backend::{rl_all_command, rl_all_command_for, LibraryCall, Op};
        let words = |cmd: &redis::Cmd| -> Vec<String> {
            cmd.args_iter()
                .map(|a| match a {
                    redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                    _ => "<not simple>".into(),
                })
                .collect()
        };
        let a: Vec<String> = vec!["FIXEDWINDOW".into(), "10".into(), "60".into()];
        let b: Vec<String> = vec!["GCRA".into(), "4".into(), "5".into(), "1".into()];
        let limits = [("k1", &a[..]), ("k2", &b[..])];
        let (module, with_limits) = rl_all_command(&limits, Op::Take(3));
        assert!(with_limits);
        let tail = "FIXEDWINDOW 10 60 GCRA 4 5 1 TOKENS 3 WITHLIMITS";
        assert_eq!(words(&module).join(" "), format!("RL.ALL 2 k1 k2 {tail}"));
        let call = |engine, with_body, now_us| LibraryCall {
            engine,
            with_body,
            now_us,
        };
        let (fcall, _) =
            rl_all_command_for(call(Engine::Functions, false, None), &limits, Op::Take(3));
        assert_eq!(
            words(&fcall).join(" "),
            format!("FCALL rl_all 2 k1 k2 {tail}")
        );
        let (fcall, _) =
            rl_all_command_for(call(Engine::Functions, false, Some(17)), &limits, Op::Peek);
        assert_eq!(
            words(&fcall).join(" "),
            "FCALL rl_all 2 k1 k2 FIXEDWINDOW 10 60 GCRA 4 5 1 PEEK WITHLIMITS NOW 17"
        );
        let (evalsha, _) =
            rl_all_command_for(call(Engine::Eval, false, None), &limits, Op::Take(3));
        assert_eq!(
            words(&evalsha).join(" "),
            format!("EVALSHA {} 2 k1 k2 rl_all {tail}", *EVAL_SHA)
        );
        let (eval, _) =
            rl_all_command_for(call(Engine::Eval, true, None), &limits[..1], Op::Refund(2));
        let eval = words(&eval);
        assert_eq!(eval[0], "EVAL");
        assert_eq!(eval[1], eval_body());
        assert_eq!(
            eval[2..].join(" "),
            "1 k1 rl_all FIXEDWINDOW 10 60 REFUND 2"
        );
        // The module never gets NOW: it reads the server's clock.
        let (module, _) = rl_all_command_for(
            call(Engine::Module, false, Some(17)),
            &limits[..1],
            Op::Take(1),
        );
        assert_eq!(words(&module).join(" "), "RL.ALL 1 k1 FIXEDWINDOW 10 60");
    }

    #[test]
    fn the_clients_detection_patterns() {
        for refused in [
            "ERR This Redis command is not allowed from script",
            "ERR The user executing the script can't run this command or subcommand",
            "NOPERM this user has no permissions to run the 'time' command",
        ] {
            assert!(TIME_REFUSED.is_match(refused), "{refused}");
        }
        assert!(!TIME_REFUSED.is_match("ERR syntax error"));
        assert!(FUNCTION_NOT_FOUND.is_match("ERR Function not found"));
        assert!(
            UNKNOWN_COMMAND.is_match("ERR unknown command 'RL.ALL', with args beginning with: ")
        );
        assert!(NOT_NOW.is_match("LOADING Redis is loading the dataset in memory"));
        assert!(!NOT_NOW.is_match("ERR unknown command 'FUNCTION'"));
    }
}
