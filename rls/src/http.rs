//! The HTTP endpoint (axum): `GET /metrics` (Prometheus text format) and
//! `GET /healthcheck` (200 when Redis answers `PING` within the timeout,
//! 503 otherwise or while shutting down). `HEAD` as `GET`; other paths 404,
//! other methods 405; a request not answered within 5 s gets 408; a
//! connection that sends nothing for 30 s is closed.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
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

/// Serves until `shutdown` completes (then finishes the requests in flight).
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    serve_with(listener, shared, shutdown, IDLE_TIMEOUT).await
}

/// [`serve`], closing connections idle for `idle`.
pub async fn serve_with(
    listener: TcpListener,
    shared: Arc<Shared>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    idle: Duration,
) {
    let listener = IdleTimeout { listener, idle };
    let result = axum::serve(listener, router(shared))
        .with_graceful_shutdown(shutdown)
        .await;
    if let Err(e) = result {
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
        shared.render_metrics(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{BackendError, LimitReply, Limiter, Limits, Op};
    use crate::config::Config;
    use crate::settings::Settings;
    use clap::Parser;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct Up;

    #[tonic::async_trait]
    impl Limiter for Up {
        async fn rl_all(
            &self,
            _: &Limits<'_>,
            _: Op,
            _: u16,
        ) -> Result<(bool, Vec<LimitReply>), BackendError> {
            Err(BackendError::Reply("unused".into()))
        }
        async fn ping(&self) -> Result<(), BackendError> {
            Ok(())
        }
        fn is_cluster(&self) -> bool {
            false
        }
        fn timeout(&self) -> Duration {
            Duration::from_millis(100)
        }
    }

    /// Keep-alive, then an idle connection closed after the idle timeout
    /// (the hand-written endpoint bounded its connections too).
    #[tokio::test]
    async fn keeps_connections_alive_and_closes_idle_ones() {
        let settings = Settings::parse_from(["ratelimit-rls", "--config", "unused.yaml"]);
        let shared = Arc::new(Shared::new(&settings, Config::default(), Arc::new(Up)));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let idle = Duration::from_millis(200);
        let server = tokio::spawn(serve_with(listener, shared, std::future::pending(), idle));
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let mut buf = vec![0u8; 4096];
        for _ in 0..2 {
            stream
                .write_all(b"GET /healthcheck HTTP/1.1\r\nhost: x\r\n\r\n")
                .await
                .unwrap();
            let n = stream.read(&mut buf).await.unwrap();
            let text = String::from_utf8_lossy(&buf[..n]);
            assert!(text.starts_with("HTTP/1.1 200"), "{text}");
            assert!(text.ends_with("OK\n"), "{text}");
        }
        // Then nothing: closed (EOF or reset) within a few idle periods.
        let closed = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await;
        assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
        server.abort();
    }
}
