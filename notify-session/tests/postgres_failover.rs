//! Session failover between hosts on the PostgreSQL journal, with real OS processes.
//!
//! Host A (a child process: this test binary re-executed, `NS_FAILOVER_ROLE` set)
//! holds the session's lease and renews it, accepts five notifications, acks two,
//! and holds a third unacknowledged. It is then SIGSTOPped (or SIGKILLed). Host B
//! (the test process) waits, bounded, for A's lease to expire, takes the session
//! over with a higher epoch, restores it, and its consumer receives exactly the
//! three pending notifications, each once; B accepts new ones.
//!
//! SIGSTOP: A is continued and told to go on. Its next append (a new notification)
//! and its ack are refused as fenced; nothing it sends after losing the lease is
//! journaled; its supervisor's retry of that notification through B's session is
//! accepted. SIGKILL: a supervisor's retry through B of a notification A had
//! accepted is a duplicate. Either way the journal ends with every notification and
//! every consumption exactly once.
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default).
#![cfg(unix)]
// Test code: a failed expectation is a test failure; the child reports on stdout.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use notify_journal::{
    AppendError, JournalBackend, JournalRead, LeaseError, PgJournal, PgOptions, replay_all,
};
use notify_loop::LoopConfig;
use notify_session::{AckError, RetryPolicy, Session, notify_with_retry, restore};
use notify_testkit::postgres::{DATABASE_URL_VAR, database_url};
use notify_types::{
    CommandId, JournalFailureKind, JournalRecord, LoopId, Notified, NotifyError,
    ProcessCompletionNotification, ProcessLifecycleState, ProcessTerminalReason, SessionEvent,
    SessionId,
};

const ROLE_VAR: &str = "NS_FAILOVER_ROLE";
// Named for the journal schema version: builds at different versions sharing a test
// database never meet (and refuse) each other's tables.
const SCHEMA: &str = "ns_failover_tests_v9";
/// Short, so B's wait is short; A renews it six times per lease.
const LEASE: Duration = Duration::from_secs(3);
/// Bounds every wait on the child (never a timing assertion: hitting it fails).
const CHILD_DEADLINE: Duration = Duration::from_secs(120);
/// Notifications of the story: A accepts 0..5, A attempts 5 after it is fenced,
/// B accepts 6.
const N: usize = 7;

fn notification(s: SessionId, l: LoopId, id: CommandId) -> ProcessCompletionNotification {
    ProcessCompletionNotification {
        command_id: id,
        session_id: s,
        loop_id: l,
        process_handle: format!("job-{id}"),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }
}

fn options() -> PgOptions {
    PgOptions::default().schema(SCHEMA).lease_duration(LEASE)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_after_sigstop_fences_the_old_host() {
    failover(
        "failover_after_sigstop_fences_the_old_host",
        Signal::SIGSTOP,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_after_sigkill_redelivers_exactly_the_pending() {
    failover(
        "failover_after_sigkill_redelivers_exactly_the_pending",
        Signal::SIGKILL,
    )
    .await;
}

/// A's stdout, line by line, through a channel (so waits on it are bounded).
struct HostA {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl HostA {
    /// Waits for a line containing `tag`; returns the text after it.
    fn expect(&mut self, tag: &str) -> String {
        loop {
            match self.lines.recv_timeout(CHILD_DEADLINE) {
                Ok(line) => {
                    if let Some(at) = line.find(tag) {
                        return line[at + tag.len()..].trim().to_owned();
                    }
                }
                Err(_) => {
                    let _ = self.child.kill();
                    let out = self.child.wait_with_output_lossy();
                    panic!("host A never said `{tag}`; its stderr:\n{out}");
                }
            }
        }
    }
}

trait WaitLossy {
    fn wait_with_output_lossy(&mut self) -> String;
}

impl WaitLossy for Child {
    fn wait_with_output_lossy(&mut self) -> String {
        let _ = self.wait();
        let mut err = String::new();
        if let Some(mut e) = self.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        err
    }
}

async fn failover(test: &str, signal: Signal) {
    if std::env::var_os(ROLE_VAR).is_some() {
        return host_a().await;
    }
    let Some(url) = database_url(test) else {
        return;
    };
    let s = SessionId::new();
    let l = LoopId::new();
    let ids: Vec<CommandId> = (0..N).map(|_| CommandId::new()).collect();
    let n = |i: usize| notification(s, l, ids[i]);

    // Host A.
    let exe = std::env::current_exe().unwrap();
    let ids_arg: Vec<String> = ids.iter().map(ToString::to_string).collect();
    let mut child = Command::new(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(ROLE_VAR, format!("{s} {l} {}", ids_arg.join(" ")))
        .env(DATABASE_URL_VAR, &url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut a = HostA { child, lines };
    let a_epoch: u64 = a.expect("LEASE ").parse().unwrap();
    a.expect("READY");
    let pid = Pid::from_raw(i32::try_from(a.child.id()).unwrap());
    kill(pid, signal).unwrap();

    // Host B waits (bounded) for A's lease to expire, then takes the session over.
    let jb = Arc::new(PgJournal::connect(&url, options()).await.unwrap());
    let mut lease = None;
    for _ in 0..1200 {
        match jb.acquire_lease(s).await {
            Ok(l) => {
                lease = Some(l);
                break;
            }
            Err(LeaseError::Held { epoch, .. }) => assert_eq!(epoch, a_epoch),
            Err(e) => panic!("acquiring the lease: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let lease = lease.expect("A's lease never expired");
    assert!(lease.epoch() > a_epoch, "the takeover raises the epoch");

    let mut report = restore(s, &*jb).await.unwrap();
    let pending: Vec<CommandId> = report
        .pending
        .get(&l)
        .map(|p| p.iter().map(|c| c.command_id()).collect())
        .unwrap_or_default();
    assert_eq!(pending, ids[2..5], "pending: accepted by A, never acked");
    let session = Session::new(s, Arc::clone(&jb) as Arc<dyn JournalBackend>);
    let mut consumer = session
        .register_loop(LoopConfig::new(s, l).seed(report.take_pending(l)))
        .unwrap();
    for want in &ids[2..5] {
        let got = consumer.recv().await.expect("B's loop delivers");
        assert_eq!(got.command_id(), *want);
        got.ack().await.unwrap();
    }
    // B accepts new notifications; the next delivery is the new one, so nothing
    // pending was delivered twice.
    assert_eq!(
        session.notify_process_completion(n(6)).await.unwrap(),
        Notified::Accepted
    );
    let got = consumer.recv().await.unwrap();
    assert_eq!(got.command_id(), ids[6]);
    got.ack().await.unwrap();

    if signal == Signal::SIGSTOP {
        let before = jb.last_seq(s).await.unwrap();
        kill(pid, Signal::SIGCONT).unwrap();
        let mut stdin = a.child.stdin.take().unwrap();
        writeln!(stdin, "GO").unwrap();
        assert_eq!(
            a.expect("NOTIFY "),
            "fenced",
            "A's append after losing the lease"
        );
        assert_eq!(a.expect("ACK "), "fenced", "A's ack after losing the lease");
        a.expect("DONE");
        let status = a.child.wait().unwrap();
        assert!(status.success(), "host A failed: {status}");
        // Nothing A sent after losing the lease was journaled.
        assert_eq!(jb.last_seq(s).await.unwrap(), before);
        assert_eq!(jb.lookup(s, *ids[5].as_uuid()).await.unwrap(), None);
        // A's supervisor retries the refused notification through B's session.
        let retried = notify_with_retry(&session, &n(5), RetryPolicy::default()).await;
        assert_eq!(retried.unwrap(), Notified::Accepted);
    } else {
        let status = a.child.wait().unwrap();
        assert!(!status.success(), "host A was killed");
        // A supervisor retries a notification A had accepted: a duplicate. And
        // the one A never got to send is accepted.
        let retried = notify_with_retry(&session, &n(3), RetryPolicy::default()).await;
        assert_eq!(retried.unwrap(), Notified::Duplicate);
        let retried = notify_with_retry(&session, &n(5), RetryPolicy::default()).await;
        assert_eq!(retried.unwrap(), Notified::Accepted);
    }
    let got = consumer.recv().await.unwrap();
    assert_eq!(got.command_id(), ids[5]);
    got.ack().await.unwrap();

    // The journal: every notification and every consumption exactly once.
    let mut commands: BTreeMap<CommandId, usize> = BTreeMap::new();
    let mut consumed: BTreeMap<CommandId, usize> = BTreeMap::new();
    for (_, record) in replay_all(&*jb, s).await.unwrap() {
        match record {
            JournalRecord::Command(c) => *commands.entry(c.command_id()).or_default() += 1,
            JournalRecord::Event(SessionEvent::NotificationConsumed(c)) => {
                *consumed.entry(c.cause()).or_default() += 1;
            }
            other => panic!("unexpected frame {other:?}"),
        }
    }
    let once: BTreeMap<CommandId, usize> = ids.iter().map(|id| (*id, 1)).collect();
    assert_eq!(commands, once);
    assert_eq!(consumed, once);
    let info = jb.lease_info(s).await.unwrap();
    assert_eq!(info.epoch, lease.epoch());
    jb.release_lease(s).await.unwrap();
    jb.close().await;
}

/// Host A: takes the lease, keeps renewing it, accepts 0..5, acks 0 and 1, holds 2
/// unacknowledged; says `READY`; on `GO` (after being continued) tries to append 5
/// and to ack 2, and says how each was refused.
async fn host_a() {
    let role = std::env::var(ROLE_VAR).unwrap();
    let mut parts = role.split(' ');
    let s = SessionId::from_uuid(parts.next().unwrap().parse().unwrap());
    let l = LoopId::from_uuid(parts.next().unwrap().parse().unwrap());
    let ids: Vec<CommandId> = parts
        .map(|p| CommandId::from_uuid(p.parse().unwrap()))
        .collect();
    let url = std::env::var(DATABASE_URL_VAR).unwrap();
    let j = Arc::new(PgJournal::connect(&url, options()).await.unwrap());
    let lease = j.acquire_lease(s).await.unwrap();
    println!("LEASE {}", lease.epoch());
    let renewer = {
        let j = Arc::clone(&j);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(LEASE / 6).await;
                if j.renew_lease(s).await.is_err() {
                    return;
                }
            }
        })
    };
    let session = Session::new(s, Arc::clone(&j) as Arc<dyn JournalBackend>);
    let mut consumer = session.register_loop(LoopConfig::new(s, l)).unwrap();
    for id in &ids[..5] {
        let d = session
            .notify_process_completion(notification(s, l, *id))
            .await
            .unwrap();
        assert_eq!(d, Notified::Accepted);
    }
    for _ in 0..2 {
        consumer.recv().await.unwrap().ack().await.unwrap();
    }
    let held = consumer.recv().await.unwrap();
    assert_eq!(held.command_id(), ids[2]);
    println!("READY");

    let go = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(go.trim(), "GO");
    match session
        .notify_process_completion(notification(s, l, ids[5]))
        .await
    {
        Err(NotifyError::Journal(f)) if f.kind() == JournalFailureKind::Fenced => {
            println!("NOTIFY fenced");
        }
        other => println!("NOTIFY unexpected {other:?}"),
    }
    match held.ack().await {
        Err(AckError::Journal(AppendError::Fenced { .. })) => println!("ACK fenced"),
        other => println!("ACK unexpected {other:?}"),
    }
    renewer.abort();
    println!("DONE");
}
