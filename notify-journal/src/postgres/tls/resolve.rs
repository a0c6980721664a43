//! Which TLS settings are in force: the options', else the connection string's,
//! else the default (`verify-full` for a remote host, plain text for a local one).

use tokio_postgres::Config;
use tokio_postgres::config::Host;

use super::conninfo::ConninfoTls;
use super::settings::{PgSslMode, PgTls};
use crate::postgres::error::PgOpenError;

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::postgres::tls::conninfo::split_conninfo;

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
}
