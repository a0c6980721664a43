//! The host runtime's benchmarks on PostgreSQL (`cargo bench -p notify-testkit --features
//! postgres --bench host`; the database is `NOTIFY_TEST_DATABASE_URL`, default the local test database;
//! each run uses a schema of its own and drops it).
//!
//! Not criterion (each part is one measured pass); figures go to
//! `target/bench-metrics/` for `cargo xtask bench`:
//!
//! * **Takeover**: host A serves 1,000 sessions, each with one notification pending;
//!   A dies (its handle is dropped: no renewal, no release, as after SIGKILL); host B
//!   adopts them. For each session, the time from A's death to the first notification
//!   B accepts for it: `host/takeover_1000/{p50,p99,max}` (ms), and the same past the
//!   moment A's lease on it ran out (`host/takeover_1000/after_expiry_{p50,p99}`, ms;
//!   the part the runtime controls: the wait for the lease is the lease duration's).
//!   Lease 5 s, adoption poll 250 ms.
//! * **Renewal**: one handle holds 10,000 leases and renews all of them, as a host's
//!   keeper does once per interval: one statement (one round trip) whatever the
//!   number; `host/renewal_10000/ms` is its time (mean of 20, the database's work plus
//!   one local round trip) and `host/renewal_10000/rows_per_s` the rows it extends per
//!   second of that time.
//! * **Retention**: 64 appenders (one session each) append for 5 s beside a backlog
//!   of 1,000 ended sessions × 50 frames, once without retention and once while a
//!   host's retention task (`RetentionSchedule`: `max_share` 0.1, steps of 256 frames)
//!   purges that backlog: `paired/appends_retention_vs_none_64/{a,b}` (appends/s;
//!   target a/b ≥ 0.8) and `host/retention/frames_purged`, the backlog's frames
//!   removed during the window (counted among the backlog's sessions only: the
//!   appenders' own frames outnumber what a paced purge removes in 5 s). The pair is
//!   recorded only if purging went on throughout the window (some of the backlog
//!   removed, some left).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use notify_journal::{JournalBackend, JournalLeases, PgJournal, PgOptions};
use notify_loop::LoopConfig;
use notify_session::notify_journal::BoxFuture;
use notify_session::{AppError, HostApp, RestoreReport, RetentionSchedule, Session, SessionHost};
use notify_testkit::bench::metric;
use notify_types::{
    CommandId, JournalRecord, LoopId, Notified, ProcessCompletionNotification,
    ProcessLifecycleState, ProcessNotification, ProcessTerminalReason, SessionEnded, SessionEvent,
    SessionId, Uuid,
};
use tokio::task::JoinSet;

const URL_VAR: &str = "NOTIFY_TEST_DATABASE_URL";
const DEFAULT_URL: &str = "host=127.0.0.1 port=5432 user=postgres dbname=test";
const TAKEOVER_SESSIONS: usize = 1_000;
const TAKEOVER_LEASE: Duration = Duration::from_secs(5);
const RENEWED: usize = 10_000;
const BACKLOG_SESSIONS: usize = 1_000;
const BACKLOG_FRAMES: usize = 50;
const APPENDERS: usize = 64;
const WINDOW: Duration = Duration::from_secs(5);

fn url() -> String {
    std::env::var(URL_VAR)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_URL.to_owned())
}

fn loop_of(s: SessionId) -> LoopId {
    LoopId::from_uuid(*s.as_uuid())
}

fn notification(s: SessionId) -> ProcessCompletionNotification {
    ProcessCompletionNotification {
        command_id: CommandId::from_uuid(Uuid::now_v7()),
        session_id: s,
        loop_id: loop_of(s),
        process_handle: "build-42".to_owned(),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }
}

/// One loop per session, seeded; its consumer acks (or, on host A, holds everything
/// so that it stays pending).
struct OneLoop {
    ack: bool,
}

impl HostApp for OneLoop {
    fn started<'a>(
        &'a self,
        session: &'a Session,
        report: RestoreReport,
    ) -> BoxFuture<'a, Result<(), AppError>> {
        let ack = self.ack;
        Box::pin(async move {
            let l = loop_of(session.id());
            let pending = report.pending.get(&l).cloned().unwrap_or_default();
            let mut consumer =
                session.register_loop(LoopConfig::new(session.id(), l).seed(pending))?;
            tokio::spawn(async move {
                let mut held = Vec::new();
                while let Some(got) = consumer.recv().await {
                    if ack {
                        if got.ack().await.is_err() {
                            break;
                        }
                    } else {
                        held.push(got);
                    }
                }
            });
            Ok(())
        })
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let schema = format!("ns_host_bench_{}", std::process::id());
        let only = std::env::var("HOST_BENCH").unwrap_or_default();
        if only.is_empty() || only == "takeover" {
            takeover(&schema).await;
        }
        if only.is_empty() || only == "renewal" {
            renewal(&schema).await;
        }
        if only.is_empty() || only == "retention" {
            retention(&schema).await;
        }
        drop_schema(&schema).await;
    });
}

async fn connect(schema: &str, lease: Duration) -> Arc<PgJournal> {
    let options = PgOptions::default().schema(schema).lease_duration(lease);
    Arc::new(
        PgJournal::connect(&url(), options)
            .await
            .unwrap_or_else(|e| panic!("the host bench needs a database ({URL_VAR}): {e}")),
    )
}

async fn takeover(schema: &str) {
    let ja = connect(schema, TAKEOVER_LEASE).await;
    let a = SessionHost::builder(Arc::clone(&ja))
        .capacity(TAKEOVER_SESSIONS)
        .adopt(false)
        .app(OneLoop { ack: false })
        .start()
        .await
        .unwrap();
    let sessions: Vec<SessionId> = (0..TAKEOVER_SESSIONS).map(|_| SessionId::new()).collect();
    for chunk in sessions.chunks(64) {
        let mut opens = JoinSet::new();
        for s in chunk {
            let (a, s) = (a.clone(), *s);
            opens.spawn(async move {
                // A lease lost while the machine is loaded (a stalled renewal) stops
                // the session: open it again.
                for _ in 0..10 {
                    let Ok(session) = a.open(s).await else {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    };
                    if let Ok(n) = session.notify_process_completion(notification(s)).await {
                        assert_eq!(n, Notified::Accepted);
                        return;
                    }
                }
                panic!("{s} could not be opened on host A");
            });
        }
        opens.join_all().await;
    }
    let b = SessionHost::builder(connect(schema, TAKEOVER_LEASE).await)
        .capacity(TAKEOVER_SESSIONS)
        .adopt_every(Duration::from_millis(250))
        .app(OneLoop { ack: true })
        .start()
        .await
        .unwrap();
    // A dies: no more renewals, nothing released.
    let died = Instant::now();
    drop(a);
    let mut firsts = JoinSet::new();
    for s in &sessions {
        let (b, s) = (b.clone(), *s);
        firsts.spawn(async move {
            let deadline = died + Duration::from_secs(120);
            loop {
                assert!(Instant::now() < deadline, "{s} was never taken over");
                if let Some(session) = b.session(s)
                    && let Ok(Notified::Accepted) =
                        session.notify_process_completion(notification(s)).await
                {
                    return (s, died.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
    }
    // When each of A's leases ran out, as the database saw it just after the death.
    let mut expiry = std::collections::HashMap::new();
    for s in &sessions {
        let asked = died.elapsed();
        let info = JournalLeases::lease_info(&*ja, *s).await.unwrap();
        expiry.insert(*s, asked + info.expires_in.unwrap_or_default());
    }
    let done = firsts.join_all().await;
    let mut total: Vec<Duration> = done.iter().map(|(_, d)| *d).collect();
    let mut after: Vec<Duration> = done
        .iter()
        .map(|(s, d)| d.saturating_sub(expiry[s]))
        .collect();
    total.sort();
    after.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    metric("host/takeover_1000/p50", ms(pct(&total, 50)), "ms");
    metric("host/takeover_1000/p99", ms(pct(&total, 99)), "ms");
    metric("host/takeover_1000/max", ms(*total.last().unwrap()), "ms");
    metric(
        "host/takeover_1000/after_expiry_p50",
        ms(pct(&after, 50)),
        "ms",
    );
    metric(
        "host/takeover_1000/after_expiry_p99",
        ms(pct(&after, 99)),
        "ms",
    );
    // A release that finds a lease already run out answers Lost (a renewal stalled
    // on a loaded machine); the host is shut down all the same.
    let _ = b.shutdown().await;
}

fn pct(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

async fn renewal(schema: &str) {
    let j = connect(schema, Duration::from_secs(120)).await;
    let sessions: Vec<SessionId> = (0..RENEWED).map(|_| SessionId::new()).collect();
    for chunk in sessions.chunks(256) {
        let mut acquires = JoinSet::new();
        for s in chunk {
            let (j, s) = (Arc::clone(&j), *s);
            acquires.spawn(async move { JournalLeases::acquire_lease(&*j, s).await.unwrap() });
        }
        acquires.join_all().await;
    }
    let first = JournalLeases::renew_leases(&*j).await.unwrap();
    assert_eq!(first.renewed.len(), RENEWED);
    const ROUNDS: u32 = 20;
    let start = Instant::now();
    for _ in 0..ROUNDS {
        let r = JournalLeases::renew_leases(&*j).await.unwrap();
        assert_eq!(r.renewed.len(), RENEWED);
    }
    let each = start.elapsed() / ROUNDS;
    metric("host/renewal_10000/ms", each.as_secs_f64() * 1e3, "ms");
    metric(
        "host/renewal_10000/rows_per_s",
        RENEWED as f64 / each.as_secs_f64(),
        "/s",
    );
    for s in &sessions {
        JournalLeases::release_lease(&*j, *s).await.unwrap();
    }
}

async fn retention(schema: &str) {
    let j = connect(schema, Duration::from_secs(30)).await;
    // The backlog: ended sessions, BACKLOG_FRAMES notifications each.
    let backlog: Vec<SessionId> = (0..BACKLOG_SESSIONS).map(|_| SessionId::new()).collect();
    let mut writes = JoinSet::new();
    for s in &backlog {
        let (j, s) = (Arc::clone(&j), *s);
        writes.spawn(async move {
            let mut records: Vec<JournalRecord> = (0..BACKLOG_FRAMES)
                .map(|_| JournalRecord::from(ProcessNotification::new(notification(s))))
                .collect();
            records.push(JournalRecord::from(SessionEvent::from(SessionEnded::new(
                s,
            ))));
            j.append_all(s, records, None).await.unwrap();
        });
        if writes.len() >= 64 {
            writes.join_next().await.unwrap().unwrap();
        }
    }
    writes.join_all().await;
    analyze(schema).await;
    let without = appends_for(&j, WINDOW).await;
    // The backlog's frames alone: the appenders' own frames (tens of thousands in a
    // window) must not hide what retention removed.
    let backlog_before = frames_of(schema, &backlog).await;
    let host = SessionHost::builder(Arc::clone(&j))
        .adopt(false)
        .retention(RetentionSchedule {
            purge_after: Duration::ZERO,
            every: Duration::from_millis(100),
            ..RetentionSchedule::default()
        })
        .start()
        .await
        .unwrap();
    let with = appends_for(&j, WINDOW).await;
    let backlog_after = frames_of(schema, &backlog).await;
    let _ = host.shutdown().await;
    let purged = backlog_before.saturating_sub(backlog_after);
    metric("host/retention/frames_purged", purged as f64, "frames");
    eprintln!(
        "retention: backlog frames {backlog_before} before the window, {backlog_after} after"
    );
    if purged == 0 || backlog_after == 0 {
        // No comparison: the window did not overlap purging, or purging ended in it.
        eprintln!(
            "retention did not purge throughout the window: appends/s with {with:.0}, without {without:.0} not recorded"
        );
        return;
    }
    metric("paired/appends_retention_vs_none_64/a", with, "/s");
    metric("paired/appends_retention_vs_none_64/b", without, "/s");
}

/// Appends per second of APPENDERS appenders, each on its own session, for `window`.
async fn appends_for(j: &Arc<PgJournal>, window: Duration) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    for _ in 0..APPENDERS {
        let (j, stop, count) = (Arc::clone(j), Arc::clone(&stop), Arc::clone(&count));
        tasks.spawn(async move {
            let s = SessionId::new();
            while !stop.load(Ordering::Relaxed) {
                let r = JournalRecord::from(ProcessNotification::new(notification(s)));
                j.append(s, r).await.unwrap();
                count.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let start = Instant::now();
    tokio::time::sleep(window).await;
    stop.store(true, Ordering::Relaxed);
    let n = count.load(Ordering::Relaxed);
    let elapsed = start.elapsed();
    tasks.join_all().await;
    n as f64 / elapsed.as_secs_f64()
}

async fn client() -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// How many frames the journal holds of `sessions`.
async fn frames_of(schema: &str, sessions: &[SessionId]) -> u64 {
    let ids: Vec<Uuid> = sessions.iter().map(|s| *s.as_uuid()).collect();
    let n: i64 = client()
        .await
        .query_one(
            &format!("SELECT count(*) FROM {schema}.frames WHERE session = ANY ($1)"),
            &[&ids],
        )
        .await
        .unwrap()
        .get(0);
    u64::try_from(n).unwrap()
}

async fn analyze(schema: &str) {
    client()
        .await
        .batch_execute(&format!(
            "ANALYZE {schema}.frames; ANALYZE {schema}.sessions"
        ))
        .await
        .unwrap();
}

async fn drop_schema(schema: &str) {
    client()
        .await
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap();
}
