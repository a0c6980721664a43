//! [`ServeConfig`]: what the server listens on, whom it trusts and its limits.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::keys::KeySet;

/// The default body limit: a completion is a few hundred bytes, a lifecycle event
/// under 2 KiB.
pub const DEFAULT_BODY_LIMIT: usize = 64 * 1024;
/// The default timestamp tolerance (Standard Webhooks' own default).
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);
/// The default request timeout (a long poll's wait is bounded below it).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a long poll waits for a first notification.
pub const MAX_POLL_WAIT: Duration = Duration::from_secs(20);
/// The default visibility timeout of a handed-out notification.
pub const DEFAULT_VISIBILITY: Duration = Duration::from_secs(30);
/// The default connection limit.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// The highest connection limit (far above what one process's file descriptors
/// usually allow).
pub const MAX_CONNECTIONS: usize = 1 << 20;
/// The default idle timeout: a connection that starts no request for this long is
/// shut down gracefully.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// A PEM certificate chain and private key for the listener (rustls).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// How the server runs. [`ServeConfig::new`] has the defaults; every field is public
/// for struct-update syntax.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServeConfig {
    /// The address to listen on.
    pub listen: SocketAddr,
    /// Serve TLS (HTTP/1.1 and HTTP/2 by ALPN) with this certificate; plaintext
    /// (HTTP/1.1, and HTTP/2 with prior knowledge) without.
    pub tls: Option<TlsFiles>,
    /// The keys requests are signed with (several for rotation).
    pub keys: KeySet,
    /// Accept unsigned requests. Refused unless `listen` is a loopback address.
    pub insecure_unsigned: bool,
    /// How far a request's `webhook-timestamp` may be from the server's clock.
    pub timestamp_tolerance: Duration,
    /// The largest request body, in bytes (413 past it).
    pub body_limit: usize,
    /// The longest a request may take (a long poll waits less).
    pub request_timeout: Duration,
    /// The most connections open at once (more wait in the kernel's backlog).
    pub max_connections: usize,
    /// The longest a client may take over a TLS handshake, a connection's first
    /// request (whatever its protocol) and each HTTP/1.1 request's headers: a bound on
    /// idle and slow connections. Not zero.
    pub header_timeout: Duration,
    /// How long a connection may go without starting a request before it is shut down
    /// gracefully (what is in flight finishes; a stream goes on until it ends). Not
    /// zero.
    pub idle_timeout: Duration,
    /// This server's base URL as other hosts and clients reach it (e.g.
    /// `https://notify-2.internal:8443`): on PostgreSQL it is advertised so a request
    /// to the wrong host is redirected to the owner.
    pub advertise_url: Option<String>,
    /// How long, after a shutdown signal, in-flight requests may take before their
    /// connections are closed.
    pub drain_timeout: Duration,
}

impl ServeConfig {
    /// The defaults, listening on `listen`, with no keys (add some, or set
    /// `insecure_unsigned` on a loopback address).
    #[must_use]
    pub fn new(listen: SocketAddr) -> Self {
        Self {
            listen,
            tls: None,
            keys: KeySet::new(),
            insecure_unsigned: false,
            timestamp_tolerance: DEFAULT_TOLERANCE,
            body_limit: DEFAULT_BODY_LIMIT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: Duration::from_secs(10),
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            advertise_url: None,
            drain_timeout: Duration::from_secs(10),
        }
    }

    /// Checks the settings: unsigned only on loopback, at least one key the API
    /// accepts otherwise (`whro_` keys alone are refused),
    /// non-zero limits.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming what is wrong.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.insecure_unsigned && !self.listen.ip().is_loopback() {
            return Err(ConfigError::UnsignedNotLoopback(self.listen));
        }
        // Whether any key verifies a request of the API (read-only `whro_` keys
        // only open the console), not whether the set is empty.
        if !self.insecure_unsigned && self.keys.keys().is_empty() {
            return Err(if self.keys.is_empty() {
                ConfigError::NoKeys
            } else {
                ConfigError::OnlyReadOnlyKeys
            });
        }
        if self.body_limit == 0
            || self.max_connections == 0
            || self.header_timeout.is_zero()
            || self.idle_timeout.is_zero()
        {
            return Err(ConfigError::ZeroLimit);
        }
        if self.max_connections > MAX_CONNECTIONS {
            return Err(ConfigError::TooManyConnections(MAX_CONNECTIONS));
        }
        if self.request_timeout <= MAX_POLL_WAIT {
            return Err(ConfigError::ShortTimeout(MAX_POLL_WAIT));
        }
        if let Some(url) = &self.advertise_url
            && !advertisable(url)
        {
            return Err(ConfigError::AdvertiseUrl(url.clone()));
        }
        Ok(())
    }

    /// The base URL other hosts should use: the advertised one, or the listen
    /// address (plaintext or TLS).
    #[must_use]
    pub fn base_url(&self) -> String {
        match &self.advertise_url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => format!(
                "{}://{}",
                if self.tls.is_some() { "https" } else { "http" },
                self.listen
            ),
        }
    }
}

/// Whether `url` can be handed to clients as a base URL: an absolute `http` or
/// `https` URL with a host, and no credentials, query or fragment (a path prefix, for a
/// proxy in front, is allowed).
pub(crate) fn advertisable(url: &str) -> bool {
    let Ok(uri) = url.parse::<axum::http::Uri>() else {
        return false;
    };
    matches!(uri.scheme_str(), Some("http" | "https"))
        && uri
            .authority()
            .is_some_and(|a| !a.host().is_empty() && !a.as_str().contains('@'))
        && uri.query().is_none()
        && !url.contains('#')
}

/// Why a [`ServeConfig`] cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Unsigned requests were asked for on an address other machines can reach.
    #[error(
        "unsigned requests are allowed only on a loopback address (127.0.0.0/8 or ::1), not {0}: give keys instead"
    )]
    UnsignedNotLoopback(SocketAddr),
    /// No key was given and unsigned requests were not asked for.
    #[error(
        "no signing keys: give at least one whsec_/whpk_ key (a key file or NOTIFY_SERVE_KEYS), or --insecure-unsigned on a loopback address"
    )]
    NoKeys,
    /// Only read-only `whro_` keys were given: they open the console but verify no
    /// request, so no client could use the API.
    #[error(
        "only read-only whro_ keys were given: they open the console and verify no request; give at least one whsec_/whpk_ key for the API"
    )]
    OnlyReadOnlyKeys,
    /// A limit is zero.
    #[error(
        "the body limit, the connection limit, the header timeout and the idle timeout must be positive"
    )]
    ZeroLimit,
    /// The connection limit is above the most one server takes.
    #[error("the connection limit must be at most {0}")]
    TooManyConnections(usize),
    /// The request timeout does not leave room for a long poll.
    #[error("the request timeout must be longer than the longest poll wait ({0:?})")]
    ShortTimeout(Duration),
    /// The advertised URL is not an absolute http(s) URL with a host (and no
    /// credentials, query or fragment).
    #[error(
        "the advertised URL must be an http:// or https:// URL with a host, and no credentials, query or fragment: {0}"
    )]
    AdvertiseUrl(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_keys_alone_are_refused_for_a_signed_server() {
        let mut config = ServeConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)));
        config.keys = KeySet::parse("whro_MDEyMzQ1Njc4OWFiY2RlZg==").unwrap_or_default();
        assert_eq!(config.keys.len(), 1, "the read-only key was read");
        assert_eq!(config.check(), Err(ConfigError::OnlyReadOnlyKeys));
        // With an API key beside it, the set runs.
        config.keys = KeySet::parse("whro_MDEyMzQ1Njc4OWFiY2RlZg== whsec_MDEyMzQ1Njc4OWFiY2RlZg==")
            .unwrap_or_default();
        assert_eq!(config.check(), Ok(()));
        // Unsigned on loopback needs no key at all.
        config.keys = KeySet::new();
        config.insecure_unsigned = true;
        assert_eq!(config.check(), Ok(()));
    }

    #[test]
    fn an_advertised_url_clients_cannot_follow_is_refused() {
        let mut config = ServeConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)));
        config.insecure_unsigned = true;
        for bad in [
            "http://",
            "https://",
            "notify-2.internal:8443",
            "ftp://notify-2.internal",
            "http://user:secret@notify-2.internal",
            "http://notify-2.internal/?a=b",
            "http://notify-2.internal/#top",
            "http://notify-2\n.internal",
        ] {
            config.advertise_url = Some(bad.to_owned());
            assert_eq!(
                config.check(),
                Err(ConfigError::AdvertiseUrl(bad.to_owned())),
                "{bad}"
            );
        }
        for good in [
            "http://10.0.0.7:8080",
            "https://notify-2.internal:8443/",
            "https://lb.internal/notify",
            "http://[::1]:8080",
        ] {
            config.advertise_url = Some(good.to_owned());
            assert_eq!(config.check(), Ok(()), "{good}");
        }
    }
}
