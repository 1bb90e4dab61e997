//! The HTTP endpoint (axum): `GET /metrics` (Prometheus text format) and
//! `GET /healthcheck` (200 when Redis answers `PING` within the timeout,
//! 503 otherwise or while shutting down). `HEAD` as `GET`; other paths 404,
//! other methods 405; a request not answered within 5 s gets 408.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::error_handling::HandleErrorLayer;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tower::ServiceBuilder;

use crate::service::Shared;

/// The most one request takes (`/healthcheck`'s `PING` is bounded by the
/// Redis timeout already).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The endpoint's routes.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthcheck", get(healthcheck))
        .layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(|_: tower::BoxError| async {
                    StatusCode::REQUEST_TIMEOUT
                }))
                .timeout(REQUEST_TIMEOUT),
        )
        .with_state(shared)
}

/// Serves until `shutdown` completes (then finishes the requests in flight).
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let result = axum::serve(listener, router(shared))
        .with_graceful_shutdown(shutdown)
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "HTTP server failed");
    }
}

async fn metrics(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        shared.metrics.render(),
    )
}

async fn healthcheck(State(shared): State<Arc<Shared>>) -> (StatusCode, String) {
    if shared.draining.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining\n".into());
    }
    match shared.backend.ping().await {
        Ok(()) => (StatusCode::OK, "OK\n".into()),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("redis: {e}\n")),
    }
}
