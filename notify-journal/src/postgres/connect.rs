//! Opening connections with a bounded wait.

use std::time::Duration;

use tokio_postgres::{Client, Config, NoTls};

use super::error::{PgOpenError, sanitize};
use crate::error::StorageError;

/// Opens connections to one server; holds the parsed config, never its text.
pub(crate) struct Connector {
    config: Config,
    timeout: Duration,
    /// Bounds lock waits on the server (`lock_timeout`).
    op_timeout: Duration,
}

/// Why a connection could not be opened.
pub(crate) enum ConnectFailure {
    Timeout(Duration),
    Failed(StorageError),
}

impl ConnectFailure {
    pub(crate) fn into_storage(self) -> StorageError {
        match self {
            Self::Timeout(after) => {
                StorageError::msg(format!("postgres: connect timed out after {after:?}"))
            }
            Self::Failed(e) => e,
        }
    }

    pub(crate) fn into_open_error(self) -> PgOpenError {
        match self {
            Self::Timeout(after) => PgOpenError::ConnectTimeout { after },
            Self::Failed(e) => PgOpenError::Unreachable(e),
        }
    }
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The config may hold a password: never print it.
        f.debug_struct("Connector")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Connector {
    pub(crate) fn new(
        conninfo: &str,
        timeout: Duration,
        op_timeout: Duration,
    ) -> Result<Self, PgOpenError> {
        let mut config: Config = conninfo.parse().map_err(|_| PgOpenError::InvalidConfig)?;
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
        if config.get_application_name().is_none() {
            config.application_name("notify-journal");
        }
        Ok(Self {
            config,
            timeout,
            op_timeout,
        })
    }

    /// Connects (TLS is not supported: `NoTls`), spawning the connection's driver
    /// task on the current runtime, and configures the session: `READ COMMITTED` as
    /// the default isolation (whatever the server's or the connection string's
    /// default; the journal's statements are written for it) and `lock_timeout` set
    /// to the operation timeout. Never waits longer than the connect timeout.
    pub(crate) async fn connect(&self) -> Result<Client, ConnectFailure> {
        let lock_ms = self.op_timeout.as_millis().clamp(1, i32::MAX as u128);
        let setup = format!(
            "SET default_transaction_isolation = 'read committed'; SET lock_timeout = {lock_ms}"
        );
        let attempt = async {
            let (client, connection) = self
                .config
                .connect(NoTls)
                .await
                .map_err(|e| ConnectFailure::Failed(sanitize("connect", &e)))?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %sanitize("connection", &e), "postgres connection ended");
                }
            });
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
