//! The listener's TLS: a rustls server configuration (ring provider) from a PEM
//! certificate chain and private key, offering HTTP/2 and HTTP/1.1 by ALPN.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use super::config::TlsFiles;

/// Why the certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The certificate file could not be read or holds no PEM certificate.
    #[error("reading the certificate chain {path}: {message}")]
    Cert {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The key file could not be read or holds no PEM private key.
    #[error("reading the private key {path}: {message}")]
    Key {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// rustls refused the pair (e.g. the key does not match the certificate).
    #[error("the certificate and key cannot be used: {0}")]
    Config(#[from] rustls::Error),
}

fn shown(p: &Path) -> String {
    p.display().to_string()
}

/// A TLS acceptor for `files`.
///
/// # Errors
///
/// [`TlsError`] naming the file or the refusal.
pub(crate) fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| TlsError::Cert {
            path: shown(&files.cert),
            message: e.to_string(),
        })?
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Cert {
            path: shown(&files.cert),
            message: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Cert {
            path: shown(&files.cert),
            message: "no certificate in it".into(),
        });
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| TlsError::Key {
        path: shown(&files.key),
        message: e.to_string(),
    })?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
