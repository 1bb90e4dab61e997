//! Redis behind a small trait: the service asks a [`Limiter`] for `RL.ALL`
//! decisions, so that matching, grouping, statuses, headers and statistics
//! are tested against an in-memory double (`service/tests.rs`).
//!
//! [`Redis`] is the real one: one connection (multiplexed) to a server or a
//! Redis Cluster, and the engine that answers there ([`engine`]): the
//! module's `RL.ALL`, the Functions library's `FCALL rl_all`, or the same
//! code through `EVALSHA`, with the same arguments and replies.

pub mod engine;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use tokio::sync::{Mutex, OnceCell};

pub use engine::Engine;
use engine::{
    caller_clock_us, eval_body, reply_error, EVAL_SHA, FUNCTION_NOT_FOUND, LIBRARY_CODE,
    LIBRARY_VERSION, NOT_NOW, TIME_REFUSED, UNKNOWN_COMMAND,
};

use crate::settings::{ClockSetting, EngineSetting};

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

/// Whatever decides limits: the module through Redis, or a test double.
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

/// The limiters in Redis: a server or a Redis Cluster, through the engine
/// it allows.
pub struct Redis {
    kind: Kind,
    timeout: Duration,
    engines: Engines,
}

/// The engine in use and how it was chosen (shared by every request).
struct Engines {
    /// `None`: `auto`.
    forced: Option<Engine>,
    clock: ClockSetting,
    /// [`Engine::code`], 0 while unknown.
    current: AtomicU8,
    /// `NOW <unix_µs>` on every library call (`RLS_CLOCK=caller`, or a
    /// server that refused `TIME` inside scripts).
    caller_clock: AtomicBool,
    /// Grows with every load of the library: a call that met "function not
    /// found" reloads only if nobody did since it sent.
    loads: AtomicU64,
    /// One detection or load at a time.
    lock: Mutex<()>,
}

enum Kind {
    Single(ConnectionManager),
    /// Connected on first use (and again after a failed connection).
    Cluster(Box<Cluster>),
}

struct Cluster {
    client: redis::cluster::ClusterClient,
    connection: OnceCell<ClusterConnection>,
}

impl Redis {
    /// Prepares the connection; nothing is connected yet (the first call
    /// connects), so the service starts while Redis is down. The
    /// connection's own timeouts are a little longer than `timeout`, so that
    /// the decision's timer is the one that fires.
    pub fn new(url: &str, cluster: bool, timeout: Duration) -> Result<Redis, BackendError> {
        let connection_timeout = timeout + Duration::from_millis(50);
        let kind = if cluster {
            let nodes: Vec<&str> = url
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            let client = redis::cluster::ClusterClient::builder(nodes)
                .connection_timeout(connection_timeout)
                .response_timeout(connection_timeout)
                .build()?;
            Kind::Cluster(Box::new(Cluster {
                client,
                connection: OnceCell::new(),
            }))
        } else {
            let client = redis::Client::open(url)?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(connection_timeout))
                .set_response_timeout(Some(connection_timeout))
                .set_number_of_retries(1)
                .set_max_delay(Duration::from_millis(200));
            Kind::Single(ConnectionManager::new_lazy_with_config(client, config)?)
        };
        Ok(Redis {
            kind,
            timeout,
            engines: Engines {
                forced: None,
                clock: ClockSetting::Auto,
                current: AtomicU8::new(0),
                caller_clock: AtomicBool::new(false),
                loads: AtomicU64::new(0),
                lock: Mutex::new(()),
            },
        })
    }

    /// With this engine setting (`RLS_ENGINE`) and clock (`RLS_CLOCK`);
    /// the default is `auto` for both.
    pub fn with_engine(mut self, engine: EngineSetting, clock: ClockSetting) -> Redis {
        let forced = match engine {
            EngineSetting::Auto => None,
            EngineSetting::Module => Some(Engine::Module),
            EngineSetting::Functions => Some(Engine::Functions),
            EngineSetting::Eval => Some(Engine::Eval),
        };
        self.engines.forced = forced;
        self.engines.clock = clock;
        self.engines
            .caller_clock
            .store(clock == ClockSetting::Caller, Ordering::Relaxed);
        // Module and eval need nothing loaded: in use from the start.
        if let Some(e @ (Engine::Module | Engine::Eval)) = forced {
            self.engines.current.store(e.code(), Ordering::Relaxed);
        }
        self
    }

    /// A plain command (benchmarks, health): routed to `slot` in a cluster,
    /// bounded by the timeout.
    pub async fn query(&self, cmd: redis::Cmd, slot: u16) -> Result<redis::Value, BackendError> {
        tokio::time::timeout(self.timeout, self.send(cmd, slot))
            .await
            .map_err(|_| BackendError::Timeout(self.timeout))?
    }

    async fn send(&self, cmd: redis::Cmd, slot: u16) -> Result<redis::Value, BackendError> {
        self.route(
            cmd,
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
                slot,
                SlotAddr::Master,
            ))),
        )
        .await
    }

    /// `cmd` to the server, or, in a cluster, where `routing` says.
    async fn route(
        &self,
        cmd: redis::Cmd,
        routing: RoutingInfo,
    ) -> Result<redis::Value, BackendError> {
        match &self.kind {
            Kind::Single(manager) => {
                let mut con = manager.clone();
                Ok(cmd.query_async(&mut con).await?)
            }
            Kind::Cluster(cluster) => {
                let mut con = cluster
                    .connection
                    .get_or_try_init(|| cluster.client.get_async_connection())
                    .await?
                    .clone();
                // A routed command's error reply comes back as a value.
                match con.route_command(cmd, routing).await? {
                    redis::Value::ServerError(e) => Err(redis::RedisError::from(e).into()),
                    value => Ok(value),
                }
            }
        }
    }

    /// The engine in use, found now if not yet (loading the library where
    /// needed); logged whenever it is found.
    pub async fn engine_ready(&self) -> Result<Engine, BackendError> {
        if let Some(engine) = self.current_engine() {
            return Ok(engine);
        }
        let _guard = self.engines.lock.lock().await;
        if let Some(engine) = self.current_engine() {
            return Ok(engine);
        }
        let engine = self.detect().await?;
        self.engines.current.store(engine.code(), Ordering::Relaxed);
        tracing::info!(
            engine = engine.as_str(),
            forced = self.engines.forced.is_some(),
            library_version = *LIBRARY_VERSION,
            "engine in use"
        );
        Ok(engine)
    }

    fn current_engine(&self) -> Option<Engine> {
        Engine::from_code(self.engines.current.load(Ordering::Relaxed))
    }

    async fn detect(&self) -> Result<Engine, BackendError> {
        match self.engines.forced {
            Some(e @ (Engine::Module | Engine::Eval)) => return Ok(e),
            Some(Engine::Functions) => {
                self.load_library().await?;
                return Ok(Engine::Functions);
            }
            None => {}
        }
        if self.has_module().await? {
            return Ok(Engine::Module);
        }
        match self.load_library().await {
            Ok(()) => Ok(Engine::Functions),
            // Refused (no FUNCTION, NOPERM, a provider's list): the EVAL
            // form. A server that cannot answer now (loading, a replica,
            // busy) or no answer at all: asked again on the next call.
            Err(e) if refused(&e) => {
                tracing::info!(error = %e, "the Functions library cannot be loaded; using EVALSHA");
                Ok(Engine::Eval)
            }
            Err(e) => Err(e),
        }
    }

    /// `COMMAND INFO rl.all`: one nil for an unknown command. A server that
    /// refuses `COMMAND` has no module for us.
    async fn has_module(&self) -> Result<bool, BackendError> {
        let mut cmd = redis::cmd("COMMAND");
        cmd.arg("INFO").arg("rl.all");
        match self.send(cmd, 0).await {
            Ok(redis::Value::Array(items)) => {
                Ok(matches!(items.first(), Some(v) if *v != redis::Value::Nil))
            }
            Ok(_) => Ok(false),
            Err(e) if refused(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// On every primary (or the one server): `FCALL_RO rl_version 0`; where
    /// the library is absent or older than the embedded copy, `FUNCTION LOAD
    /// REPLACE`. A newer library is left alone (same contract, later fixes).
    async fn load_library(&self) -> Result<(), BackendError> {
        let mut version = redis::cmd("FCALL_RO");
        version.arg("rl_version").arg(0);
        let mut load = redis::cmd("FUNCTION");
        load.arg("LOAD").arg("REPLACE").arg(LIBRARY_CODE);
        match &self.kind {
            Kind::Single(_) => {
                let found = match self.send(version, 0).await {
                    Ok(v) => redis::from_redis_value_ref::<i64>(&v).unwrap_or(0),
                    Err(BackendError::Redis(e))
                        if reply_error(&e).is_some_and(|m| FUNCTION_NOT_FOUND.is_match(&m)) =>
                    {
                        0
                    }
                    Err(e) => return Err(e),
                };
                if found < *LIBRARY_VERSION {
                    self.send(load, 0).await?;
                    tracing::info!(
                        version = *LIBRARY_VERSION,
                        replaced = found,
                        "Functions library loaded"
                    );
                }
            }
            Kind::Cluster(_) => {
                // Each primary's answer, by address.
                let all = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                let redis::Value::Map(answers) = self.route(version, all).await? else {
                    return Err(BackendError::Reply(
                        "FCALL_RO rl_version on every primary: no map of answers".into(),
                    ));
                };
                for (address, answer) in answers {
                    let address: String = redis::from_redis_value_ref(&address)
                        .map_err(|_| BackendError::Reply(format!("{address:?}")))?;
                    let found = match answer {
                        redis::Value::ServerError(e) => {
                            let e = redis::RedisError::from(e);
                            match reply_error(&e) {
                                Some(m) if FUNCTION_NOT_FOUND.is_match(&m) => 0,
                                _ => return Err(e.into()),
                            }
                        }
                        v => redis::from_redis_value_ref::<i64>(&v).unwrap_or(0),
                    };
                    if found >= *LIBRARY_VERSION {
                        continue;
                    }
                    let (host, port) = address
                        .rsplit_once(':')
                        .and_then(|(h, p)| Some((h.to_string(), p.parse().ok()?)))
                        .ok_or_else(|| BackendError::Reply(format!("node address {address}")))?;
                    let node =
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
                    self.route(load.clone(), node).await?;
                    tracing::info!(
                        node = %address,
                        version = *LIBRARY_VERSION,
                        replaced = found,
                        "Functions library loaded"
                    );
                }
            }
        }
        self.engines.loads.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Loads the library again after "function not found", unless another
    /// call did since `loads_seen`.
    async fn reload(&self, loads_seen: u64) -> Result<(), BackendError> {
        let _guard = self.engines.lock.lock().await;
        if self.engines.loads.load(Ordering::Relaxed) == loads_seen {
            self.load_library().await?;
        }
        Ok(())
    }

    /// `RL.ALL` through the library, with each recovery once: the library
    /// reloaded on "function not found", the script sent whole on
    /// `NOSCRIPT`, the caller's clock where `TIME` is refused.
    async fn library_rl_all(
        &self,
        mut engine: Engine,
        limits: &Limits<'_>,
        op: Op,
        slot: u16,
    ) -> Result<redis::Value, BackendError> {
        let mut reloaded = false;
        let mut with_body = false;
        let mut time_refused: Option<String> = None;
        loop {
            let with_now =
                self.engines.caller_clock.load(Ordering::Relaxed) || time_refused.is_some();
            let call = LibraryCall {
                engine,
                with_body,
                now_us: with_now.then(caller_clock_us),
            };
            let loads = self.engines.loads.load(Ordering::Relaxed);
            let (cmd, _) = rl_all_command_for(call, limits, op);
            let err = match self.send(cmd, slot).await {
                Ok(value) => {
                    if let Some(reason) = time_refused {
                        self.use_caller_clock(&reason);
                    }
                    return Ok(value);
                }
                Err(e) => e,
            };
            let Some(message) = backend_reply_error(&err) else {
                return Err(err);
            };
            if engine == Engine::Functions && !reloaded && FUNCTION_NOT_FOUND.is_match(&message) {
                reloaded = true;
                tracing::info!(error = %message, "the Functions library is gone; loading it again");
                if let Err(load_err) = self.reload(loads).await {
                    // FUNCTION refused now (a failover to a server that
                    // refuses it): the EVAL form, unless forced.
                    if self.engines.forced.is_some() || !refused(&load_err) {
                        return Err(load_err);
                    }
                    engine = Engine::Eval;
                    self.set_engine(Engine::Eval);
                }
                continue;
            }
            if engine == Engine::Eval && !with_body && message.starts_with("NOSCRIPT") {
                with_body = true;
                continue;
            }
            if !with_now
                && self.engines.clock == ClockSetting::Auto
                && TIME_REFUSED.is_match(&message)
            {
                time_refused = Some(message);
                continue;
            }
            return Err(err);
        }
    }

    fn set_engine(&self, engine: Engine) {
        let old = self.engines.current.swap(engine.code(), Ordering::Relaxed);
        if old != engine.code() {
            tracing::warn!(engine = engine.as_str(), "engine in use");
        }
    }

    fn use_caller_clock(&self, reason: &str) {
        if !self.engines.caller_clock.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                reason,
                "the server refuses TIME inside scripts; the library's calls now carry this \
                 process's clock (NOW <unix_µs>): keep it NTP-synchronized"
            );
        }
    }
}

/// A server's error reply in `e`, as sent.
fn backend_reply_error(e: &BackendError) -> Option<String> {
    match e {
        BackendError::Redis(e) => reply_error(e),
        _ => None,
    }
}

/// Whether `e` is a server's refusal (an error reply that is not "not now").
fn refused(e: &BackendError) -> bool {
    backend_reply_error(e).is_some_and(|m| !NOT_NOW.is_match(&m))
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
    let ints: Vec<i64> = redis::from_redis_value_ref(value)
        .map_err(|_| BackendError::Reply(format!("{value:?}")))?;
    let expected = if with_limits { 6 + 5 * limits } else { 6 };
    if ints.len() != expected {
        return Err(BackendError::Reply(format!("{ints:?}")));
    }
    let each = if with_limits { &ints[6..] } else { &ints[..5] };
    let each = each
        .chunks_exact(5)
        .map(|c| LimitReply {
            limited: c[0] != 0,
            limit: c[1],
            remaining: c[2],
            retry_after_ms: c[3],
            reset_after_ms: c[4],
        })
        .collect();
    Ok((ints[0] != 0, each))
}

#[tonic::async_trait]
impl Limiter for Redis {
    async fn rl_all(
        &self,
        limits: &Limits<'_>,
        op: Op,
        slot: u16,
    ) -> Result<(bool, Vec<LimitReply>), BackendError> {
        // The caller bounds the whole decision by the timeout: no second
        // timer here.
        let (cmd, with_limits) = rl_all_command(limits, op);
        let mut engine = self.engine_ready().await?;
        if engine == Engine::Module {
            match self.send(cmd, slot).await {
                Ok(value) => return parse_rl_all(&value, limits.len(), with_limits),
                Err(e) => {
                    // The module went away (a failover to a server without
                    // it): find the engine again, once.
                    let gone = self.engines.forced.is_none()
                        && backend_reply_error(&e).is_some_and(|m| UNKNOWN_COMMAND.is_match(&m));
                    if !gone {
                        return Err(e);
                    }
                    tracing::warn!(error = %e, "the module is gone; finding the engine again");
                    let _ = self.engines.current.compare_exchange(
                        Engine::Module.code(),
                        0,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                    engine = self.engine_ready().await?;
                    if engine == Engine::Module {
                        return Err(e);
                    }
                }
            }
        }
        let value = self.library_rl_all(engine, limits, op, slot).await?;
        parse_rl_all(&value, limits.len(), with_limits)
    }

    async fn ping(&self) -> Result<(), BackendError> {
        self.query(redis::cmd("PING"), 0).await.map(|_| ())
    }

    fn is_cluster(&self) -> bool {
        matches!(self.kind, Kind::Cluster(_))
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn engine(&self) -> Option<Engine> {
        self.current_engine()
    }

    async fn prepare(&self) -> Result<Option<Engine>, BackendError> {
        self.engine_ready().await.map(Some)
    }
}
