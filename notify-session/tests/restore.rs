//! Crash and restore: what was appended and never consumed comes back, nothing
//! acknowledged does, and declaring orphans lost is idempotent.

// Tests unwrap freely, helpers included: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use notify_journal::{JournalBackend, JournalRead, RedbJournal, RedbOptions, replay_all};
use notify_loop::LoopConfig;
use notify_session::{RestoreReport, Session, restore};
use notify_testkit::MemoryJournal;
use notify_testkit::sample::{lifecycle, notification};
use notify_types::{
    JournalRecord, LoopId, Notified, ProcessLifecycleKind, ProcessLifecycleState,
    ProcessNotification, ProcessTerminalReason, SessionEvent, SessionId, lost_command_id,
    lost_event_id,
};

/// A session over a fresh memory journal with one native loop.
fn one_loop() -> (
    MemoryJournal,
    Session,
    LoopId,
    notify_session::SessionConsumer,
) {
    let journal = MemoryJournal::new();
    let session = Session::new(SessionId::new(), Arc::new(journal.clone()));
    let loop_id = LoopId::new();
    let consumer = session
        .register_loop(LoopConfig::new(session.id(), loop_id))
        .unwrap();
    (journal, session, loop_id, consumer)
}

/// The whole crash story, on any backend: `reopen` simulates a restart and returns
/// the journal as the restarted process sees it.
async fn crash_between_append_and_dispatch<F, Fut>(first: Arc<dyn JournalBackend>, reopen: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Arc<dyn JournalBackend>>,
{
    let session_id = SessionId::new();
    let loop_id = LoopId::new();
    let session = Session::new(session_id, first.clone());
    let mut consumer = session
        .register_loop(LoopConfig::new(session_id, loop_id))
        .unwrap();

    // Acknowledged: must never come back.
    let acked = notification(session_id, loop_id);
    session
        .notify_process_completion(acked.clone())
        .await
        .unwrap();
    consumer.recv().await.unwrap().ack().await.unwrap();
    // Accepted, received, not acknowledged: must come back.
    let unacked = notification(session_id, loop_id);
    session
        .notify_process_completion(unacked.clone())
        .await
        .unwrap();
    let held = consumer.recv().await.unwrap();
    assert_eq!(held.command_id(), unacked.command_id);
    // Appended, then the process died before dispatch: must come back.
    let undispatched = notification(session_id, loop_id);
    first
        .append(
            session_id,
            JournalRecord::Command(ProcessNotification::new(undispatched.clone())),
        )
        .await
        .unwrap();

    // Crash: drop everything without shutdown.
    drop((held, consumer, session, first));
    let journal = reopen().await;

    let mut report = restore(session_id, journal.as_ref()).await.unwrap();
    let again = restore(session_id, journal.as_ref()).await.unwrap();
    assert_eq!(report, again, "restore only reads");
    let pending: Vec<_> = report.pending[&loop_id]
        .iter()
        .map(ProcessNotification::command_id)
        .collect();
    assert_eq!(
        pending,
        vec![unacked.command_id, undispatched.command_id],
        "journal order"
    );

    let session = Session::new(session_id, journal.clone());
    let mut consumer = session
        .register_loop(LoopConfig::new(session_id, loop_id).seed(report.take_pending(loop_id)))
        .unwrap();
    for expected in [&unacked, &undispatched] {
        let got = consumer.recv().await.unwrap();
        assert_eq!(got.notification().notification(), expected);
        got.ack().await.unwrap();
    }
    // Retries after the acknowledgement: Duplicate, never redelivered.
    for n in [&acked, &unacked, &undispatched] {
        assert_eq!(
            session.notify_process_completion(n.clone()).await.unwrap(),
            Notified::Duplicate
        );
    }
    let fresh = notification(session_id, loop_id);
    session
        .notify_process_completion(fresh.clone())
        .await
        .unwrap();
    assert_eq!(
        consumer.recv().await.unwrap().command_id(),
        fresh.command_id,
        "nothing acked came back"
    );

    let after = restore(session_id, journal.as_ref()).await.unwrap();
    let still: Vec<_> = after.pending[&loop_id]
        .iter()
        .map(ProcessNotification::command_id)
        .collect();
    assert_eq!(still, vec![fresh.command_id]);
}

#[tokio::test]
async fn crash_between_append_and_dispatch_on_the_memory_journal() {
    let journal = MemoryJournal::new();
    let keep = journal.clone();
    crash_between_append_and_dispatch(Arc::new(journal), || async move {
        Arc::new(keep) as Arc<dyn JournalBackend>
    })
    .await;
}

#[tokio::test]
async fn crash_between_append_and_dispatch_on_the_redb_journal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.redb");
    let first = RedbJournal::open(&path, RedbOptions::default()).unwrap();
    crash_between_append_and_dispatch(Arc::new(first), || async move {
        Arc::new(RedbJournal::open(&path, RedbOptions::default()).unwrap())
            as Arc<dyn JournalBackend>
    })
    .await;
}

#[tokio::test]
async fn orphans_are_declared_lost_once_even_when_declared_twice() {
    let (journal, session, loop_id, _consumer) = one_loop();
    let session_id = session.id();

    // One process finished, one left running, one stop requested and never completed.
    let mut done = lifecycle(session_id, loop_id, ProcessLifecycleKind::Started);
    done.process_handle = "done".into();
    let mut done_completed = lifecycle(session_id, loop_id, ProcessLifecycleKind::Completed);
    done_completed.process_handle = "done".into();
    done_completed.origin_execution_id = done.origin_execution_id;
    let mut running = lifecycle(session_id, loop_id, ProcessLifecycleKind::Started);
    running.process_handle = "running".into();
    let mut stopping = lifecycle(session_id, loop_id, ProcessLifecycleKind::StopRequested);
    stopping.process_handle = "stopping".into();
    for m in [done, running.clone(), done_completed, stopping.clone()] {
        session.publish_lifecycle(m).await.unwrap();
    }
    drop((session, _consumer));

    let report = restore(session_id, &journal).await.unwrap();
    assert_eq!(report.orphans, vec![running.clone(), stopping.clone()]);
    assert_eq!(report, restore(session_id, &journal).await.unwrap());

    let session = Session::new(session_id, Arc::new(journal.clone()));
    let mut consumer = session
        .register_loop(LoopConfig::new(session_id, loop_id))
        .unwrap();
    let mut events = session.subscribe();
    for orphan in &report.orphans {
        let outcome = session.declare_lost(orphan).await.unwrap();
        assert_eq!(outcome.completion, Ok(Notified::Accepted));
        assert!(matches!(
            outcome.event,
            notify_session::Published::New { .. }
        ));
    }
    let frames = journal.last_seq(session_id).await.unwrap();
    // A crash during restore: the same declaration again adds nothing.
    for orphan in &report.orphans {
        let outcome = session.declare_lost(orphan).await.unwrap();
        assert_eq!(outcome.completion, Ok(Notified::Duplicate));
        assert!(matches!(
            outcome.event,
            notify_session::Published::Duplicate { .. }
        ));
    }
    assert_eq!(
        journal.last_seq(session_id).await.unwrap(),
        frames,
        "declaring twice adds no frames"
    );

    for orphan in [&running, &stopping] {
        let got = consumer.recv().await.unwrap();
        let n = got.notification().notification();
        assert_eq!(n.command_id, lost_command_id(orphan));
        assert_eq!(
            (n.state, n.reason),
            (
                ProcessLifecycleState::LostOnRestore,
                ProcessTerminalReason::LostOnRestore
            )
        );
        got.ack().await.unwrap();
        match events.recv().await.unwrap() {
            SessionEvent::Lifecycle(m) => {
                assert_eq!(m.event_id, lost_event_id(orphan));
                assert_eq!(m.kind, ProcessLifecycleKind::Lost);
            }
            other => panic!("expected ProcessLost, got {other:?}"),
        }
    }
    let after: RestoreReport = restore(session_id, &journal).await.unwrap();
    assert!(after.orphans.is_empty(), "lost processes are terminal");
    assert!(after.pending.is_empty());
    let records = replay_all(&journal, session_id).await.unwrap();
    assert_eq!(
        records.len() as u64,
        journal.last_seq(session_id).await.unwrap()
    );
}

/// The same crash story on the PostgreSQL journal (needs a database; see
/// `notify_testkit::postgres`).
#[tokio::test]
async fn crash_between_append_and_dispatch_on_the_postgres_journal() {
    use notify_journal::{PgJournal, PgOptions};
    let Some(url) = notify_testkit::postgres::database_url("session restore on PostgreSQL") else {
        return;
    };
    // Named for the journal schema version: builds at different versions sharing a
    // test database never meet (and refuse) each other's tables.
    let options = PgOptions::default().schema("notify_session_tests_v9");
    let first = PgJournal::connect(&url, options.clone()).await.unwrap();
    crash_between_append_and_dispatch(Arc::new(first), || async move {
        Arc::new(PgJournal::connect(&url, options).await.unwrap()) as Arc<dyn JournalBackend>
    })
    .await;
}

/// A started process in `loop_id` under `handle`, created at `created_s`.
fn started(
    session_id: SessionId,
    loop_id: LoopId,
    handle: &str,
    created_s: i64,
) -> notify_types::ProcessLifecycleMetadata {
    let mut m = lifecycle(session_id, loop_id, ProcessLifecycleKind::Started);
    m.process_handle = handle.into();
    m.process_created_at = notify_types::Timestamp::constant(created_s, 0);
    m.process_started_at = Some(notify_types::Timestamp::constant(created_s + 1, 0));
    m
}

#[tokio::test]
async fn a_reused_handle_is_another_process_and_each_is_declared_lost() {
    // postmortem (review): restore keyed processes by handle alone and derived the
    // lost IDs from (session, handle), so a handle reused after a first incarnation
    // was declared lost collided forever, and the same handle in two loops hid one.
    let journal = MemoryJournal::new();
    let session_id = SessionId::new();
    let (loop_a, loop_b) = (LoopId::new(), LoopId::new());
    let session = Session::new(session_id, Arc::new(journal.clone()));
    let mut consumer_a = session
        .register_loop(LoopConfig::new(session_id, loop_a))
        .unwrap();
    let _consumer_b = session
        .register_loop(LoopConfig::new(session_id, loop_b))
        .unwrap();

    // Incarnation 1 of `build` is orphaned and declared lost.
    session
        .publish_lifecycle(started(session_id, loop_a, "build", 1_000))
        .await
        .unwrap();
    let first = restore(session_id, &journal).await.unwrap();
    assert_eq!(first.orphans.len(), 1);
    let outcome = session.declare_lost(&first.orphans[0]).await.unwrap();
    assert_eq!(outcome.completion, Ok(Notified::Accepted));
    consumer_a.recv().await.unwrap().ack().await.unwrap();

    // Incarnation 2 of `build` in the same loop, and a `build` in another loop.
    session
        .publish_lifecycle(started(session_id, loop_a, "build", 2_000))
        .await
        .unwrap();
    session
        .publish_lifecycle(started(session_id, loop_b, "build", 2_000))
        .await
        .unwrap();
    let second = restore(session_id, &journal).await.unwrap();
    assert_eq!(second.orphans.len(), 2, "{:?}", second.orphans);
    for orphan in &second.orphans {
        let outcome = session.declare_lost(orphan).await.unwrap();
        assert_eq!(outcome.completion, Ok(Notified::Accepted), "{orphan:?}");
        assert!(matches!(
            outcome.event,
            notify_session::Published::New { .. }
        ));
    }
    let got = consumer_a.recv().await.unwrap();
    assert_eq!(got.command_id(), lost_command_id(&second.orphans[0]));
    assert!(
        restore(session_id, &journal)
            .await
            .unwrap()
            .orphans
            .is_empty()
    );
}

#[tokio::test]
async fn a_completion_journaled_before_its_completed_event_is_pending_not_orphaned() {
    // The supervisor journals the completion, then `ProcessCompleted`; a crash between
    // the two must leave the completion to redeliver, not an orphan to declare lost.
    let (journal, session, loop_id, _consumer) = one_loop();
    let session_id = session.id();
    session
        .publish_lifecycle(started(session_id, loop_id, "build", 1_000))
        .await
        .unwrap();
    let mut n = notification(session_id, loop_id);
    n.process_handle = "build".into();
    session.notify_process_completion(n.clone()).await.unwrap();
    drop(session);

    let report = restore(session_id, &journal).await.unwrap();
    assert!(report.orphans.is_empty(), "{:?}", report.orphans);
    assert_eq!(report.pending[&loop_id].len(), 1);
    assert_eq!(report.pending[&loop_id][0].command_id(), n.command_id);
}

#[tokio::test]
async fn a_crash_between_the_lost_completion_and_the_lost_event_is_finished_on_the_next_restore() {
    let (journal, session, loop_id, _consumer) = one_loop();
    let session_id = session.id();
    let orphan = started(session_id, loop_id, "build", 1_000);
    session.publish_lifecycle(orphan.clone()).await.unwrap();
    // The first half of declare_lost, then the crash.
    let lost = notify_types::ProcessCompletionNotification {
        command_id: lost_command_id(&orphan),
        session_id,
        loop_id,
        process_handle: "build".into(),
        state: ProcessLifecycleState::LostOnRestore,
        reason: ProcessTerminalReason::LostOnRestore,
    };
    session.notify_process_completion(lost).await.unwrap();
    drop((session, _consumer));

    let mut report = restore(session_id, &journal).await.unwrap();
    assert_eq!(
        report.orphans,
        vec![orphan.clone()],
        "still an orphan: no ProcessLost yet"
    );
    let session = Session::new(session_id, Arc::new(journal.clone()));
    let _consumer = session
        .register_loop(LoopConfig::new(session_id, loop_id).seed(report.take_pending(loop_id)))
        .unwrap();
    let frames = journal.last_seq(session_id).await.unwrap();
    let outcome = session.declare_lost(&orphan).await.unwrap();
    assert_eq!(outcome.completion, Ok(Notified::Duplicate));
    assert!(matches!(
        outcome.event,
        notify_session::Published::New { .. }
    ));
    assert_eq!(
        journal.last_seq(session_id).await.unwrap(),
        frames + 1,
        "only ProcessLost was added"
    );
    assert!(
        restore(session_id, &journal)
            .await
            .unwrap()
            .orphans
            .is_empty()
    );
}

#[tokio::test]
async fn a_handle_reused_before_its_orphan_was_declared_lost_hides_nothing() {
    // postmortem (review): completions were matched to processes by (loop, handle), so a
    // later process under the same handle finishing made restore forget an earlier
    // orphan under that handle.
    let (journal, session, loop_id, _consumer) = one_loop();
    let session_id = session.id();
    let orphan = started(session_id, loop_id, "build", 1_000);
    session.publish_lifecycle(orphan.clone()).await.unwrap();
    // After a restart, `build` is reused and completes normally.
    let second = started(session_id, loop_id, "build", 2_000);
    session.publish_lifecycle(second.clone()).await.unwrap();
    let mut n = notification(session_id, loop_id);
    n.process_handle = "build".into();
    session.notify_process_completion(n).await.unwrap();
    let mut done = lifecycle(session_id, loop_id, ProcessLifecycleKind::Completed);
    done.process_handle = "build".into();
    done.origin_execution_id = second.origin_execution_id;
    done.process_created_at = second.process_created_at;
    done.process_started_at = second.process_started_at;
    session.publish_lifecycle(done).await.unwrap();

    let report = restore(session_id, &journal).await.unwrap();
    assert_eq!(report.orphans, vec![orphan]);
}
