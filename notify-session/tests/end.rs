//! Ending a session: pending notifications refuse the end or are abandoned on the
//! record, and after the end nothing is appended or dispatched: every new notify,
//! publish and ack is refused. Retries after the end are in `end_retry.rs`, an end
//! raced by notifications or by another handle in `end_races.rs`, an end that fails
//! or is dropped midway in `end_atomic.rs`.

// Tests unwrap freely, helpers included: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod end_support;

use std::sync::Arc;

use end_support::{assert_ended, end_abandoning, kinds, one_loop};
use notify_journal::{JournalRead, SessionState};
use notify_loop::LoopConfig;
use notify_session::{AckError, EndError, IfPending, PublishError, Session, restore};
use notify_testkit::MemoryJournal;
use notify_testkit::sample::{lifecycle, notification};
use notify_types::{LoopId, ProcessLifecycleKind, SessionId};

#[tokio::test]
async fn pending_notifications_refuse_the_end_and_nothing_is_written() {
    let journal = MemoryJournal::new();
    let (session, loop_id, _consumer) = one_loop(Arc::new(journal.clone()));
    for _ in 0..3 {
        session
            .notify_process_completion(notification(session.id(), loop_id))
            .await
            .unwrap();
    }
    let before = journal.last_seq(session.id()).await.unwrap();
    match session.end(IfPending::Refuse).await {
        Err(EndError::Pending { count: 3 }) => {}
        other => panic!("want Pending {{ count: 3 }}, got {other:?}"),
    }
    assert_eq!(journal.last_seq(session.id()).await.unwrap(), before);
    assert_eq!(
        journal.session_state(session.id()).await.unwrap(),
        SessionState::Live
    );
    // Still live: a new notification is taken.
    session
        .notify_process_completion(notification(session.id(), loop_id))
        .await
        .unwrap();
}

#[tokio::test]
async fn abandoning_journals_each_pending_notification_before_the_end() {
    let journal = MemoryJournal::new();
    let (session, loop_id, mut consumer) = one_loop(Arc::new(journal.clone()));
    let consumed = notification(session.id(), loop_id);
    session
        .notify_process_completion(consumed.clone())
        .await
        .unwrap();
    consumer.recv().await.unwrap().ack().await.unwrap();
    let mut pending = Vec::new();
    for _ in 0..2 {
        let n = notification(session.id(), loop_id);
        session.notify_process_completion(n.clone()).await.unwrap();
        pending.push(n.command_id);
    }
    let ended = session.end(IfPending::Abandon).await.unwrap();
    assert_eq!(ended.abandoned, pending);
    assert!(!ended.already);
    assert_eq!(
        kinds(&journal, session.id()).await,
        [
            "ProcessNotification",
            "NotificationConsumed",
            "ProcessNotification",
            "ProcessNotification",
            "NotificationAbandoned",
            "NotificationAbandoned",
            "SessionEnded",
        ]
    );
    assert_eq!(ended.seq, 7);
    assert!(matches!(
        journal.session_state(session.id()).await.unwrap(),
        SessionState::Ended { last_seq: 7, .. }
    ));
    // The loop is shut down: the consumer sees its inbox close.
    assert!(consumer.recv().await.is_none());
    // Restore reports the session ended, with nothing to redeliver.
    let report = restore(session.id(), &journal).await.unwrap();
    assert!(report.state.is_ended() && !report.state.is_purged());
    assert_eq!(report.pending_count(), 0);
    assert!(report.orphans.is_empty());
    assert_eq!(report.last_seq, 7);
}

#[tokio::test]
async fn after_the_end_new_notify_publish_and_ack_are_refused_and_nothing_is_appended() {
    let journal = MemoryJournal::new();
    let (session, loop_id, mut consumer) = one_loop(Arc::new(journal.clone()));
    let first = notification(session.id(), loop_id);
    session
        .notify_process_completion(first.clone())
        .await
        .unwrap();
    let received = consumer.recv().await.unwrap();
    session.end(IfPending::Abandon).await.unwrap();
    let last = journal.last_seq(session.id()).await.unwrap();

    // A new notification: refused, never retryable.
    let e = session
        .notify_process_completion(notification(session.id(), loop_id))
        .await
        .unwrap_err();
    assert_ended(&e, session.id(), false);
    let started = lifecycle(session.id(), loop_id, ProcessLifecycleKind::Started);
    match session.publish_lifecycle(started).await {
        Err(PublishError::SessionEnded { session_id, purged }) => {
            assert_eq!((session_id, purged), (session.id(), false));
        }
        other => panic!("want PublishError::SessionEnded, got {other:?}"),
    }
    // Abandoned at the end: its consumption was never journaled, so the ack is new.
    match received.ack().await {
        Err(AckError::SessionEnded { session_id }) => assert_eq!(session_id, session.id()),
        other => panic!("want AckError::SessionEnded, got {other:?}"),
    }
    assert_eq!(journal.last_seq(session.id()).await.unwrap(), last);
    // Ending again is not an error and writes nothing.
    let again = session.end(IfPending::Refuse).await.unwrap();
    assert!(again.already);
    assert_eq!(journal.last_seq(session.id()).await.unwrap(), last);
}

#[tokio::test]
async fn a_headless_session_ends_at_once() {
    let session = Session::headless(SessionId::new());
    let loop_id = LoopId::new();
    let _inbox = session
        .register_loop(LoopConfig::new(session.id(), loop_id))
        .unwrap();
    let ended = session.end(IfPending::Refuse).await.unwrap();
    assert_eq!((ended.seq, ended.already), (0, false));
    assert!(session.is_ended().await);
    let e = session
        .notify_process_completion(notification(session.id(), loop_id))
        .await
        .unwrap_err();
    assert_ended(&e, session.id(), false);
}

/// A journal whose log holds the end marker but whose bookkeeping lost the session's
/// row is damaged: restore names it, never a clean live session with nothing pending.
#[tokio::test]
async fn restore_names_an_end_marker_without_its_session_row() {
    use notify_journal::{JournalError, RedbJournal, RedbOptions};
    use notify_testkit::tamper;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.redb");
    let (session_id, loop_id) = (SessionId::new(), LoopId::new());
    {
        let journal = RedbJournal::open(&path, RedbOptions::default()).unwrap();
        end_abandoning(journal.clone(), notification(session_id, loop_id)).await;
        journal.close();
    }
    tamper::with_txn(&path, |txn| {
        let mut rows = txn
            .open_table(tamper::SESSIONS)
            .map_err(|e| tamper::TamperError::new(format!("open sessions: {e}")))?;
        rows.remove(session_id.as_uuid().as_u128())
            .map_err(|e| tamper::TamperError::new(format!("remove row: {e}")))?;
        Ok(())
    })
    .unwrap();
    let journal = RedbJournal::open(&path, RedbOptions::default()).unwrap();
    match restore(session_id, &journal).await {
        Err(notify_session::RestoreError::Replay(JournalError::Corrupt { session, .. })) => {
            assert_eq!(session, session_id);
        }
        other => panic!("want Corrupt, got {other:?}"),
    }
}
