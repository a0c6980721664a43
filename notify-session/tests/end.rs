//! Ending a session: pending notifications refuse the end or are abandoned on the
//! record, and after the end every notify, publish and ack is refused and nothing is
//! appended — in this process, in a restarted one, and after a purge.

// Tests unwrap freely, helpers included: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::sync::Arc;

use notify_journal::{JournalBackend, SessionState, purge, replay_all};
use notify_loop::LoopConfig;
use notify_session::{
    AckError, EndError, IfPending, PublishError, Session, SessionConsumer, restore,
};
use notify_testkit::MemoryJournal;
use notify_testkit::sample::{lifecycle, notification};
use notify_types::{
    CommandId, Disposition, JournalRecord, LoopId, NotifyError, ProcessLifecycleKind, SessionEvent,
    SessionId, Timestamp,
};

fn one_loop(journal: Arc<dyn JournalBackend>) -> (Session, LoopId, SessionConsumer) {
    let session = Session::new(SessionId::new(), journal);
    let loop_id = LoopId::new();
    let consumer = session
        .register_loop(LoopConfig::new(session.id(), loop_id))
        .unwrap();
    (session, loop_id, consumer)
}

fn assert_ended(e: &NotifyError, session: SessionId, purged: bool) {
    match e {
        NotifyError::SessionEnded {
            session_id,
            purged: p,
        } => {
            assert_eq!((*session_id, *p), (session, purged));
            assert!(!e.is_retryable());
            assert_eq!(e.disposition(), Some(Disposition::Stopped));
        }
        other => panic!("want SessionEnded, got {other:?}"),
    }
}

/// The kinds of a session's frames, in order.
async fn kinds(journal: &dyn JournalBackend, session: SessionId) -> Vec<&'static str> {
    replay_all(journal, session)
        .await
        .unwrap()
        .iter()
        .map(|(_, r)| r.type_name())
        .collect()
}

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
async fn after_the_end_notify_publish_and_ack_are_refused_and_nothing_is_appended() {
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

    // A retry of the old ID and a new notification: refused, never retryable.
    for n in [first, notification(session.id(), loop_id)] {
        let e = session.notify_process_completion(n).await.unwrap_err();
        assert_ended(&e, session.id(), false);
    }
    let started = lifecycle(session.id(), loop_id, ProcessLifecycleKind::Started);
    match session.publish_lifecycle(started).await {
        Err(PublishError::SessionEnded { session_id, purged }) => {
            assert_eq!((session_id, purged), (session.id(), false));
        }
        other => panic!("want PublishError::SessionEnded, got {other:?}"),
    }
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
    {
        let session = Session::new(session_id, first);
        let _inbox = session
            .register_loop(LoopConfig::new(session_id, loop_id))
            .unwrap();
        session
            .notify_process_completion(old.clone())
            .await
            .unwrap();
        session.end(IfPending::Abandon).await.unwrap();
    }
    let journal: Arc<dyn JournalBackend> = reopen();
    let report = restore(session_id, journal.as_ref()).await.unwrap();
    assert!(matches!(
        report.state,
        SessionState::Ended { last_seq: 3, .. }
    ));
    let session = Session::new(session_id, journal.clone());
    let _inbox = session
        .register_loop(LoopConfig::new(session_id, loop_id))
        .unwrap();
    let e = session
        .notify_process_completion(old.clone())
        .await
        .unwrap_err();
    assert_ended(&e, session_id, false);
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
    use notify_journal::{JournalOptions, RedbJournal};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.redb");
    let first = RedbJournal::open(&path, JournalOptions::default()).unwrap();
    // The first process's handle is closed before the restart opens the file again.
    let first: Arc<dyn JournalBackend> = Arc::new(first);
    let reopen = {
        let path = path.clone();
        move || -> Arc<dyn JournalBackend> {
            Arc::new(RedbJournal::open(&path, JournalOptions::default()).unwrap())
        }
    };
    restarted_process_is_refused_with(first, reopen).await;
}

/// Notifications racing the end: each is either taken before the end (then it is
/// consumed or abandoned on the record) or refused as `SessionEnded` — none is
/// journaled and left unrecorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_racing_the_end_are_recorded_or_refused() {
    let journal = MemoryJournal::new();
    let (session, loop_id, _consumer) = one_loop(Arc::new(journal.clone()));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let session = session.clone();
        let n = notification(session.id(), loop_id);
        tasks.push(tokio::spawn(async move {
            (n.command_id, session.notify_process_completion(n).await)
        }));
    }
    let ended = session.end(IfPending::Abandon).await.unwrap();
    let mut accepted: HashSet<CommandId> = HashSet::new();
    for task in tasks {
        match task.await.unwrap() {
            (id, Ok(_)) => {
                accepted.insert(id);
            }
            // Appended before the end, the loop full: journaled, so abandoned.
            (
                id,
                Err(NotifyError::DeliveryStopped {
                    cause: notify_types::StopCause::Full,
                    ..
                }),
            ) => {
                accepted.insert(id);
            }
            (_, Err(e)) => assert_ended(&e, session.id(), false),
        }
    }
    let frames = replay_all(&journal, session.id()).await.unwrap();
    let mut commands = HashSet::new();
    let mut abandoned = HashSet::new();
    for (_, record) in &frames {
        match record {
            JournalRecord::Command(c) => {
                commands.insert(c.command_id());
            }
            JournalRecord::Event(SessionEvent::NotificationAbandoned(a)) => {
                abandoned.insert(a.cause());
            }
            _ => {}
        }
    }
    assert_eq!(commands, accepted, "journaled = taken before the end");
    assert_eq!(abandoned, commands, "every journaled one is abandoned");
    assert_eq!(ended.abandoned.len(), commands.len());
    assert!(matches!(
        frames.last(),
        Some((_, JournalRecord::Event(SessionEvent::SessionEnded(_))))
    ));
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
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

/// A journal whose log holds the end marker but whose bookkeeping lost the session's
/// row is damaged: restore names it, never a clean live session with nothing pending.
#[tokio::test]
async fn restore_names_an_end_marker_without_its_session_row() {
    use notify_journal::{JournalError, JournalOptions, RedbJournal};
    use notify_testkit::tamper;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.redb");
    let (session_id, loop_id) = (SessionId::new(), LoopId::new());
    {
        let journal = RedbJournal::open(&path, JournalOptions::default()).unwrap();
        let session = Session::new(session_id, journal.clone());
        let _inbox = session
            .register_loop(LoopConfig::new(session_id, loop_id))
            .unwrap();
        session
            .notify_process_completion(notification(session_id, loop_id))
            .await
            .unwrap();
        session.end(IfPending::Abandon).await.unwrap();
        drop(session);
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
    let journal = RedbJournal::open(&path, JournalOptions::default()).unwrap();
    match restore(session_id, &journal).await {
        Err(notify_session::RestoreError::Replay(JournalError::Corrupt { session, .. })) => {
            assert_eq!(session, session_id);
        }
        other => panic!("want Corrupt, got {other:?}"),
    }
}

/// Another handle of the session (another process, in effect): a journal wrapper that,
/// just before it forwards an append of kind `on`, appends the next of `foreign` itself
/// (one each time, while any is left).
struct Interloper {
    inner: MemoryJournal,
    on: &'static str,
    foreign: std::sync::Mutex<std::collections::VecDeque<JournalRecord>>,
}

impl JournalBackend for Interloper {
    fn append(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> notify_journal::BoxFuture<
        '_,
        Result<notify_journal::AppendOutcome, notify_journal::AppendError>,
    > {
        let foreign = if record.type_name() == self.on {
            self.foreign.lock().unwrap().pop_front()
        } else {
            None
        };
        Box::pin(async move {
            if let Some(foreign) = foreign {
                self.inner.append(session, foreign).await.unwrap();
            }
            self.inner.append(session, record).await
        })
    }
    fn lookup(
        &self,
        session: SessionId,
        key: notify_types::Uuid,
    ) -> notify_journal::BoxFuture<'_, Result<Option<u64>, notify_journal::JournalError>> {
        self.inner.lookup(session, key)
    }
    fn replay(
        &self,
        session: SessionId,
        from_seq: u64,
        limit: usize,
    ) -> notify_journal::BoxFuture<
        '_,
        Result<Vec<notify_journal::Frame>, notify_journal::JournalError>,
    > {
        self.inner.replay(session, from_seq, limit)
    }
    fn last_seq(
        &self,
        session: SessionId,
    ) -> notify_journal::BoxFuture<'_, Result<u64, notify_journal::JournalError>> {
        self.inner.last_seq(session)
    }
    fn sessions(
        &self,
    ) -> notify_journal::BoxFuture<'_, Result<Vec<SessionId>, notify_journal::JournalError>> {
        self.inner.sessions()
    }
    fn sessions_after(
        &self,
        after: Option<SessionId>,
        limit: usize,
    ) -> notify_journal::BoxFuture<'_, Result<Vec<SessionId>, notify_journal::JournalError>> {
        self.inner.sessions_after(after, limit)
    }
    fn session_state(
        &self,
        session: SessionId,
    ) -> notify_journal::BoxFuture<'_, Result<SessionState, notify_journal::JournalError>> {
        self.inner.session_state(session)
    }
    fn purge_step(
        &self,
        ended_before: Timestamp,
        max_frames: usize,
    ) -> notify_journal::BoxFuture<
        '_,
        Result<notify_journal::PurgeStep, notify_journal::JournalError>,
    > {
        self.inner.purge_step(ended_before, max_frames)
    }
    fn drop_tombstones(
        &self,
        purged_before: Timestamp,
        limit: usize,
    ) -> notify_journal::BoxFuture<'_, Result<u64, notify_journal::JournalError>> {
        self.inner.drop_tombstones(purged_before, limit)
    }
}

/// Ends a session with one pending notification while "another handle" appends
/// `foreign` notifications, one just before each append of kind `on`; answers the end,
/// the foreign notifications' command IDs and the journal.
async fn end_with_interloper(
    on: &'static str,
    foreign: usize,
) -> (notify_session::Ended, Vec<CommandId>, MemoryJournal) {
    let memory = MemoryJournal::new();
    let (session_id, loop_id) = (SessionId::new(), LoopId::new());
    let foreign: Vec<_> = (0..foreign)
        .map(|_| notification(session_id, loop_id))
        .collect();
    let journal = Interloper {
        inner: memory.clone(),
        on,
        foreign: std::sync::Mutex::new(
            foreign
                .iter()
                .map(|n| JournalRecord::Command(n.clone().into()))
                .collect(),
        ),
    };
    let session = Session::new(session_id, journal);
    let _inbox = session
        .register_loop(LoopConfig::new(session_id, loop_id))
        .unwrap();
    session
        .notify_process_completion(notification(session_id, loop_id))
        .await
        .unwrap();
    let ended = session.end(IfPending::Abandon).await.unwrap();
    (
        ended,
        foreign.iter().map(|n| n.command_id).collect(),
        memory,
    )
}

/// A notification another handle appends while this end is abandoning is found by the
/// next reading and abandoned too.
#[tokio::test]
async fn a_notification_appended_while_abandoning_is_abandoned_too() {
    let (ended, foreign, _) = end_with_interloper("NotificationAbandoned", 1).await;
    assert!(ended.abandoned.contains(&foreign[0]), "{ended:?}");
    assert_eq!(ended.abandoned.len(), 2);
    assert!(ended.unresolved.is_empty());
}

/// One appended after the last reading, just before the end marker, cannot be
/// abandoned any more: the end reports it rather than leaving it silent.
#[tokio::test]
async fn a_notification_appended_just_before_the_marker_is_reported_unresolved() {
    let (ended, foreign, journal) = end_with_interloper("SessionEnded", 1).await;
    assert_eq!(ended.unresolved, foreign);
    assert!(!ended.abandoned.contains(&foreign[0]));
    let kinds = kinds(&journal, ended.session_id).await;
    assert_eq!(
        kinds,
        [
            "ProcessNotification",
            "NotificationAbandoned",
            "ProcessNotification",
            "SessionEnded"
        ]
    );
}

/// Another handle that appends again during every round of abandoning cannot hold the
/// end off: after its last reading the end goes, and what is still pending is
/// reported, never dropped silently.
#[tokio::test]
async fn an_end_raced_by_endless_appends_reports_what_it_could_not_abandon() {
    let (ended, foreign, journal) = end_with_interloper("NotificationAbandoned", 100).await;
    // Every appended notification is either abandoned or reported.
    let frames = replay_all(&journal, ended.session_id).await.unwrap();
    let commands: Vec<CommandId> = frames
        .iter()
        .filter_map(|(_, r)| match r {
            JournalRecord::Command(c) => Some(c.command_id()),
            _ => None,
        })
        .collect();
    assert!(!ended.unresolved.is_empty(), "{ended:?}");
    assert!(ended.abandoned.len() < 100);
    for id in &commands {
        assert!(
            ended.abandoned.contains(id) ^ ended.unresolved.contains(id),
            "{id} is neither abandoned nor reported (or both): {ended:?}"
        );
    }
    assert!(
        foreign
            .iter()
            .take(ended.abandoned.len())
            .all(|id| commands.contains(id))
    );
}
