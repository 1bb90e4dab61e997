//! Redis: one connection (multiplexed) to a server or a Redis Cluster, and
//! `RL.ALL` calls bounded by a timeout.

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

/// What one `RL.ALL` does with its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Take `n` (≥ 1) from every limit, or none.
    Take(u64),
    /// Answer whether one more hit would be admitted; write nothing.
    Peek,
    /// Give `n` back to every limit.
    Refund(u64),
}

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

/// A Redis connection.
pub struct Backend {
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

impl Backend {
    /// Prepares the connection; nothing is connected yet (the first call
    /// connects), so the service starts while Redis is down.
    pub fn new(url: &str, cluster: bool, timeout: Duration) -> Result<Backend, BackendError> {
        let kind = if cluster {
            let nodes: Vec<&str> = url
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            let client = redis::cluster::ClusterClient::builder(nodes)
                .connection_timeout(timeout)
                .response_timeout(timeout)
                .build()?;
            Kind::Cluster(Box::new(Cluster {
                client,
                connection: OnceCell::new(),
            }))
        } else {
            let client = redis::Client::open(url)?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout))
                .set_number_of_retries(1)
                .set_max_delay(Duration::from_millis(200));
            Kind::Single(ConnectionManager::new_lazy_with_config(client, config)?)
        };
        Ok(Backend { kind, timeout })
    }

    /// The most one decision may wait for Redis.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether the keys of one call must share a slot (Redis Cluster).
    pub fn is_cluster(&self) -> bool {
        matches!(self.kind, Kind::Cluster(_))
    }

    /// `RL.ALL` over `(key, limit arguments)` with `op` (and `WITHLIMITS`
    /// for more than one limit): whether the call was refused, and each
    /// limit's own five integers. In a cluster every key must be in `slot`.
    pub async fn rl_all(
        &self,
        limits: &[(&str, &[String])],
        op: Op,
        slot: u16,
    ) -> Result<(bool, Vec<LimitReply>), BackendError> {
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
                cmd.arg("TOKENS").arg(n);
            }
            Op::Peek => {
                cmd.arg("PEEK");
            }
            Op::Refund(n) => {
                cmd.arg("REFUND").arg(n);
            }
        }
        // One limit is the binding one: the six integers already are its own.
        let with_limits = limits.len() > 1;
        if with_limits {
            cmd.arg("WITHLIMITS");
        }
        // The caller bounds the whole decision by the timeout (and the
        // connection its every response): no third timer here.
        let value = self.send(cmd, slot).await?;
        let ints: Vec<i64> = redis::from_redis_value_ref(&value)
            .map_err(|_| BackendError::Reply(format!("{value:?}")))?;
        let expected = if with_limits { 6 + 5 * limits.len() } else { 6 };
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

    /// A plain command (benchmarks, health): routed to `slot` in a cluster.
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
