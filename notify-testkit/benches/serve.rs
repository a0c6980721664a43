//! `notify serve` under load (`cargo bench -p notify-testkit --features serve --bench
//! serve`, after `cargo build --profile bench -p notify-session --features serve --bin
//! notify`; `cargo xtask bench` does both; needs `wrk`, Debian's package of that name):
//! wrk, a separate process, drives the real binary over loopback with signed
//! completions (each a new command ID, HTTP/1.1 keep-alive, one request in flight per
//! connection) at 1, 64 and 256 connections for 5 s each, and the same number of tasks
//! calls `notify_process_completion` in process on a redb journal in the same run, the
//! two sides taking turns for three rounds (the median round is reported):
//! completions/s and p50/p99 latency side by side. Then the server's resident memory
//! per idle connection (1,000 connections, each after one request). `SERVE_LEVELS=64`
//! runs only the levels named.
//!
//! Both sides share the machine's two cores with the generator. Every request is signed
//! before its level's clock starts (a file of requests per wrk thread, which its Lua
//! script sends in order), so what the generator costs during the level is wrk's own
//! HTTP work. A generator on hyper in this process, signing as it went, took a third
//! to a half of the server's CPU per request, and measured 0.32× at 64 connections
//! where wrk measured 0.4×.
//!
//! The HTTP figures are taken over a window inside wrk's run, from 1.5 s to 4.5 s
//! after it starts: completions/s are the server's answers (its
//! `notify_serve_requests_total`) over the window, and the CPU times are the
//! processes' over the same window. wrk's own count would also take in what its first
//! thread sends while the second still loads its file (about 0.15 s, before wrk's
//! clock starts: 1 to 2% of a level's requests), and its CPU time that loading. The
//! latencies are wrk's, over its whole run.
//!
//! Where the CPU goes, from `/proc` (each figure per completion, of the median round):
//! the server's CPU time and its journal threads' share of it, wrk's own, and the
//! in-process side's. Each level also drives a static answer (`GET /healthz`, one
//! round): what the HTTP stack and the generator cost before any work. Printed after
//! the table: each level's CPU-bound ceiling, the machine's cores over the
//! generator's and the server's CPU time per completion, the journal's groups on each
//! side (commits per second, appends per commit: the server's from its
//! `notify_journal_commit_batch_size` over the window, the in-process journal's from
//! its `commit_stats`) and how long each side's journal threads waited for a core while
//! runnable (their `schedstat`), the ratio of each round (an HTTP round against the
//! in-process round after it, so both met nearly the same disk), and its floor.
//!
//! Figures for `cargo xtask bench` (`notify_testkit::bench::metric`):
//! `serve/{http,in_process}/N/{per_s,p50_ms,p99_ms,cpu_us,appends_per_commit,journal_wait_ms_per_s}`
//! for N connections (tasks),
//! `serve/http/N/{journal_cpu_us,generator_cpu_us}`,
//! `serve/floor/N/{per_s,cpu_us,generator_cpu_us}` and `serve/idle_connection_kib`.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
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
/// Rounds per level, the two sides taking turns: the median round is reported.
const ROUNDS: usize = 3;

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
    /// CPU time per completion (user and system), in µs: the server's over HTTP, the
    /// bench process's in process.
    cpu_us: f64,
    /// Over HTTP: the server's journal threads' share of `cpu_us`.
    journal_cpu_us: f64,
    /// Over HTTP: wrk's CPU time per request, in µs.
    generator_cpu_us: f64,
    /// The journal's mean group: appends per commit (the server's, over HTTP).
    appends_per_commit: f64,
    /// How long the journal's threads waited for a core while runnable, in ms per
    /// second of the window (the kernel's `schedstat`; 0 where it keeps none).
    journal_wait_ms_per_s: f64,
}

/// The round with the median rate (its latencies with it).
fn median(mut rounds: Vec<Figures>) -> Figures {
    rounds.sort_by(|a, b| a.per_s.total_cmp(&b.per_s));
    rounds.swap_remove(rounds.len() / 2)
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
        cpu_us: 0.0,
        journal_cpu_us: 0.0,
        generator_cpu_us: 0.0,
        appends_per_commit: 0.0,
        journal_wait_ms_per_s: 0.0,
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

/// wrk's script: each of its threads sends its own file of requests signed before the
/// clock starts, in order, one each; `done` prints the figures on one line.
const WRK_SCRIPT: &str = r#"
local threads, next = {}, 1
function setup(thread)
  thread:set("id", next)
  table.insert(threads, thread)
  next = next + 1
end
function init(args)
  local f = assert(io.open(args[1] .. "." .. id, "rb"))
  local data = f:read("*a")
  f:close()
  reqs, sent = {}, 0
  local pos = 1
  while true do
    local s = string.find(data, "\0", pos, true)
    if not s then break end
    reqs[#reqs + 1] = string.sub(data, pos, s - 1)
    pos = s + 1
  end
  count = #reqs
end
function request()
  sent = sent + 1
  return reqs[sent] or reqs[count]
end
function done(summary, latency, requests)
  local over = 0
  for _, t in ipairs(threads) do
    local sent, count = t:get("sent"), t:get("count")
    if sent > count then over = over + sent - count end
  end
  local e = summary.errors
  io.write(string.format("NOTIFY-WRK %d %d %d %d %d %d %d %d %d %d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect, e.read, e.write, e.status, e.timeout, over))
end
"#;

/// The most completions one level can send: every request is signed beforehand, one
/// new command ID each, so a level that ran out would send duplicates (and fails).
const SIGNED_PER_LEVEL: usize = 600_000;

/// One level over HTTP: wrk (a separate process, from the system's packages) drives
/// `conns` keep-alive connections for [`RUN`], one request in flight on each, every
/// request a completion with a new command ID, signed before the clock starts and
/// spread over one loop per connection.
async fn http_level(addr: &str, key: &SignKey, conns: usize, dir: &Path, server: u32) -> Figures {
    let s = SessionId::new();
    let mut admin = connect(addr).await;
    assert_eq!(
        send(
            &mut admin,
            key,
            "PUT",
            &format!("/v1/sessions/{s}"),
            &format!("open:{s}"),
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
            &format!("register:{s}:{l}"),
            br#"{"capacity":65536}"#.to_vec(),
        )
        .await;
        assert_eq!(status, 201);
        loops.push(l);
    }
    let threads = conns.min(2);
    let prefix = dir.join(format!("requests-{conns}"));
    let path = format!("/v1/sessions/{s}/completions");
    let ts = now();
    for t in 1..=threads {
        let mut out = Vec::with_capacity(SIGNED_PER_LEVEL / threads * 700);
        for i in 0..SIGNED_PER_LEVEL / threads {
            let n = completion(s, loops[(i * threads + t) % loops.len()]);
            let (id, body) = (n.command_id.to_string(), n.encode());
            let sig = key.sign(&id, ts, &body);
            write!(
                out,
                "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nwebhook-id: {id}\r\nwebhook-timestamp: {ts}\r\nwebhook-signature: {sig}\r\ncontent-length: {}\r\n\r\n",
                body.len()
            )
            .unwrap();
            out.extend_from_slice(&body);
            out.push(0);
        }
        std::fs::write(format!("{}.{t}", prefix.display()), out).unwrap();
    }
    let script = dir.join("notify.lua");
    std::fs::write(&script, WRK_SCRIPT).unwrap();
    let mut wrk = Command::new("wrk");
    wrk.arg(format!("-t{threads}"))
        .arg(format!("-c{conns}"))
        .arg(format!("-d{}s", RUN.as_secs()))
        .args(["--timeout", "30s", "-s"])
        .arg(&script)
        .arg(format!("http://{addr}"))
        .arg("--")
        .arg(&prefix);
    let (stdout, took, window) = run_wrk(wrk, addr, server, COMPLETIONS).await;
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("NOTIFY-WRK "))
        .unwrap_or_else(|| panic!("wrk printed no figures: {stdout}"));
    let v: Vec<u64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
    // wrk's own count and clock (the first two) give way to the window's.
    let [_, _, p50, p99, connect, read, write, status, timeout, over] = v[..] else {
        panic!("wrk's figures: {line}")
    };
    assert_eq!(
        (connect, read, write, status, timeout),
        (0, 0, 0, 0, 0),
        "wrk met errors (connect, read, write, non-2xx, timeout): {stdout}"
    );
    assert_eq!(
        over, 0,
        "a level ran out of signed requests: raise SIGNED_PER_LEVEL"
    );
    for t in 1..=threads {
        let _ = std::fs::remove_file(format!("{}.{t}", prefix.display()));
    }
    window.figures(took, p50, p99)
}

/// The series of `notify_serve_requests_total` a level counts: signed completions
/// answered 201.
const COMPLETIONS: &str =
    r#"route="/v1/sessions/{session_id}/completions",method="POST",status="201""#;
/// The floor's series: `GET /healthz` answered 200.
const HEALTHZ: &str = r#"route="/healthz",method="GET",status="200""#;
/// When the window starts, after wrk is started, and how long it lasts.
const WINDOW_START: Duration = Duration::from_millis(1500);
const WINDOW: Duration = Duration::from_secs(3);

/// What a window saw, or the totals at one reading: the server's answers in the series,
/// its journal's commits and the appends they answered, and the CPU time (clock ticks)
/// of the server, its journal threads and wrk.
#[derive(Clone, Copy)]
struct Counts {
    answered: u64,
    commits: u64,
    appends: u64,
    server: u64,
    journal: u64,
    /// The journal threads' time runnable but not running, in ns.
    journal_wait: u64,
    generator: u64,
}

impl Counts {
    /// What happened between `earlier` and these. A process gone before the later
    /// reading reads 0 (its run failed, which the caller reports).
    fn since(self, earlier: Self) -> Self {
        Self {
            answered: self.answered.saturating_sub(earlier.answered),
            commits: self.commits.saturating_sub(earlier.commits),
            appends: self.appends.saturating_sub(earlier.appends),
            server: self.server.saturating_sub(earlier.server),
            journal: self.journal.saturating_sub(earlier.journal),
            journal_wait: self.journal_wait.saturating_sub(earlier.journal_wait),
            generator: self.generator.saturating_sub(earlier.generator),
        }
    }

    /// A level's figures from a window of `took`: the rate and the CPU times from
    /// the window, the latencies (µs) from wrk.
    fn figures(&self, took: Duration, p50: u64, p99: u64) -> Figures {
        let per = |ticks: u64| ticks as f64 / ticks_per_s() * 1e6 / self.answered as f64;
        Figures {
            per_s: self.answered as f64 / took.as_secs_f64(),
            p50_ms: p50 as f64 / 1000.0,
            p99_ms: p99 as f64 / 1000.0,
            cpu_us: per(self.server),
            journal_cpu_us: per(self.journal),
            generator_cpu_us: per(self.generator),
            appends_per_commit: self.appends as f64 / self.commits.max(1) as f64,
            journal_wait_ms_per_s: self.journal_wait as f64 / 1e6 / took.as_secs_f64(),
        }
    }
}

/// One reading while wrk runs: when, and the totals so far.
async fn reading(metrics: &mut Sender, server: u32, wrk: u32, series: &str) -> (Instant, Counts) {
    let at = Instant::now();
    let (server_ticks, (journal, journal_wait), generator) =
        (cpu_ticks(server), journal_threads(server), cpu_ticks(wrk));
    let req = hyper::Request::get("/metrics")
        .header("host", "127.0.0.1")
        .body(Full::new(Bytes::new()))
        .unwrap();
    metrics.ready().await.unwrap();
    let resp = metrics.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&text);
    // The sum of the series `name{labels…}` whose labels start with `labels`.
    let total = |name: &str, labels: &str| -> u64 {
        text.lines()
            .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
            .filter(|l| l.starts_with(labels))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    let counts = Counts {
        answered: total("notify_serve_requests_total", series),
        commits: total("notify_journal_commit_batch_size_count", ""),
        appends: total("notify_journal_commit_batch_size_sum", ""),
        server: server_ticks,
        journal,
        journal_wait,
        generator,
    };
    (at, counts)
}

/// Runs wrk to its end: its standard output, and how long the window inside its run
/// lasted and what it saw of the server's answers in `series` and of the CPU times.
async fn run_wrk(
    mut wrk: Command,
    addr: &str,
    server: u32,
    series: &str,
) -> (String, Duration, Counts) {
    let mut metrics = connect(addr).await;
    let child = wrk
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("wrk, the load generator (Debian's package `wrk`), must be installed");
    let pid = child.id();
    tokio::time::sleep(WINDOW_START).await;
    let (start, first) = reading(&mut metrics, server, pid, series).await;
    tokio::time::sleep(WINDOW).await;
    let (end, last) = reading(&mut metrics, server, pid, series).await;
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "wrk failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let window = last.since(first);
    assert!(window.answered > 0, "no answers in the window: {stdout}");
    (stdout, end - start, window)
}

/// The floor at `conns` connections: wrk asks for a static answer (`GET /healthz`,
/// unsigned, no script), one round of [`RUN`].
async fn floor_level(addr: &str, conns: usize, server: u32) -> Figures {
    let mut wrk = Command::new("wrk");
    wrk.arg(format!("-t{}", conns.min(2)))
        .arg(format!("-c{conns}"))
        .arg(format!("-d{}s", RUN.as_secs()))
        .args(["--timeout", "30s"])
        .arg(format!("http://{addr}/healthz"));
    let (stdout, took, window) = run_wrk(wrk, addr, server, HEALTHZ).await;
    assert!(
        !stdout.contains("Non-2xx") && !stdout.contains("Socket errors"),
        "wrk met errors on /healthz: {stdout}"
    );
    window.figures(took, 0, 0)
}

async fn in_process_level(journal: &Arc<RedbJournal>, conns: usize) -> Figures {
    let session = Session::new(SessionId::new(), Arc::clone(journal));
    let commits_before = journal.commit_stats();
    let cpu_before = cpu_ticks(std::process::id());
    let (_, waited_before) = journal_threads(std::process::id());
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
    let cpu = cpu_ticks(std::process::id()) - cpu_before;
    let (_, waited) = journal_threads(std::process::id());
    let completions = lat.len() as f64;
    let took = start.elapsed();
    let mut f = figures(lat, took);
    f.journal_wait_ms_per_s =
        waited.saturating_sub(waited_before) as f64 / 1e6 / took.as_secs_f64();
    f.cpu_us = cpu as f64 / ticks_per_s() * 1e6 / completions;
    let commits = journal.commit_stats();
    f.appends_per_commit = (commits.appends - commits_before.appends) as f64
        / (commits.commits - commits_before.commits).max(1) as f64;
    f
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
    metric(&format!("serve/{side}/{conns}/cpu_us"), f.cpu_us, "µs");
    metric(
        &format!("serve/{side}/{conns}/appends_per_commit"),
        f.appends_per_commit,
        "appends",
    );
    metric(
        &format!("serve/{side}/{conns}/journal_wait_ms_per_s"),
        f.journal_wait_ms_per_s,
        "ms/s",
    );
}

/// Records a level's CPU figures over HTTP (the server's is [`record`]'s) and its
/// floor's, and returns the line that says what they bound.
fn budget(
    conns: usize,
    http: &Figures,
    local: &Figures,
    floor: &Figures,
    ratios: &[f64],
) -> String {
    metric(
        &format!("serve/http/{conns}/journal_cpu_us"),
        http.journal_cpu_us,
        "µs",
    );
    metric(
        &format!("serve/http/{conns}/generator_cpu_us"),
        http.generator_cpu_us,
        "µs",
    );
    metric(&format!("serve/floor/{conns}/per_s"), floor.per_s, "/s");
    metric(&format!("serve/floor/{conns}/cpu_us"), floor.cpu_us, "µs");
    metric(
        &format!("serve/floor/{conns}/generator_cpu_us"),
        floor.generator_cpu_us,
        "µs",
    );
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get) as f64;
    let ceiling = cores * 1e6 / (http.generator_cpu_us + http.cpu_us);
    let rounds: Vec<String> = ratios.iter().map(|r| format!("{r:.2}×")).collect();
    format!(
        "{conns} connection{}: HTTP / in-process by round (each HTTP round against the in-process round after it): {}. A completion cost wrk {:.1} µs and the server {:.1} µs of CPU ({:.1} µs in its journal threads): on {cores} cores a CPU-bound ceiling of {ceiling:.0}/s, {:.2}× of in-process (which spent {:.1} µs per completion). The server's journal committed {:.0} groups/s of {:.1} appends, its threads waiting for a core {:.0} ms a second; in process {:.0}/s of {:.1}, waiting {:.0} ms a second. A static answer (GET /healthz, {:.0}/s) cost wrk {:.1} µs and the server {:.1} µs.",
        if conns == 1 { "" } else { "s" },
        rounds.join(", "),
        http.generator_cpu_us,
        http.cpu_us,
        http.journal_cpu_us,
        ceiling / local.per_s,
        local.cpu_us,
        http.per_s / http.appends_per_commit,
        http.appends_per_commit,
        http.journal_wait_ms_per_s,
        local.per_s / local.appends_per_commit,
        local.appends_per_commit,
        local.journal_wait_ms_per_s,
        floor.per_s,
        floor.generator_cpu_us,
        floor.cpu_us,
    )
}

/// The fields of a `/proc/.../stat` file after the command's name (in parentheses):
/// utime and stime are the 12th and 13th of them.
fn stat_fields(path: &str) -> Vec<u64> {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    rest.split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect()
}

/// The sum of fields `i` and `i + 1` (0 where missing).
fn pair(f: &[u64], i: usize) -> u64 {
    f.get(i).copied().unwrap_or(0) + f.get(i + 1).copied().unwrap_or(0)
}

/// A process's CPU time so far (user and system), in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    pair(&stat_fields(&format!("/proc/{pid}/stat")), 11)
}

/// The CPU time so far of a process's journal threads (`notify-journal-…`: the writer
/// and its helpers), in clock ticks, and how long they have waited for a core while
/// runnable, in ns (the second field of each thread's `schedstat`; 0 where the kernel
/// keeps none).
fn journal_threads(pid: u32) -> (u64, u64) {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return (0, 0);
    };
    tasks
        .filter_map(Result::ok)
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|c| c.starts_with("notify-journal"))
        })
        .map(|t| {
            let ticks = pair(&stat_fields(&t.path().join("stat").to_string_lossy()), 11);
            let waited = std::fs::read_to_string(t.path().join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().nth(1)?.parse().ok())
                .unwrap_or(0);
            (ticks, waited)
        })
        .fold((0, 0), |(t, w), (ticks, waited)| (t + ticks, w + waited))
}

/// Clock ticks per second, as `/proc` counts CPU time: `USER_HZ`, 100 on Linux
/// whatever the kernel's own tick.
fn ticks_per_s() -> f64 {
    100.0
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
        "serve: signed completions over HTTP/1.1 (wrk) vs in-process notify_process_completion (redb, {}s each, medians of {ROUNDS} rounds)",
        RUN.as_secs()
    );
    println!(
        "| connections | HTTP completions/s | HTTP p50 ms | HTTP p99 ms | server CPU µs / completion | wrk CPU µs / request | in-process/s | in-process p50 ms | in-process p99 ms | in-process CPU µs / completion | HTTP / in-process |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let levels: Vec<usize> = std::env::var("SERVE_LEVELS").map_or_else(
        |_| LEVELS.to_vec(),
        |v| v.split(',').map(|n| n.trim().parse().unwrap()).collect(),
    );
    let mut budgets = Vec::new();
    for conns in levels {
        let (mut https, mut locals) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            https.push(http_level(&addr, &key, conns, dir.path(), child.id()).await);
            locals.push(in_process_level(&journal, conns).await);
        }
        let ratios: Vec<f64> = https
            .iter()
            .zip(&locals)
            .map(|(h, l)| h.per_s / l.per_s)
            .collect();
        let (http, local) = (median(https), median(locals));
        let floor = floor_level(&addr, conns, child.id()).await;
        println!(
            "| {conns} | {:.0} | {:.2} | {:.2} | {:.1} | {:.1} | {:.0} | {:.2} | {:.2} | {:.1} | {:.2} |",
            http.per_s,
            http.p50_ms,
            http.p99_ms,
            http.cpu_us,
            http.generator_cpu_us,
            local.per_s,
            local.p50_ms,
            local.p99_ms,
            local.cpu_us,
            http.per_s / local.per_s
        );
        record("http", conns, &http);
        record("in_process", conns, &local);
        budgets.push(budget(conns, &http, &local, &floor, &ratios));
    }
    for line in budgets {
        println!("{line}");
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
