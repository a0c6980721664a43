//! The accept loop: a bounded number of connections (a semaphore permit per
//! connection; more wait in the kernel's backlog), TLS handshakes, a connection's
//! first request and every HTTP/1.1 request's headers under a deadline, an idle
//! limit on every connection, HTTP/1.1 and HTTP/2 on every connection (hyper-util's
//! automatic builder), and a graceful drain: on shutdown the listener closes, idle
//! connections are closed, in-flight requests finish (bounded by the drain timeout).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::Response;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore, watch};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tower::Service;

use crate::serve::state::until_true;

/// The accept loop's limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_connections: usize,
    pub(crate) header_timeout: Duration,
    pub(crate) idle_timeout: Duration,
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
            () = until_true(&mut stop) => break,
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
            () = until_true(&mut stop) => break,
        };
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            app: app.clone(),
            builder: Arc::clone(&builder),
            limits,
            peer,
            stop: stop.clone(),
        };
        let tls = tls.clone();
        tokio::spawn(async move {
            // Handed back when the connection ends, whichever way: the drain below
            // counts them.
            let _permit = permit;
            match tls {
                Some(acceptor) => {
                    let handshake = acceptor.accept(stream);
                    let mut stop = connection.stop.clone();
                    let shaken = tokio::select! {
                        shaken = tokio::time::timeout(connection.limits.header_timeout, handshake) => shaken,
                        // Stopping mid-handshake: nothing is in flight.
                        () = until_true(&mut stop) => return,
                    };
                    match shaken {
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
    // Every connection is told by `stop` (idle ones close, busy ones finish what is in
    // flight); all permits back means every connection ended.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    tokio::select! {
        _ = permits.acquire_many(all) => tracing::info!("every connection drained"),
        () = tokio::time::sleep(limits.drain_timeout) => {
            tracing::warn!("drain timeout: closing the connections still open");
        }
    }
}

/// One accepted connection, ready to be served.
struct Connection {
    app: Router,
    builder: Arc<Builder<TokioExecutor>>,
    limits: Limits,
    peer: SocketAddr,
    stop: watch::Receiver<bool>,
}

impl Connection {
    /// Serves HTTP/1.1 or HTTP/2 on `io` until the connection ends; closes it if its
    /// first request has not arrived within the header timeout, and shuts it down
    /// gracefully (what is in flight finishes, no new request starts) once no request
    /// has started for the idle timeout, or when the server stops.
    ///
    /// hyper's own header timeout starts only once HTTP/1.1 is chosen, which takes the
    /// connection's first bytes, and HTTP/2 has none: without the first deadline, a
    /// client that connects and sends nothing (or only HTTP/2's preface) would hold
    /// one of the `--max-connections` permits for good; without the idle limit, an
    /// HTTP/2 client that made one request and answers the server's pings would.
    async fn serve<IO>(self, io: IO)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Self {
            app,
            builder,
            limits,
            peer,
            mut stop,
        } = self;
        let activity = Activity::new();
        let service = TowerToHyperService::new(activity.wrap(app));
        let conn = builder.serve_connection(TokioIo::new(io), service);
        tokio::pin!(conn);
        tokio::select! {
            ended = &mut conn => return log_end(peer, ended),
            arrived = tokio::time::timeout(limits.header_timeout, activity.arrived()) => {
                if arrived.is_err() {
                    tracing::debug!(%peer, "no request within the header timeout: closed");
                    return;
                }
            }
            // Stopping before any request: nothing is in flight.
            () = until_true(&mut stop) => return,
        }
        loop {
            let idle_at = activity.last_request() + limits.idle_timeout;
            tokio::select! {
                ended = &mut conn => return log_end(peer, ended),
                () = tokio::time::sleep_until(idle_at) => {
                    if activity.last_request() + limits.idle_timeout <= Instant::now() {
                        tracing::debug!(%peer, "idle: shut down");
                        break;
                    }
                }
                () = until_true(&mut stop) => break,
            }
        }
        conn.as_mut().graceful_shutdown();
        log_end(peer, conn.await);
    }
}

fn log_end<E: std::fmt::Display>(peer: SocketAddr, ended: Result<(), E>) {
    if let Err(e) = ended {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

/// When a connection's requests started: whether its first has, and when its last
/// did. One `Arc`: the service that holds it is cloned for every request.
#[derive(Clone)]
struct Activity(Arc<Started>);

struct Started {
    seen: AtomicBool,
    notify: Notify,
    /// When the connection was accepted: `last`'s origin.
    base: Instant,
    /// When the last request started, in ms after `base`.
    last: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self(Arc::new(Started {
            seen: AtomicBool::new(false),
            notify: Notify::new(),
            base: Instant::now(),
            last: AtomicU64::new(0),
        }))
    }

    /// `app`, telling this when a request starts.
    fn wrap(&self, app: Router) -> Arrived {
        Arrived {
            app,
            activity: self.clone(),
        }
    }

    /// A request started now.
    fn started(&self) {
        let started = &self.0;
        let ms = u64::try_from(started.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        started.last.fetch_max(ms, Ordering::AcqRel);
        if !started.seen.swap(true, Ordering::AcqRel) {
            started.notify.notify_waiters();
        }
    }

    /// When the last request started (the connection's start before any).
    fn last_request(&self) -> Instant {
        self.0.base + Duration::from_millis(self.0.last.load(Ordering::Acquire))
    }

    /// Resolves once the first request has arrived (at once if it has).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the arrival is kept, not consumed.
    async fn arrived(&self) {
        loop {
            // Made before the flag is read: `notify_waiters` wakes every waiter made
            // before it.
            let notified = self.0.notify.notified();
            if self.0.seen.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }
}

/// The router, noting when each of the connection's requests starts.
#[derive(Clone)]
struct Arrived {
    app: Router,
    activity: Activity,
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
        self.activity.started();
        self.app.call(request)
    }
}
