//! The accept loop: a bounded number of connections (a semaphore permit per
//! connection; more wait in the kernel's backlog), TLS handshakes and request
//! headers under a deadline, HTTP/1.1 and HTTP/2 on every connection (hyper-util's
//! automatic builder), and a graceful drain: on shutdown the listener closes, idle
//! connections are closed, in-flight requests finish (bounded by the drain timeout).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio_rustls::TlsAcceptor;

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
        let service = TowerToHyperService::new(app.clone());
        let watcher = graceful.watcher();
        let builder = Arc::clone(&builder);
        let tls = tls.clone();
        let header_timeout = limits.header_timeout;
        tokio::spawn(async move {
            let _permit = permit;
            match tls {
                Some(acceptor) => {
                    let stream =
                        match tokio::time::timeout(header_timeout, acceptor.accept(stream)).await {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "TLS handshake timed out");
                                return;
                            }
                        };
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    if let Err(e) = watcher.watch(conn).await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                }
                None => {
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    if let Err(e) = watcher.watch(conn).await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                }
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
