//! `notify serve` under load (`cargo bench -p notify-testkit --features serve --bench
//! serve`, after `cargo build --profile bench -p notify-session --features serve --bin
//! notify`; `cargo xtask bench` does both): a load
//! generator on hyper drives the real binary over loopback with signed completions
//! (each a new command ID, HTTP/1.1 keep-alive, one request in flight per
//! connection) at 1, 64 and 256 connections for 5 s each, and the same number of
//! tasks calls `notify_process_completion` in process on a redb journal in the same
//! run: completions/s and p50/p99 latency side by side. Then the server's resident
//! memory per idle connection (1,000 connections, each after one request).
//!
//! Both sides share the machine's cores with the generator, so the HTTP figures include
//! the generator's own cost: per request a new command ID, the encoding, the HMAC and
//! hyper's client (a third to a half of the server's CPU per request). Building and
//! signing every request before the clock starts was tried and is worse: a level's
//! requests held in memory (over a GB at 64 connections) cost more in cache misses and
//! page faults than the signing they save.
//!
//! Figures for `cargo xtask bench` (`notify_testkit::bench::metric`):
//! `serve/{http,in_process}/N/{per_s,p50_ms,p99_ms}` for N connections (tasks), and
//! `serve/idle_connection_kib`.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use notify_journal::{RedbJournal, RedbOptions};
use notify_loop::LoopConfig;
use notify_session::Session;
use notify_session::serve::SignKey;
use notify_testkit::bench::{metric, target_dir};
use notify_types::{
    CommandId, LoopId, ProcessCompletionNotification, ProcessLifecycleState, ProcessTerminalReason,
    SessionId,
};

const RUN: Duration = Duration::from_secs(5);
const LEVELS: [usize; 3] = [1, 64, 256];

fn completion(s: SessionId, l: LoopId) -> ProcessCompletionNotification {
    ProcessCompletionNotification {
        command_id: CommandId::new(),
        session_id: s,
        loop_id: l,
        process_handle: "build-42".into(),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }
}

fn now() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
}

struct Figures {
    per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn figures(mut lat: Vec<Duration>, elapsed: Duration) -> Figures {
    lat.sort();
    let pick = |q: f64| {
        let i = ((lat.len() as f64 * q) as usize).min(lat.len().saturating_sub(1));
        lat.get(i).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    Figures {
        per_s: lat.len() as f64 / elapsed.as_secs_f64(),
        p50_ms: pick(0.50),
        p99_ms: pick(0.99),
    }
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(addr: &str) -> Sender {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

async fn send(
    sender: &mut Sender,
    key: &SignKey,
    method: &str,
    path: &str,
    id: &str,
    body: Vec<u8>,
) -> u16 {
    let ts = now();
    let sig = key.sign(id, ts, &body);
    let req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "127.0.0.1")
        .header("webhook-id", id)
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", sig)
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    sender.ready().await.unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let _ = resp.into_body().collect().await.unwrap();
    status
}

async fn http_level(addr: &str, key: &SignKey, conns: usize) -> Figures {
    let s = SessionId::new();
    let mut admin = connect(addr).await;
    assert_eq!(
        send(
            &mut admin,
            key,
            "PUT",
            &format!("/v1/sessions/{s}"),
            &s.to_string(),
            Vec::new()
        )
        .await,
        201
    );
    let mut loops = Vec::new();
    for _ in 0..conns {
        let l = LoopId::new();
        let status = send(
            &mut admin,
            key,
            "PUT",
            &format!("/v1/sessions/{s}/loops/{l}"),
            &l.to_string(),
            br#"{"capacity":65536}"#.to_vec(),
        )
        .await;
        assert_eq!(status, 201);
        loops.push(l);
    }
    let start = Instant::now();
    let deadline = start + RUN;
    let mut tasks = Vec::new();
    for l in loops {
        let (addr, key) = (addr.to_owned(), key.clone());
        tasks.push(tokio::spawn(async move {
            let mut sender = connect(&addr).await;
            let path = format!("/v1/sessions/{s}/completions");
            let mut lat = Vec::new();
            while Instant::now() < deadline {
                let n = completion(s, l);
                let t = Instant::now();
                let status = send(
                    &mut sender,
                    &key,
                    "POST",
                    &path,
                    &n.command_id.to_string(),
                    n.encode(),
                )
                .await;
                assert_eq!(status, 201);
                lat.push(t.elapsed());
            }
            lat
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    figures(lat, start.elapsed())
}

async fn in_process_level(journal: &Arc<RedbJournal>, conns: usize) -> Figures {
    let session = Session::new(SessionId::new(), Arc::clone(journal));
    let start = Instant::now();
    let deadline = start + RUN;
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let l = LoopId::new();
        let consumer = session
            .register_loop(LoopConfig::new(session.id(), l).capacity(65_536))
            .unwrap();
        let session = session.clone();
        tasks.push(tokio::spawn(async move {
            let _consumer = consumer;
            let mut lat = Vec::new();
            while Instant::now() < deadline {
                let n = completion(session.id(), l);
                let t = Instant::now();
                session.notify_process_completion(n).await.unwrap();
                lat.push(t.elapsed());
            }
            lat
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    figures(lat, start.elapsed())
}

/// The `notify` binary, built beside this bench (the bench profile's directory) before
/// it runs: a bench of another package than the binary's cannot have cargo build it.
fn notify_bin() -> std::path::PathBuf {
    let bin = target_dir()
        .join("release")
        .join(format!("notify{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --profile bench -p notify-session --features serve --bin notify` first (cargo xtask bench does)",
        bin.display()
    );
    bin
}

/// Records one side's figures at one connection count.
fn record(side: &str, conns: usize, f: &Figures) {
    metric(&format!("serve/{side}/{conns}/per_s"), f.per_s, "/s");
    metric(&format!("serve/{side}/{conns}/p50_ms"), f.p50_ms, "ms");
    metric(&format!("serve/{side}/{conns}/p99_ms"), f.p99_ms, "ms");
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let secret = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    let key: SignKey = secret.parse().unwrap();
    let mut child = Command::new(notify_bin())
        .args(["serve", "--journal"])
        .arg(dir.path().join("serve.redb"))
        .args(["--listen", "127.0.0.1:0", "--max-connections", "4096"])
        .env("NOTIFY_SERVE_KEYS", secret)
        .env("NOTIFY_LOG", "warn")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("notify serve: listening on ") {
                let _ = tx.send(rest.split(' ').next().unwrap().to_owned());
            }
        }
    });
    let addr = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    let journal = Arc::new(
        RedbJournal::open(dir.path().join("inproc.redb"), RedbOptions::default()).unwrap(),
    );

    println!(
        "serve: signed completions over HTTP/1.1 vs in-process notify_process_completion (redb, {}s each)",
        RUN.as_secs()
    );
    println!(
        "| connections | HTTP completions/s | HTTP p50 ms | HTTP p99 ms | in-process/s | in-process p50 ms | in-process p99 ms | HTTP / in-process |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for conns in LEVELS {
        let http = http_level(&addr, &key, conns).await;
        let local = in_process_level(&journal, conns).await;
        println!(
            "| {conns} | {:.0} | {:.2} | {:.2} | {:.0} | {:.2} | {:.2} | {:.2} |",
            http.per_s,
            http.p50_ms,
            http.p99_ms,
            local.per_s,
            local.p50_ms,
            local.p99_ms,
            http.per_s / local.per_s
        );
        record("http", conns, &http);
        record("in_process", conns, &local);
    }

    // Memory per idle connection: 1,000 connections, each after one request.
    let pid = child.id();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_kib(pid);
    let mut idle = Vec::new();
    for _ in 0..1000 {
        let mut sender = connect(&addr).await;
        let status = send(&mut sender, &key, "GET", "/healthz", "x", Vec::new()).await;
        assert_eq!(status, 200);
        idle.push(sender);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib(pid);
    metric(
        "serve/idle_connection_kib",
        (after.saturating_sub(before)) as f64 / 1000.0,
        "KiB",
    );
    println!(
        "idle connections: 1000 held open; server RSS {before} KiB -> {after} KiB: {:.1} KiB per idle connection",
        (after.saturating_sub(before)) as f64 / 1000.0
    );
    drop(idle);
    let _ = child.kill();
    let _ = child.wait();
}
