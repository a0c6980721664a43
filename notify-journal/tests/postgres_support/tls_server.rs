//! A throwaway PostgreSQL cluster with `ssl = on` and certificates made here (rcgen),
//! for the TLS tests, built on `notify_testkit::pg_cluster`. Listens on 127.0.0.1 on a
//! free port, under a temporary directory, and is stopped (immediate mode) and removed
//! when dropped. Every failure panics with what went wrong and the server's log: a TLS
//! test never skips.

use std::path::{Path, PathBuf};

use notify_testkit::pg_cluster::{self, Cluster};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
    SanType,
};

/// The role that must log in with a client certificate (pg_hba `cert`).
pub const CERT_USER: &str = "certuser";

/// A running TLS-enabled cluster and the files to reach it.
pub struct TlsServer {
    /// Its TCP port on 127.0.0.1.
    pub port: u16,
    /// The CA that signed the server's and the client's certificates (PEM).
    pub ca: PathBuf,
    /// Another CA, which signed nothing the server uses (PEM).
    pub other_ca: PathBuf,
    /// A client certificate for [`CERT_USER`] and its key (PEM).
    pub client_cert: PathBuf,
    /// The client certificate's key (PEM).
    pub client_key: PathBuf,
    /// Kept for its lifetime: dropping it stops the server.
    _cluster: Cluster,
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A CA: its certificate's PEM, and the issuer that signs with it.
fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key")).expect("CA cert")
}

impl TlsServer {
    /// Makes the certificates, creates the cluster and starts it. Panics, with the
    /// reason and the server's log, if any step fails.
    pub fn start() -> Self {
        let fail = |e: std::io::Error| -> ! { panic!("the TLS test cluster: {e}") };
        let mut cluster = Cluster::new("nj-tls-").unwrap_or_else(|e| fail(e));
        let path = cluster.dir().to_owned();
        let path = path.as_path();

        // Certificates: the server's names `localhost` only (so connecting to
        // 127.0.0.1 with verify-full is a wrong host name).
        let ca = ca("notify-journal test CA");
        let other = ca_pem_only("unrelated test CA");
        let server_key = KeyPair::generate().expect("server key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("server params");
        params.subject_alt_names =
            vec![SanType::DnsName("localhost".try_into().expect("dns name"))];
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let server_cert = params.signed_by(&server_key, &ca).expect("server cert");
        let client_key = KeyPair::generate().expect("client key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("client params");
        params
            .distinguished_name
            .push(DnType::CommonName, CERT_USER);
        let client_cert = params.signed_by(&client_key, &ca).expect("client cert");

        let files = |name: &str| path.join(name);
        write(&files("ca.pem"), &ca.pem());
        write(&files("other-ca.pem"), &other);
        write(&files("server.crt"), &server_cert.pem());
        write(&files("server.key"), &server_key.serialize_pem());
        write(&files("client.crt"), &client_cert.pem());
        write(&files("client.key"), &client_key.serialize_pem());
        cluster.hand_over().unwrap_or_else(|e| fail(e));
        pg_cluster::run(
            "chmod",
            &["0600", &path.join("server.key").display().to_string()],
        )
        .unwrap_or_else(|e| fail(e));

        cluster.initdb(&["-A", "trust"]).unwrap_or_else(|e| fail(e));
        write(
            &cluster.data().join("pg_hba.conf"),
            &format!(
                "local all all trust\n\
                 hostssl all {CERT_USER} 127.0.0.1/32 cert\n\
                 host all all 127.0.0.1/32 trust\n"
            ),
        );
        let port = cluster
            .start(&format!(
                "-c ssl=on -c ssl_cert_file={dir}/server.crt -c ssl_key_file={dir}/server.key \
                 -c ssl_ca_file={dir}/ca.pem -c max_connections=40",
                dir = path.display()
            ))
            .unwrap_or_else(|e| fail(e));
        Self {
            port,
            ca: files("ca.pem"),
            other_ca: files("other-ca.pem"),
            client_cert: files("client.crt"),
            client_key: files("client.key"),
            _cluster: cluster,
        }
    }

    /// A key/value connection string to this server: `host` is the name TLS checks,
    /// the address is always 127.0.0.1.
    pub fn conninfo(&self, host: &str, user: &str, extra: &str) -> String {
        format!(
            "host={host} hostaddr=127.0.0.1 port={} user={user} dbname=postgres {extra}",
            self.port
        )
    }
}

fn ca_pem_only(name: &str) -> String {
    ca(name).pem()
}
