//! A command's page on the real `notify serve` says what a retry of it would be
//! answered now, as the contract checks: the session's host and the command's loop
//! before the journal. An unknown session is 404 `session_not_found`, not a new
//! delivery; a journaled command whose loop is not registered is 404 `loop_not_found`
//! before its duplicate.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod serve_support;

use notify_types::{CommandId, LoopId, SessionId};
use reqwest::StatusCode;
use serve_support::{Client, Server, Start, completion, journal_dir};

async fn retry_now(base: &str, s: SessionId, c: &str) -> String {
    let r = reqwest::get(format!("{base}/console/sessions/{s}/commands/{c}"))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let page = r.text().await.unwrap();
    let at = page
        .find("a retry now")
        .expect("the page says what a retry gets");
    page[at..]
        .split("</dd>")
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// On the code before, the unknown session's page said "201 accepted" and the
/// unregistered loop's "200 duplicate": the API answered 404 to both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_is_predicted_as_the_api_answers_it() {
    let (_dir, journal) = journal_dir();
    let start = Start::redb(&journal, &[]).arg("--insecure-unsigned");
    let mut server = Server::start(&start);
    let api = Client::new(&server.url, None);
    let (s, l) = (SessionId::new(), LoopId::new());
    assert_eq!(api.open(s).await.status, StatusCode::CREATED);
    assert_eq!(api.register(s, l, 8).await.status, StatusCode::CREATED);
    let n = completion(s, l);
    let c = n.command_id.to_string();
    assert_eq!(api.deliver(&n).await.status, StatusCode::CREATED);

    // Served here, its loop registered: the journal answers.
    let said = retry_now(&server.url, s, &c).await;
    assert!(said.contains("200 duplicate of seq 1"), "{said}");
    assert!(!said.contains("loop_not_found"), "{said}");
    // An unknown session: the API's 404, never "accepted".
    let unknown = SessionId::new();
    let said = retry_now(&server.url, unknown, &CommandId::new().to_string()).await;
    assert!(said.contains("404 session_not_found"), "{said}");
    assert!(!said.contains("201"), "{said}");
    let answer = api.deliver(&completion(unknown, l)).await;
    assert_eq!(
        (answer.status, answer.str("reason")),
        (StatusCode::NOT_FOUND, "session_not_found")
    );

    // After a restart the host serves the session again (it adopts what is live), but
    // the loop, registered over HTTP, is not registered yet.
    assert!(server.terminate().success());
    let server = Server::start(&start);
    let api = Client::new(&server.url, None);
    let answer = api.deliver(&n).await;
    assert_eq!(
        (answer.status, answer.str("reason")),
        (StatusCode::NOT_FOUND, "loop_not_found"),
        "{answer:?}"
    );
    let said = retry_now(&server.url, s, &c).await;
    assert!(said.contains("404 loop_not_found"), "{said}");
    assert!(said.contains("once it is"), "{said}");
    // Registered again: the duplicate, as the page said.
    assert_eq!(api.register(s, l, 8).await.status, StatusCode::CREATED);
    let said = retry_now(&server.url, s, &c).await;
    assert!(
        said.starts_with("a retry now</dt><dd>the same body: 200 duplicate"),
        "{said}"
    );
    assert_eq!(api.deliver(&n).await.status, StatusCode::OK);
}
