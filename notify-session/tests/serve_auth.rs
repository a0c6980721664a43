//! Signatures on the real `notify serve`: HMAC (`v1,`) and ed25519 (`v1a,`) accepted,
//! a wrong key, an expired or future timestamp, a tampered body and a missing header
//! refused (401); rotation (several keys at once, and a key withdrawn by a restart);
//! the same ID with another body is a collision (409), not an authentication failure;
//! unsigned access only on loopback; the signature computed independently (openssl)
//! verifies; a signed request replayed as another operation on the same target (an
//! open as an end, a registration as a poll or a stream, a completion as its
//! acknowledgement) is refused and changes nothing; a request whose headers cannot
//! authenticate it is refused before its body is read.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod serve_support;

use notify_types::{LoopId, SessionId};
use reqwest::{Method, StatusCode};
use serve_support::{
    Client, Server, Start, completion, journal_dir, new_ed25519, new_secret, now, run_to_exit,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signatures_tolerance_and_rotation() {
    let (_dir, journal) = journal_dir();
    let (old, new) = (new_secret(), new_secret());
    let (ed_sk, ed_pk) = new_ed25519();
    let mut server = Server::start(&Start::redb(&journal, &[&old, &new, &ed_pk]));
    let by_old = Client::new(&server.url, Some(&old));
    let by_new = Client::new(&server.url, Some(&new));
    let by_ed = Client::new(&server.url, Some(&ed_sk));
    let (s, l) = (SessionId::new(), LoopId::new());
    assert_eq!(by_old.open(s).await.status, StatusCode::CREATED);
    assert_eq!(by_new.register(s, l, 64).await.status, StatusCode::CREATED);
    // Each active key signs: HMAC with either secret, ed25519 with the public key's pair.
    for c in [&by_old, &by_new, &by_ed] {
        let r = c.deliver(&completion(s, l)).await;
        assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    }
    // A key the server does not have.
    let stranger = Client::new(&server.url, Some(&new_secret()));
    let r = stranger.deliver(&completion(s, l)).await;
    assert_eq!(
        (r.status, r.str("reason")),
        (StatusCode::UNAUTHORIZED, "unauthenticated")
    );
    let (other_sk, _) = new_ed25519();
    let r = Client::new(&server.url, Some(&other_sk))
        .deliver(&completion(s, l))
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    // Timestamps outside the tolerance (default 300 s), both ways; inside it, fine.
    for (skew, want) in [
        (-301, StatusCode::UNAUTHORIZED),
        (301, StatusCode::UNAUTHORIZED),
        (-250, StatusCode::CREATED),
    ] {
        let c = Client {
            skew,
            ..by_old.clone()
        };
        let r = c.deliver(&completion(s, l)).await;
        assert_eq!(r.status, want, "skew {skew}: {r:?}");
    }
    // A body changed after signing; a missing header; a second entry that verifies.
    let n = completion(s, l);
    let id = n.command_id.to_string();
    let ts = now();
    let key: notify_session::serve::SignKey = old.parse().unwrap();
    let sig = key.sign(&id, ts, &n.encode());
    let mut tampered = n.clone();
    tampered.process_handle = "other".into();
    let send = |body: Vec<u8>, headers: Vec<(&'static str, String)>| {
        let http = by_old.http.clone();
        let url = format!("{}/v1/sessions/{s}/completions", server.url);
        async move {
            let mut req = http.post(url).body(body);
            for (k, v) in headers {
                req = req.header(k, v);
            }
            req.send().await.unwrap().status()
        }
    };
    let headers = |sig: String| {
        vec![
            ("webhook-id", id.clone()),
            ("webhook-timestamp", ts.to_string()),
            ("webhook-signature", sig),
        ]
    };
    assert_eq!(
        send(tampered.encode(), headers(sig.clone())).await,
        StatusCode::UNAUTHORIZED
    );
    let mut missing = headers(sig.clone());
    missing.remove(1);
    assert_eq!(send(n.encode(), missing).await, StatusCode::UNAUTHORIZED);
    let bogus = format!("v1,AAAA v1a,BBBB {sig}");
    assert_eq!(send(n.encode(), headers(bogus)).await, StatusCode::CREATED);
    // The same ID, validly signed, with another body: a collision, not a 401.
    let r = by_new.deliver(&tampered).await;
    assert_eq!(
        (r.status, r.str("disposition")),
        (StatusCode::CONFLICT, "collision")
    );

    // Rotation: restart with the old secret withdrawn; the new one and ed25519 go on.
    assert!(server.terminate().success());
    let server = Server::start(&Start::redb(&journal, &[&new, &ed_pk]));
    let by_old = Client::new(&server.url, Some(&old));
    let by_new = Client::new(&server.url, Some(&new));
    assert_eq!(
        by_old.deliver(&completion(s, l)).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(by_new.register(s, l, 64).await.status, StatusCode::CREATED);
    assert_eq!(
        by_new.deliver(&completion(s, l)).await.status,
        StatusCode::CREATED
    );
}

/// The signature covers `webhook-id`, the timestamp and the body, not the method or the
/// path: a captured request sent unchanged to another operation's route carries a
/// signature that verifies, so only the ID's operation prefix refuses it. Each replay
/// here is exactly what a captured request would be: the same ID and body, signed
/// within the tolerance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_replayed_as_another_operation_on_its_target_is_refused() {
    let (_dir, journal) = journal_dir();
    let secret = new_secret();
    let server = Server::start(&Start::redb(&journal, &[&secret]));
    let c = Client::new(&server.url, Some(&secret));
    // A replayed stream that opened would never end: 5 s is a refusal's bound.
    let replay = Client {
        http: reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(5))
            .build()
            .unwrap(),
        ..c.clone()
    };
    let (s, l) = (SessionId::new(), LoopId::new());
    assert_eq!(c.open(s).await.status, StatusCode::CREATED);
    let registration = br#"{"capacity":64}"#.to_vec();
    let registered = format!("register:{s}:{l}");
    let r = c
        .send(
            Method::PUT,
            &format!("/v1/sessions/{s}/loops/{l}"),
            &registered,
            registration.clone(),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    let n = completion(s, l);
    let (command, body) = (n.command_id.to_string(), n.encode());
    let r = c
        .send(
            Method::POST,
            &format!("/v1/sessions/{s}/completions"),
            &command,
            body.clone(),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");

    // The loop's consumer has it handed out, for 300 ms.
    let first = serve_support::polled(&c.poll(s, l, "wait_ms=0&visibility_ms=300").await);
    assert_eq!(first, [(command.clone(), 1)]);

    // The completion replayed as its acknowledgement: refused, nothing consumed.
    let loops = format!("/v1/sessions/{s}/loops/{l}");
    let r = replay
        .send(
            Method::POST,
            &format!("{loops}/notifications/{command}/ack"),
            &command,
            body.clone(),
        )
        .await;
    assert_eq!(
        (r.status, r.str("field")),
        (StatusCode::BAD_REQUEST, "command_id"),
        "{r:?}"
    );
    // The registration replayed as a poll and as a stream: refused, nothing handed out.
    for route in [
        format!("{loops}/notifications?max=1000&visibility_ms=900000"),
        format!("{loops}/notifications/stream?visibility_ms=900000"),
    ] {
        let r = replay
            .send(Method::GET, &route, &registered, registration.clone())
            .await;
        assert_eq!(
            (r.status, r.str("field")),
            (StatusCode::BAD_REQUEST, "loop_id"),
            "{route}: {r:?}"
        );
    }
    // The open replayed as an end: refused, the session still takes deliveries.
    let r = replay
        .send(
            Method::POST,
            &format!("/v1/sessions/{s}/end"),
            &format!("open:{s}"),
            Vec::new(),
        )
        .await;
    assert_eq!(
        (r.status, r.str("field")),
        (StatusCode::BAD_REQUEST, "session_id"),
        "{r:?}"
    );
    // The completion replayed as an open of a session named by its command ID, and
    // the registration replayed into another session: refused, nothing opened.
    let r = replay
        .send(
            Method::PUT,
            &format!("/v1/sessions/{command}"),
            &command,
            body.clone(),
        )
        .await;
    assert_eq!(
        (r.status, r.str("field")),
        (StatusCode::BAD_REQUEST, "session_id"),
        "{r:?}"
    );
    let other = SessionId::new();
    assert_eq!(c.open(other).await.status, StatusCode::CREATED);
    let r = replay
        .send(
            Method::PUT,
            &format!("/v1/sessions/{other}/loops/{l}"),
            &registered,
            registration.clone(),
        )
        .await;
    assert_eq!(
        (r.status, r.str("field")),
        (StatusCode::BAD_REQUEST, "loop_id"),
        "{r:?}"
    );
    let r = c
        .send(
            Method::GET,
            &format!("/v1/sessions/{command}/loops/{l}/notifications"),
            &format!("poll:{l}"),
            Vec::new(),
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::NOT_FOUND,
        "no session {command}: {r:?}"
    );
    assert_eq!(
        c.deliver(&completion(s, l)).await.status,
        StatusCode::CREATED
    );

    // Once its visibility passed, the consumer gets the first again (it was never
    // acknowledged, nor handed out to the replayed poll), then the second; its own
    // acknowledgements and the end go through.
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let polled = serve_support::polled(&c.poll(s, l, "wait_ms=0").await);
    assert_eq!(polled.len(), 2, "{polled:?}");
    assert_eq!(polled[0], (command.clone(), 2));
    for (id, _) in &polled {
        let r = c.ack(s, l, id).await;
        assert_eq!(r.str("outcome"), "acknowledged", "{r:?}");
    }
    let r = c.end(s, false).await;
    assert_eq!(r.str("outcome"), "ended", "{r:?}");
}

/// A request without a signature, or with a timestamp outside the tolerance, is
/// answered 401 as soon as its headers are in: its declared body (60,000 bytes, under
/// the limit) is never sent, so a server that read it first would not answer at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_headers_refuse_is_answered_before_the_body_is_read() {
    use tokio::io::AsyncWriteExt as _;
    let (_dir, journal) = journal_dir();
    let secret = new_secret();
    let server = Server::start(&Start::redb(&journal, &[&secret]));
    let s = SessionId::new();
    let path = format!("/v1/sessions/{s}/completions");
    let stale = now() - 3_600;
    for (what, headers) in [
        ("no signature", String::new()),
        (
            "an hour-old timestamp",
            format!(
                "webhook-id: {s}\r\nwebhook-timestamp: {stale}\r\nwebhook-signature: v1,AAAA\r\n"
            ),
        ),
    ] {
        let mut stream = tokio::net::TcpStream::connect(&server.addr).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 60000\r\n{headers}\r\n"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let answer = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            serve_support::read_head(&mut stream),
        )
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 5 s, the body still awaited"));
        assert!(answer.starts_with("HTTP/1.1 401"), "{what}: {answer}");
    }
}

/// With a tolerance of 1 s, a correctly signed completion whose body trickles in over
/// 2.5 s is refused: its timestamp is checked again once the body is in, not only when
/// the headers arrived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timestamp_that_expires_while_the_body_arrives_is_refused() {
    use tokio::io::AsyncWriteExt as _;
    let (_dir, journal) = journal_dir();
    let secret = new_secret();
    let start = Start::redb(&journal, &[&secret])
        .arg("--timestamp-tolerance")
        .arg("1");
    let server = Server::start(&start);
    let c = Client::new(&server.url, Some(&secret));
    let (s, l) = (SessionId::new(), LoopId::new());
    assert_eq!(c.open(s).await.status, StatusCode::CREATED);
    assert_eq!(c.register(s, l, 64).await.status, StatusCode::CREATED);
    let n = completion(s, l);
    let (id, body) = (n.command_id.to_string(), n.encode());
    let ts = now();
    let key: notify_session::serve::SignKey = secret.parse().unwrap();
    let head = format!(
        "POST /v1/sessions/{s}/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\nwebhook-id: {id}\r\nwebhook-timestamp: {ts}\r\nwebhook-signature: {}\r\n\r\n",
        body.len(),
        key.sign(&id, ts, &body)
    );
    let mut stream = tokio::net::TcpStream::connect(&server.addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    for chunk in body.chunks(body.len().div_ceil(5)) {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        stream.write_all(chunk).await.unwrap();
    }
    let answer = serve_support::read_head(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    // Nothing was journaled: the same completion, signed now, is accepted.
    assert_eq!(c.deliver(&n).await.status, StatusCode::CREATED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openssl_signature_verifies() {
    // The signature as a shell would compute it (examples/clients/curl.sh does the
    // same): base64(HMAC-SHA256(base64-decoded secret, "id.ts.body")).
    let (_dir, journal) = journal_dir();
    let secret = new_secret();
    let server = Server::start(&Start::redb(&journal, &[&secret]));
    let c = Client::new(&server.url, Some(&secret));
    let s = SessionId::new();
    let id = format!("open:{s}");
    let ts = now().to_string();
    let key_hex: String = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(secret.trim_start_matches("whsec_"))
            .unwrap()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "printf '%s' '{id}.{ts}.' | openssl dgst -sha256 -mac HMAC -macopt hexkey:{key_hex} -binary | openssl base64 -A"
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let sig = String::from_utf8(out.stdout).unwrap();
    let r = c
        .http
        .put(format!("{}/v1/sessions/{s}", server.url))
        .header("webhook-id", &id)
        .header("webhook-timestamp", &ts)
        .header("webhook-signature", format!("v1,{}", sig.trim()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    // The library's signer agrees byte for byte.
    let ours = secret
        .parse::<notify_session::serve::SignKey>()
        .unwrap()
        .sign(&id, ts.parse().unwrap(), b"");
    assert_eq!(ours, format!("v1,{}", sig.trim()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_only_on_loopback() {
    let (_dir, journal) = journal_dir();
    let path = journal.display().to_string();
    // Refused before binding anything, with a clear message and the usage status.
    let (code, stderr) = run_to_exit(
        &[
            "serve",
            "--journal",
            &path,
            "--listen",
            "0.0.0.0:0",
            "--insecure-unsigned",
        ],
        &[],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("only on a loopback address"), "{stderr}");
    // No keys at all: refused too.
    let (code, stderr) = run_to_exit(
        &["serve", "--journal", &path, "--listen", "127.0.0.1:0"],
        &[],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no signing keys"), "{stderr}");
    // A bad key names itself.
    let (code, stderr) = run_to_exit(
        &["serve", "--journal", &path, "--listen", "127.0.0.1:0"],
        &[("NOTIFY_SERVE_KEYS", "whsec_!!!")],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("NOTIFY_SERVE_KEYS") && stderr.contains("base64"),
        "{stderr}"
    );
    // On loopback, unsigned requests are served; a signature given is still checked.
    let start = Start {
        args: vec![
            "serve".into(),
            "--journal".into(),
            path.clone(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--insecure-unsigned".into(),
        ],
        envs: Vec::new(),
    };
    let server = Server::start(&start);
    let c = Client::new(&server.url, None);
    let (s, l) = (SessionId::new(), LoopId::new());
    assert_eq!(c.open(s).await.status, StatusCode::CREATED);
    assert_eq!(c.register(s, l, 4).await.status, StatusCode::CREATED);
    assert_eq!(
        c.deliver(&completion(s, l)).await.status,
        StatusCode::CREATED
    );
    let signed_badly = Client::new(&server.url, Some(&new_secret()));
    assert_eq!(
        signed_badly.deliver(&completion(s, l)).await.status,
        StatusCode::UNAUTHORIZED
    );
    let r = c
        .send(Method::PUT, &format!("/v1/sessions/{s}"), "", Vec::new())
        .await;
    assert_eq!(r.status, StatusCode::OK);
}
