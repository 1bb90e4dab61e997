//! `ratelimit-rls`: an Envoy rate limit service (`envoy.service.ratelimit.v3`)
//! whose decisions are made by the redis-ratelimit module (or, where the
//! server has no module, its Functions library), one `RL.ALL` per request.
//! See `rls/README.md`.

pub mod backend;
pub mod cache;
pub mod config;
pub mod http;
pub mod keys;
pub mod metrics;
pub mod reload;
pub mod runtime;
pub mod service;
pub mod settings;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::backend::Limiter;
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
    #[error("gRPC server reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
}

/// The encoded descriptor set of `envoy.service.ratelimit.v3` and its
/// imports (`build.rs`, from `rls/proto/`), for gRPC server reflection.
pub const RLS_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/rls_descriptor_set.bin"));

/// A running service.
pub struct Running {
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub shared: Arc<Shared>,
    /// `grpc.health.v1.Health`'s statuses.
    pub health: HealthReporter,
    stop_grpc: Option<oneshot::Sender<()>>,
    stop_http: Option<oneshot::Sender<()>>,
    grpc: Option<JoinHandle<()>>,
    http: Option<JoinHandle<()>>,
    background: Vec<JoinHandle<()>>,
}

impl Running {
    /// Waits until the gRPC server ends (it fails, or a shutdown ends it).
    pub async fn wait(&mut self) {
        if let Some(grpc) = self.grpc.as_mut() {
            let _ = grpc.await;
            self.grpc = None;
        }
    }

    /// Stops gracefully, as envoy's service does: health turns NOT_SERVING
    /// (gRPC) and 503 (`/healthcheck`), the gRPC port stops accepting, and
    /// the requests in flight are answered, waiting at most `drain`; then
    /// everything stops. Whether every request in flight was answered.
    pub async fn shutdown(&mut self, drain: Duration) -> bool {
        self.shared.draining.store(true, Ordering::SeqCst);
        self.health
            .set_service_status("", ServingStatus::NotServing)
            .await;
        self.health
            .set_not_serving::<RateLimitServiceServer<Service>>()
            .await;
        if let Some(stop) = self.stop_grpc.take() {
            let _ = stop.send(());
        }
        let drained = match self.grpc.take() {
            Some(mut grpc) => match tokio::time::timeout(drain, &mut grpc).await {
                Ok(_) => true,
                Err(_) => {
                    grpc.abort();
                    false
                }
            },
            None => true,
        };
        tracing::info!(drained, "gRPC stopped");
        if let Some(stop) = self.stop_http.take() {
            let _ = stop.send(());
        }
        if let Some(mut http) = self.http.take() {
            if tokio::time::timeout(Duration::from_secs(1), &mut http)
                .await
                .is_err()
            {
                http.abort();
            }
        }
        self.stop();
        drained
    }

    /// Stops at once: every task is aborted.
    pub fn stop(&mut self) {
        self.stop_grpc.take();
        self.stop_http.take();
        for task in self
            .grpc
            .take()
            .into_iter()
            .chain(self.http.take())
            .chain(self.background.drain(..))
        {
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
/// and serves in the background, deciding in Redis.
pub async fn start(settings: &Settings) -> Result<Running, StartError> {
    let backend = backend::Redis::new(
        &settings.redis_url,
        settings.redis_cluster,
        settings.redis_timeout(),
    )?
    .with_engine(settings.engine, settings.clock);
    start_with(settings, Arc::new(backend)).await
}

/// [`start`] with another [`Limiter`] (tests).
pub async fn start_with(
    settings: &Settings,
    backend: Arc<dyn Limiter>,
) -> Result<Running, StartError> {
    let files = config::read_files(&settings.config)?;
    let config = Config::from_yaml(&files)?;
    tracing::info!(
        config = %settings.config.display(),
        rules = config.rules().len(),
        redis = %settings.redis_url,
        cluster = settings.redis_cluster,
        "configuration loaded"
    );
    let shared = Arc::new(Shared::new(settings, config, backend));
    shared.metrics.config_load_success.increment(1);

    let grpc_listener = TcpListener::bind(settings.grpc_addr).await?;
    let grpc_addr = grpc_listener.local_addr()?;
    let http_listener = TcpListener::bind(settings.http_addr).await?;
    let http_addr = http_listener.local_addr()?;
    let (stop_grpc, grpc_stopped) = oneshot::channel::<()>();
    let (stop_http, http_stopped) = oneshot::channel::<()>();
    let incoming =
        tonic::transport::server::TcpIncoming::from(grpc_listener).with_nodelay(Some(true));
    let service = RateLimitServiceServer::new(Service {
        shared: shared.clone(),
    });
    // grpc.health.v1.Health, for Envoy's gRPC health checks of the cluster.
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_service_status("", ServingStatus::Serving).await;
    health
        .set_serving::<RateLimitServiceServer<Service>>()
        .await;
    // gRPC server reflection (v1, and v1alpha for older clients): the
    // service and its health, callable without `.proto` files.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(RLS_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection().build_v1()?;
    let reflection_v1alpha = reflection().build_v1alpha()?;
    let grpc = tokio::spawn(async move {
        let result = tonic::transport::Server::builder()
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, async {
                let _ = grpc_stopped.await;
            })
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "gRPC server failed");
        }
    });
    let http = tokio::spawn(http::serve(http_listener, shared.clone(), async {
        let _ = http_stopped.await;
    }));
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
    // The engine is found now (logged, `ratelimit_rls_engine`), not on the
    // first request; where Redis cannot answer yet, the first request finds it.
    let prepare = tokio::spawn({
        let backend = shared.backend.clone();
        let bound = backend.timeout().max(Duration::from_secs(5));
        async move {
            match tokio::time::timeout(bound, backend.prepare()).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "engine not found yet; the first request looks again")
                }
                Err(_) => tracing::warn!(
                    "engine not found within {bound:?}; the first request looks again"
                ),
            }
        }
    });
    tracing::info!(grpc = %grpc_addr, http = %http_addr, "serving");
    Ok(Running {
        grpc_addr,
        http_addr,
        shared,
        health,
        stop_grpc: Some(stop_grpc),
        stop_http: Some(stop_http),
        grpc: Some(grpc),
        http: Some(http),
        background: vec![reload, upkeep, prepare],
    })
}
