//! The TLS listener of the real `notify serve` (rustls, a certificate made here): a
//! client that trusts the certificate delivers and consumes over HTTP/2 (ALPN) and
//! HTTP/1.1; one that does not trust it, or speaks plaintext, gets nothing; a missing
//! key file is refused at start, naming it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod serve_support;

use notify_types::{LoopId, SessionId};
use reqwest::StatusCode;
use serve_support::{
    Client, Server, Start, completion, journal_dir, new_secret, polled, run_to_exit,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_http2_and_http1() {
    let (dir, journal) = journal_dir();
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    let cert_pem = certified.cert.pem();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, &cert_pem).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let secret = new_secret();
    let server = Server::start(
        &Start::redb(&journal, &[&secret])
            .arg("--tls-cert")
            .arg(cert.display().to_string())
            .arg("--tls-key")
            .arg(key.display().to_string()),
    );
    assert!(server.url.starts_with("https://"), "{}", server.url);
    let base = server.url.replace("127.0.0.1", "localhost");
    let root = reqwest::Certificate::from_pem(cert_pem.as_bytes()).unwrap();
    let h2 = Client::with_http(
        &base,
        Some(&secret),
        reqwest::Client::builder().add_root_certificate(root.clone()),
    );
    let h1 = Client::with_http(
        &base,
        Some(&secret),
        reqwest::Client::builder()
            .add_root_certificate(root)
            .http1_only(),
    );
    let (s, l) = (SessionId::new(), LoopId::new());
    let r = h2.open(s).await;
    assert_eq!(
        (r.status, r.version),
        (StatusCode::CREATED, reqwest::Version::HTTP_2),
        "ALPN picks h2"
    );
    let r = h1.register(s, l, 8).await;
    assert_eq!(
        (r.status, r.version),
        (StatusCode::CREATED, reqwest::Version::HTTP_11)
    );
    let n = completion(s, l);
    assert_eq!(h2.deliver(&n).await.status, StatusCode::CREATED);
    assert_eq!(h1.deliver(&n).await.status, StatusCode::OK);
    let r = h1.poll(s, l, "wait_ms=1000").await;
    assert_eq!(polled(&r), vec![(n.command_id.to_string(), 1)]);

    // Not trusted: the handshake fails. Plaintext to the TLS port: no answer.
    let untrusting = Client::new(&base, Some(&secret));
    assert!(
        untrusting
            .try_send(reqwest::Method::GET, "/healthz", "x", Vec::new())
            .await
            .is_err()
    );
    let plain = Client::new(&format!("http://{}", server.addr), Some(&secret));
    assert!(
        plain
            .try_send(reqwest::Method::GET, "/healthz", "x", Vec::new())
            .await
            .is_err()
    );
    // The server goes on serving after both.
    assert_eq!(h2.deliver(&n).await.status, StatusCode::OK);

    // A key file that is not there: refused at start, naming it.
    let missing = dir.path().join("nope.pem");
    let (code, stderr) = run_to_exit(
        &[
            "serve",
            "--journal",
            &dir.path().join("other.redb").display().to_string(),
            "--listen",
            "127.0.0.1:0",
            "--insecure-unsigned",
            "--tls-cert",
            &cert.display().to_string(),
            "--tls-key",
            &missing.display().to_string(),
        ],
        &[],
    );
    assert_ne!(code, 0);
    assert!(stderr.contains("nope.pem"), "{stderr}");
}
