//! The accept loop, hardened against careless and hostile clients: hyper's HTTP/1 on every
//! connection with a header read timeout, a cap on open connections, connections whose writes
//! stall (a client that stops reading its stream) closed after `--timeout`, and a shutdown that
//! always ends: connections drain gracefully until the hard stop, then the rest are dropped.
//!
//! Request bodies have their own read timeout (a middleware in [`crate::http`]), and a
//! streamed reply whose client leaves 2,048 events unread ends, freeing its slot (the
//! generating endpoints' `MAX_UNREAD_EVENTS`).

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// The limits of the accept loop and of each connection ([`crate::ServerConfig::hardening`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Hardening {
    /// llama-server's `--timeout`: a request body must arrive, and a blocked write to a client
    /// must make progress, within it.
    pub timeout: Duration,
    /// A request's headers must arrive within it (`--header-timeout`).
    pub header_timeout: Duration,
    /// Most open connections (`--max-connections`); 0: from the process's open-file limit.
    pub max_connections: usize,
    /// Origins browsers may call from (`--cors-origin`); empty: any origin (llama-server's
    /// behaviour).
    pub cors_origins: Vec<String>,
}

impl Default for Hardening {
    fn default() -> Self {
        Hardening {
            timeout: Duration::from_secs(600),
            header_timeout: Duration::from_secs(10),
            max_connections: 0,
            cors_origins: Vec::new(),
        }
    }
}

/// The connection cap for `max_connections` (0: half the soft open-file limit, which leaves
/// descriptors for the model and logs, at most 4096; 256 where the limit cannot be read).
pub fn connection_cap(max_connections: usize) -> usize {
    if max_connections > 0 {
        return max_connections;
    }
    let soft = std::fs::read_to_string("/proc/self/limits").ok().and_then(|t| {
        let line = t.lines().find(|l| l.starts_with("Max open files"))?;
        line.split_whitespace().nth(3)?.parse::<usize>().ok()
    });
    soft.map_or(256, |n| (n / 2).clamp(16, 4096))
}

/// A TCP stream that records since when a write has been blocked (0: not blocked), so a
/// watchdog can close a connection whose client stopped reading.
struct Watched {
    io: TcpStream,
    blocked_since: Arc<AtomicU64>,
    epoch: Instant,
}

impl Watched {
    fn note<T>(&self, r: &Poll<T>) {
        match r {
            Poll::Pending => {
                let now = self.epoch.elapsed().as_millis() as u64 + 1;
                let _ = self.blocked_since.compare_exchange(
                    0,
                    now,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            Poll::Ready(_) => self.blocked_since.store(0, Ordering::Relaxed),
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.note(&r);
        r
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.note(&r);
        r
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        self.note(&r);
        r
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Resolves once a write has been blocked for longer than `limit`.
async fn stalled(blocked_since: Arc<AtomicU64>, epoch: Instant, limit: Duration) {
    let tick = (limit / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        tokio::time::sleep(tick).await;
        let since = blocked_since.load(Ordering::Relaxed);
        let now = epoch.elapsed().as_millis() as u64 + 1;
        if since != 0 && now.saturating_sub(since) > limit.as_millis() as u64 {
            return;
        }
    }
}

/// Serves `app` on `listener` until `stop` resolves, then lets open connections finish until
/// `hard` resolves, and drops what is left (see the module docs).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Hardening,
    stop: impl Future<Output = ()>,
    hard: impl Future<Output = ()>,
) {
    let cap = connection_cap(limits.max_connections);
    tracing::debug!(cap, header_timeout_s = limits.header_timeout.as_secs_f64(), "accepting");
    let slots = Arc::new(Semaphore::new(cap));
    let graceful = GracefulShutdown::new();
    let mut refused: u64 = 0;
    tokio::pin!(stop);
    loop {
        let (stream, _peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors, say: wait instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            refused += 1;
            if refused.is_power_of_two() {
                tracing::warn!(cap, refused, "connection limit reached: closing new connections");
            }
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let epoch = Instant::now();
        let blocked_since = Arc::new(AtomicU64::new(0));
        let io = Watched { io: stream, blocked_since: blocked_since.clone(), epoch };
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .serve_connection(TokioIo::new(io), TowerToHyperService::new(app.clone()));
        let conn = graceful.watch(conn);
        let io_timeout = limits.timeout;
        tokio::spawn(async move {
            tokio::select! {
                r = conn => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "connection ended");
                    }
                }
                _ = stalled(blocked_since, epoch, io_timeout) => {
                    tracing::warn!("closing a connection whose client stopped reading (--timeout)");
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    let open = graceful.count();
    if open > 0 {
        tracing::info!(open, "waiting for open connections");
    }
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = hard => {
            tracing::warn!("shutdown deadline: closing the connections still open");
        }
    }
}
