//! Redis behind a small trait: the service asks a [`Limiter`] for `RL.ALL`
//! decisions, so that matching, grouping, statuses, headers and statistics
//! are tested against an in-memory double (`service/tests.rs`), and the
//! engine that answers (the module today) is one type to swap.
//!
//! [`Redis`] is the real one: one connection (multiplexed) to a server or a
//! Redis Cluster.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use tokio::sync::OnceCell;

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
}

/// The module through Redis: a server or a Redis Cluster.
pub struct Redis {
    kind: Kind,
    timeout: Duration,
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
        Ok(Redis { kind, timeout })
    }

    /// A plain command (benchmarks, health): routed to `slot` in a cluster,
    /// bounded by the timeout.
    pub async fn query(&self, cmd: redis::Cmd, slot: u16) -> Result<redis::Value, BackendError> {
        tokio::time::timeout(self.timeout, self.send(cmd, slot))
            .await
            .map_err(|_| BackendError::Timeout(self.timeout))?
    }

    async fn send(&self, cmd: redis::Cmd, slot: u16) -> Result<redis::Value, BackendError> {
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
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::new(slot, SlotAddr::Master),
                ));
                Ok(con.route_command(cmd, routing).await?)
            }
        }
    }
}

/// The `RL.ALL` command for `limits` and `op` (`WITHLIMITS` for more than
/// one limit), and whether it asks for `WITHLIMITS`.
pub fn rl_all_command(limits: &Limits<'_>, op: Op) -> (redis::Cmd, bool) {
    let mut cmd = redis::cmd("RL.ALL");
    cmd.arg(limits.len());
    for (key, _) in limits {
        cmd.arg(*key);
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
        let (cmd, with_limits) = rl_all_command(limits, op);
        // The caller bounds the whole decision by the timeout: no second
        // timer here.
        let value = self.send(cmd, slot).await?;
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
}
