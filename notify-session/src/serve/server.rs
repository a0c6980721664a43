//! [`Server`]: binds, starts the host, serves, and shuts down in order.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use notify_journal::JournalLeases;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::auth::Auth;
use super::config::{ConfigError, ServeConfig};
use super::console::{self, Console, JournalInspect};
use super::consume::Consumers;
use super::directory::{NoDirectory, OwnerDirectory};
use super::host::{Host, ServeApp, SharedApp};
use super::listen;
use super::routes::router;
use super::state::{AppState, Inner};
use super::tls::{TlsError, acceptor};
use crate::{HostBuilder, HostError};

/// How often the advertisement is written again.
const ADVERTISE_EVERY: Duration = Duration::from_secs(60);
/// How soon an advertisement that could not be written is tried again (the
/// directory reconnects by itself).
const ADVERTISE_RETRY: Duration = Duration::from_secs(5);

/// The wait before the next advertisement, after one that was written or not.
fn next_advertisement(written: bool) -> Duration {
    if written {
        ADVERTISE_EVERY
    } else {
        ADVERTISE_RETRY
    }
}

/// Why the server could not start (or stop cleanly).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The configuration cannot run.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The certificate or key cannot be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The host could not start, or its shutdown could not release every lease.
    #[error("the host failed")]
    Host(#[source] HostError),
}

/// The server's settings beyond [`ServeConfig`]: where other hosts are and the
/// metrics exporter. Built by [`Server::builder`].
#[must_use = "a builder does nothing until started"]
pub struct ServerBuilder {
    config: ServeConfig,
    directory: Arc<dyn OwnerDirectory>,
    metrics: Option<PrometheusHandle>,
    inspect: Option<Arc<dyn JournalInspect>>,
}

impl std::fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ServerBuilder {
    /// Where other hosts advertise their URLs (default: nowhere, one host).
    pub fn directory(mut self, directory: impl OwnerDirectory) -> Self {
        self.directory = Arc::new(directory);
        self
    }

    /// Serves `/metrics` from this Prometheus recorder (install it as the `metrics`
    /// facade's global recorder first; without it `/metrics` answers 404).
    pub fn metrics(mut self, handle: PrometheusHandle) -> Self {
        self.metrics = Some(handle);
        self
    }

    /// Gives the console (`/console/`) the engine's view of the journal the host
    /// runs on: its figures, its scrub, its verify. Without it the pages say what
    /// they cannot know.
    pub fn inspect(mut self, journal: Arc<dyn JournalInspect>) -> Self {
        self.inspect = Some(journal);
        self
    }

    /// Binds the listener, starts the host from `host` (its application is the
    /// server's own: loops are registered over HTTP), and serves. `/healthz` answers
    /// as soon as the listener is bound; `/readyz` and the API wait for the host's
    /// first adoption pass (503 `not_ready` until then).
    ///
    /// # Errors
    ///
    /// [`ServeError`]: the configuration, the certificate, the address or the host.
    ///
    /// # Cancel safety
    ///
    /// If dropped while the host starts, the listener stops and the host is dropped
    /// (its leases expire).
    pub async fn start<J: JournalLeases + 'static>(
        self,
        host: HostBuilder<J>,
    ) -> Result<Server, ServeError> {
        let config = self.config;
        config.check()?;
        let tls = config.tls.as_ref().map(acceptor).transpose()?;
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ServeError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| ServeError::Bind {
            addr: config.listen,
            source,
        })?;
        let mut config = config;
        // A port of 0 was bound to a real one: that is the URL.
        config.listen = addr;
        let base_url = config.base_url();
        let consumers = Arc::new(Consumers::default());
        let app = Arc::new(ServeApp::new(Arc::clone(&consumers)));
        let (drain, _) = watch::channel(false);
        let state = AppState {
            inner: Arc::new(Inner {
                host: std::sync::OnceLock::new(),
                app: Arc::clone(&app),
                consumers,
                directory: self.directory,
                metrics: self.metrics,
                draining: AtomicBool::new(false),
                drain,
                max_visibility: Duration::from_secs(15 * 60),
                base_url: base_url.clone(),
                console: Arc::new(Console::new(
                    self.inspect,
                    Arc::new(config.keys.clone()),
                    config.insecure_unsigned,
                    config.tls.is_some(),
                    config.listen.ip().is_loopback(),
                )),
            }),
        };
        let auth = Arc::new(Auth {
            keys: Arc::new(config.keys.clone()),
            tolerance: config.timestamp_tolerance,
            unsigned: config.insecure_unsigned,
            body_limit: config.body_limit,
        });
        let routes = router(state.clone(), auth, config.request_timeout);
        let (stop, stop_rx) = watch::channel(false);
        let limits = listen::Limits {
            max_connections: config.max_connections,
            header_timeout: config.header_timeout,
            idle_timeout: config.idle_timeout,
            drain_timeout: config.drain_timeout,
        };
        let listening = tokio::spawn(listen::run(listener, tls, routes, limits, stop_rx.clone()));
        let started = host.app(SharedApp(app)).start().await;
        let host: Arc<dyn Host> = match started {
            Ok(h) => Arc::new(h),
            Err(e) => {
                let _ = stop.send(true);
                let _ = listening.await;
                return Err(ServeError::Host(e));
            }
        };
        let holder = host.holder_id();
        let _ = state.inner.host.set(Arc::clone(&host));
        console::spawn(&state);
        let directory = Arc::clone(&state.inner.directory);
        let advertised = directory.advertise(holder, base_url.clone()).await;
        let advertising = tokio::spawn({
            let directory = Arc::clone(&directory);
            let url = base_url.clone();
            let mut stop = stop_rx;
            async move {
                let mut wait = next_advertisement(advertised);
                loop {
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {
                            wait = next_advertisement(directory.advertise(holder, url.clone()).await);
                        }
                        () = crate::serve::state::until_true(&mut stop) => break,
                    }
                }
            }
        });
        tracing::info!(%addr, url = %base_url, %holder, tls = config.tls.is_some(), "serving");
        Ok(Server {
            state,
            host,
            addr,
            base_url,
            stop,
            listening,
            advertising,
        })
    }
}

/// A running server: the listener, the host behind it, and what advertises it.
pub struct Server {
    state: AppState,
    host: Arc<dyn Host>,
    addr: SocketAddr,
    base_url: String,
    stop: watch::Sender<bool>,
    listening: JoinHandle<()>,
    advertising: JoinHandle<()>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.addr)
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// A builder for a server with `config`.
    pub fn builder(config: ServeConfig) -> ServerBuilder {
        ServerBuilder {
            config,
            directory: Arc::new(NoDirectory),
            metrics: None,
            inspect: None,
        }
    }

    /// The address the listener is bound to (the real port when 0 was asked).
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL this server advertises.
    #[must_use]
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The host's lease-holder identity.
    #[must_use]
    pub fn holder_id(&self) -> notify_types::Uuid {
        self.host.holder_id()
    }

    /// Shuts down in order: `/readyz` turns 503 and long polls and streams end (what
    /// they handed out and nobody acknowledged is redelivered); the listener closes
    /// and in-flight requests finish (bounded by the drain timeout); then the host
    /// shuts down, releasing its leases so other hosts adopt the sessions at once;
    /// last, the advertisement is withdrawn.
    ///
    /// # Errors
    ///
    /// [`ServeError::Host`] if a lease could not be released (it expires).
    ///
    /// # Cancel safety
    ///
    /// If dropped, the server stops accepting but the host may not release its
    /// leases (they expire).
    pub async fn shutdown(self) -> Result<(), ServeError> {
        tracing::info!("shutting down: draining requests");
        self.state.begin_drain();
        let _ = self.stop.send(true);
        let _ = self.listening.await;
        let _ = self.advertising.await;
        let released = self.host.shutdown().await;
        self.state
            .inner
            .directory
            .withdraw(self.host.holder_id())
            .await;
        tracing::info!("shut down");
        released.map_err(ServeError::Host)
    }

    /// Serves until `signal` completes (e.g. [`shutdown_signal`](super::shutdown_signal)),
    /// then [shuts down](Self::shutdown).
    ///
    /// # Errors
    ///
    /// As [`shutdown`](Self::shutdown).
    ///
    /// # Cancel safety
    ///
    /// As [`shutdown`](Self::shutdown).
    pub async fn run_until(
        self,
        signal: impl std::future::Future<Output = ()>,
    ) -> Result<(), ServeError> {
        signal.await;
        self.shutdown().await
    }
}
