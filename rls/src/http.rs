//! The HTTP endpoint (axum): `GET /metrics` (Prometheus text format) and
//! `GET /healthcheck` (200 when Redis answers `PING` within the timeout,
//! 503 otherwise). `HEAD` as `GET`; other paths 404, other methods 405;
//! connections kept alive; a request not answered within 5 s gets 408; a
//! connection that sends nothing for 30 s is closed.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::net::{TcpListener, TcpStream};
use tokio_io_timeout::TimeoutStream;
use tower::ServiceBuilder;

use crate::service::Shared;

/// The most one request takes (`/healthcheck`'s `PING` is bounded by the
/// Redis timeout already).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a connection may send nothing (keep-alive idle, or a request
/// that never completes) before it is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

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

/// Serves until the task is dropped.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    serve_with(listener, shared, IDLE_TIMEOUT).await
}

/// [`serve`], closing connections idle for `idle`.
pub async fn serve_with(listener: TcpListener, shared: Arc<Shared>, idle: Duration) {
    let listener = IdleTimeout { listener, idle };
    if let Err(e) = axum::serve(listener, router(shared)).await {
        tracing::error!(error = %e, "HTTP server failed");
    }
}

/// A listener whose connections time out when they send nothing for
/// `idle` (accept errors are backed off by axum's own TCP listener).
struct IdleTimeout {
    listener: TcpListener,
    idle: Duration,
}

impl axum::serve::Listener for IdleTimeout {
    type Io = Pin<Box<TimeoutStream<TcpStream>>>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (stream, addr) = axum::serve::Listener::accept(&mut self.listener).await;
        let mut stream = TimeoutStream::new(stream);
        stream.set_read_timeout(Some(self.idle));
        stream.set_write_timeout(Some(self.idle));
        (Box::pin(stream), addr)
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

async fn metrics(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        shared.metrics.render(),
    )
}

async fn healthcheck(State(shared): State<Arc<Shared>>) -> (StatusCode, String) {
    match shared.backend.query(redis::cmd("PING"), 0).await {
        Ok(_) => (StatusCode::OK, "OK\n".into()),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("redis: {e}\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::config::Config;
    use crate::settings::FailureMode;
    use std::sync::RwLock;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Keep-alive, HEAD, 404 and 405 on one connection, then the idle
    /// connection closed after the idle timeout (the hand-written endpoint
    /// bounded its connections too).
    #[tokio::test]
    async fn keeps_connections_alive_and_closes_idle_ones() {
        // /metrics needs no Redis (nothing listens there).
        let backend = Backend::new("redis://127.0.0.1:1", false, Duration::from_millis(100))
            .expect("a lazy connection");
        let shared = Arc::new(Shared {
            config: RwLock::new(Arc::new(Config::default())),
            backend,
            metrics: Default::default(),
            failure_mode: FailureMode::Open,
            key_prefix: String::new(),
            hash_tag_keys: Vec::new(),
            near_limit_ratio: 0.8,
            global_shadow_mode: false,
            response_headers: false,
        });
        shared.metrics.requests.increment(7);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let idle = Duration::from_millis(200);
        let server = tokio::spawn(serve_with(listener, shared, idle));
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let mut buf = vec![0u8; 16384];
        for (request, status, ends_with) in [
            (
                "GET /metrics",
                "200",
                "ratelimit_service_should_rate_limit_total 7\n",
            ),
            (
                "GET /metrics",
                "200",
                "ratelimit_service_should_rate_limit_total 7\n",
            ),
            ("HEAD /metrics", "200", "\r\n\r\n"),
            ("GET /nope", "404", "\r\n\r\n"),
            ("POST /metrics", "405", "\r\n\r\n"),
        ] {
            stream
                .write_all(
                    format!("{request} HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
                        .as_bytes(),
                )
                .await
                .unwrap();
            let n = stream.read(&mut buf).await.unwrap();
            let text = String::from_utf8_lossy(&buf[..n]);
            assert!(
                text.starts_with(&format!("HTTP/1.1 {status}")),
                "{request}: {text}"
            );
            assert!(text.contains(ends_with), "{request}: {text}");
        }
        // Then nothing: closed (EOF or reset) within a few idle periods.
        let closed = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await;
        assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
        server.abort();
    }
}
