//! `ratelimit-rls`: an Envoy rate limit service (`envoy.service.ratelimit.v3`)
//! whose decisions are made by the redis-ratelimit module, one `RL.ALL` per
//! request. See `rls/README.md`.

pub mod backend;
pub mod config;
pub mod http;
pub mod keys;
pub mod metrics;
pub mod reload;
pub mod service;
pub mod settings;

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::service::{Service, Shared};
use crate::settings::Settings;

/// Why the service did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("configuration: {0}")]
    Config(#[from] config::ConfigError),
    #[error("{0}")]
    Backend(#[from] backend::BackendError),
    #[error("cannot listen: {0}")]
    Listen(#[from] std::io::Error),
}

/// A running service.
pub struct Running {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// Waits until the gRPC server ends.
    pub async fn wait(mut self) {
        if let Some(grpc) = self.tasks.first_mut() {
            let _ = grpc.await;
        }
    }

    /// Stops serving.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Loads the configuration, binds both addresses (port 0: any free port)
/// and serves in the background.
pub async fn start(settings: &Settings) -> Result<Running, StartError> {
    let files = config::read_files(&settings.config)?;
    let config = Config::from_yaml(&files)?;
    let backend = backend::Backend::new(
        &settings.redis_url,
        settings.redis_cluster,
        settings.redis_timeout(),
    )?;
    tracing::info!(
        config = %settings.config.display(),
        rules = config.rules().len(),
        redis = %settings.redis_url,
        cluster = settings.redis_cluster,
        "configuration loaded"
    );
    let shared = Arc::new(Shared {
        config: RwLock::new(Arc::new(config)),
        backend,
        metrics: Default::default(),
        failure_mode: settings.failure_mode,
        key_prefix: settings.key_prefix.clone(),
        hash_tag_keys: settings
            .hash_tag_keys
            .iter()
            .map(|k| k.trim().to_string())
            .filter(|k| !k.is_empty())
            .collect(),
        near_limit_ratio: settings.near_limit_ratio,
        global_shadow_mode: settings.global_shadow_mode,
        response_headers: settings.response_headers,
    });
    shared.metrics.config_load_success.increment(1);

    let grpc_listener = TcpListener::bind(settings.grpc_addr).await?;
    let grpc_addr = grpc_listener.local_addr()?;
    let http_listener = TcpListener::bind(settings.http_addr).await?;
    let http_addr = http_listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let incoming =
        tonic::transport::server::TcpIncoming::from(grpc_listener).with_nodelay(Some(true));
    let service = RateLimitServiceServer::new(Service {
        shared: shared.clone(),
    });
    // grpc.health.v1.Health, for Envoy's gRPC health checks of the cluster.
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    health
        .set_serving::<RateLimitServiceServer<Service>>()
        .await;
    let grpc = tokio::spawn(async move {
        let result = tonic::transport::Server::builder()
            .add_service(health_service)
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stopped.await;
            })
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "gRPC server failed");
        }
    });
    let http = tokio::spawn(http::serve(http_listener, shared.clone()));
    let reload = reload::spawn(
        settings.config.clone(),
        Duration::from_millis(settings.reload_interval_ms.max(10)),
        shared.clone(),
        files,
    );
    // Response times are drained into their histogram every few seconds,
    // scraped or not.
    let upkeep = tokio::spawn({
        let shared = shared.clone();
        async move {
            let mut ticker = tokio::time::interval(Duration::from_secs(5));
            loop {
                ticker.tick().await;
                shared.metrics.run_upkeep();
            }
        }
    });
    tracing::info!(grpc = %grpc_addr, http = %http_addr, "serving");
    Ok(Running {
        grpc_addr,
        http_addr,
        shared,
        stop: Some(stop),
        tasks: vec![grpc, http, reload, upkeep],
    })
}
