//! Running the real `notify serve` on loopback and talking to it like a client in
//! another language would: reqwest, requests signed after Standard Webhooks.
// Shared by the tests/serve_*.rs binaries; each uses part of it.
#![allow(dead_code)]

pub(crate) mod one_loop;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use notify_session::serve::SignKey;
use notify_types::{
    CommandId, LoopId, ProcessCompletionNotification, ProcessLifecycleState, ProcessTerminalReason,
    SessionId, Uuid,
};
use reqwest::{Method, StatusCode};
use serde_json::Value;

/// A fresh HMAC secret, `whsec_…`.
pub(crate) fn new_secret() -> String {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(Uuid::new_v4().as_bytes());
    bytes.extend_from_slice(Uuid::new_v4().as_bytes());
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// A fresh ed25519 signing key `whsk_…` and its public key `whpk_…`.
pub(crate) fn new_ed25519() -> (String, String) {
    let mut seed = [0u8; 32];
    seed[..16].copy_from_slice(Uuid::new_v4().as_bytes());
    seed[16..].copy_from_slice(Uuid::new_v4().as_bytes());
    let sk = format!(
        "whsk_{}",
        base64::engine::general_purpose::STANDARD.encode(seed)
    );
    let pk = sk.parse::<SignKey>().unwrap().verify_key_string();
    (sk, pk)
}

/// A running `notify serve`: killed (SIGKILL) when dropped.
pub(crate) struct Server {
    child: Option<Child>,
    pub(crate) addr: String,
    pub(crate) url: String,
    pub(crate) log: Arc<Mutex<Vec<String>>>,
}

/// How to start a server.
#[derive(Clone, Debug)]
pub(crate) struct Start {
    pub(crate) args: Vec<String>,
    pub(crate) envs: Vec<(String, String)>,
}

impl Start {
    /// `notify serve --journal PATH --listen 127.0.0.1:0` with `keys` in a key file
    /// beside the journal.
    pub(crate) fn redb(journal: &Path, keys: &[&str]) -> Self {
        let key_file = journal.with_extension("keys");
        std::fs::write(&key_file, keys.join("\n")).unwrap();
        Self {
            args: vec![
                "serve".into(),
                "--journal".into(),
                journal.display().to_string(),
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--key-file".into(),
                key_file.display().to_string(),
            ],
            envs: Vec::new(),
        }
    }

    /// `notify serve --postgres URL --schema SCHEMA --listen 127.0.0.1:0` (add keys or
    /// `--insecure-unsigned`).
    pub(crate) fn postgres(url: &str, schema: &str) -> Self {
        Self {
            args: [
                "serve",
                "--postgres",
                url,
                "--schema",
                schema,
                "--listen",
                "127.0.0.1:0",
            ]
            .map(String::from)
            .to_vec(),
            envs: Vec::new(),
        }
    }

    /// Adds arguments.
    pub(crate) fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }
}

impl Server {
    /// Starts the binary and waits for its "listening on" line.
    pub(crate) fn start(start: &Start) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_notify"));
        cmd.args(&start.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .env("NOTIFY_LOG", "info")
            .env_remove("NOTIFY_SERVE_KEYS");
        for (k, v) in &start.envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.strip_prefix("notify serve: listening on ") {
                    let _ = tx.send(Some(rest.to_owned()));
                }
                lines.lock().unwrap().push(line);
            }
            let _ = tx.send(None);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .ok()
            .flatten()
            .unwrap_or_else(|| {
                let _ = child.kill();
                panic!("the server did not start: {:#?}", log.lock().unwrap())
            });
        // "127.0.0.1:PORT (http://127.0.0.1:PORT)"
        let (addr, url) = line.split_once(' ').unwrap();
        let url = url.trim_start_matches('(').trim_end_matches(')').to_owned();
        Self {
            child: Some(child),
            addr: addr.to_owned(),
            url,
            log,
        }
    }

    /// The process ID.
    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// SIGKILL, and wait for the process to be gone.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, and wait for the exit status.
    pub(crate) fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        child.wait().unwrap()
    }

    /// The log so far.
    pub(crate) fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Drops a test's PostgreSQL schema.
pub(crate) async fn drop_schema(url: &str, schema: &str) {
    pg_client(url)
        .await
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

/// A plain connection to the test database (its driver task spawned).
pub(crate) async fn pg_client(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// Runs the binary to its exit (for refusals at start).
pub(crate) fn run_to_exit(args: &[&str], envs: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_notify"));
    cmd.args(args).env_remove("NOTIFY_SERVE_KEYS");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The current Unix time in seconds.
pub(crate) fn now() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
}

/// An answer: status, headers, JSON body (Null when none).
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: reqwest::header::HeaderMap,
    pub(crate) body: Value,
    pub(crate) version: reqwest::Version,
}

impl Answer {
    /// The body's string member `k`.
    pub(crate) fn str(&self, k: &str) -> &str {
        self.body[k].as_str().unwrap_or("")
    }
}

/// A signing client of one server.
#[derive(Clone)]
pub(crate) struct Client {
    pub(crate) http: reqwest::Client,
    pub(crate) base: String,
    pub(crate) key: Option<SignKey>,
    /// Added to the timestamp (to test the tolerance).
    pub(crate) skew: i64,
    /// Sent with every request besides the signature (e.g. `traceparent`).
    pub(crate) headers: Vec<(String, String)>,
}

impl Client {
    /// A client of `base` signing with `key` (`whsec_`/`whsk_`), or unsigned.
    pub(crate) fn new(base: &str, key: Option<&str>) -> Self {
        Self::with_http(base, key, reqwest::Client::builder())
    }

    /// The same with a client builder of the caller's.
    pub(crate) fn with_http(base: &str, key: Option<&str>, http: reqwest::ClientBuilder) -> Self {
        Self {
            http: http.timeout(Duration::from_secs(60)).build().unwrap(),
            base: base.trim_end_matches('/').to_owned(),
            key: key.map(|k| k.parse().unwrap()),
            skew: 0,
            headers: Vec::new(),
        }
    }

    /// Sends `method path` with `body`, signed with `id` (unless unsigned).
    pub(crate) async fn send(&self, method: Method, path: &str, id: &str, body: Vec<u8>) -> Answer {
        self.try_send(method, path, id, body).await.unwrap()
    }

    /// As `send`, with the transport error.
    pub(crate) async fn try_send(
        &self,
        method: Method,
        path: &str,
        id: &str,
        body: Vec<u8>,
    ) -> Result<Answer, reqwest::Error> {
        let url = if path.starts_with("http") {
            path.to_owned()
        } else {
            format!("{}{path}", self.base)
        };
        let req = self.headers(self.http.request(method, url), id, &body);
        let resp = req.body(body).send().await?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let version = resp.version();
        let bytes = resp.bytes().await?;
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        Ok(Answer {
            status,
            headers,
            body,
            version,
        })
    }

    /// `req` with this client's headers and, unless unsigned, the signature of `body`
    /// under `id`.
    fn headers(
        &self,
        mut req: reqwest::RequestBuilder,
        id: &str,
        body: &[u8],
    ) -> reqwest::RequestBuilder {
        for (name, value) in &self.headers {
            req = req.header(name, value);
        }
        if let Some(key) = &self.key {
            let ts = now() + self.skew;
            req = req
                .header("webhook-id", id)
                .header("webhook-timestamp", ts.to_string())
                .header("webhook-signature", key.sign(id, ts, body));
        }
        req
    }

    /// Opens loop `l`'s server-sent-events stream (`query`: its query string) and
    /// asserts it opened (200, `text/event-stream`).
    pub(crate) async fn stream(&self, s: SessionId, l: LoopId, query: &str) -> reqwest::Response {
        let url = format!(
            "{}/v1/sessions/{s}/loops/{l}/notifications/stream?{query}",
            self.base
        );
        let req = self.headers(self.http.get(url), &format!("stream:{l}"), b"");
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        resp
    }

    /// `PUT /v1/sessions/{s}`.
    pub(crate) async fn open(&self, s: SessionId) -> Answer {
        self.send(
            Method::PUT,
            &format!("/v1/sessions/{s}"),
            &format!("open:{s}"),
            Vec::new(),
        )
        .await
    }

    /// `PUT …/loops/{l}` with `capacity`.
    pub(crate) async fn register(&self, s: SessionId, l: LoopId, capacity: usize) -> Answer {
        self.send(
            Method::PUT,
            &format!("/v1/sessions/{s}/loops/{l}"),
            &format!("register:{s}:{l}"),
            format!("{{\"capacity\":{capacity}}}").into_bytes(),
        )
        .await
    }

    /// `POST …/completions` with the notification's wire form.
    pub(crate) async fn deliver(&self, n: &ProcessCompletionNotification) -> Answer {
        self.deliver_bytes(n.session_id, &n.command_id.to_string(), n.encode())
            .await
    }

    /// `POST …/completions` with these bytes and this ID.
    pub(crate) async fn deliver_bytes(&self, s: SessionId, id: &str, body: Vec<u8>) -> Answer {
        self.send(
            Method::POST,
            &format!("/v1/sessions/{s}/completions"),
            id,
            body,
        )
        .await
    }

    /// A long poll.
    pub(crate) async fn poll(&self, s: SessionId, l: LoopId, query: &str) -> Answer {
        self.send(
            Method::GET,
            &format!("/v1/sessions/{s}/loops/{l}/notifications?{query}"),
            &format!("poll:{l}"),
            Vec::new(),
        )
        .await
    }

    /// Acknowledges `c`.
    pub(crate) async fn ack(&self, s: SessionId, l: LoopId, c: &str) -> Answer {
        self.send(
            Method::POST,
            &format!("/v1/sessions/{s}/loops/{l}/notifications/{c}/ack"),
            &format!("ack:{c}"),
            Vec::new(),
        )
        .await
    }

    /// Ends the session.
    pub(crate) async fn end(&self, s: SessionId, abandon: bool) -> Answer {
        let body = if abandon {
            r#"{"if_pending":"abandon"}"#
        } else {
            r#"{"if_pending":"refuse"}"#
        };
        self.send(
            Method::POST,
            &format!("/v1/sessions/{s}/end"),
            &format!("end:{s}"),
            body.as_bytes().to_vec(),
        )
        .await
    }
}

/// An answer's head (status line and headers) as read off a raw connection: up to its
/// blank line, or what came before the connection closed.
pub(crate) async fn read_head(stream: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt as _;
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

/// The command IDs a poll answer lists, in order.
pub(crate) fn polled(answer: &Answer) -> Vec<(String, u64)> {
    answer.body["notifications"]
        .as_array()
        .unwrap_or_else(|| panic!("not a poll answer: {answer:?}"))
        .iter()
        .map(|n| {
            (
                n["command_id"].as_str().unwrap().to_owned(),
                n["delivery"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// A valid completion for `s`/`l`.
pub(crate) fn completion(s: SessionId, l: LoopId) -> ProcessCompletionNotification {
    ProcessCompletionNotification {
        command_id: CommandId::new(),
        session_id: s,
        loop_id: l,
        process_handle: "build-42".into(),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }
}

/// A temporary directory and a journal path in it.
pub(crate) fn journal_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.redb");
    (dir, path)
}

/// The SHA-256 (hex) of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
