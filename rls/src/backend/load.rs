//! How [`Redis`] finds its engine (the module, else the Functions library,
//! else its EVAL form) and keeps the library loaded on every primary.

use std::sync::atomic::Ordering;

use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo};

use super::engine::{
    refused, reply_error, Engine, FUNCTION_NOT_FOUND, LIBRARY_CODE, LIBRARY_VERSION,
};
use super::server::{Kind, Redis};
use super::BackendError;

impl Redis {
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

    pub(super) fn current_engine(&self) -> Option<Engine> {
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
    pub(super) async fn reload(&self, loads_seen: u64) -> Result<(), BackendError> {
        let _guard = self.engines.lock.lock().await;
        if self.engines.loads.load(Ordering::Relaxed) == loads_seen {
            self.load_library().await?;
        }
        Ok(())
    }
}
