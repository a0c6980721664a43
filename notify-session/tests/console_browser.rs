//! The console in a real headless Chromium (chromedriver, WebDriver): after a demo
//! run on the real `notify serve` (a completion delivered, its duplicate, another
//! completion, the first consumed, the session ended abandoning the second) every
//! page loads; the session's timeline shows the duplicate, the consumption and the
//! end in that order; a command's page shows its lifecycle; the back button returns
//! to the filtered sessions page; and on a journal damaged on disk the integrity
//! page names the damage. No page logs an error in the browser's console.
//! Screenshots of each page go to `docs/console/` with `NOTIFY_CONSOLE_SCREENSHOTS=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod console_support;
mod serve_support;

use base64::Engine as _;
use console_support::Browser;
use fantoccini::Locator;
use notify_testkit::tamper;
use notify_types::{LoopId, SessionId, Uuid};
use reqwest::StatusCode;
use serve_support::{Client, Server, Start, completion, journal_dir, new_secret, polled};

fn read_only_key() -> String {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(Uuid::new_v4().as_bytes());
    bytes.extend_from_slice(Uuid::new_v4().as_bytes());
    format!(
        "whro_{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// The demo: one session, one loop; a completion, its duplicate, a second one; the
/// first acknowledged; the session ended, abandoning the second. Answers the
/// session and the two command IDs.
async fn demo(client: &Client) -> (SessionId, String, String) {
    let (s, l) = (SessionId::new(), LoopId::new());
    assert_eq!(client.open(s).await.status, StatusCode::CREATED);
    assert_eq!(client.register(s, l, 8).await.status, StatusCode::CREATED);
    let first = completion(s, l);
    assert_eq!(client.deliver(&first).await.status, StatusCode::CREATED);
    let again = client.deliver(&first).await;
    assert_eq!(
        (again.status, again.str("disposition")),
        (StatusCode::OK, "duplicate")
    );
    let mut second = completion(s, l);
    second.process_handle = "test-7".into();
    assert_eq!(client.deliver(&second).await.status, StatusCode::CREATED);
    let handed = polled(&client.poll(s, l, "max=1&wait_ms=2000").await);
    let c1 = first.command_id.to_string();
    assert_eq!(handed[0].0, c1);
    assert_eq!(client.ack(s, l, &c1).await.status, StatusCode::OK);
    assert_eq!(client.end(s, true).await.status, StatusCode::OK);
    (s, c1, second.command_id.to_string())
}

/// Logs in through the form with `key`, starting from `path`; answers the page
/// the login returns to.
async fn login(browser: &Browser, base: &str, path: &str, key: &str) -> String {
    browser.client.goto(&format!("{base}{path}")).await.unwrap();
    let url = browser.client.current_url().await.unwrap();
    assert_eq!(url.path(), "/console/login", "no cookie: the form");
    browser
        .client
        .find(Locator::Id("key"))
        .await
        .unwrap()
        .send_keys(key)
        .await
        .unwrap();
    browser
        .client
        .find(Locator::Css("button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser.wait_for("</main>").await
}

/// `needles` appear in `haystack` in this order.
fn in_order(haystack: &str, needles: &[&str]) {
    let mut at = 0;
    for n in needles {
        match haystack[at..].find(n) {
            Some(i) => at += i + n.len(),
            None => panic!("{n:?} missing after byte {at} (order {needles:?}):\n{haystack}"),
        }
    }
}

/// A journal in a fresh directory under the target directory, named relative to the
/// test's working directory (the package's), so the pages (and screenshots) show a
/// path inside the repository.
fn relative_journal() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let cwd = std::env::current_dir().unwrap();
    let root = cwd.parent().unwrap();
    let path = match dir.path().strip_prefix(root) {
        Ok(inside) => std::path::Path::new("..").join(inside).join("notify.redb"),
        Err(_) => dir.path().join("notify.redb"),
    };
    (dir, path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_after_a_demo_run_in_a_real_browser() {
    let browser = Browser::start().await;
    let (_dir, journal) = relative_journal();
    let secret = new_secret();
    let read_only = read_only_key();
    let server = Server::start(&Start::redb(&journal, &[&secret, &read_only]));
    let base = server.url.clone();
    let (s, c1, c2) = demo(&Client::new(&base, Some(&secret))).await;

    // The login form, then the page it was asked from.
    let overview = login(&browser, &base, "/console/", &read_only).await;
    assert_eq!(
        browser.client.current_url().await.unwrap().path(),
        "/console/"
    );
    for text in [
        "Overview",
        "redb",
        "format version",
        "Appends and acknowledgements",
        "<svg",
    ] {
        assert!(overview.contains(text), "{text}: {overview}");
    }
    // Counted again now: the demo's session, ended, and its five frames.
    browser
        .client
        .find(Locator::Css("form[action='/console/census'] button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let overview = browser.wait_for("frames</dt><dd>5<").await;
    in_order(
        &overview,
        &[
            "frames</dt><dd>5<",
            "live</dt><dd>0<",
            "ended</dt><dd>1<",
            "pending notifications</dt><dd>0<",
        ],
    );
    browser.screenshot("overview").await;

    let sessions = browser
        .open(&format!("{base}/console/sessions?state=ended"))
        .await;
    assert!(sessions.contains(&s.to_string()), "{sessions}");
    browser.screenshot("sessions").await;

    // The session: its timeline, frame by frame, with the duplicate answer in place.
    browser
        .client
        .find(Locator::LinkText(&s.to_string()))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let timeline = browser.wait_for("ended</span>").await;
    assert_eq!(
        browser.client.current_url().await.unwrap().path(),
        format!("/console/sessions/{s}")
    );
    in_order(
        &timeline,
        &[
            "Timeline",
            "completion</span>",
            &c1,
            "duplicate</span>",
            "a retry answered duplicate of seq 1",
            "completion</span>",
            &c2,
            "consumed</span>",
            "abandoned</span>",
            "ended</span>",
        ],
    );
    assert!(timeline.contains("ended"), "{timeline}");
    browser.screenshot("session").await;

    // The back button returns to the filtered list.
    browser.client.back().await.unwrap();
    let url = browser.client.current_url().await.unwrap();
    assert_eq!(
        (url.path(), url.query()),
        ("/console/sessions", Some("state=ended"))
    );

    // A command's life: appended at seq 1, consumed at seq 3, and what a retry gets.
    let command = browser
        .open(&format!("{base}/console/sessions/{s}/commands/{c1}"))
        .await;
    in_order(
        &command,
        &[
            "appended",
            "seq 1",
            "dispatched",
            "consumed",
            "yes: acknowledged, seq 3",
            "abandoned",
            "no",
            "a retry now",
            "200 duplicate of seq 1",
            "409 collision",
            "Answers this server gave",
            "accepted",
            "duplicate",
        ],
    );
    browser.screenshot("command").await;
    let abandoned = browser
        .open(&format!("{base}/console/sessions/{s}/commands/{c2}"))
        .await;
    assert!(
        abandoned.contains("yes: pending when the session ended, seq 4"),
        "{abandoned}"
    );

    let hosts = browser.open(&format!("{base}/console/hosts")).await;
    assert!(hosts.contains("only host"), "{hosts}");
    browser.screenshot("hosts").await;

    browser.open(&format!("{base}/console/integrity")).await;
    browser
        .client
        .find(Locator::Css(
            "form[action='/console/integrity/verify'] button",
        ))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // The verify runs in the background; the POST returns here once it is done (or
    // the page reloads itself until then).
    let integrity = browser.wait_for("Clean: every frame").await;
    assert_eq!(
        browser.client.current_url().await.unwrap().path(),
        "/console/integrity"
    );
    assert!(!integrity.contains("A verify is running"), "{integrity}");
    browser.screenshot("integrity").await;

    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "the browser logged errors: {errors:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_integrity_page_names_the_damage_of_a_damaged_journal() {
    let browser = Browser::start().await;
    let (_dir, journal) = journal_dir();
    let secret = new_secret();
    let read_only = read_only_key();
    let start = Start::redb(&journal, &[&secret, &read_only]);
    let mut server = Server::start(&start);
    let (s, _, _) = demo(&Client::new(&server.url, Some(&secret))).await;
    assert!(server.terminate().success());

    // Flip a bit of frame 2's stored bytes on disk: its checksum no longer matches.
    tamper::edit_frame(&journal, s.as_uuid().as_u128(), 2, false, |bytes| {
        let last = bytes.len() - 1;
        bytes[last] ^= 0x20;
    })
    .unwrap();

    let server = Server::start(&start);
    let base = server.url.clone();
    login(&browser, &base, "/console/integrity", &read_only).await;
    browser
        .client
        .find(Locator::Css(
            "form[action='/console/integrity/verify'] button",
        ))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let page = browser.wait_for("Damaged").await;
    let named = format!("session {s} seq 2");
    in_order(&page, &["Damaged", &named, "checksum"]);
    browser.screenshot("integrity-damaged").await;
    // The session's page shows the frames before the damage and names it in words.
    let session = browser.open(&format!("{base}/console/sessions/{s}")).await;
    in_order(
        &session,
        &[
            "Restore of this session fails",
            "checksum mismatch",
            "Timeline",
            "completion</span>",
            "The next frame cannot be read",
            &format!("frame 2 of session {s} is damaged"),
            "frames after the damaged one",
        ],
    );
    browser.screenshot("session-damaged").await;
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "the browser logged errors: {errors:#?}");
}
