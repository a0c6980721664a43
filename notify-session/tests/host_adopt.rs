//! Adoption under churn, on tokio's paused clock over the testkit's in-memory journal:
//! a dead holder's session is adopted within one poll while releases keep being
//! announced; a start longer than the lease loses none of the leases it took; a
//! session whose start keeps failing is retried with backoff and hides no real orphan
//! from a host with little room. Waits are bounded by a generous timeout; the bounds
//! asserted are correctness deadlines (a poll, a lease), never speed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod host_support;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use host_support::{OneLoop, Seen, WAIT, adopting_host, next_seen, notification};
use notify_journal::{BoxFuture, JournalLeases};
use notify_loop::LoopConfig;
use notify_session::{AppError, HostApp, IfPending, RestoreReport, Session, StopReason};
use notify_testkit::MemoryJournal;
use notify_types::{LoopId, Notified, SessionId};
use tokio::time::Instant;

/// A session with one notification, written through `writer` (a holder's handle).
async fn written(writer: &MemoryJournal, loop_id: LoopId) -> SessionId {
    let session = Session::new(SessionId::new(), writer.clone());
    let _consumer = session
        .register_loop(LoopConfig::new(session.id(), loop_id))
        .unwrap();
    let answer = session
        .notify_process_completion(notification(session.id(), loop_id))
        .await;
    assert_eq!(answer.unwrap(), Notified::Accepted);
    session.id()
}

/// A holder that died holding `id`'s lease: it took the lease and wrote the session,
/// and will never renew.
async fn held_by_a_dead_holder(journal: &MemoryJournal, loop_id: LoopId) -> SessionId {
    let dead = journal.another_holder();
    let id = SessionId::new();
    dead.acquire_lease(id).await.unwrap();
    let session = Session::new(id, dead.clone());
    let _consumer = session.register_loop(LoopConfig::new(id, loop_id)).unwrap();
    session
        .notify_process_completion(notification(id, loop_id))
        .await
        .unwrap();
    id
}

/// Lease 2 s, a poll every second, and a release announced every 200 ms (another
/// holder taking and giving up an ended session's lease, as hosts do with every
/// session that ends). A holder dies; once its lease runs out the session is adopted
/// within one poll.
///
/// On the code before the fix every announcement restarted the poll's timer: the
/// session was not adopted in 15 s.
#[tokio::test(start_paused = true)]
async fn a_dead_holders_session_is_adopted_within_a_poll_while_releases_keep_coming() {
    let lease = Duration::from_secs(2);
    let poll = Duration::from_secs(1);
    let journal = MemoryJournal::new().with_lease_duration(lease);
    let loop_id = LoopId::new();
    let orphan = held_by_a_dead_holder(&journal, loop_id).await;
    let (app, mut seen) = OneLoop::new(loop_id);
    let host = adopting_host(Arc::new(journal.clone()), poll, |h| h.app(app)).await;
    assert!(host.sessions().is_empty());

    let churn = journal.another_holder();
    let ended = Session::new(SessionId::new(), churn.clone());
    ended.end(IfPending::Abandon).await.unwrap();
    let ended = ended.id();
    let churning = tokio::spawn(async move {
        loop {
            churn.acquire_lease(ended).await.unwrap();
            churn.release_lease(ended).await.unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });

    tokio::time::sleep(Duration::from_millis(500)).await;
    journal.advance_lease_clock(lease);
    let expired_at = Instant::now();
    let adopted = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            if let Seen::Started { session, .. } = next_seen(&mut seen).await
                && session == orphan
            {
                return Instant::now();
            }
        }
    })
    .await
    .expect("the dead holder's session was not adopted in 15 s");
    assert!(
        adopted - expired_at <= poll,
        "adopted {:?} after its lease ran out",
        adopted - expired_at
    );
    churning.abort();
    host.shutdown().await.unwrap();
}

/// An application whose `started` takes `delay`, registering one loop; it counts the
/// starts and reports every stop.
struct Slow {
    loop_id: LoopId,
    delay: Duration,
    stops: Arc<Mutex<Vec<(SessionId, StopReason)>>>,
}

impl HostApp for Slow {
    fn started<'a>(
        &'a self,
        session: &'a Session,
        report: RestoreReport,
    ) -> BoxFuture<'a, Result<(), AppError>> {
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            let pending = report
                .pending
                .get(&self.loop_id)
                .cloned()
                .unwrap_or_default();
            let consumer =
                session.register_loop(LoopConfig::new(session.id(), self.loop_id).seed(pending))?;
            // Kept by the loop's task: the consumer lives as long as the session.
            std::mem::forget(consumer);
            Ok(())
        })
    }

    fn stopped(&self, session: SessionId, why: StopReason) {
        self.stops.lock().unwrap().push((session, why));
    }
}

/// Forty orphans, each `started` taking 800 ms, 16 at a time: the host's start
/// (which adopts them before it returns) takes 2.4 s, longer than a 2 s lease. None
/// of the leases it took is lost, then or later. (On the real clock: the memory
/// journal's leases expire by it.)
///
/// On the code before the fix the keeper ran only once the start returned: the
/// first leases had expired by then (40 orphans adopted, 32 lost).
#[tokio::test]
async fn a_start_longer_than_the_lease_loses_none_of_its_leases() {
    let lease = Duration::from_secs(2);
    let journal = MemoryJournal::new().with_lease_duration(lease);
    let loop_id = LoopId::new();
    let writer = journal.another_holder();
    let mut orphans = Vec::new();
    for _ in 0..40 {
        orphans.push(written(&writer, loop_id).await);
    }
    let stops = Arc::new(Mutex::new(Vec::new()));
    let app = Slow {
        loop_id,
        delay: Duration::from_millis(800),
        stops: Arc::clone(&stops),
    };
    let began = Instant::now();
    let host = adopting_host(Arc::new(journal.clone()), lease, |h| h.app(app)).await;
    assert!(began.elapsed() >= lease);
    tokio::time::sleep(lease * 2).await;
    let lost = stops.lock().unwrap().clone();
    let mut served = host.sessions();
    served.sort();
    orphans.sort();
    assert!(
        lost.is_empty(),
        "{} of {} leases lost (first: {:?})",
        lost.len(),
        orphans.len(),
        lost.first()
    );
    assert_eq!(served, orphans);
    host.shutdown().await.unwrap();
}

/// An application whose `started` takes `delay` and registers nothing; it keeps the
/// most starts it saw running at once.
struct Overlapping {
    delay: Duration,
    running: Arc<Mutex<(usize, usize)>>,
}

impl HostApp for Overlapping {
    fn started<'a>(
        &'a self,
        _session: &'a Session,
        _report: RestoreReport,
    ) -> BoxFuture<'a, Result<(), AppError>> {
        Box::pin(async move {
            {
                let mut running = self.running.lock().unwrap();
                running.0 += 1;
                running.1 = running.1.max(running.0);
            }
            tokio::time::sleep(self.delay).await;
            self.running.lock().unwrap().0 -= 1;
            Ok(())
        })
    }
}

/// Host A shuts down, releasing 20 sessions; host B, whose `started` takes 400 ms and
/// which polls only every minute, hears each release announced and adopts them all
/// before its first poll, several at a time.
///
/// On the code before the fix B opened announced sessions one at a time, waiting for
/// each start (at most 1 running at once; the last adopted 8 s after the release).
#[tokio::test(start_paused = true)]
async fn announced_releases_are_adopted_several_at_a_time() {
    let journal = MemoryJournal::new().with_lease_duration(Duration::from_secs(3));
    let (a_app, _a_seen) = OneLoop::new(LoopId::new());
    let a = host_support::opening_host(Arc::new(journal.clone()), |h| h.app(a_app)).await;
    let mut ids = Vec::new();
    for _ in 0..20 {
        let id = SessionId::new();
        a.open(id).await.unwrap();
        ids.push(id);
    }
    let running = Arc::new(Mutex::new((0, 0)));
    let b_app = Overlapping {
        delay: Duration::from_millis(400),
        running: Arc::clone(&running),
    };
    let b = adopting_host(
        Arc::new(journal.another_holder()),
        Duration::from_secs(60),
        |h| h.app(b_app),
    )
    .await;
    a.shutdown().await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), async {
        while b.sessions().len() < ids.len() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("B did not adopt every released session before its first poll");
    let most = running.lock().unwrap().1;
    assert!(most > 1, "at most {most} announced adoption(s) ran at once");
    b.shutdown().await.unwrap();
}

/// An application whose `started` fails for the sessions in `failing` and counts
/// every attempt; it registers one loop in the others.
struct FailingFor {
    loop_id: LoopId,
    failing: HashSet<SessionId>,
    attempts: Arc<Mutex<HashMap<SessionId, usize>>>,
}

impl HostApp for FailingFor {
    fn started<'a>(
        &'a self,
        session: &'a Session,
        _report: RestoreReport,
    ) -> BoxFuture<'a, Result<(), AppError>> {
        Box::pin(async move {
            *self
                .attempts
                .lock()
                .unwrap()
                .entry(session.id())
                .or_default() += 1;
            if self.failing.contains(&session.id()) {
                return Err("the application cannot start this session".into());
            }
            let consumer = session.register_loop(LoopConfig::new(session.id(), self.loop_id))?;
            std::mem::forget(consumer);
            Ok(())
        })
    }
}

/// A session whose start always fails, on a host with room: in 30 s it is tried a
/// handful of times (backing off: after 2, 4, 8, 16 s), not every time the host may
/// take it again.
///
/// On the code before the fix it was tried every time the host's re-adoption window
/// (the lease, 2 s) had passed: 15 times in 30 s.
#[tokio::test(start_paused = true)]
async fn a_failing_start_is_retried_with_backoff() {
    let lease = Duration::from_secs(2);
    let journal = MemoryJournal::new().with_lease_duration(lease);
    let loop_id = LoopId::new();
    let failing = written(&journal.another_holder(), loop_id).await;
    let attempts = Arc::new(Mutex::new(HashMap::new()));
    let app = FailingFor {
        loop_id,
        failing: HashSet::from([failing]),
        attempts: Arc::clone(&attempts),
    };
    let host = adopting_host(Arc::new(journal.clone()), Duration::from_millis(200), |h| {
        h.app(app)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let tried = attempts.lock().unwrap().get(&failing).copied().unwrap_or(0);
    assert!(
        (2..=6).contains(&tried),
        "a failing session was tried {tried} times in 30 s"
    );
    assert!(host.sessions().is_empty());
    host.shutdown().await.unwrap();
}

/// Four sessions whose start always fails (never leased: they are listed before any
/// expired lease) and one real orphan, a dead holder's; a host with room for one
/// session, polling every 200 ms. The orphan is adopted within a few polls.
///
/// On the code before the fix the host asked for twice its room, got two failing
/// sessions every time and retried them once its re-adoption window (the lease, 2 s)
/// had passed: the real orphan was never adopted.
#[tokio::test(start_paused = true)]
async fn failing_starts_hide_no_real_orphan_from_a_host_with_little_room() {
    let lease = Duration::from_secs(2);
    let journal = MemoryJournal::new().with_lease_duration(lease);
    let loop_id = LoopId::new();
    let writer = journal.another_holder();
    let mut failing = HashSet::new();
    for _ in 0..4 {
        failing.insert(written(&writer, loop_id).await);
    }
    let orphan = held_by_a_dead_holder(&journal, loop_id).await;
    journal.advance_lease_clock(lease);
    let attempts = Arc::new(Mutex::new(HashMap::new()));
    let app = FailingFor {
        loop_id,
        failing,
        attempts: Arc::clone(&attempts),
    };
    let host = adopting_host(Arc::new(journal.clone()), Duration::from_millis(200), |h| {
        h.capacity(1).app(app)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let attempts = attempts.lock().unwrap().clone();
    assert_eq!(
        host.sessions(),
        vec![orphan],
        "the real orphan was not adopted; attempts: {attempts:?}"
    );
    tokio::time::timeout(WAIT, host.shutdown())
        .await
        .unwrap()
        .unwrap();
}
