//! A real headless Chromium for the console's browser tests: chromedriver started on
//! a free loopback port, Chromium with a fresh profile and the flags a closed network
//! needs, driven through WebDriver (fantoccini). Missing binaries FAIL the test with
//! what to install; they never skip it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};

/// Where Chromium is (`NOTIFY_CHROMIUM` overrides).
fn chromium() -> PathBuf {
    std::env::var_os("NOTIFY_CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

/// Where chromedriver is (`NOTIFY_CHROMEDRIVER` overrides).
fn chromedriver() -> PathBuf {
    std::env::var_os("NOTIFY_CHROMEDRIVER")
        .map_or_else(|| PathBuf::from("/usr/bin/chromedriver"), PathBuf::from)
}

/// A running chromedriver and a browser session in it; both end when dropped.
pub(crate) struct Browser {
    pub(crate) client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// chromedriver's legacy log endpoint (W3C WebDriver has none): the browser's
/// console messages since the last call.
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/se/log",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type":"browser"}"#.to_owned()))
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session.
    pub(crate) async fn start() -> Self {
        for (what, path, package) in [
            ("Chromium", chromium(), "chromium"),
            ("chromedriver", chromedriver(), "chromium-driver"),
        ] {
            assert!(
                path.exists(),
                "{what} is missing at {}: the console's browser tests need a real browser \
                 (apt-get install -y {package}, or set NOTIFY_CHROMIUM / NOTIFY_CHROMEDRIVER)",
                path.display()
            );
        }
        let port = free_port();
        let driver = Command::new(chromedriver())
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let profile = tempfile::tempdir().unwrap();
        let caps = json!({
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": chromium().display().to_string(),
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage", "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
        });
        let Value::Object(caps) = caps else {
            unreachable!()
        };
        let mut last = None;
        for _ in 0..100 {
            match ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&format!("http://127.0.0.1:{port}"))
                .await
            {
                Ok(client) => {
                    return Self {
                        client,
                        driver,
                        _profile: profile,
                    };
                }
                Err(e) => {
                    last = Some(e.to_string());
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        panic!("no WebDriver session from chromedriver on port {port}: {last:?}");
    }

    /// The page's HTML now.
    pub(crate) async fn source(&self) -> String {
        self.client.source().await.unwrap()
    }

    /// The page's HTML once it contains `needle` (a click that submits a form returns
    /// before the next page has loaded); panics with the page after 10 s.
    pub(crate) async fn wait_for(&self, needle: &str) -> String {
        let mut page = String::new();
        for _ in 0..100 {
            page = self.source().await;
            if page.contains(needle) {
                return page;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{needle:?} did not appear within 10 s:\n{page}");
    }

    /// Goes to `url` and answers the page's HTML.
    pub(crate) async fn open(&self, url: &str) -> String {
        self.client.goto(url).await.unwrap();
        self.source().await
    }

    /// The browser console's messages at level SEVERE since the last call (a page's
    /// errors: failed loads, CSP refusals, script errors).
    pub(crate) async fn console_errors(&self) -> Vec<String> {
        let log = self.client.issue_cmd(BrowserLog).await.unwrap();
        log.as_array()
            .map(|entries| {
                entries
                    .iter()
                    .filter(|e| e["level"] == "SEVERE")
                    .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Saves a screenshot of the page as `name`.png: into the repository's
    /// `docs/console/` when `NOTIFY_CONSOLE_SCREENSHOTS=1`, else under the target
    /// directory (`tmp/console-screenshots/`).
    pub(crate) async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }
}

/// Where screenshots go.
pub(crate) fn screenshot_dir() -> PathBuf {
    if std::env::var("NOTIFY_CONSOLE_SCREENSHOTS").as_deref() == Ok("1") {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/console")
    } else {
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots")
    }
}
