//! The PostgreSQL journal over TLS, against a real server with `ssl = on` (a
//! throwaway cluster started by the test with certificates it made: see
//! `postgres_support/tls_server.rs`): `verify-full` connects and appends over TLS;
//! a wrong CA and a wrong host name are refused with typed errors; `verify-ca`,
//! `require`, the connection string's libpq keys and client certificates work;
//! no credential appears in an error.
//!
//! Needs no `NOTIFY_TEST_DATABASE_URL`: it starts its own server, and fails (never
//! skips) when it cannot.
#![cfg(feature = "postgres")]
// Test code: a failed expectation is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod postgres_support;

use notify_journal::{
    JournalBackend, JournalRead, PgJournal, PgOpenError, PgOptions, PgSslMode, PgTls, PgTlsRefusal,
    replay_all,
};
use notify_types::{SessionId, Uuid};
use postgres_support::command;
use postgres_support::tls_server::{CERT_USER, TlsServer};

async fn open(conninfo: &str, options: PgOptions) -> Result<PgJournal, PgOpenError> {
    PgJournal::connect(conninfo, options.schema("nj_tls")).await
}

/// How many of the server's connections with `application_name` use TLS, and how
/// many exist, asked over a plain connection (pg_hba allows it for `postgres`).
async fn tls_connections(server: &TlsServer, app: &str) -> (i64, i64) {
    let (client, conn) = tokio_postgres::connect(
        &server.conninfo("127.0.0.1", "postgres", ""),
        tokio_postgres::NoTls,
    )
    .await
    .expect("plain connection to the TLS cluster");
    tokio::spawn(conn);
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE s.ssl), count(*)
             FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
             WHERE a.application_name = $1",
            &[&app],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_modes_against_a_real_tls_server() {
    let server = TlsServer::start();
    let ca = server.ca.display().to_string();

    // verify-full, CA from a file, the name the certificate carries: connects, and
    // every connection of the journal is encrypted.
    let app = format!("nj_tls_{}", Uuid::now_v7().simple());
    let j = open(
        &server.conninfo("localhost", "postgres", &format!("application_name={app}")),
        PgOptions::default().tls(PgTls::verify_full().root_cert(&server.ca)),
    )
    .await
    .expect("verify-full with the right CA and host name connects");
    let s = SessionId::new();
    let k = Uuid::now_v7();
    assert!(j.append(s, command(s, k, 0)).await.unwrap().appended);
    assert_eq!(
        replay_all(&j, s).await.unwrap(),
        vec![(1, command(s, k, 0))]
    );
    let (encrypted, all) = tls_connections(&server, &app).await;
    assert!(all >= 2, "writer and reader connections: {all}");
    assert_eq!(encrypted, all, "every journal connection uses TLS");
    j.close().await;

    // The same through libpq's keys in the connection string.
    let j = open(
        &server.conninfo(
            "localhost",
            "postgres",
            &format!("sslmode=verify-full sslrootcert='{ca}'"),
        ),
        PgOptions::default(),
    )
    .await
    .expect("sslmode=verify-full in the connection string connects");
    assert_eq!(j.last_seq(s).await.unwrap(), 1);
    j.close().await;

    // A wrong CA: refused, typed, in verify-full and verify-ca alike. The password
    // given never shows in the error.
    for tls in [PgTls::verify_full(), PgTls::verify_ca()] {
        let err = open(
            &server.conninfo("localhost", "postgres", "password=s3cr3t-pw"),
            PgOptions::default().tls(tls.clone().root_cert(&server.other_ca)),
        )
        .await
        .expect_err("a certificate from an untrusted CA is refused");
        assert!(
            matches!(
                err,
                PgOpenError::TlsRefused(PgTlsRefusal::UntrustedCertificate)
            ),
            "{:?}: {err:?}",
            tls.mode()
        );
        for text in [err.to_string(), format!("{err:?}")] {
            assert!(
                !text.contains("s3cr3t-pw"),
                "credential in the error: {text}"
            );
        }
    }

    // A wrong host name: the certificate names `localhost`, not 127.0.0.1.
    let err = open(
        &server.conninfo("127.0.0.1", "postgres", ""),
        PgOptions::default().tls(PgTls::verify_full().root_cert(&server.ca)),
    )
    .await
    .expect_err("a certificate for another host name is refused");
    assert!(
        matches!(err, PgOpenError::TlsRefused(PgTlsRefusal::WrongHostName)),
        "{err:?}"
    );
    let err = open(
        &server.conninfo(
            "127.0.0.1",
            "postgres",
            &format!("sslmode=verify-full sslrootcert={ca}"),
        ),
        PgOptions::default(),
    )
    .await
    .expect_err("the same refusal through the connection string");
    assert!(
        matches!(err, PgOpenError::TlsRefused(PgTlsRefusal::WrongHostName)),
        "{err:?}"
    );

    // verify-ca checks the chain, not the name; require checks neither.
    for (tls, what) in [
        (PgTls::verify_ca().root_cert(&server.ca), "verify-ca"),
        (PgTls::require(), "require"),
    ] {
        let j = open(
            &server.conninfo("127.0.0.1", "postgres", ""),
            PgOptions::default().tls(tls),
        )
        .await
        .unwrap_or_else(|e| panic!("{what} to 127.0.0.1 connects: {e:?}"));
        assert_eq!(j.last_seq(s).await.unwrap(), 1);
        j.close().await;
    }
    assert_eq!(PgTls::require().mode(), PgSslMode::Require);

    // A client certificate: the `cert` role logs in with it, and is refused by the
    // server without it.
    create_cert_role(&server).await;
    let j = open(
        &server.conninfo("localhost", CERT_USER, ""),
        PgOptions::default().tls(
            PgTls::verify_full()
                .root_cert(&server.ca)
                .client_cert(&server.client_cert, &server.client_key),
        ),
    )
    .await
    .expect("the client certificate logs in");
    assert_eq!(j.last_seq(s).await.unwrap(), 1);
    j.close().await;
    let err = open(
        &server.conninfo("localhost", CERT_USER, ""),
        PgOptions::default().tls(PgTls::verify_full().root_cert(&server.ca)),
    )
    .await
    .expect_err("no client certificate, no login");
    assert!(matches!(err, PgOpenError::Unreachable(_)), "{err:?}");

    // A missing CA file is a typed configuration error, before any connection.
    let err = open(
        &server.conninfo("localhost", "postgres", ""),
        PgOptions::default().tls(PgTls::verify_full().root_cert(server.ca.with_extension("nope"))),
    )
    .await
    .expect_err("a missing CA file is refused");
    assert!(
        matches!(
            err,
            PgOpenError::TlsConfig {
                setting: "root_cert",
                ..
            }
        ),
        "{err:?}"
    );
}

/// Creates the client-certificate role, with rights on the test schema.
async fn create_cert_role(server: &TlsServer) {
    let (client, conn) = tokio_postgres::connect(
        &server.conninfo("127.0.0.1", "postgres", ""),
        tokio_postgres::NoTls,
    )
    .await
    .expect("plain connection to the TLS cluster");
    tokio::spawn(conn);
    client
        .batch_execute(&format!(
            "CREATE ROLE {CERT_USER} LOGIN;
             GRANT USAGE ON SCHEMA nj_tls TO {CERT_USER};
             GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA nj_tls TO {CERT_USER};
             GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA nj_tls TO {CERT_USER};"
        ))
        .await
        .expect("create the client-certificate role");
}

/// What a row of the mode table must do against the real TLS server.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Connects in plain text.
    Plain,
    /// Connects over TLS, in this mode.
    Tls(PgSslMode),
    /// The handshake is refused for this reason.
    Refused(PgTlsRefusal),
    /// Refused for a certificate the system's roots do not trust: the test CA is in
    /// no system store (a system with no roots at all refuses with `TlsConfig`).
    UntrustedBySystemRoots,
    /// The settings are refused before any connection.
    InvalidSslMode,
}

/// Every row of the mode table in `docs/postgres.md` (libpq's `sslmode` with and
/// without `sslrootcert`, as a connection string gives them), with a real
/// handshake each: the server's certificate is signed by `ca` and names
/// `localhost` only. `localhost` and `127.0.0.1` count as local hosts;
/// `remote.test` (reached at 127.0.0.1 through `hostaddr`) as a remote one.
/// Connecting to `127.0.0.1` makes the name check fail, so a connection there shows
/// that no name was checked; `remote.test` refused for its name shows that the
/// chain passed and the name was checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libpq_mode_table_against_a_real_tls_server() {
    use Expect::{InvalidSslMode, Plain, Refused, Tls, UntrustedBySystemRoots};
    use PgSslMode::{Require, VerifyCa, VerifyFull};
    use PgTlsRefusal::{UntrustedCertificate, WrongHostName};

    let server = TlsServer::start();
    let ca = format!("sslrootcert='{}'", server.ca.display());
    let other = format!("sslrootcert='{}'", server.other_ca.display());
    let none = String::new();
    let mut rows: Vec<(&str, &str, String, Expect)> = Vec::new();
    for mode in ["", "sslmode=allow", "sslmode=prefer"] {
        rows.extend([
            // Unset, allow, prefer: never plain text for a remote host.
            (mode, "localhost", none.clone(), Plain),
            (mode, "remote.test", none.clone(), UntrustedBySystemRoots),
            (mode, "127.0.0.1", ca.clone(), Tls(VerifyCa)),
            (
                mode,
                "127.0.0.1",
                other.clone(),
                Refused(UntrustedCertificate),
            ),
            (mode, "remote.test", ca.clone(), Refused(WrongHostName)),
        ]);
    }
    rows.extend([
        ("sslmode=disable", "localhost", none.clone(), Plain),
        ("sslmode=disable", "remote.test", none.clone(), Plain),
        ("sslmode=disable", "127.0.0.1", other.clone(), Plain),
        // require: no check without a root; with one, the chain (not the name).
        ("sslmode=require", "127.0.0.1", none.clone(), Tls(Require)),
        ("sslmode=require", "remote.test", none.clone(), Tls(Require)),
        ("sslmode=require", "127.0.0.1", ca.clone(), Tls(VerifyCa)),
        (
            "sslmode=require",
            "127.0.0.1",
            other.clone(),
            Refused(UntrustedCertificate),
        ),
        (
            "sslmode=require",
            "localhost",
            other.clone(),
            Refused(UntrustedCertificate),
        ),
        // verify-ca: the chain against the system's roots or the file.
        (
            "sslmode=verify-ca",
            "127.0.0.1",
            none.clone(),
            UntrustedBySystemRoots,
        ),
        ("sslmode=verify-ca", "127.0.0.1", ca.clone(), Tls(VerifyCa)),
        (
            "sslmode=verify-ca",
            "127.0.0.1",
            other.clone(),
            Refused(UntrustedCertificate),
        ),
        // verify-full: chain and name.
        (
            "sslmode=verify-full",
            "localhost",
            none.clone(),
            UntrustedBySystemRoots,
        ),
        (
            "sslmode=verify-full",
            "localhost",
            ca.clone(),
            Tls(VerifyFull),
        ),
        (
            "sslmode=verify-full",
            "127.0.0.1",
            ca.clone(),
            Refused(WrongHostName),
        ),
        (
            "sslmode=verify-full",
            "localhost",
            other.clone(),
            Refused(UntrustedCertificate),
        ),
        // sslrootcert=system (libpq 16): system roots, verify-full only.
        (
            "",
            "localhost",
            "sslrootcert=system".into(),
            UntrustedBySystemRoots,
        ),
        (
            "sslmode=verify-full",
            "localhost",
            "sslrootcert=system".into(),
            UntrustedBySystemRoots,
        ),
        (
            "sslmode=require",
            "localhost",
            "sslrootcert=system".into(),
            InvalidSslMode,
        ),
        (
            "sslmode=prefer",
            "localhost",
            "sslrootcert=system".into(),
            InvalidSslMode,
        ),
    ]);

    let mut failures = Vec::new();
    for (i, (mode, host, root, expect)) in rows.iter().enumerate() {
        let app = format!("nj_tls_row_{i}_{}", Uuid::now_v7().simple());
        let conninfo = server.conninfo(
            host,
            "postgres",
            &format!("{mode} {root} application_name={app}"),
        );
        let row = format!("[{mode:?} host={host} {root:?}]");
        let got = open(&conninfo, PgOptions::default()).await;
        let ok = match (expect, got) {
            (Plain | Tls(_), Ok(j)) => {
                let (encrypted, all) = tls_connections(&server, &app).await;
                let want_tls = matches!(expect, Tls(_));
                let mode_ok = match expect {
                    Tls(m) => j.ssl_mode() == *m,
                    _ => j.ssl_mode() == PgSslMode::Disable,
                };
                let ok = all >= 2 && encrypted == if want_tls { all } else { 0 } && mode_ok;
                if !ok {
                    failures.push(format!(
                        "{row}: connected in {:?}, {encrypted} of {all} connections \
                         encrypted; expected {expect:?}",
                        j.ssl_mode()
                    ));
                }
                j.close().await;
                continue;
            }
            (Refused(want), Err(PgOpenError::TlsRefused(got))) => got == *want,
            (
                UntrustedBySystemRoots,
                Err(
                    PgOpenError::TlsRefused(UntrustedCertificate)
                    | PgOpenError::TlsConfig {
                        setting: "root_cert",
                        ..
                    },
                ),
            ) => true,
            (
                InvalidSslMode,
                Err(PgOpenError::InvalidOption {
                    option: "sslmode", ..
                }),
            ) => true,
            (_, got) => {
                failures.push(format!("{row}: got {got:?}, expected {expect:?}"));
                continue;
            }
        };
        if !ok {
            failures.push(format!("{row}: refused otherwise than {expect:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows wrong:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );

    // The same fix through the options: `require` with a root checks the chain.
    let err = open(
        &server.conninfo("127.0.0.1", "postgres", ""),
        PgOptions::default().tls(PgTls::require().root_cert(&server.other_ca)),
    )
    .await
    .expect_err("require with another CA's root is refused");
    assert!(
        matches!(err, PgOpenError::TlsRefused(UntrustedCertificate)),
        "{err:?}"
    );
    let j = open(
        &server.conninfo("127.0.0.1", "postgres", ""),
        PgOptions::default().tls(PgTls::require().root_cert(&server.ca)),
    )
    .await
    .expect("require with the right root connects, whatever the host name");
    assert_eq!(j.ssl_mode(), VerifyCa);
    j.close().await;
}

/// `PgJournal::connector`: a companion's connection is opened exactly as the
/// journal's own (the connection string's TLS keys and CA, the session setup), named
/// as asked unless the connection string names it, and still after the journal
/// closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_connector_connects_as_the_journal_does() {
    let server = TlsServer::start();
    let ca = server.ca.display().to_string();
    let j = open(
        &server.conninfo(
            "localhost",
            "postgres",
            &format!("sslmode=verify-full sslrootcert='{ca}'"),
        ),
        PgOptions::default().connect_timeout(std::time::Duration::from_secs(7)),
    )
    .await
    .expect("sslmode=verify-full in the connection string connects");
    let app = format!("nj_companion_{}", Uuid::now_v7().simple());
    let connector = j.connector().application_name(&app);
    assert_eq!(connector.ssl_mode(), PgSslMode::VerifyFull);
    assert_eq!(connector.ssl_mode(), j.ssl_mode());
    assert_eq!(
        connector.connect_timeout(),
        std::time::Duration::from_secs(7)
    );
    let client = connector.connect().await.expect("the connector connects");
    assert_eq!(tls_connections(&server, &app).await, (1, 1));
    let isolation: String = client
        .query_one("SHOW default_transaction_isolation", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(isolation, "read committed");
    // The debug form carries no connection string.
    assert!(!format!("{connector:?}").contains(&ca));

    // After the journal closed, the connector still connects.
    j.close().await;
    drop(client);
    let again = connector.connect().await.expect("connects after close");
    let name: String = again
        .query_one("SHOW application_name", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(name, app);

    // A connection string that names its connections keeps its name.
    let named = format!("nj_named_{}", Uuid::now_v7().simple());
    let j = open(
        &server.conninfo(
            "localhost",
            "postgres",
            &format!("sslmode=verify-full sslrootcert='{ca}' application_name={named}"),
        ),
        PgOptions::default(),
    )
    .await
    .unwrap();
    let client = j
        .connector()
        .application_name("ignored")
        .connect()
        .await
        .unwrap();
    let name: String = client
        .query_one("SHOW application_name", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(name, named);
    j.close().await;

    // A connector whose server is gone fails typed, within its timeout.
    drop(server);
    let err = connector.connect().await.expect_err("the server is gone");
    assert!(
        matches!(
            err,
            PgOpenError::Unreachable(_) | PgOpenError::ConnectTimeout { .. }
        ),
        "{err:?}"
    );
}
