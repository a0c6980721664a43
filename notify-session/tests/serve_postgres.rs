//! Two real `notify serve` hosts on one PostgreSQL journal: each advertises its URL;
//! a request to the host that does not own the session is answered 307 with the
//! owner's URL (and a client that follows it is served by the owner); after the
//! owner's SIGTERM (leases released), the other host adopts the session and hands
//! out what was left unacknowledged. Needs `NOTIFY_TEST_DATABASE_URL` (default: the
//! local test database).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod serve_support;

use std::time::Duration;

use notify_testkit::postgres::database_url;
use notify_types::{LoopId, SessionId, Uuid};
use reqwest::StatusCode;
use serve_support::{Client, Server, Start, completion, drop_schema, new_secret, polled};

fn start(url: &str, schema: &str, key_file: &std::path::Path) -> Server {
    Server::start(
        &Start::postgres(url, schema)
            .arg("--key-file")
            .arg(key_file.display().to_string())
            .arg("--lease-secs")
            .arg("6"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wrong_host_names_and_redirects_to_the_owner() {
    let Some(url) = database_url("serve_postgres") else {
        return;
    };
    let schema = format!("serve_{}", Uuid::new_v4().simple());
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("keys");
    let secret = new_secret();
    std::fs::write(&key_file, &secret).unwrap();
    let mut a = start(&url, &schema, &key_file);
    let b = start(&url, &schema, &key_file);
    let no_redirects = || reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
    let at_a = Client::with_http(&a.url, Some(&secret), no_redirects());
    let at_b = Client::with_http(&b.url, Some(&secret), no_redirects());
    let following_b = Client::new(&b.url, Some(&secret));

    let (s, l) = (SessionId::new(), LoopId::new());
    assert_eq!(at_a.open(s).await.status, StatusCode::CREATED);
    assert_eq!(at_a.register(s, l, 64).await.status, StatusCode::CREATED);

    // B names A: 307, Location = this request at A, the body says who and where.
    let n = completion(s, l);
    let r = at_b.deliver(&n).await;
    assert_eq!(
        (r.status, r.str("disposition"), r.str("reason")),
        (StatusCode::TEMPORARY_REDIRECT, "stopped", "not_owner"),
        "{r:?}"
    );
    assert_eq!(r.str("owner_url"), a.url);
    assert_eq!(
        r.headers["location"],
        format!("{}/v1/sessions/{s}/completions", a.url)
    );
    for r in [
        at_b.open(s).await,
        at_b.register(s, l, 64).await,
        at_b.poll(s, l, "wait_ms=0").await,
    ] {
        assert_eq!(r.status, StatusCode::TEMPORARY_REDIRECT, "{r:?}");
        assert_eq!(r.str("owner_url"), a.url);
    }
    // A client that follows redirects is served by A (the signature travels along).
    let r = following_b.deliver(&n).await;
    assert_eq!(
        (r.status, r.str("disposition")),
        (StatusCode::CREATED, "accepted"),
        "{r:?}"
    );
    let r = following_b.deliver(&n).await;
    assert_eq!(
        (r.status, r.str("disposition")),
        (StatusCode::OK, "duplicate")
    );
    // Handed out at A, not acknowledged.
    let r = at_a.poll(s, l, "wait_ms=1000").await;
    assert_eq!(polled(&r), vec![(n.command_id.to_string(), 1)]);

    // A shuts down (releasing its leases): B adopts the session; the loop, registered
    // at B, gets the unacknowledged notification again.
    assert!(a.terminate().success(), "{}", a.log());
    let mut registered = None;
    for _ in 0..200 {
        let r = at_b.register(s, l, 64).await;
        if r.status == StatusCode::CREATED {
            registered = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = registered.expect("B adopted the session within 20 s");
    assert_eq!(r.body["seeded"], 1, "{r:?}");
    let r = at_b.poll(s, l, "wait_ms=1000").await;
    assert_eq!(polled(&r), vec![(n.command_id.to_string(), 1)]);
    assert_eq!(
        at_b.ack(s, l, &n.command_id.to_string())
            .await
            .str("outcome"),
        "acknowledged"
    );
    assert_eq!(at_b.deliver(&n).await.status, StatusCode::OK);
    drop(b);
    drop_schema(&url, &schema).await;
}
