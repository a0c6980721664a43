//! Errors of the PostgreSQL backend, and the one place driver errors are sanitized.

use std::time::Duration;

use crate::error::StorageError;

/// Why [`PgJournal::connect`](super::PgJournal::connect) (or
/// [`PgConnector::connect`](super::PgConnector::connect)) failed.
///
/// No variant carries the connection string or a driver message (either may hold
/// credentials or host names); storage failures carry a SQLSTATE and a fixed text.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum PgOpenError {
    /// The connection string does not parse. Its text is deliberately not repeated.
    #[error("the PostgreSQL connection string does not parse")]
    InvalidConfig,
    /// An option is out of range or malformed.
    #[error("invalid PostgreSQL journal option `{option}`: {reason}")]
    InvalidOption {
        /// The option's name.
        option: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The server did not complete the connection handshake within the connect
    /// timeout.
    #[error("PostgreSQL did not answer within the {after:?} connect timeout")]
    ConnectTimeout {
        /// The timeout that elapsed.
        after: Duration,
    },
    /// The server could not be reached or refused the connection (refused, reset,
    /// authentication failed, database missing, ...).
    #[error("could not connect to PostgreSQL")]
    Unreachable(#[source] StorageError),
    /// The database's journal schema is newer than this code understands; nothing
    /// was changed. Upgrade the code before opening this database.
    #[error("journal schema version {found} is newer than the {supported} this code supports")]
    SchemaTooNew {
        /// The version recorded in the database.
        found: u32,
        /// The newest version this code knows.
        supported: u32,
    },
    /// The options asked to validate the schema only, and it is missing or older
    /// than the code; nothing was changed.
    #[error("journal schema version {found} is older than the required {required} (validate-only)")]
    SchemaOutdated {
        /// The version recorded in the database (0: no journal schema).
        found: u32,
        /// The version this code needs.
        required: u32,
    },
    /// The TLS settings could not be used: a CA file, client certificate or key
    /// that is unreadable or malformed, or no trusted roots on the system.
    #[error("PostgreSQL TLS setting `{setting}` is unusable: {reason}")]
    TlsConfig {
        /// The setting (`root_cert`, `client_cert`, `client_key`, `tls`).
        setting: &'static str,
        /// What is wrong with it (names the file, never its content).
        reason: String,
    },
    /// The TLS handshake with the server failed, or the server offered no TLS.
    #[error("the PostgreSQL server's TLS was refused: {0}")]
    TlsRefused(PgTlsRefusal),
    /// Any other storage failure while opening (e.g. migrations lacked privileges).
    #[error(transparent)]
    Storage(StorageError),
}

/// Why a TLS handshake with the server failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum PgTlsRefusal {
    /// The server's certificate does not chain to a trusted root (wrong CA, or
    /// self-signed).
    #[error("its certificate is not signed by a trusted CA")]
    UntrustedCertificate,
    /// The certificate is trusted but does not name the host connected to
    /// (`verify-full`).
    #[error("its certificate does not name the host connected to")]
    WrongHostName,
    /// The certificate has expired or is not valid yet.
    #[error("its certificate is expired or not yet valid")]
    CertificateNotCurrent,
    /// The certificate is unusable for another reason.
    #[error("its certificate is invalid")]
    InvalidCertificate,
    /// The server aborted the handshake (for example, it wanted a client
    /// certificate it did not get or trust).
    #[error("the server aborted the handshake")]
    RefusedByServer,
    /// The server does not offer TLS.
    #[error("the server does not offer TLS")]
    NotOffered,
    /// Another handshake failure.
    #[error("the handshake failed")]
    Handshake,
}

/// Maps a driver error to a [`StorageError`] with no driver text: the operation, the
/// SQLSTATE when the server sent one, otherwise the I/O error kind or "connection
/// closed". Driver messages can quote values, host names or user names.
pub(crate) fn sanitize(op: &'static str, err: &tokio_postgres::Error) -> StorageError {
    if let Some(state) = err.code() {
        return StorageError::msg(format!("postgres: {op} failed (SQLSTATE {})", state.code()));
    }
    if err.is_closed() {
        return StorageError::msg(format!("postgres: {op} failed (connection closed)"));
    }
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return StorageError::msg(format!("postgres: {op} failed (I/O: {:?})", io.kind()));
        }
        source = s.source();
    }
    StorageError::msg(format!("postgres: {op} failed"))
}
