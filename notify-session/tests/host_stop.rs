//! Stopping and shutting down a host, at the edges: an acknowledgement after the
//! keeper stopped an ended session answers the ended path (not `NotOwner`), a shutdown
//! grace of `Duration::MAX` means "as long as it takes", a second, concurrent
//! shutdown returns only once the first has finished, and a stop hanging past the
//! grace does not hold shutdown, nor one of the adopter's opens outlive it; many
//! sessions are all stopped (told and released) within the grace; a stale handle
//! cannot end the session under its next placement. Waits are bounded by a generous
//! timeout that turns a hang into a failure (never a timing assertion).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod host_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use host_support::{
    Counting, OneLoop, Seen, WAIT, adopting_host, ended_with_one_received, next_seen, notification,
    opening_host, stop_of,
};
use notify_journal::{
    AppendError, JournalLeases, JournalRead, RedbJournal, RedbOptions, SessionState,
};
use notify_session::{AckError, EndError, HostError, IfPending, StopReason, TxAckError};
use notify_testkit::MemoryJournal;
use notify_types::{LoopId, Notified, SessionId};

/// A notification received before the session ended, acknowledged after the keeper
/// gave the ended session up: the answer is the ended path's (`SessionEnded`: it was
/// abandoned by the end, not consumed), as before the stop, never `NotOwner`.
#[tokio::test]
async fn a_plain_ack_after_the_keeper_stopped_the_ended_session_answers_ended() {
    let journal = MemoryJournal::new().with_lease_duration(Duration::from_secs(6));
    let ended = ended_with_one_received(Arc::new(journal)).await;
    let id = ended.id;

    let answer = ended.received.ack().await;
    assert!(
        matches!(&answer, Err(AckError::SessionEnded { session_id }) if *session_id == id),
        "{answer:?}"
    );
    ended.host.shutdown().await.unwrap();
}

/// The same through `ack_with` on redb: the ended path answers, `write` is not run.
#[tokio::test]
async fn a_transactional_ack_after_the_keeper_stopped_the_ended_session_answers_ended() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Arc::new(
        RedbJournal::open(dir.path().join("notify.redb"), RedbOptions::default()).unwrap(),
    );
    let ended = ended_with_one_received(Arc::clone(&journal)).await;
    let id = ended.id;

    let answer = ended
        .received
        .ack_with(&journal, |t| {
            let mut rows = t.open_table::<u128, &str>("app/conversation")?;
            rows.insert(1, "build-42 exited")?;
            Ok(())
        })
        .await;
    assert!(
        matches!(
            &answer,
            Err(TxAckError::Ack(AckError::SessionEnded { session_id })) if *session_id == id
        ),
        "{answer:?}"
    );
    ended.host.shutdown().await.unwrap();
}

/// `shutdown_grace(Duration::MAX)`: shutdown waits as long as it takes, it does not
/// overflow the deadline.
#[tokio::test]
async fn a_shutdown_grace_of_duration_max_shuts_down() {
    let journal = MemoryJournal::new().with_lease_duration(Duration::from_secs(6));
    let loop_id = LoopId::new();
    let (app, mut seen) = OneLoop::new(loop_id);
    let host = opening_host(Arc::new(journal), |h| {
        h.shutdown_grace(Duration::MAX).app(app)
    })
    .await;
    let id = SessionId::new();
    let _session = host.open(id).await.unwrap();
    let Seen::Started { .. } = next_seen(&mut seen).await else {
        panic!("expected the open's start");
    };
    host.shutdown().await.unwrap();
    assert_eq!(stop_of(&mut seen, id).await, StopReason::ShutDown);
}

/// Two shutdowns at once, from clones of the handle: whichever returns first, the
/// host is shut down by then (its session stopped and the application told). The
/// release yields once, so the first shutdown is still stopping when the second runs.
#[tokio::test]
async fn a_second_concurrent_shutdown_returns_only_once_the_host_is_shut_down() {
    let journal = Arc::new(Counting::new(Arc::new(
        MemoryJournal::new().with_lease_duration(Duration::from_secs(6)),
    )));
    journal.yield_releases.store(true, Ordering::SeqCst);
    let loop_id = LoopId::new();
    let (app, mut seen) = OneLoop::new(loop_id);
    let host = opening_host(Arc::clone(&journal), |h| h.app(app)).await;
    let id = SessionId::new();
    let _session = host.open(id).await.unwrap();
    let Seen::Started { .. } = next_seen(&mut seen).await else {
        panic!("expected the open's start");
    };
    let other = host.clone();
    let mut first = Box::pin(host.shutdown());
    let mut second = Box::pin(other.shutdown());
    tokio::select! {
        biased;
        done = &mut first => done.unwrap(),
        done = &mut second => done.unwrap(),
    }
    // Whichever returned, the session's stop was reported before it did.
    let Ok(Seen::Stopped { session, why }) = seen.try_recv() else {
        panic!("a shutdown returned before the host's session was stopped");
    };
    assert_eq!((session, why), (id, StopReason::ShutDown));
}

/// A stop whose release hangs (as one waiting for a row an application transaction
/// holds) is cut short by the grace: shutdown returns, the session is no longer
/// served here, its lease is left to expire.
#[tokio::test]
async fn a_stop_hanging_past_the_grace_does_not_hold_shutdown() {
    let journal = Arc::new(Counting::new(Arc::new(
        MemoryJournal::new().with_lease_duration(Duration::from_secs(6)),
    )));
    let loop_id = LoopId::new();
    let (app, mut seen) = OneLoop::new(loop_id);
    let host = opening_host(Arc::clone(&journal), |h| {
        h.shutdown_grace(Duration::from_millis(100)).app(app)
    })
    .await;
    let id = SessionId::new();
    let _session = host.open(id).await.unwrap();
    let Seen::Started { .. } = next_seen(&mut seen).await else {
        panic!("expected the open's start");
    };
    journal.hang_releases.store(true, Ordering::SeqCst);
    let other = host.clone();
    tokio::time::timeout(WAIT, host.shutdown())
        .await
        .expect("shutdown waited past its grace for a hanging release")
        .unwrap();
    assert!(other.sessions().is_empty());
}

/// An application whose `started` never returns; it says when it was entered and
/// when its future was dropped.
struct Hanging {
    entered: tokio::sync::mpsc::UnboundedSender<()>,
    dropped: Arc<std::sync::atomic::AtomicBool>,
}

/// Sets the flag when dropped, 50 ms after the drop began (a future whose drop takes
/// a while: an abort only requested is not over by the time shutdown returns).
struct DropFlag(Arc<std::sync::atomic::AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        std::thread::sleep(Duration::from_millis(50));
        self.0.store(true, Ordering::SeqCst);
    }
}

impl notify_session::HostApp for Hanging {
    fn started<'a>(
        &'a self,
        _session: &'a notify_session::Session,
        _report: notify_session::RestoreReport,
    ) -> notify_journal::BoxFuture<'a, Result<(), notify_session::AppError>> {
        let flag = DropFlag(Arc::clone(&self.dropped));
        let _ = self.entered.send(());
        Box::pin(async move {
            let _flag = flag;
            std::future::pending::<()>().await;
            Ok(())
        })
    }

    fn stopped(&self, _session: SessionId, _why: StopReason) {}
}

/// An adoption whose `started` hangs past the grace: when shutdown returns, the open
/// has been aborted and awaited (its `started` dropped), not merely asked to abort.
/// On a multi-thread runtime, with a drop that takes a while, the code before
/// shutdown awaited the adopter's opens (they ran in a `JoinSet` inside the adopter,
/// whose abort only requested theirs) fails it: shutdown returned before the drop was
/// over. (On a current-thread runtime it passed, the requested abort landing while
/// shutdown awaited its later steps.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_awaits_the_adopters_open_it_aborts() {
    let journal = MemoryJournal::new().with_lease_duration(Duration::from_secs(6));
    let (entered, mut entering) = tokio::sync::mpsc::unbounded_channel();
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let host = adopting_host(Arc::new(journal.clone()), Duration::from_millis(20), |h| {
        h.shutdown_grace(Duration::from_millis(100)).app(Hanging {
            entered,
            dropped: Arc::clone(&dropped),
        })
    })
    .await;
    // An orphan, written after the host started (its first poll found nothing).
    let loop_id = LoopId::new();
    let orphan = notify_session::Session::new(SessionId::new(), journal.another_holder());
    let _consumer = orphan
        .register_loop(notify_loop::LoopConfig::new(orphan.id(), loop_id))
        .unwrap();
    orphan
        .notify_process_completion(notification(orphan.id(), loop_id))
        .await
        .unwrap();
    tokio::time::timeout(WAIT, entering.recv())
        .await
        .expect("the orphan was never adopted")
        .unwrap();
    tokio::time::timeout(WAIT, host.shutdown())
        .await
        .expect("shutdown hung")
        .unwrap();
    assert!(
        dropped.load(Ordering::SeqCst),
        "shutdown returned while the adopter's open was still running"
    );
}

/// An application that registers one loop per session (kept running) and counts the
/// stops it was told of.
struct CountingStops {
    loop_id: LoopId,
    stops: Arc<AtomicUsize>,
}

impl notify_session::HostApp for CountingStops {
    fn started<'a>(
        &'a self,
        session: &'a notify_session::Session,
        _report: notify_session::RestoreReport,
    ) -> notify_journal::BoxFuture<'a, Result<(), notify_session::AppError>> {
        Box::pin(async move {
            let consumer =
                session.register_loop(notify_loop::LoopConfig::new(session.id(), self.loop_id))?;
            std::mem::forget(consumer);
            Ok(())
        })
    }

    fn stopped(&self, _session: SessionId, why: StopReason) {
        assert_eq!(why, StopReason::ShutDown);
        self.stops.fetch_add(1, Ordering::SeqCst);
    }
}

/// 200 sessions, each release a 5 ms round trip, a grace of 300 ms: every session is
/// told stopped and has its release tried within the grace.
///
/// On the code before the fix the stops ran one after another: 60 sessions were
/// stopped within the grace, the other 140 were never told and their leases were
/// left to expire.
#[tokio::test(start_paused = true)]
async fn shutdown_stops_every_one_of_many_sessions_within_the_grace() {
    let journal = Arc::new(Counting::new(Arc::new(
        MemoryJournal::new().with_lease_duration(Duration::from_secs(6)),
    )));
    let stops = Arc::new(AtomicUsize::new(0));
    let app = CountingStops {
        loop_id: LoopId::new(),
        stops: Arc::clone(&stops),
    };
    let host = opening_host(Arc::clone(&journal), |h| {
        h.shutdown_grace(Duration::from_millis(300)).app(app)
    })
    .await;
    for _ in 0..200 {
        host.open(SessionId::new()).await.unwrap();
    }
    journal.release_delay_ms.store(5, Ordering::SeqCst);
    host.shutdown().await.unwrap();
    assert_eq!(
        (
            stops.load(Ordering::SeqCst),
            journal.releases.load(Ordering::SeqCst)
        ),
        (200, 200),
        "(stops told, releases tried) of 200 sessions"
    );
}

/// A handle from the session's first placement, after the host released the session
/// and opened it again: ending through it is refused (nothing written), and the
/// session goes on under its new placement.
///
/// On the code before the fix the fence knew only the session's ID: the stale
/// handle's end was journaled, ending the session its new placement serves.
#[tokio::test]
async fn a_stale_handle_cannot_end_the_session_under_its_next_placement() {
    let journal = MemoryJournal::new().with_lease_duration(Duration::from_secs(6));
    let loop_id = LoopId::new();
    let (app, mut seen) = OneLoop::new(loop_id);
    let host = opening_host(Arc::new(journal.clone()), |h| h.app(app)).await;
    let id = SessionId::new();
    let stale = host.open(id).await.unwrap();
    let _first = next_seen(&mut seen).await;
    host.release(id).await.unwrap();
    assert_eq!(stop_of(&mut seen, id).await, StopReason::Released);
    let current = host.open(id).await.unwrap();
    let _second = next_seen(&mut seen).await;

    let ended = stale.end(IfPending::Abandon).await;
    assert!(
        matches!(
            ended,
            Err(EndError::Journal(AppendError::Fenced { session })) if session == id
        ),
        "{ended:?}"
    );
    assert_eq!(journal.session_state(id).await.unwrap(), SessionState::Live);
    let answer = current
        .notify_process_completion(notification(id, loop_id))
        .await;
    assert_eq!(answer.unwrap(), Notified::Accepted);
    host.shutdown().await.unwrap();
}

/// A session opened again on this host while its last placement here is still
/// stopping (its release on the way): the open is refused as `Opening` (retry) until
/// the stop has finished. Then the application hears the old placement's stop before
/// the new one's start, and the old placement's release cannot release the lease the
/// new placement holds under the same holder.
///
/// On the code before the fix the open went ahead during the stop: the application
/// was told `stopped` after the new placement's `started` (the server then dropped the
/// new placement's consumers), and the release freed the new placement's lease.
#[tokio::test]
async fn a_session_is_not_opened_again_while_its_last_placement_stops() {
    let journal = Arc::new(Counting::new(Arc::new(
        MemoryJournal::new().with_lease_duration(Duration::from_secs(6)),
    )));
    let loop_id = LoopId::new();
    let (app, mut seen) = OneLoop::new(loop_id);
    let host = opening_host(Arc::clone(&journal), |h| h.app(app)).await;
    let id = SessionId::new();
    host.open(id).await.unwrap();
    let _first = next_seen(&mut seen).await;

    journal.release_delay_ms.store(1_000, Ordering::SeqCst);
    let releasing = {
        let host = host.clone();
        tokio::spawn(async move { host.release(id).await })
    };
    // The stop has begun once the host no longer serves the session; its release is
    // still sleeping.
    tokio::time::timeout(WAIT, async {
        while host.session(id).is_some() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    assert_eq!(
        journal.releases.load(Ordering::SeqCst),
        1,
        "the release has begun"
    );
    let during = host.open(id).await;
    assert!(
        matches!(during, Err(HostError::Opening { session }) if session == id),
        "an open while the last placement stops: {:?}",
        during.map(|s| s.id())
    );

    releasing.await.unwrap().unwrap();
    journal.release_delay_ms.store(0, Ordering::SeqCst);
    assert_eq!(stop_of(&mut seen, id).await, StopReason::Released);
    let current = host.open(id).await.unwrap();
    // Held: its consumer keeps the loop running.
    let second = next_seen(&mut seen).await;
    assert!(matches!(&second, Seen::Started { session, .. } if *session == id));
    let lease = journal.lease_info(id).await.unwrap();
    assert!(
        lease.live && lease.holder == Some(journal.holder_id()),
        "the new placement holds the lease: {lease:?}"
    );
    let answer = current
        .notify_process_completion(notification(id, loop_id))
        .await;
    assert_eq!(answer.unwrap(), Notified::Accepted);
    host.shutdown().await.unwrap();
}
