//! A throwaway PostgreSQL cluster with `ssl = on` and certificates made here (rcgen),
//! for the TLS tests: `initdb` and `pg_ctl` from the machine's PostgreSQL
//! installation (`/usr/lib/postgresql/<version>/bin`, or `NOTIFY_TEST_PG_BIN`), run
//! as the `postgres` OS user when the tests run as root (PostgreSQL refuses root).
//! Listens on 127.0.0.1 on a free port, under a temporary directory, and is stopped
//! (immediate mode) and removed when dropped. Every failure panics with what went
//! wrong and the server's log: a TLS test never skips.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

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
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_postgres: bool,
}

fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("NOTIFY_TEST_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .unwrap_or_else(|e| {
            panic!(
                "the TLS tests need PostgreSQL's server binaries (initdb, pg_ctl) under \
                 /usr/lib/postgresql/<version>/bin or in NOTIFY_TEST_PG_BIN: {e}"
            )
        })
        .filter_map(Result::ok)
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse().ok()?;
            Some((v, e.path().join("bin")))
        })
        .filter(|(_, bin)| bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .unwrap_or_else(|| panic!("no /usr/lib/postgresql/<version>/bin/initdb found"))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
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
        let bin = bin_dir();
        let as_postgres = is_root();
        let dir = tempfile::Builder::new()
            .prefix("nj-tls-")
            .tempdir()
            .expect("temp dir for the TLS cluster");
        let path = dir.path();

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
        let server = Self {
            port: 0,
            ca: files("ca.pem"),
            other_ca: files("other-ca.pem"),
            client_cert: files("client.crt"),
            client_key: files("client.key"),
            dir,
            bin,
            as_postgres,
        };
        let path = server.dir.path().to_owned();
        let path = path.as_path();
        if as_postgres {
            server.run_plain("chown", &["-R", "postgres:", &path.display().to_string()]);
        }
        server.run_plain(
            "chmod",
            &["0600", &path.join("server.key").display().to_string()],
        );

        let data = path.join("data");
        server.pg(
            "initdb",
            &[
                "-D",
                &data.display().to_string(),
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        );
        write(
            &data.join("pg_hba.conf"),
            &format!(
                "local all all trust\n\
                 hostssl all {CERT_USER} 127.0.0.1/32 cert\n\
                 host all all 127.0.0.1/32 trust\n"
            ),
        );
        let mut server = server;
        let mut last = String::new();
        for _ in 0..5 {
            let port = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let opts = format!(
                "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={dir} \
                 -c ssl=on -c ssl_cert_file={dir}/server.crt -c ssl_key_file={dir}/server.key \
                 -c ssl_ca_file={dir}/ca.pem -c fsync=off -c max_connections=40",
                dir = path.display()
            );
            let log = path.join("server.log");
            let (ok, out) = server.try_pg(
                "pg_ctl",
                &[
                    "-D",
                    &data.display().to_string(),
                    "-l",
                    &log.display().to_string(),
                    "-o",
                    &opts,
                    "-w",
                    "-t",
                    "60",
                    "start",
                ],
            );
            if ok {
                server.port = port;
                break;
            }
            last = format!(
                "{out}\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        assert!(
            server.port != 0,
            "the TLS test cluster did not start:\n{last}"
        );
        server
    }

    /// The data directory.
    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A key/value connection string to this server: `host` is the name TLS checks,
    /// the address is always 127.0.0.1.
    pub fn conninfo(&self, host: &str, user: &str, extra: &str) -> String {
        format!(
            "host={host} hostaddr=127.0.0.1 port={} user={user} dbname=postgres {extra}",
            self.port
        )
    }

    fn run_plain(&self, program: &str, args: &[&str]) {
        let out = Command::new(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("run {program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn try_pg(&self, tool: &str, args: &[&str]) -> (bool, String) {
        let exe = self.bin.join(tool);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let out = cmd
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", exe.display()));
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    fn pg(&self, tool: &str, args: &[&str]) {
        let (ok, out) = self.try_pg(tool, args);
        assert!(ok, "{tool} {args:?} failed:\n{out}");
    }
}

fn ca_pem_only(name: &str) -> String {
    ca(name).pem()
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        if self.port != 0 {
            let data = self.data().display().to_string();
            let _ = self.try_pg("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]);
        }
    }
}
