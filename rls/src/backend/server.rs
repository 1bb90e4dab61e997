//! [`Redis`]: the connection (a server or a Redis Cluster) and the
//! `RL.ALL` call through the engine in use (see [`super::engine`]; how the
//! engine is found and the library loaded: `load.rs`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use tokio::sync::{Mutex, OnceCell};

use super::engine::{
    backend_reply_error, caller_clock_us, refused, Engine, FUNCTION_NOT_FOUND, TIME_REFUSED,
    UNKNOWN_COMMAND,
};
use super::single::Single;
use super::{
    parse_rl_all, rl_all_command, rl_all_command_for, BackendError, LibraryCall, LimitReply,
    Limiter, Limits, Op,
};
use crate::settings::{ClockSetting, EngineSetting};

/// The limiters in Redis: a server or a Redis Cluster, through the engine
/// it allows.
pub struct Redis {
    pub(super) kind: Kind,
    timeout: Duration,
    pub(super) engines: Engines,
}

/// The engine in use and how it was chosen (shared by every request).
pub(super) struct Engines {
    /// `None`: `auto`.
    pub(super) forced: Option<Engine>,
    pub(super) clock: ClockSetting,
    /// [`Engine::code`], 0 while unknown.
    pub(super) current: AtomicU8,
    /// `NOW <unix_µs>` on every library call (`RLS_CLOCK=caller`, or a
    /// server that refused `TIME` inside scripts).
    pub(super) caller_clock: AtomicBool,
    /// Grows with every load of the library: a call that met "function not
    /// found" reloads only if nobody did since it sent.
    pub(super) loads: AtomicU64,
    /// One detection or load at a time.
    pub(super) lock: Mutex<()>,
}

pub(super) enum Kind {
    Single(Box<Single>),
    /// Connected on first use (and again after a failed connection).
    Cluster(Box<Cluster>),
}

pub(super) struct Cluster {
    client: redis::cluster::ClusterClient,
    connection: OnceCell<ClusterConnection>,
}

impl Redis {
    /// Prepares the connection; nothing is connected yet (the first call
    /// connects), so the service starts while Redis is down. Connecting is
    /// bounded a little longer than `timeout`, and so is each reply in a
    /// cluster, so that the decision's timer is the one that fires; a
    /// single server's replies have no timer of their own (every call is
    /// under a decision's timer or [`Redis::query`]'s: one timer per call).
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
            Kind::Single(Box::new(Single::new(
                client.get_connection_info().clone(),
                connection_timeout,
            )))
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
        self
    }

    /// A plain command (benchmarks, health): routed to `slot` in a cluster,
    /// bounded by the timeout.
    pub async fn query(&self, cmd: redis::Cmd, slot: u16) -> Result<redis::Value, BackendError> {
        tokio::time::timeout(self.timeout, self.send(cmd, slot))
            .await
            .map_err(|_| BackendError::Timeout(self.timeout))?
    }

    pub(super) async fn send(
        &self,
        cmd: redis::Cmd,
        slot: u16,
    ) -> Result<redis::Value, BackendError> {
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
    pub(super) async fn route(
        &self,
        cmd: redis::Cmd,
        routing: RoutingInfo,
    ) -> Result<redis::Value, BackendError> {
        match &self.kind {
            Kind::Single(single) => Ok(single.query(&cmd).await?),
            // Boxed: the cluster client's futures are large, and inline they
            // would make a single server's calls as large.
            Kind::Cluster(cluster) => Box::pin(cluster.route(cmd, routing)).await,
        }
    }
}

impl Cluster {
    async fn route(
        &self,
        cmd: redis::Cmd,
        routing: RoutingInfo,
    ) -> Result<redis::Value, BackendError> {
        let mut con = self
            .connection
            .get_or_try_init(|| self.client.get_async_connection())
            .await?
            .clone();
        // A routed command's error reply comes back as a value.
        match con.route_command(cmd, routing).await? {
            redis::Value::ServerError(e) => Err(redis::RedisError::from(e).into()),
            value => Ok(value),
        }
    }
}

impl Redis {
    /// `RL.ALL` through the library, with each recovery once: the library
    /// reloaded on "function not found", the script sent whole on
    /// `NOSCRIPT`, the caller's clock where `TIME` is refused. The reply,
    /// and whether it holds each limit's integers (`WITHLIMITS`).
    async fn library_rl_all(
        &self,
        mut engine: Engine,
        limits: &Limits<'_>,
        op: Op,
        slot: u16,
    ) -> Result<(redis::Value, bool), BackendError> {
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
            let (cmd, with_limits) = rl_all_command_for(call, limits, op);
            let err = match self.send(cmd, slot).await {
                Ok(value) => {
                    if let Some(reason) = time_refused {
                        self.use_caller_clock(&reason);
                    }
                    return Ok((value, with_limits));
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

#[tonic::async_trait]
impl Limiter for Redis {
    async fn rl_all(
        &self,
        limits: &Limits<'_>,
        op: Op,
        slot: u16,
    ) -> Result<(bool, Vec<LimitReply>), BackendError> {
        // The caller bounds the whole decision by the timeout: no second
        // timer here. The rare paths (finding the engine, the library's
        // recoveries) are boxed, so that the module's call moves a small
        // future.
        let mut engine = match self.current_engine() {
            Some(engine) => engine,
            None => Box::pin(self.engine_ready()).await?,
        };
        if engine == Engine::Module {
            let (cmd, with_limits) = rl_all_command(limits, op);
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
                    engine = Box::pin(self.engine_ready()).await?;
                    if engine == Engine::Module {
                        return Err(e);
                    }
                }
            }
        }
        let (value, with_limits) = Box::pin(self.library_rl_all(engine, limits, op, slot)).await?;
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
