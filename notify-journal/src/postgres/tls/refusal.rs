//! Naming why a TLS handshake was refused ([`PgTlsRefusal`]), from the error's
//! sources, never from driver text.

use rustls::CertificateError;

use crate::postgres::error::PgTlsRefusal;

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
