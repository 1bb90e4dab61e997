//! Redis behind a small trait: the service asks a [`Limiter`] for `RL.ALL`
//! decisions, so that matching, grouping, statuses, headers and statistics
//! are tested against an in-memory double (`service/tests.rs`).
//!
//! [`Redis`] is the real one: one connection (multiplexed) to a server or a
//! Redis Cluster, and the engine that answers there ([`engine`]): the
//! module's `RL.ALL`, the Functions library's `FCALL rl_all`, or the same
//! code through `EVALSHA`, with the same arguments and replies.

pub mod engine;
mod load;
mod server;
mod single;

use std::time::Duration;

pub use engine::Engine;
use engine::{eval_body, EVAL_SHA};
pub use server::Redis;

/// Why a Redis call gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("unexpected reply from redis: {0}")]
    Reply(String),
}

impl BackendError {
    /// Whether Redis did not answer in time (our timer or the connection's).
    pub fn is_timeout(&self) -> bool {
        match self {
            BackendError::Timeout(_) => true,
            BackendError::Redis(e) => e.is_timeout(),
            BackendError::Reply(_) => false,
        }
    }

    /// Whether Redis refused a `FORCE` that its limit cannot hold as a debt
    /// (`ERR FORCE cannot record this cost: …`, or a cost whose arithmetic
    /// would overflow; nothing was written).
    pub fn is_unrecordable_charge(&self) -> bool {
        let unrecordable = |m: &str| {
            m.contains("FORCE cannot record this cost") || m.contains("arithmetic would overflow")
        };
        match self {
            BackendError::Redis(e) => unrecordable(&e.to_string()),
            BackendError::Reply(m) => unrecordable(m),
            BackendError::Timeout(_) => false,
        }
    }

    /// Whether Redis refused a call whose sliding logs may touch more
    /// entries than the server's `sliding-log-call-budget` allows (`ERR this
    /// call may touch … sliding-log entries …`; nothing was written): a
    /// server set below the default the service plans its calls by.
    pub fn is_over_log_budget(&self) -> bool {
        let over =
            |m: &str| m.contains("sliding-log entries") && m.contains("sliding-log-call-budget");
        match self {
            BackendError::Redis(e) => over(&e.to_string()),
            BackendError::Reply(m) => over(m),
            BackendError::Timeout(_) => false,
        }
    }
}

/// What one `RL.ALL` does with its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Take `n` (1 ..= [`MAX_TOKENS`]) from every limit, or none.
    Take(u64),
    /// Answer whether one more hit would be admitted; write nothing.
    Peek,
    /// Give `n` back to every limit.
    Refund(u64),
}

/// The most tokens one call takes: the module's `TOKENS` is a signed 64-bit
/// integer. A larger hit count is sent as this one, which no limit (at most
/// 2^32 − 1 per unit) admits.
pub const MAX_TOKENS: u64 = i64::MAX as u64;

/// One limit's five integers (`RL.ALL … WITHLIMITS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitReply {
    pub limited: bool,
    pub limit: i64,
    pub remaining: i64,
    /// -1: never (or allowed).
    pub retry_after_ms: i64,
    pub reset_after_ms: i64,
}

/// One `RL.ALL`'s limits: `(key, the module's limit arguments)`, e.g.
/// `("rls:api_user_alice_fw60", ["FIXEDWINDOW", "10", "60"])`.
pub type Limits<'a> = [(&'a str, &'a [String])];

/// Whatever decides limits: Redis (the module or its Functions library), or a
/// test double.
#[tonic::async_trait]
pub trait Limiter: Send + Sync {
    /// `RL.ALL` over `limits` with `op`, all keys in `slot` (a Redis Cluster
    /// slot; 0 on a single server): whether the call was refused, and each
    /// limit's own five integers, in order.
    async fn rl_all(
        &self,
        limits: &Limits<'_>,
        op: Op,
        slot: u16,
    ) -> Result<(bool, Vec<LimitReply>), BackendError>;

    /// Whether Redis answers (`PING`), within [`Limiter::timeout`].
    async fn ping(&self) -> Result<(), BackendError>;

    /// Whether the keys of one call must share a slot (Redis Cluster).
    fn is_cluster(&self) -> bool;

    /// The most one decision may wait for Redis.
    fn timeout(&self) -> Duration;

    /// The engine deciding now; `None` before it is known (or a test double).
    fn engine(&self) -> Option<Engine> {
        None
    }

    /// Finds the engine now (loading the library where needed), rather than
    /// on the first request: the service calls it at start.
    async fn prepare(&self) -> Result<Option<Engine>, BackendError> {
        Ok(None)
    }
}

/// How one `RL.ALL` is sent through the library.
#[derive(Debug, Clone, Copy)]
pub struct LibraryCall {
    /// [`Engine::Functions`] (`FCALL`) or [`Engine::Eval`] (`EVALSHA`;
    /// [`Engine::Module`] sends the module's command).
    pub engine: Engine,
    /// `EVAL` with the script rather than `EVALSHA` (after `NOSCRIPT`).
    pub with_body: bool,
    /// The caller's clock, `NOW <unix_µs>` last.
    pub now_us: Option<u64>,
}

/// The `RL.ALL` command for `limits` and `op` (`WITHLIMITS` for more than
/// one limit), and whether it asks for `WITHLIMITS`.
pub fn rl_all_command(limits: &Limits<'_>, op: Op) -> (redis::Cmd, bool) {
    rl_all_command_for(
        LibraryCall {
            engine: Engine::Module,
            with_body: false,
            now_us: None,
        },
        limits,
        op,
    )
}

/// [`rl_all_command`] through an engine: `RL.ALL numkeys key… limit… opts`,
/// `FCALL rl_all numkeys key… limit… opts [NOW us]`, or `EVALSHA sha
/// numkeys key… rl_all limit… opts [NOW us]` (`EVAL script …` with
/// `with_body`). The same reply for each.
pub fn rl_all_command_for(call: LibraryCall, limits: &Limits<'_>, op: Op) -> (redis::Cmd, bool) {
    let mut cmd = match call.engine {
        Engine::Module => redis::cmd("RL.ALL"),
        Engine::Functions => {
            let mut cmd = redis::cmd("FCALL");
            cmd.arg("rl_all");
            cmd
        }
        Engine::Eval if call.with_body => {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(eval_body());
            cmd
        }
        Engine::Eval => {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(EVAL_SHA.as_str());
            cmd
        }
    };
    cmd.arg(limits.len());
    for (key, _) in limits {
        cmd.arg(*key);
    }
    if call.engine == Engine::Eval {
        cmd.arg("rl_all");
    }
    for (_, args) in limits {
        cmd.arg(*args);
    }
    match op {
        Op::Take(1) => {}
        Op::Take(n) => {
            cmd.arg("TOKENS").arg(n.min(MAX_TOKENS));
        }
        Op::Peek => {
            cmd.arg("PEEK");
        }
        Op::Refund(n) => {
            cmd.arg("REFUND").arg(n.min(MAX_TOKENS));
        }
    }
    // One limit is the binding one: the six integers already are its own.
    let with_limits = limits.len() > 1;
    if with_limits {
        cmd.arg("WITHLIMITS");
    }
    if let (Some(now_us), Engine::Functions | Engine::Eval) = (call.now_us, call.engine) {
        cmd.arg("NOW").arg(now_us);
    }
    (cmd, with_limits)
}

/// `RL.ALL`'s reply: whether refused, and each limit's five integers.
pub fn parse_rl_all(
    value: &redis::Value,
    limits: usize,
    with_limits: bool,
) -> Result<(bool, Vec<LimitReply>), BackendError> {
    let unexpected = || BackendError::Reply(format!("{value:?}"));
    let redis::Value::Array(items) = value else {
        return Err(unexpected());
    };
    let expected = if with_limits { 6 + 5 * limits } else { 6 };
    if items.len() != expected {
        return Err(unexpected());
    }
    let int = |v: &redis::Value| match v {
        redis::Value::Int(i) => Ok(*i),
        _ => Err(unexpected()),
    };
    let each = if with_limits {
        &items[6..]
    } else {
        &items[..5]
    };
    let each = each
        .chunks_exact(5)
        .map(|c| {
            Ok(LimitReply {
                limited: int(&c[0])? != 0,
                limit: int(&c[1])?,
                remaining: int(&c[2])?,
                retry_after_ms: int(&c[3])?,
                reset_after_ms: int(&c[4])?,
            })
        })
        .collect::<Result<_, BackendError>>()?;
    Ok((int(&items[0])? != 0, each))
}
