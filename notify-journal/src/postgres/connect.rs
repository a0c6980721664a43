//! Opening connections with a bounded wait.

use std::time::Duration;

use tokio_postgres::{Client, Config, NoTls};

use super::error::{PgOpenError, sanitize};
use crate::error::StorageError;

/// Opens connections to one server; holds the parsed config, never its text.
pub(crate) struct Connector {
    config: Config,
    timeout: Duration,
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
    pub(crate) fn new(conninfo: &str, timeout: Duration) -> Result<Self, PgOpenError> {
        let mut config: Config = conninfo.parse().map_err(|_| PgOpenError::InvalidConfig)?;
        // The per-address TCP timeout; the whole handshake is bounded in `connect`.
        if config.get_connect_timeout().is_none_or(|t| *t > timeout) {
            config.connect_timeout(timeout);
        }
        if config.get_application_name().is_none() {
            config.application_name("notify-journal");
        }
        Ok(Self { config, timeout })
    }

    /// Connects (TLS is not supported: `NoTls`), spawning the connection's driver
    /// task on the current runtime. Never waits longer than the connect timeout.
    pub(crate) async fn connect(&self) -> Result<Client, ConnectFailure> {
        match tokio::time::timeout(self.timeout, self.config.connect(NoTls)).await {
            Err(_) => Err(ConnectFailure::Timeout(self.timeout)),
            Ok(Err(e)) => Err(ConnectFailure::Failed(sanitize("connect", &e))),
            Ok(Ok((client, connection))) => {
                tokio::spawn(async move {
                    if let Err(e) = connection.await {
                        tracing::debug!(error = %sanitize("connection", &e), "postgres connection ended");
                    }
                });
                Ok(client)
            }
        }
    }
}
