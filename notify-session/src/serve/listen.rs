//! The accept loop: a bounded number of connections (a semaphore permit per
//! connection; more wait in the kernel's backlog), TLS handshakes, a connection's
//! first request and every HTTP/1.1 request's headers under a deadline, HTTP/1.1 and
//! HTTP/2 on every connection (hyper-util's automatic builder), and a graceful drain:
//! on shutdown the listener closes, idle connections are closed, in-flight requests
//! finish (bounded by the drain timeout).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::Response;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore, watch};
use tokio_rustls::TlsAcceptor;
use tower::Service;

/// The accept loop's limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_connections: usize,
    pub(crate) header_timeout: Duration,
    pub(crate) drain_timeout: Duration,
}

/// Serves `app` on `listener` until `stop` turns true, then drains.
pub(crate) async fn run(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    app: Router,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .max_concurrent_streams(256);
    let builder = Arc::new(builder);
    loop {
        let permit = tokio::select! {
            p = Arc::clone(&permits).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            () = crate::serve::state::until_true(&mut stop) => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off, never spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = crate::serve::state::until_true(&mut stop) => break,
        };
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            app: app.clone(),
            builder: Arc::clone(&builder),
            watcher: graceful.watcher(),
            header_timeout: limits.header_timeout,
            peer,
        };
        let tls = tls.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match tls {
                Some(acceptor) => {
                    let handshake = acceptor.accept(stream);
                    match tokio::time::timeout(connection.header_timeout, handshake).await {
                        Ok(Ok(stream)) => connection.serve(stream).await,
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                }
                None => connection.serve(stream).await,
            }
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("every connection drained"),
        () = tokio::time::sleep(limits.drain_timeout) => {
            tracing::warn!("drain timeout: closing the connections still open");
        }
    }
}

/// One accepted connection, ready to be served.
struct Connection {
    app: Router,
    builder: Arc<Builder<TokioExecutor>>,
    watcher: Watcher,
    header_timeout: Duration,
    peer: SocketAddr,
}

impl Connection {
    /// Serves HTTP/1.1 or HTTP/2 on `io` until the connection ends, or closes it if
    /// its first request has not arrived within the header timeout. hyper's own
    /// header timeout starts only once HTTP/1.1 is chosen, which takes the
    /// connection's first bytes; an HTTP/2 connection has none. Without this, a
    /// client that connects and sends nothing (or only HTTP/2's preface) holds one of
    /// the `--max-connections` permits for good.
    async fn serve<IO>(self, io: IO)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let first = FirstRequest::default();
        let service = TowerToHyperService::new(first.wrap(self.app));
        let conn = self
            .watcher
            .watch(self.builder.serve_connection(TokioIo::new(io), service));
        tokio::pin!(conn);
        let ended = tokio::select! {
            ended = &mut conn => ended,
            arrived = tokio::time::timeout(self.header_timeout, first.arrived()) => {
                if arrived.is_err() {
                    tracing::debug!(peer = %self.peer, "no request within the header timeout: closed");
                    return;
                }
                conn.await
            }
        };
        if let Err(e) = ended {
            tracing::debug!(peer = %self.peer, error = %e, "connection ended with an error");
        }
    }
}

/// Whether a connection's first request has arrived (its headers were read).
#[derive(Clone, Default)]
struct FirstRequest {
    seen: Arc<AtomicBool>,
    notify: Arc<Notify>,
}

impl FirstRequest {
    /// `app`, telling this when it is first called.
    fn wrap(&self, app: Router) -> Arrived {
        Arrived {
            app,
            first: self.clone(),
        }
    }

    /// Resolves once the first request has arrived (at once if it has).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the arrival is kept, not consumed.
    async fn arrived(&self) {
        loop {
            let notified = self.notify.notified();
            if self.seen.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }
}

/// The router, noting the connection's first request.
#[derive(Clone)]
struct Arrived {
    app: Router,
    first: FirstRequest,
}

impl<B> Service<Request<B>> for Arrived
where
    Router: Service<Request<B>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = <Router as Service<Request<B>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        <Router as Service<Request<B>>>::poll_ready(&mut self.app, cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if !self.first.seen.swap(true, Ordering::AcqRel) {
            self.first.notify.notify_waiters();
        }
        self.app.call(request)
    }
}
