//! Opening connections with a bounded wait, over TLS unless the settings say
//! otherwise (see `tls.rs`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;
use tokio_postgres::config::SslMode;
use tokio_postgres::{AsyncMessage, Client, Config, Connection, NoTls, Notification};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::error::{PgOpenError, PgTlsRefusal, sanitize};
use super::passfile;
use super::tls::{self, PgSslMode, PgTls};
use crate::error::StorageError;

/// Opens connections to one server; holds the parsed config, never its text.
#[derive(Clone)]
pub(crate) struct Connector {
    config: Config,
    /// Whether the connection string named the connections (`application_name`).
    named: bool,
    /// `None`: plain text.
    tls: Option<MakeRustlsConnect>,
    mode: PgSslMode,
    timeout: Duration,
    /// Bounds lock waits on the server (`lock_timeout`).
    op_timeout: Duration,
}

/// Why a connection could not be opened.
pub(crate) enum ConnectFailure {
    Timeout(Duration),
    Tls(PgTlsRefusal),
    Failed(StorageError),
}

impl ConnectFailure {
    pub(crate) fn into_storage(self) -> StorageError {
        match self {
            Self::Timeout(after) => {
                StorageError::msg(format!("postgres: connect timed out after {after:?}"))
            }
            Self::Tls(refusal) => {
                StorageError::msg(format!("postgres: connect failed (TLS: {refusal})"))
            }
            Self::Failed(e) => e,
        }
    }

    pub(crate) fn into_open_error(self) -> PgOpenError {
        match self {
            Self::Timeout(after) => PgOpenError::ConnectTimeout { after },
            Self::Tls(refusal) => PgOpenError::TlsRefused(refusal),
            Self::Failed(e) => PgOpenError::Unreachable(e),
        }
    }
}

/// Where a connection's notifications (`LISTEN`) go, and who hears that it ended:
/// `ended`'s receiver resolves (with an error) once the connection is gone.
pub(crate) struct Notifications {
    pub(crate) sink: Box<dyn FnMut(Notification) + Send>,
    #[expect(dead_code, reason = "never sent on: dropping it tells the receiver")]
    pub(crate) ended: oneshot::Sender<()>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The config may hold a password: never print it.
        f.debug_struct("Connector")
            .field("tls", &self.mode)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Connector {
    pub(crate) fn new(
        conninfo: &str,
        tls_options: Option<&PgTls>,
        timeout: Duration,
        op_timeout: Duration,
        credentials: (Option<&str>, Option<&Path>),
    ) -> Result<Self, PgOpenError> {
        let (from_conninfo, rest) = tls::split_conninfo(conninfo)?;
        let mut config: Config = rest.parse().map_err(|_| PgOpenError::InvalidConfig)?;
        passfile::fill(&mut config, credentials.0, credentials.1);
        let settings = tls::resolve(tls_options, from_conninfo, tls::all_hosts_local(&config))?;
        let mode = settings.effective_mode();
        let tls = tls::client_config(&settings)?.map(MakeRustlsConnect::new);
        // Never the driver's `prefer`: TLS is required or off, as decided above.
        config.ssl_mode(if tls.is_some() {
            SslMode::Require
        } else {
            SslMode::Disable
        });
        // The per-address TCP timeout; the whole handshake is bounded in `connect`.
        if config.get_connect_timeout().is_none_or(|t| *t > timeout) {
            config.connect_timeout(timeout);
        }
        // A peer that vanished silently (partition, paused host) is noticed by the
        // kernel within seconds instead of the system default of hours. Values the
        // connection string set are kept (the driver's idle default is 2 h, so an
        // idle of exactly 2 h is taken as unset).
        if config.get_keepalives() {
            if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
                config.keepalives_idle(Duration::from_secs(5));
            }
            if config.get_keepalives_interval().is_none() {
                config.keepalives_interval(Duration::from_secs(2));
            }
            if config.get_keepalives_retries().is_none() {
                config.keepalives_retries(3);
            }
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(op_timeout.max(Duration::from_secs(1)));
        }
        let named = config.get_application_name().is_some();
        if !named {
            config.application_name("notify-journal");
        }
        Ok(Self {
            config,
            named,
            tls,
            mode,
            timeout,
            op_timeout,
        })
    }

    /// The TLS mode in force.
    pub(crate) fn mode(&self) -> PgSslMode {
        self.mode
    }

    /// The same, naming its connections `name` unless the connection string named
    /// them.
    fn named(&self, name: &str) -> Self {
        let mut named = self.clone();
        if !self.named {
            named.config.application_name(name);
        }
        named
    }

    /// Connects (over TLS unless the mode is `disable`), spawning the connection's
    /// driver task on the current runtime, and configures the session: `READ COMMITTED` as
    /// the default isolation (whatever the server's or the connection string's
    /// default; the journal's statements are written for it) and `lock_timeout` set
    /// to the operation timeout. Never waits longer than the connect timeout.
    pub(crate) async fn connect(&self) -> Result<Client, ConnectFailure> {
        self.connect_with(None).await
    }

    /// [`connect`](Self::connect), handing the connection's notifications to
    /// `notes` (when given) as they arrive.
    pub(crate) async fn connect_with(
        &self,
        notes: Option<Notifications>,
    ) -> Result<Client, ConnectFailure> {
        let lock_ms = self.op_timeout.as_millis().clamp(1, i32::MAX as u128);
        let setup = format!(
            "SET default_transaction_isolation = 'read committed'; SET lock_timeout = {lock_ms}"
        );
        let attempt = async {
            let failed = |e: tokio_postgres::Error| match tls::refusal(&e) {
                Some(refusal) => ConnectFailure::Tls(refusal),
                None => ConnectFailure::Failed(sanitize("connect", &e)),
            };
            let client = match &self.tls {
                Some(tls) => {
                    let (client, connection) =
                        self.config.connect(tls.clone()).await.map_err(failed)?;
                    tokio::spawn(drive(connection, notes));
                    client
                }
                None => {
                    let (client, connection) = self.config.connect(NoTls).await.map_err(failed)?;
                    tokio::spawn(drive(connection, notes));
                    client
                }
            };
            client
                .batch_execute(&setup)
                .await
                .map_err(|e| ConnectFailure::Failed(sanitize("configure session", &e)))?;
            Ok(client)
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Err(_) => Err(ConnectFailure::Timeout(self.timeout)),
            Ok(result) => result,
        }
    }
}

/// Runs a connection until it ends, handing its notifications to `notes` (if
/// any); its error is logged sanitized. Dropping `notes` at the end tells its
/// `ended` receiver.
async fn drive<S, T>(mut connection: Connection<S, T>, mut notes: Option<Notifications>)
where
    S: AsyncRead + AsyncWrite + Unpin,
    T: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            None => break,
            Some(Ok(AsyncMessage::Notification(n))) => {
                if let Some(notes) = notes.as_mut() {
                    (notes.sink)(n);
                }
            }
            // Notices (and whatever else the server sends unasked) are not used.
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                tracing::debug!(error = %sanitize("connection", &e), "postgres connection ended");
                break;
            }
        }
    }
}

/// Opens PostgreSQL connections exactly as a [`PgJournal`](super::PgJournal) opens its
/// own, for a component that keeps tables beside the journal (e.g. a directory of
/// hosts): the same server and credentials (connection string, password, password
/// file), the same TLS mode, roots and client certificate, the same connect timeout
/// and keepalives, and the same session setup (`READ COMMITTED`, `lock_timeout` set
/// to the operation timeout). Get one from
/// [`PgJournal::connector`](super::PgJournal::connector); cloning it is cheap. It
/// holds the parsed settings, never the connection string's text, and does not
/// print the password.
///
/// The connections are the caller's: the journal neither counts nor closes them,
/// and the connector keeps working after the journal is
/// [closed](super::PgJournal::close).
#[derive(Clone)]
pub struct PgConnector {
    inner: Arc<Connector>,
}

impl std::fmt::Debug for PgConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.inner, f)
    }
}

impl PgConnector {
    pub(crate) fn new(inner: Arc<Connector>) -> Self {
        Self { inner }
    }

    /// The same connector, naming its connections `name` (`application_name`, as
    /// `pg_stat_activity` shows it) instead of `notify-journal`, unless the connection
    /// string named them (then its name is kept).
    #[must_use]
    pub fn application_name(&self, name: &str) -> Self {
        Self {
            inner: Arc::new(self.inner.named(name)),
        }
    }

    /// The TLS mode its connections use (as [`PgJournal::ssl_mode`](super::PgJournal::ssl_mode)).
    #[must_use]
    pub fn ssl_mode(&self) -> PgSslMode {
        self.inner.mode
    }

    /// The longest [`connect`](Self::connect) waits ([`PgOptions::connect_timeout`](super::PgOptions::connect_timeout)).
    #[must_use]
    pub fn connect_timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// Opens a connection, spawning its driver task on the current tokio runtime
    /// (the task ends when the returned client is dropped or the connection breaks:
    /// then the client's statements fail with
    /// [`is_closed`](tokio_postgres::Error::is_closed) errors and the caller connects
    /// again).
    ///
    /// # Errors
    ///
    /// [`PgOpenError::ConnectTimeout`] if the handshake and the session setup took
    /// longer than the connect timeout, [`PgOpenError::TlsRefused`] if the TLS
    /// handshake failed, [`PgOpenError::Unreachable`] for any other failure
    /// (refused, reset, authentication failed, database missing; sanitized: the
    /// operation and the SQLSTATE or I/O error kind only, no driver text).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future abandons the connection being opened.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (the driver task is spawned on it).
    pub async fn connect(&self) -> Result<Client, PgOpenError> {
        self.inner
            .connect()
            .await
            .map_err(ConnectFailure::into_open_error)
    }
}
