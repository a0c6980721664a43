//! The public TLS settings: libpq's modes ([`PgSslMode`]) and the files that go
//! with them ([`PgTls`]).

use std::path::PathBuf;

/// How a connection is secured: libpq's `sslmode` values (`prefer` and `allow`,
/// which fall back to plain text, are not offered).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PgSslMode {
    /// Plain text. Only for a local socket, loopback, or a network you trust.
    Disable,
    /// Encrypted, but the server's certificate is not checked (no protection
    /// against an active man in the middle), as libpq's `require` without a root
    /// certificate. With a root certificate ([`PgTls::root_cert`], or `sslrootcert`
    /// in the connection string) the chain is checked against it, as libpq does:
    /// `require` then behaves as [`VerifyCa`](Self::VerifyCa), and
    /// [`PgJournal::ssl_mode`](crate::PgJournal::ssl_mode) reports `VerifyCa`.
    Require,
    /// Encrypted; the server's certificate must chain to a trusted root. Its host
    /// name is not checked.
    VerifyCa,
    /// Encrypted; the server's certificate must chain to a trusted root and name
    /// the host connected to (DNS name or IP address). The recommended mode.
    VerifyFull,
}

impl PgSslMode {
    /// libpq's name of the mode (`disable`, `require`, `verify-ca`, `verify-full`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }
}

/// TLS settings of [`PgOptions::tls`](crate::PgOptions::tls).
///
/// ```
/// use notify_journal::{PgOptions, PgTls};
///
/// let options = PgOptions::default().tls(
///     PgTls::verify_full()
///         .root_cert("/etc/notify/db-ca.pem")
///         .client_cert("/etc/notify/client.pem", "/etc/notify/client.key"),
/// );
/// # let _ = options;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgTls {
    pub(super) mode: PgSslMode,
    pub(super) root_cert: Option<PathBuf>,
    pub(super) client_cert: Option<(PathBuf, PathBuf)>,
}

impl PgTls {
    /// Settings for `mode`, trusting the system's roots, with no client certificate.
    #[must_use]
    pub fn new(mode: PgSslMode) -> Self {
        Self {
            mode,
            root_cert: None,
            client_cert: None,
        }
    }

    /// Plain text ([`PgSslMode::Disable`]): the way to say so for a remote host.
    #[must_use]
    pub fn disable() -> Self {
        Self::new(PgSslMode::Disable)
    }

    /// Encrypted, certificate unchecked ([`PgSslMode::Require`]); checked against
    /// the root certificate if one is given ([`root_cert`](Self::root_cert)), as
    /// libpq does.
    #[must_use]
    pub fn require() -> Self {
        Self::new(PgSslMode::Require)
    }

    /// Encrypted, certificate chain checked ([`PgSslMode::VerifyCa`]).
    #[must_use]
    pub fn verify_ca() -> Self {
        Self::new(PgSslMode::VerifyCa)
    }

    /// Encrypted, certificate chain and host name checked
    /// ([`PgSslMode::VerifyFull`]).
    #[must_use]
    pub fn verify_full() -> Self {
        Self::new(PgSslMode::VerifyFull)
    }

    /// Trust only the CA certificates in this PEM file (libpq's `sslrootcert`)
    /// instead of the system's roots. Read at connect. With
    /// [`PgSslMode::Require`] it makes the chain checked (`verify-ca`), as in libpq;
    /// with [`PgSslMode::Disable`] it is unused.
    #[must_use]
    pub fn root_cert(mut self, path: impl Into<PathBuf>) -> Self {
        self.root_cert = Some(path.into());
        self
    }

    /// Present this client certificate chain (PEM) and private key (PEM: PKCS#8,
    /// PKCS#1 or SEC1), libpq's `sslcert` and `sslkey`. Read at connect.
    #[must_use]
    pub fn client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.client_cert = Some((cert.into(), key.into()));
        self
    }

    /// The mode as set (see [`effective_mode`](Self::effective_mode) for the one
    /// connections use).
    #[must_use]
    pub fn mode(&self) -> PgSslMode {
        self.mode
    }

    /// The mode connections use: the mode as set, except that `require` with a root
    /// certificate checks the chain, as libpq does ([`PgSslMode::VerifyCa`]).
    #[must_use]
    pub fn effective_mode(&self) -> PgSslMode {
        match self.mode {
            PgSslMode::Require if self.root_cert.is_some() => PgSslMode::VerifyCa,
            mode => mode,
        }
    }
}
