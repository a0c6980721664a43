//! The rustls client configuration for the settings in force: roots, verifier,
//! client certificate.

use std::path::Path;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use super::settings::{PgSslMode, PgTls};
use super::verifiers::{ChainOnly, Unverified};
use crate::postgres::error::PgOpenError;

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

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
