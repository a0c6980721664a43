//! A retry after the end gets the truthful answer: what was journaled before the end
//! is a duplicate (or a collision), anything new is refused, until the session is
//! purged — in this process, in a restarted one, and after a purge.

// Tests unwrap freely, helpers included: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod end_support;

use std::sync::Arc;

use end_support::{assert_ended, drop_schema, end_abandoning, one_loop};
use notify_journal::{JournalBackend, JournalRead, SessionState, purge};
use notify_loop::LoopConfig;
use notify_session::{IfPending, PublishError, Published, Session, restore};
use notify_testkit::MemoryJournal;
use notify_testkit::sample::{lifecycle, notification};
use notify_types::{
    JournalRecord, LoopId, NotificationConsumed, Notified, NotifyError,
    ProcessCompletionNotification, ProcessLifecycleKind, ProcessNotification, SessionEvent,
    SessionId, Timestamp,
};

/// The seq of `record`'s key in `journal`.
async fn seq_of(journal: &dyn JournalBackend, session: SessionId, record: JournalRecord) -> u64 {
    journal
        .lookup(session, record.key())
        .await
        .unwrap()
        .unwrap()
}

/// A supervisor whose first attempt ended with an unknown outcome retries after the
/// end: what was journaled before the end is a duplicate (consumed or abandoned on the
/// record), the same ID with another payload a collision naming the original frame,
/// and only a new ID is refused — for notifications and lifecycle events alike. Nothing
/// is appended, dispatched or broadcast; once purged, every ID is refused as purged.
#[tokio::test]
async fn a_retry_after_the_end_gets_the_truthful_answer() {
    let journal = MemoryJournal::new();
    let (session, loop_id, mut consumer) = one_loop(Arc::new(journal.clone()));
    let id = session.id();
    let consumed = notification(id, loop_id);
    session
        .notify_process_completion(consumed.clone())
        .await
        .unwrap();
    consumer.recv().await.unwrap().ack().await.unwrap();
    let abandoned = notification(id, loop_id);
    session
        .notify_process_completion(abandoned.clone())
        .await
        .unwrap();
    let started = lifecycle(id, loop_id, ProcessLifecycleKind::Started);
    let Published::New { seq: started_seq } =
        session.publish_lifecycle(started.clone()).await.unwrap()
    else {
        panic!("the event is new");
    };
    let ended = session.end(IfPending::Abandon).await.unwrap();
    assert_eq!(ended.abandoned, vec![abandoned.command_id]);
    let mut events = session.subscribe();
    let last = journal.last_seq(id).await.unwrap();

    for n in [&consumed, &abandoned] {
        assert_eq!(
            session.notify_process_completion(n.clone()).await.unwrap(),
            Notified::Duplicate,
            "retry of {} after the end",
            n.command_id
        );
    }
    let original = seq_of(
        &journal,
        id,
        ProcessNotification::new(abandoned.clone()).into(),
    )
    .await;
    let reused = ProcessCompletionNotification {
        process_handle: "another-process".into(),
        ..abandoned.clone()
    };
    match session.notify_process_completion(reused).await {
        Err(NotifyError::Collision { command_id, seq }) => {
            assert_eq!((command_id, seq), (abandoned.command_id, original));
        }
        other => panic!("want Collision at seq {original}, got {other:?}"),
    }
    let e = session
        .notify_process_completion(notification(id, loop_id))
        .await
        .unwrap_err();
    assert_ended(&e, id, false);

    assert_eq!(
        session.publish_lifecycle(started.clone()).await.unwrap(),
        Published::Duplicate { seq: started_seq }
    );
    let mut forged = started.clone();
    forged.process_handle.push_str("-other");
    match session.publish_lifecycle(forged).await {
        Err(PublishError::Collision { event_id, seq }) => {
            assert_eq!((event_id, seq), (started.event_id, started_seq));
        }
        other => panic!("want PublishError::Collision, got {other:?}"),
    }
    match session
        .publish_lifecycle(lifecycle(id, loop_id, ProcessLifecycleKind::Started))
        .await
    {
        Err(PublishError::SessionEnded { session_id, purged }) => {
            assert_eq!((session_id, purged), (id, false));
        }
        other => panic!("want PublishError::SessionEnded, got {other:?}"),
    }

    // Nothing appended, dispatched or broadcast.
    assert_eq!(journal.last_seq(id).await.unwrap(), last);
    assert!(consumer.recv().await.is_none());
    assert!(matches!(
        events.try_recv(),
        Err(tokio::sync::broadcast::error::TryRecvError::Empty)
    ));

    // Purged: every ID is refused, and says so.
    purge(&journal, Timestamp::MAX, 2).await.unwrap();
    for n in [consumed, abandoned, notification(id, loop_id)] {
        let e = session.notify_process_completion(n).await.unwrap_err();
        assert_ended(&e, id, true);
    }
    match session.publish_lifecycle(started).await {
        Err(PublishError::SessionEnded { session_id, purged }) => {
            assert_eq!((session_id, purged), (id, true));
        }
        other => panic!("want PublishError::SessionEnded (purged), got {other:?}"),
    }
}

/// An acknowledgement whose consumption was journaled before the end (by another
/// handle of the session, here through the journal itself) is done: `Ok`, nothing
/// appended.
#[tokio::test]
async fn an_ack_journaled_before_the_end_is_done_after_it() {
    let journal = MemoryJournal::new();
    let (session, loop_id, mut consumer) = one_loop(Arc::new(journal.clone()));
    let id = session.id();
    let n = notification(id, loop_id);
    session.notify_process_completion(n.clone()).await.unwrap();
    let received = consumer.recv().await.unwrap();
    let consumption = JournalRecord::from(SessionEvent::NotificationConsumed(
        NotificationConsumed::new(id, loop_id, n.command_id),
    ));
    journal.append(id, consumption).await.unwrap();
    // Nothing pending: the end needs no abandonment.
    let ended = session.end(IfPending::Refuse).await.unwrap();
    assert!(ended.abandoned.is_empty());
    let last = journal.last_seq(id).await.unwrap();
    received.ack().await.unwrap();
    assert_eq!(journal.last_seq(id).await.unwrap(), last);
}

/// A restarted process (a new `Session` on the same journal) is refused by the journal
/// itself; after a purge the refusal says so, and restore reports the tombstone.
async fn restarted_process_is_refused(
    first: Arc<dyn JournalBackend>,
    journal: Arc<dyn JournalBackend>,
) {
    restarted_process_is_refused_with(first, move || journal).await;
}

/// [`restarted_process_is_refused`], the restarted process's journal opened by `reopen`
/// once the first process's session (and its journal handle) is gone.
async fn restarted_process_is_refused_with(
    first: Arc<dyn JournalBackend>,
    reopen: impl FnOnce() -> Arc<dyn JournalBackend>,
) {
    let (session_id, loop_id) = (SessionId::new(), LoopId::new());
    let old = notification(session_id, loop_id);
    end_abandoning(first, old.clone()).await;
    let journal: Arc<dyn JournalBackend> = reopen();
    let report = restore(session_id, journal.as_ref()).await.unwrap();
    assert!(matches!(
        report.state,
        SessionState::Ended { last_seq: 3, .. }
    ));
    let session = Session::new(session_id, journal.clone());
    let mut inbox = session
        .register_loop(LoopConfig::new(session_id, loop_id))
        .unwrap();
    // Its handle has not ended, but the journal has: a retry of the notification
    // journaled (and abandoned) before the end is a duplicate and is not dispatched;
    // a new one is refused.
    assert_eq!(
        session
            .notify_process_completion(old.clone())
            .await
            .unwrap(),
        Notified::Duplicate
    );
    let e = session
        .notify_process_completion(notification(session_id, loop_id))
        .await
        .unwrap_err();
    assert_ended(&e, session_id, false);
    assert!(session.shutdown_loop(loop_id).await);
    assert!(inbox.recv().await.is_none(), "nothing was dispatched");
    // Ending in the restarted process finds it ended.
    assert!(session.end(IfPending::Refuse).await.unwrap().already);

    purge(journal.as_ref(), Timestamp::MAX, 2).await.unwrap();
    let fresh = Session::new(session_id, journal.clone());
    let _inbox = fresh
        .register_loop(LoopConfig::new(session_id, loop_id))
        .unwrap();
    for n in [old, notification(session_id, loop_id)] {
        let e = fresh.notify_process_completion(n).await.unwrap_err();
        assert_ended(&e, session_id, true);
    }
    let report = restore(session_id, journal.as_ref()).await.unwrap();
    match report.state {
        SessionState::Purged(t) => assert_eq!((t.last_seq, t.frames), (3, 3)),
        other => panic!("want Purged, got {other:?}"),
    }
    assert_eq!(report.last_seq, 3);
    assert_eq!(report.pending_count(), 0);
}

#[tokio::test]
async fn a_restarted_process_is_refused_on_memory() {
    let journal = MemoryJournal::new();
    restarted_process_is_refused(Arc::new(journal.clone()), Arc::new(journal)).await;
}

#[tokio::test]
async fn a_restarted_process_is_refused_on_redb() {
    use notify_journal::{RedbJournal, RedbOptions};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.redb");
    let first = RedbJournal::open(&path, RedbOptions::default()).unwrap();
    // The first process's handle is closed before the restart opens the file again.
    let first: Arc<dyn JournalBackend> = Arc::new(first);
    let reopen = {
        let path = path.clone();
        move || -> Arc<dyn JournalBackend> {
            Arc::new(RedbJournal::open(&path, RedbOptions::default()).unwrap())
        }
    };
    restarted_process_is_refused_with(first, reopen).await;
}

/// The restarted-process story on the PostgreSQL journal: the second journal is a
/// new connection (another process, as far as the database knows). A schema of its
/// own, since the story purges every ended session (needs a database; see
/// `notify_testkit::postgres`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_process_is_refused_on_postgres() {
    use notify_journal::{PgJournal, PgOptions};
    let Some(url) = notify_testkit::postgres::database_url("session end on PostgreSQL") else {
        return;
    };
    let schema = format!("ns_end_{}", notify_types::Uuid::now_v7().simple());
    let options = PgOptions::default().schema(&schema);
    let first = PgJournal::connect(&url, options.clone()).await.unwrap();
    let second = PgJournal::connect(&url, options).await.unwrap();
    restarted_process_is_refused(Arc::new(first), Arc::new(second)).await;
    drop_schema(&url, &schema).await;
}
