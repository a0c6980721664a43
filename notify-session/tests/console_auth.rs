//! The console's door on the real `notify serve`: without a cookie a page load is sent
//! to the login form (303) and anything else is 401; a wrong key is refused; a
//! read-only `whro_` key (or a `whsec_` secret) logs in and its cookie is `HttpOnly`,
//! `SameSite=Strict`; a tampered cookie, or one another server issued, is refused; a
//! read-only key signs nothing the API accepts (it cannot deliver); unsigned on
//! loopback the console is open; over plain HTTP off loopback the login form takes a
//! read-only key only, never an API secret.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod serve_support;

use base64::Engine as _;
use notify_session::serve::SignKey;
use notify_types::{LoopId, SessionId, Uuid};
use reqwest::StatusCode;
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use serve_support::{Client, Server, Start, completion, journal_dir, new_secret};

/// A fresh read-only key `whro_…` and the same secret as an HMAC key `whsec_…`.
fn read_only_key() -> (String, String) {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(Uuid::new_v4().as_bytes());
    bytes.extend_from_slice(Uuid::new_v4().as_bytes());
    let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
    (format!("whro_{b64}"), format!("whsec_{b64}"))
}

fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Logs in with `key`: the answer's status and its cookie (`name=value`), if any.
async fn login(
    http: &reqwest::Client,
    base: &str,
    key: &str,
) -> (StatusCode, Option<String>, String) {
    let r = http
        .post(format!("{base}/console/login"))
        .form(&[("key", key), ("next", "/console/sessions?state=live")])
        .send()
        .await
        .unwrap();
    let status = r.status();
    let set = r
        .headers()
        .get(SET_COOKIE)
        .map(|v| v.to_str().unwrap().to_owned());
    let location = r
        .headers()
        .get(LOCATION)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, set, location)
}

async fn get(http: &reqwest::Client, url: &str, cookie: Option<&str>) -> reqwest::Response {
    let mut req = http.get(url);
    if let Some(c) = cookie {
        req = req.header(COOKIE, c);
    }
    req.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_needs_a_login_and_a_read_only_key_only_reads() {
    let (_dir, journal) = journal_dir();
    let secret = new_secret();
    let (read_only, read_only_as_hmac) = read_only_key();
    let server = Server::start(&Start::redb(&journal, &[&secret, &read_only]));
    let base = &server.url;
    let http = browser();

    // No cookie: a page load goes to the login form, naming where it was going.
    for path in [
        "/console/",
        "/console/sessions?state=live",
        "/console/integrity",
    ] {
        let r = get(&http, &format!("{base}{path}"), None).await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER, "{path}");
        let to = r.headers()[LOCATION].to_str().unwrap();
        assert!(to.starts_with("/console/login?next=/console/"), "{to}");
    }
    // Anything but a page load is 401.
    let r = http
        .post(format!("{base}/console/integrity/verify"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // A HEAD is a GET without a body: sent to the login form too.
    let r = http
        .head(format!("{base}/console/sessions"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        r.headers()[LOCATION].to_str().unwrap(),
        "/console/login?next=/console/sessions"
    );
    // The form itself and the stylesheet need no login.
    assert_eq!(
        get(&http, &format!("{base}/console/login"), None)
            .await
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        get(&http, &format!("{base}/console/assets/console.css"), None)
            .await
            .status(),
        StatusCode::OK
    );

    // A key the server does not have, and an ed25519-style non-secret, are refused.
    for wrong in [
        new_secret(),
        read_only_key().0,
        "whpk_AAAA".to_owned(),
        String::new(),
    ] {
        let (status, cookie, _) = login(&http, base, &wrong).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{wrong}");
        assert!(cookie.is_none());
    }

    // The read-only key logs in: a cookie the script of a page cannot read, never sent
    // cross-site, scoped to the console; back to where the login was asked from.
    let (status, set, location) = login(&http, base, &read_only).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(location, "/console/sessions?state=live");
    let set = set.expect("a cookie");
    for attribute in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/console",
        "Max-Age=43200",
    ] {
        assert!(set.contains(attribute), "{set}");
    }
    let cookie = set.split(';').next().unwrap().to_owned();
    for path in [
        "/console/",
        "/console/sessions",
        "/console/hosts",
        "/console/integrity",
    ] {
        let r = get(&http, &format!("{base}{path}"), Some(&cookie)).await;
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        assert!(r.text().await.unwrap().contains("Log out"));
    }
    // A `next` that is not a plain path under /console/ returns to the console's root,
    // never off-site and never without a Location.
    for next in [
        "/console/a\nb",
        "/console/\u{1}",
        "https://evil.example/console/",
        "//evil.example/console/",
        "/console/../v1/sessions",
        "/console/%2e%2e/v1/sessions",
        "/v1/sessions",
    ] {
        let r = http
            .post(format!("{base}/console/login"))
            .form(&[("key", read_only.as_str()), ("next", next)])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::SEE_OTHER, "{next:?}");
        assert_eq!(
            r.headers().get(LOCATION).map(|v| v.to_str().unwrap()),
            Some("/console/"),
            "{next:?}"
        );
        assert!(r.headers().get(SET_COOKIE).is_some(), "{next:?}");
    }
    let form = get(
        &http,
        &format!("{base}/console/login?next=https%3A%2F%2Fevil.example%2F"),
        None,
    )
    .await
    .text()
    .await
    .unwrap();
    assert!(
        form.contains("name=\"next\" value=\"/console/\"") && !form.contains("evil"),
        "{form}"
    );
    // The HMAC secret logs in too.
    assert_eq!(login(&http, base, &secret).await.0, StatusCode::SEE_OTHER);

    // A tampered cookie is refused, and says so on the form.
    let (name, value) = cookie.split_once('=').unwrap();
    let mut parts: Vec<&str> = value.split('.').collect();
    let later = (parts[1].parse::<u64>().unwrap() + 3600).to_string();
    parts[1] = &later;
    let forged = format!("{name}={}", parts.join("."));
    let r = get(&http, &format!("{base}/console/"), Some(&forged)).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(
        r.headers()[LOCATION]
            .to_str()
            .unwrap()
            .ends_with("&why=refused")
    );
    let r = get(&http, &format!("{base}/console/login?why=refused"), None).await;
    assert!(r.text().await.unwrap().contains("not accepted"));

    // A read-only key cannot deliver: its secret signs nothing the API accepts.
    let (s, l) = (SessionId::new(), LoopId::new());
    let writer = Client::new(base, Some(&secret));
    assert_eq!(writer.open(s).await.status, StatusCode::CREATED);
    assert_eq!(writer.register(s, l, 8).await.status, StatusCode::CREATED);
    let reader = Client {
        key: Some(read_only_as_hmac.parse::<SignKey>().unwrap()),
        ..writer.clone()
    };
    let r = reader.deliver(&completion(s, l)).await;
    assert_eq!(
        (r.status, r.str("reason")),
        (StatusCode::UNAUTHORIZED, "unauthenticated")
    );
    assert_eq!(reader.end(s, true).await.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        writer.deliver(&completion(s, l)).await.status,
        StatusCode::CREATED
    );

    // A cookie another server issued (its own key: a restart logs everyone out).
    let (_dir2, journal2) = journal_dir();
    let other = Server::start(&Start::redb(&journal2, &[&secret, &read_only]));
    let r = get(&http, &format!("{}/console/", other.url), Some(&cookie)).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_on_loopback_the_console_is_open() {
    let (_dir, journal) = journal_dir();
    let server = Server::start(&Start::redb(&journal, &[]).arg("--insecure-unsigned"));
    let r = get(&browser(), &format!("{}/console/", server.url), None).await;
    assert_eq!(r.status(), StatusCode::OK);
    let body = r.text().await.unwrap();
    assert!(body.contains("redb") && !body.contains("Log out"), "{body}");
    // Every page forbids script and framing.
    let r = get(
        &browser(),
        &format!("{}/console/sessions", server.url),
        None,
    )
    .await;
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    // Its own forms send their origin (a "null" one is refused below).
    assert_eq!(r.headers()["referrer-policy"], "same-origin");

    // With no login, a POST from another site (the operator's browser on a page of
    // theirs) is refused; so is a request naming a Host that is not loopback (a DNS
    // rebinding: the attacker's name resolving to 127.0.0.1).
    let http = browser();
    let base = &server.url;
    for (path, name, value) in [
        ("/console/census", "sec-fetch-site", "cross-site"),
        ("/console/integrity/verify", "sec-fetch-site", "same-site"),
        ("/console/census", "origin", "http://evil.example"),
        ("/console/integrity/verify", "origin", "http://localhost:1"),
        // An origin hidden by the sending page's own referrer policy: the console's
        // pages send theirs (same-origin), so only another site's page sends "null".
        ("/console/census", "origin", "null"),
    ] {
        let r = http
            .post(format!("{base}{path}"))
            .header(name, value)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{path} {name}: {value}");
        let body = r.text().await.unwrap();
        assert!(
            body.contains("notify console") && body.contains("Refused"),
            "{body}"
        );
    }
    for (method, path) in [
        (reqwest::Method::GET, "/console/"),
        (reqwest::Method::POST, "/console/census"),
    ] {
        let r = http
            .request(method, format!("{base}{path}"))
            .header("host", "evil.example")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{path}");
        assert!(r.text().await.unwrap().contains("loopback"));
    }
    // The same origin, as a browser sends it, is let through.
    let r = http
        .post(format!("{base}/console/census"))
        .header("sec-fetch-site", "same-origin")
        .header("origin", base.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let r = http
        .get(format!("{base}/console/"))
        .header("host", "localhost")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

#[test]
fn read_only_keys_alone_do_not_start_a_server() {
    let (_dir, journal) = journal_dir();
    let (read_only, _) = read_only_key();
    let keys = journal.with_extension("keys");
    std::fs::write(&keys, &read_only).unwrap();
    let (code, stderr) = serve_support::run_to_exit(
        &[
            "serve",
            "--journal",
            journal.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--key-file",
            keys.to_str().unwrap(),
        ],
        &[],
    );
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains("read-only"), "{stderr}");
}

/// Listening beyond loopback without TLS, the login form refuses an API secret
/// (`whsec_`), valid or not: typed in there it would cross the network in the clear,
/// where the API only ever sends signatures. A read-only key still logs in.
///
/// On the code before the fix the `whsec_` secret logged in (303 and a cookie).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_plain_http_off_loopback_only_a_read_only_key_logs_in() {
    let (_dir, journal) = journal_dir();
    let secret = new_secret();
    let (read_only, _) = read_only_key();
    let mut start = Start::redb(&journal, &[&secret, &read_only]);
    let listen = start.args.iter().position(|a| a == "127.0.0.1:0").unwrap();
    start.args[listen] = "0.0.0.0:0".into();
    let server = Server::start(&start);
    let port = server.addr.rsplit(':').next().unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let http = browser();

    // The form asks for a read-only key before anything is typed.
    let form = get(&http, &format!("{base}/console/login"), None).await;
    let form = form.text().await.unwrap();
    assert!(form.contains("never type an API secret here"), "{form}");
    let (status, cookie, _) = login(&http, &base, &secret).await;
    assert_eq!(
        (status, cookie),
        (StatusCode::UNAUTHORIZED, None),
        "an API secret"
    );
    let (status, cookie, _) = login(&http, &base, "whsec_bm90IGEga2V5IGF0IGFsbA==").await;
    assert_eq!(
        (status, cookie),
        (StatusCode::UNAUTHORIZED, None),
        "a wrong secret"
    );
    let (status, cookie, _) = login(&http, &base, &read_only).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(cookie.is_some(), "the read-only key logs in");
}
