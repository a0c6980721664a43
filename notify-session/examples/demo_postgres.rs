//! The failover demo on the PostgreSQL journal: two hosts share one session through
//! the database; host A dies with notifications pending, host B takes the session
//! over and redelivers exactly those, and A, when it comes back, writes nothing.
//!
//! Run it with `cargo xtask demo --postgres` (or `cargo run -p notify-session
//! --example demo_postgres`). The database is `NOTIFY_TEST_DATABASE_URL`, by default
//! `host=127.0.0.1 port=5432 user=postgres dbname=test`; the demo uses the schema
//! `notify_demo` and a fresh session. Host A is this program re-executed as a child
//! process (`NOTIFY_DEMO_PG_HOST_A` set); host B is the parent.
#![allow(clippy::print_stdout, reason = "a command-line demo prints its report")]

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use notify_journal::{AppendError, JournalBackend, JournalRead, LeaseError, PgJournal, PgOptions};
use notify_loop::LoopConfig;
use notify_session::{AckError, RetryPolicy, Session, notify_with_retry, restore};
use notify_types::{
    CommandId, JournalFailureKind, LoopId, Notified, NotifyError, ProcessCompletionNotification,
    ProcessLifecycleState, ProcessTerminalReason, SessionId,
};

const URL_VAR: &str = "NOTIFY_TEST_DATABASE_URL";
const DEFAULT_URL: &str = "host=127.0.0.1 port=5432 user=postgres dbname=test";
const ROLE_VAR: &str = "NOTIFY_DEMO_PG_HOST_A";
const LEASE: Duration = Duration::from_secs(3);
/// The longest the demo waits for host A to say something.
const WAIT: Duration = Duration::from_secs(120);

fn url() -> String {
    std::env::var(URL_VAR)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_URL.to_owned())
}

fn options() -> PgOptions {
    PgOptions::default()
        .schema("notify_demo")
        .lease_duration(LEASE)
}

fn notification(
    s: SessionId,
    l: LoopId,
    id: CommandId,
    job: &str,
) -> ProcessCompletionNotification {
    ProcessCompletionNotification {
        command_id: id,
        session_id: s,
        loop_id: l,
        process_handle: job.to_owned(),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }
}

const JOBS: [&str; 7] = [
    "build-1", "build-2", "test-3", "test-4", "lint-5", "deploy-6", "docs-7",
];

fn b(text: &str) {
    println!("  [host B] {text}");
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if let Ok(role) = std::env::var(ROLE_VAR) {
        return host_a(&role).await;
    }
    println!("notify failover demo: one session, two hosts, one PostgreSQL");
    println!("(lease {LEASE:?}; host A is a child process, host B is this one)");
    let s = SessionId::new();
    let l = LoopId::new();
    let ids: Vec<CommandId> = (0..JOBS.len()).map(|_| CommandId::new()).collect();
    let n = |i: usize| notification(s, l, ids[i], JOBS[i]);

    println!("\n== 1. host A owns the session");
    let ids_arg: Vec<String> = ids.iter().map(ToString::to_string).collect();
    let mut child = Command::new(std::env::current_exe()?)
        .env(ROLE_VAR, format!("{s} {l} {}", ids_arg.join(" ")))
        .env(URL_VAR, url())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("start host A")?;
    let stdout = child.stdout.take().context("host A's stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut a = HostA { child, rx };
    let a_epoch: u64 = a.until("LEASE")?.parse()?;
    a.until("READY")?;

    println!("\n== 2. host A freezes (SIGSTOP) with three notifications unacknowledged");
    let pid = a.child.id();
    signal(Signal::SIGSTOP, pid)?;
    println!("  [demo]   host A is stopped: it cannot renew its lease");

    println!("\n== 3. host B takes over once A's lease expires");
    let jb = Arc::new(PgJournal::connect(&url(), options()).await?);
    let mut waited = 0;
    let lease = loop {
        match jb.acquire_lease(s).await {
            Ok(lease) => break lease,
            Err(LeaseError::Held { epoch, .. }) => {
                if waited == 0 {
                    b(&format!(
                        "lease held by host A (epoch {epoch}); waiting for it to expire"
                    ));
                }
                waited += 1;
                ensure!(waited < 1200, "host A's lease never expired");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    b(&format!(
        "acquired the lease: epoch {} (A had {a_epoch}); A is now fenced",
        lease.epoch()
    ));
    let mut report = restore(s, &*jb).await?;
    let pending = report.take_pending(l);
    b(&format!(
        "restored the session: {} pending: {}",
        pending.len(),
        pending
            .iter()
            .map(|p| p.notification().process_handle.clone())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let session = Session::new(s, Arc::clone(&jb) as Arc<dyn JournalBackend>);
    let mut consumer = session.register_loop(LoopConfig::new(s, l).seed(pending))?;
    for want in &ids[2..5] {
        let got = consumer.recv().await.context("B's loop exited")?;
        ensure!(got.command_id() == *want, "redelivered out of order");
        b(&format!(
            "loop received {} (redelivered), acts, acks",
            got.completion().process_handle
        ));
        got.ack().await?;
    }
    let d = session.notify_process_completion(n(6)).await?;
    b(&format!("new notification {}: {d}", JOBS[6]));
    let got = consumer.recv().await.context("B's loop exited")?;
    ensure!(
        got.command_id() == ids[6],
        "something pending was delivered twice"
    );
    b(&format!("loop received {}, acks", JOBS[6]));
    got.ack().await?;

    println!("\n== 4. host A wakes up (SIGCONT) and tries to go on");
    let before = jb.last_seq(s).await?;
    signal(Signal::SIGCONT, pid)?;
    let mut stdin = a.child.stdin.take().context("host A's stdin")?;
    writeln!(stdin, "GO")?;
    let notify = a.until("NOTIFY")?;
    let ack = a.until("ACK")?;
    a.until("DONE")?;
    let status = a.child.wait()?;
    ensure!(status.success(), "host A failed: {status}");
    ensure!(
        notify == "fenced" && ack == "fenced",
        "host A was not fenced"
    );
    let after = jb.last_seq(s).await?;
    ensure!(
        after == before,
        "host A journaled something after losing its lease"
    );
    ensure!(jb.lookup(s, *ids[5].as_uuid()).await?.is_none());
    b(&format!(
        "journal unchanged by A: still {after} frames, {} not journaled",
        JOBS[5]
    ));

    println!("\n== 5. A's supervisor retries its notification through host B");
    let d = notify_with_retry(&session, &n(5), RetryPolicy::default()).await?;
    b(&format!("{}: {d}", JOBS[5]));
    let got = consumer.recv().await.context("B's loop exited")?;
    ensure!(got.command_id() == ids[5], "unexpected delivery");
    got.ack().await?;
    let d = notify_with_retry(&session, &n(3), RetryPolicy::default()).await?;
    b(&format!("{} again (A had accepted it): {d}", JOBS[3]));
    ensure!(d == Notified::Duplicate, "a retry journaled twice");

    let frames = jb.last_seq(s).await?;
    jb.release_lease(s).await?;
    jb.close().await;
    println!(
        "\nfailover demo passed: {} notifications, each journaled and consumed once \
         ({frames} frames); the stale host wrote nothing",
        JOBS.len()
    );
    Ok(())
}

fn signal(sig: Signal, pid: u32) -> anyhow::Result<()> {
    kill(Pid::from_raw(i32::try_from(pid)?), sig).with_context(|| format!("send {sig}"))
}

struct HostA {
    child: Child,
    rx: mpsc::Receiver<String>,
}

impl HostA {
    /// Prints host A's narration until a line `TAG value`; returns the value.
    fn until(&mut self, tag: &str) -> anyhow::Result<String> {
        loop {
            let Ok(line) = self.rx.recv_timeout(WAIT) else {
                let _ = self.child.kill();
                bail!("host A never said {tag}");
            };
            if let Some(text) = line.strip_prefix("SAY ") {
                println!("  [host A] {text}");
            } else if let Some(rest) = line.strip_prefix(tag) {
                return Ok(rest.trim().to_owned());
            }
        }
    }
}

/// Host A: lease, accept five, ack two, hold one; on `GO`, try to go on.
async fn host_a(role: &str) -> anyhow::Result<()> {
    let mut parts = role.split(' ');
    let mut next = || parts.next().context("malformed role");
    let s = SessionId::from_uuid(next()?.parse()?);
    let l = LoopId::from_uuid(next()?.parse()?);
    let ids: Vec<CommandId> = parts
        .map(|p| p.parse().map(CommandId::from_uuid))
        .collect::<Result<_, _>>()?;
    ensure!(ids.len() == JOBS.len(), "malformed role");
    let j = Arc::new(PgJournal::connect(&url(), options()).await?);
    let lease = j.acquire_lease(s).await?;
    println!(
        "SAY acquired the lease on the session: epoch {}",
        lease.epoch()
    );
    println!("LEASE {}", lease.epoch());
    let renewer = {
        let j = Arc::clone(&j);
        tokio::spawn(async move {
            while j.renew_lease(s).await.is_ok() {
                tokio::time::sleep(LEASE / 6).await;
            }
        })
    };
    let session = Session::new(s, Arc::clone(&j) as Arc<dyn JournalBackend>);
    let mut consumer = session.register_loop(LoopConfig::new(s, l))?;
    for (i, id) in ids.iter().enumerate().take(5) {
        let d = session
            .notify_process_completion(notification(s, l, *id, JOBS[i]))
            .await?;
        println!("SAY supervisor: {} finished -> {d}", JOBS[i]);
    }
    for _ in 0..2 {
        let got = consumer.recv().await.context("loop exited")?;
        println!(
            "SAY loop received {}, acts, acks",
            got.completion().process_handle
        );
        got.ack().await?;
    }
    let held = consumer.recv().await.context("loop exited")?;
    println!(
        "SAY loop received {} and is still working on it",
        held.completion().process_handle
    );
    println!("READY");
    let go = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await??;
    ensure!(go.trim() == "GO", "unexpected instruction");
    match session
        .notify_process_completion(notification(s, l, ids[5], JOBS[5]))
        .await
    {
        Err(NotifyError::Journal(f)) if f.kind() == JournalFailureKind::Fenced => {
            println!("SAY supervisor: {} finished -> refused: fenced", JOBS[5]);
            println!("NOTIFY fenced");
        }
        other => println!("NOTIFY unexpected {other:?}"),
    }
    match held.ack().await {
        Err(AckError::Journal(AppendError::Fenced { .. })) => {
            println!("SAY loop acks {} -> refused: fenced", JOBS[2]);
            println!("ACK fenced");
        }
        other => println!("ACK unexpected {other:?}"),
    }
    renewer.abort();
    println!("DONE");
    Ok(())
}
