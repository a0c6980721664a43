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
    JournalBackend, PgJournal, PgOpenError, PgOptions, PgSslMode, PgTls, PgTlsRefusal, replay_all,
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
