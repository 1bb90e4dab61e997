//! One Redis server's connection: redis-rs's multiplexed connection (every
//! request's command on one socket, pipelined), made on first use and made
//! again after it drops, over a socket whose writes wait one turn of the
//! scheduler ([`Coalesce`]): the commands of the requests that run in that
//! turn go out in one write.
//!
//! Why (issue 47): a write on a socket costs the kernel far more than the
//! service's own work on a decision. redis-rs's connection task sends every
//! command queued when it runs in one write, but tokio runs a task woken by
//! another right after it (the LIFO slot), so the connection task ran after
//! each request's command and wrote it alone: one write per decision.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, RedisResult};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Mutex;

/// The connection in use and its number.
type Current = ArcSwapOption<(u64, MultiplexedConnection)>;

/// The connection to one server (not a cluster), shared by every request.
pub(super) struct Single {
    info: ConnectionInfo,
    timeout: Duration,
    /// `None` before the first call and after the connection dropped.
    current: Arc<Current>,
    connections: AtomicU64,
    /// One connection attempt at a time.
    connecting: Mutex<()>,
}

impl Single {
    /// Nothing is connected yet: the first call connects. `timeout` bounds
    /// connecting, and each reply.
    pub(super) fn new(info: ConnectionInfo, timeout: Duration) -> Single {
        Single {
            info,
            timeout,
            current: Arc::new(ArcSwapOption::empty()),
            connections: AtomicU64::new(0),
            connecting: Mutex::new(()),
        }
    }

    /// `cmd`'s reply (a server's error reply as an error). Unbounded here:
    /// every caller bounds it by its own timer (a decision's, or
    /// [`super::Redis::query`]'s), so a call arms one timer, not two.
    pub(super) async fn query(&self, cmd: &redis::Cmd) -> RedisResult<redis::Value> {
        let (number, mut con) = match self.current.load().as_deref() {
            Some(current) => current.clone(),
            // Boxed: connecting is rare, and its future is large; inline, it
            // would make every call's future as large (issue 47's profile:
            // kilobytes moved per call).
            None => Box::pin(self.connect()).await?,
        };
        let result = con
            .send_packed_command(cmd)
            .await
            .and_then(redis::Value::extract_error);
        if let Err(e) = &result {
            if e.is_unrecoverable_error() || e.is_connection_dropped() {
                forget(&self.current, number);
            }
        }
        result
    }

    /// Connects, unless another call did meanwhile.
    async fn connect(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        let _guard = self.connecting.lock().await;
        if let Some(current) = self.current.load().as_deref() {
            return Ok(current.clone());
        }
        let timed_out =
            |what: &str| io::Error::new(io::ErrorKind::TimedOut, format!("{what} timed out"));
        let stream = tokio::time::timeout(self.timeout, connect(self.info.addr()))
            .await
            .map_err(|_| timed_out("connecting"))??;
        let config = AsyncConnectionConfig::new().set_response_timeout(None);
        let (con, driver) = tokio::time::timeout(
            self.timeout,
            MultiplexedConnection::new_with_config(self.info.redis_settings(), stream, config),
        )
        .await
        .map_err(|_| timed_out("the connection's setup"))??;
        let number = self.connections.fetch_add(1, Ordering::Relaxed) + 1;
        // When the socket closes, the next call connects again.
        let current = self.current.clone();
        tokio::spawn(async move {
            driver.await;
            forget(&current, number);
        });
        let entry = (number, con);
        self.current.store(Some(Arc::new(entry.clone())));
        Ok(entry)
    }
}

/// Drops connection `number` if it is still the one in use.
fn forget(current: &Current, number: u64) {
    current.rcu(|c| match c {
        Some(c) if c.0 == number => None,
        other => other.clone(),
    });
}

/// A socket to `addr`: TCP (with `TCP_NODELAY`, as the writes are already
/// gathered) or Unix.
async fn connect(addr: &ConnectionAddr) -> RedisResult<Coalesce> {
    let socket = match addr {
        ConnectionAddr::Tcp(host, port) => {
            let stream = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
            stream.set_nodelay(true)?;
            Socket::Tcp(stream)
        }
        ConnectionAddr::Unix(path) => Socket::Unix(tokio::net::UnixStream::connect(path).await?),
        other => {
            return Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "unsupported connection address (this build has no TLS)",
                other.to_string(),
            )))
        }
    };
    Ok(Coalesce {
        socket,
        deferred: false,
    })
}

/// A TCP or Unix socket.
enum Socket {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

/// A socket whose first write after each flush waits one turn of the
/// scheduler: it wakes its own task and answers "not yet", so that tokio
/// runs the other tasks ready now (other requests, whose commands join the
/// connection's buffer) before the connection task writes them all at once.
struct Coalesce {
    socket: Socket,
    /// A turn was waited since the last flush.
    deferred: bool,
}

impl Coalesce {
    /// Whether this write goes now (`true`), or waits one turn.
    fn ready(&mut self, cx: &mut Context<'_>) -> bool {
        if self.deferred {
            return true;
        }
        self.deferred = true;
        cx.waker().wake_by_ref();
        false
    }
}

/// `$e` on the socket, whichever it is.
macro_rules! on_socket {
    ($socket:expr, $s:ident => $e:expr) => {
        match $socket {
            Socket::Tcp($s) => $e,
            Socket::Unix($s) => $e,
        }
    };
}

impl AsyncRead for Coalesce {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        on_socket!(&mut self.get_mut().socket, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for Coalesce {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !this.ready(cx) {
            return Poll::Pending;
        }
        on_socket!(&mut this.socket, s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !this.ready(cx) {
            return Poll::Pending;
        }
        on_socket!(&mut this.socket, s => Pin::new(s).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        on_socket!(&self.socket, s => s.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let flushed = on_socket!(&mut this.socket, s => Pin::new(s).poll_flush(cx));
        if flushed.is_ready() {
            this.deferred = false;
        }
        flushed
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        on_socket!(&mut self.get_mut().socket, s => Pin::new(s).poll_shutdown(cx))
    }
}
