//! TLS for the journal's connections, through rustls (ring provider), with libpq's
//! `sslmode` semantics: `disable`, `require`, `verify-ca`, `verify-full` (and
//! `require` with a root certificate checks the chain, as libpq's does). The mode
//! table (libpq's meaning and this crate's, with and without `sslrootcert`) is in
//! `docs/postgres.md`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres::Config;
use tokio_postgres::config::Host;

use super::error::{PgOpenError, PgTlsRefusal};

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
    /// [`PgJournal::ssl_mode`](super::PgJournal::ssl_mode) reports `VerifyCa`.
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

/// TLS settings of [`PgOptions::tls`](super::PgOptions::tls).
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
    mode: PgSslMode,
    root_cert: Option<PathBuf>,
    client_cert: Option<(PathBuf, PathBuf)>,
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

/// The libpq TLS keys a connection string may carry that the driver does not
/// parse itself; taken out of the string before it is handed over.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ConninfoTls {
    pub(crate) mode: Option<PgSslMode>,
    /// Whether `sslmode` was given at all (`prefer` and `allow` leave `mode` unset).
    pub(crate) mode_given: bool,
    pub(crate) root_cert: Option<PathBuf>,
    /// `sslrootcert=system` (libpq 16): the system's roots, `verify-full` only.
    pub(crate) system_roots: bool,
    pub(crate) cert: Option<PathBuf>,
    pub(crate) key: Option<PathBuf>,
}

impl ConninfoTls {
    /// Records one libpq TLS key; `Ok(false)` if `key` is not one of them.
    fn take(&mut self, key: &str, value: &str) -> Result<bool, PgOpenError> {
        match key {
            "sslmode" => {
                self.mode_given = true;
                self.mode = Some(match value {
                    "disable" => PgSslMode::Disable,
                    "require" => PgSslMode::Require,
                    "verify-ca" => PgSslMode::VerifyCa,
                    "verify-full" => PgSslMode::VerifyFull,
                    // `prefer` (the driver's default) and `allow` may fall back to
                    // plain text: treated as unset, so the journal's default applies.
                    "prefer" | "allow" => return Ok(true),
                    _ => {
                        return Err(PgOpenError::InvalidOption {
                            option: "sslmode",
                            reason: "must be disable, allow, prefer, require, verify-ca or \
                                     verify-full",
                        });
                    }
                });
            }
            "sslrootcert" if value == "system" => {
                self.system_roots = true;
                self.root_cert = None;
            }
            "sslrootcert" => {
                self.system_roots = false;
                self.root_cert = Some(PathBuf::from(value));
            }
            "sslcert" => self.cert = Some(PathBuf::from(value)),
            "sslkey" => self.key = Some(PathBuf::from(value)),
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// Splits the libpq TLS keys (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`) out of
/// a connection string (key/value or URL form), returning them and the rest of the
/// string for the driver.
pub(crate) fn split_conninfo(conninfo: &str) -> Result<(ConninfoTls, String), PgOpenError> {
    let mut tls = ConninfoTls::default();
    if conninfo.starts_with("postgres://") || conninfo.starts_with("postgresql://") {
        let Some((base, query)) = conninfo.split_once('?') else {
            return Ok((tls, conninfo.to_owned()));
        };
        let mut kept = Vec::new();
        for pair in query.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(v).ok_or(PgOpenError::InvalidConfig)?;
            if !tls.take(k, &value)? {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return Ok((tls, rest));
    }
    // Key/value form: `key = value` pairs separated by whitespace; a value may be
    // single-quoted with backslash escapes.
    let mut rest = String::with_capacity(conninfo.len());
    let mut chars = conninfo.char_indices().peekable();
    loop {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let Some(&(start, _)) = chars.peek() else {
            break;
        };
        let mut key = String::new();
        while let Some((_, c)) = chars.next_if(|(_, c)| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        if chars.next_if(|(_, c)| *c == '=').is_none() {
            return Err(PgOpenError::InvalidConfig);
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if(|(_, c)| *c == '\'').is_some() {
            loop {
                match chars.next() {
                    None => return Err(PgOpenError::InvalidConfig),
                    Some((_, '\'')) => break,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, c)) => value.push(c),
                        None => return Err(PgOpenError::InvalidConfig),
                    },
                    Some((_, c)) => value.push(c),
                }
            }
        } else {
            while let Some((_, c)) = chars.next_if(|(_, c)| !c.is_whitespace()) {
                if c == '\\' {
                    match chars.next() {
                        Some((_, c)) => value.push(c),
                        None => return Err(PgOpenError::InvalidConfig),
                    }
                } else {
                    value.push(c);
                }
            }
        }
        let end = chars.peek().map_or(conninfo.len(), |(i, _)| *i);
        if !tls.take(&key, &value)? {
            rest.push_str(conninfo.get(start..end).unwrap_or_default());
            rest.push(' ');
        }
    }
    Ok((tls, rest.trim_end().to_owned()))
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Whether every host of `config` is on this machine (a Unix socket or loopback):
/// only then is plain text the default.
pub(crate) fn all_hosts_local(config: &Config) -> bool {
    let hosts_local = config.get_hosts().iter().all(|h| match h {
        Host::Tcp(name) => {
            name.eq_ignore_ascii_case("localhost")
                || name
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
        #[cfg(unix)]
        Host::Unix(_) => true,
    });
    let addrs_local = config.get_hostaddrs().iter().all(|a| a.is_loopback());
    hosts_local && addrs_local
}

/// The TLS settings in force: the options' if given, else the connection string's.
/// Without a mode (`sslmode` unset, `prefer` or `allow`): `verify-full` for a
/// remote host; for a local one, `verify-ca` if a root certificate is given (the
/// chain is checked, as libpq's `prefer` does when the server offers TLS, but
/// never falling back to plain text), else plain text. `sslrootcert=system` means
/// the system's roots and `verify-full`; with any other `sslmode` it is refused,
/// as libpq refuses it.
pub(crate) fn resolve(
    explicit: Option<&PgTls>,
    from_conninfo: ConninfoTls,
    local: bool,
) -> Result<PgTls, PgOpenError> {
    if let Some(tls) = explicit {
        return Ok(tls.clone());
    }
    let mode = if from_conninfo.system_roots {
        if from_conninfo.mode_given && from_conninfo.mode != Some(PgSslMode::VerifyFull) {
            return Err(PgOpenError::InvalidOption {
                option: "sslmode",
                reason: "sslrootcert=system needs sslmode=verify-full (or no sslmode)",
            });
        }
        PgSslMode::VerifyFull
    } else {
        from_conninfo
            .mode
            .unwrap_or(match (local, &from_conninfo.root_cert) {
                (false, _) => PgSslMode::VerifyFull,
                (true, Some(_)) => PgSslMode::VerifyCa,
                (true, None) => PgSslMode::Disable,
            })
    };
    Ok(PgTls {
        mode,
        root_cert: from_conninfo.root_cert,
        client_cert: from_conninfo.cert.zip(from_conninfo.key),
    })
}

fn config_error(setting: &'static str, reason: impl Into<String>) -> PgOpenError {
    PgOpenError::TlsConfig {
        setting,
        reason: reason.into(),
    }
}

fn read_certs(
    setting: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, PgOpenError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| config_error(setting, format!("cannot read {}: {e}", path.display())))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| config_error(setting, format!("malformed PEM in {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(config_error(
            setting,
            format!("no certificate in {}", path.display()),
        ));
    }
    Ok(certs)
}

/// Builds the rustls client configuration for `tls` (`None` for plain text).
pub(crate) fn client_config(tls: &PgTls) -> Result<Option<ClientConfig>, PgOpenError> {
    let mode = tls.effective_mode();
    if mode == PgSslMode::Disable {
        return Ok(None);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| config_error("tls", e.to_string()))?;
    // `require` with a root certificate is `verify-ca` here (see `effective_mode`):
    // the root is never dropped.
    let verifier: Arc<dyn ServerCertVerifier> = if mode == PgSslMode::Require {
        Arc::new(Unverified(provider))
    } else {
        let mut roots = RootCertStore::empty();
        match &tls.root_cert {
            Some(path) => {
                for cert in read_certs("root_cert", path)? {
                    roots
                        .add(cert)
                        .map_err(|e| config_error("root_cert", e.to_string()))?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
                if roots.is_empty() {
                    return Err(config_error(
                        "root_cert",
                        "no trusted root certificates found on this system; give a CA file",
                    ));
                }
            }
        }
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| config_error("root_cert", e.to_string()))?;
        if mode == PgSslMode::VerifyCa {
            Arc::new(ChainOnly(webpki))
        } else {
            webpki
        }
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match &tls.client_cert {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = read_certs("client_cert", cert)?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                config_error("client_key", format!("cannot load {}: {e}", key.display()))
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| config_error("client_cert", e.to_string()))?
        }
    };
    Ok(Some(config))
}

/// `verify-ca`: the chain must verify; a certificate that is valid but names
/// another host is accepted (webpki checks the name only after the chain).
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `require`: any certificate; the handshake's signatures are still checked (so
/// the peer holds the key of the certificate it showed).
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Why the TLS handshake of `err` failed, if it was one: found by walking the
/// error's sources for the rustls error (never by echoing driver text).
pub(crate) fn refusal(err: &tokio_postgres::Error) -> Option<PgTlsRefusal> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(s) = source {
        let tls = s.downcast_ref::<rustls::Error>().or_else(|| {
            s.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(tls) = tls {
            return Some(match tls {
                rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                ) => PgTlsRefusal::WrongHostName,
                rustls::Error::InvalidCertificate(
                    CertificateError::UnknownIssuer | CertificateError::BadSignature,
                ) => PgTlsRefusal::UntrustedCertificate,
                rustls::Error::InvalidCertificate(
                    CertificateError::Expired
                    | CertificateError::ExpiredContext { .. }
                    | CertificateError::NotValidYet
                    | CertificateError::NotValidYetContext { .. },
                ) => PgTlsRefusal::CertificateNotCurrent,
                rustls::Error::InvalidCertificate(_) => PgTlsRefusal::InvalidCertificate,
                rustls::Error::AlertReceived(_) => PgTlsRefusal::RefusedByServer,
                _ => PgTlsRefusal::Handshake,
            });
        }
        source = s.source();
    }
    // The driver's own refusal when the server answers that it has no TLS (a fixed
    // text of the driver, holding nothing from the connection string).
    err.to_string()
        .contains("server does not support TLS")
        .then_some(PgTlsRefusal::NotOffered)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn libpq_tls_keys_are_split_out_of_key_value_strings() {
        let (tls, rest) = split_conninfo(
            "host=db.example user=app sslmode=verify-full sslrootcert='/etc/ca dir/ca.pem' \
             password='it\\'s' dbname = x",
        )
        .unwrap();
        assert_eq!(tls.mode, Some(PgSslMode::VerifyFull));
        assert_eq!(tls.root_cert, Some(PathBuf::from("/etc/ca dir/ca.pem")));
        assert_eq!(
            rest,
            "host=db.example user=app password='it\\'s' dbname = x"
        );
        let (tls, rest) = split_conninfo("host=h sslmode=prefer").unwrap();
        assert_eq!((tls.mode, rest.as_str()), (None, "host=h"));
        assert!(matches!(
            split_conninfo("host=h sslmode=sometimes"),
            Err(PgOpenError::InvalidOption {
                option: "sslmode",
                ..
            })
        ));
        assert!(matches!(
            split_conninfo("host=h password='unterminated"),
            Err(PgOpenError::InvalidConfig)
        ));
    }

    #[test]
    fn libpq_tls_keys_are_split_out_of_urls() {
        let (tls, rest) = split_conninfo(
            "postgresql://u:p@db.example/x?sslmode=verify-ca&application_name=a&sslcert=%2Fc.pem&sslkey=k",
        )
        .unwrap();
        assert_eq!(tls.mode, Some(PgSslMode::VerifyCa));
        assert_eq!(tls.cert, Some(PathBuf::from("/c.pem")));
        assert_eq!(tls.key, Some(PathBuf::from("k")));
        assert_eq!(rest, "postgresql://u:p@db.example/x?application_name=a");
    }

    #[test]
    fn remote_hosts_default_to_verify_full_and_local_ones_to_plain_text() {
        let local = |s: &str| all_hosts_local(&s.parse::<Config>().unwrap());
        assert!(local("host=127.0.0.1"));
        assert!(local("host=localhost,::1"));
        assert!(local("host=/var/run/postgresql"));
        assert!(!local("host=db.example"));
        assert!(!local("host=127.0.0.1,10.0.0.7"));
        assert!(!local("host=localhost hostaddr=10.1.2.3"));
        let none = ConninfoTls::default();
        assert_eq!(
            resolve(None, none, false).unwrap().mode(),
            PgSslMode::VerifyFull
        );
        assert_eq!(
            resolve(None, ConninfoTls::default(), true).unwrap().mode(),
            PgSslMode::Disable
        );
        let said = ConninfoTls {
            mode: Some(PgSslMode::Disable),
            ..ConninfoTls::default()
        };
        assert_eq!(
            resolve(None, said, false).unwrap().mode(),
            PgSslMode::Disable
        );
        let explicit = PgTls::require();
        assert_eq!(
            resolve(Some(&explicit), ConninfoTls::default(), true)
                .unwrap()
                .mode(),
            PgSslMode::Require
        );
    }

    #[test]
    fn a_root_certificate_makes_require_check_the_chain() {
        assert_eq!(PgTls::require().effective_mode(), PgSslMode::Require);
        let with_root = PgTls::require().root_cert("/etc/ca.pem");
        assert_eq!(with_root.mode(), PgSslMode::Require);
        assert_eq!(with_root.effective_mode(), PgSslMode::VerifyCa);
        let conninfo = |s: &str| split_conninfo(s).unwrap().0;
        let resolved = |s: &str, local: bool| resolve(None, conninfo(s), local);
        let mode = |s: &str, local: bool| resolved(s, local).unwrap().effective_mode();
        assert_eq!(
            mode("host=h sslmode=require sslrootcert=/ca.pem", true),
            PgSslMode::VerifyCa
        );
        assert_eq!(mode("host=h sslmode=require", true), PgSslMode::Require);
        // No mode, `prefer` or `allow` with a root: the chain is checked, never plain.
        for m in ["", "sslmode=prefer", "sslmode=allow"] {
            assert_eq!(
                mode(&format!("host=h {m} sslrootcert=/ca.pem"), true),
                PgSslMode::VerifyCa,
                "{m}"
            );
            assert_eq!(
                mode(&format!("host=h {m} sslrootcert=/ca.pem"), false),
                PgSslMode::VerifyFull,
                "{m}"
            );
            assert_eq!(
                mode(&format!("host=h {m}"), true),
                PgSslMode::Disable,
                "{m}"
            );
        }
        // `sslrootcert=system`: the system's roots, verify-full only.
        let system = conninfo("host=h sslrootcert=system");
        assert!(system.system_roots && system.root_cert.is_none());
        assert_eq!(
            mode("host=h sslrootcert=system", true),
            PgSslMode::VerifyFull
        );
        assert_eq!(
            mode("host=h sslmode=verify-full sslrootcert=system", true),
            PgSslMode::VerifyFull
        );
        for m in ["disable", "allow", "prefer", "require", "verify-ca"] {
            assert!(
                matches!(
                    resolved(&format!("host=h sslmode={m} sslrootcert=system"), false),
                    Err(PgOpenError::InvalidOption {
                        option: "sslmode",
                        ..
                    })
                ),
                "{m}"
            );
        }
    }

    #[test]
    fn unreadable_tls_files_are_typed_errors() {
        let tls = PgTls::verify_full().root_cert("/nonexistent/ca.pem");
        assert!(matches!(
            client_config(&tls),
            Err(PgOpenError::TlsConfig {
                setting: "root_cert",
                ..
            })
        ));
        assert!(client_config(&PgTls::disable()).unwrap().is_none());
        assert!(client_config(&PgTls::require()).unwrap().is_some());
    }
}
