//! Ending a session: pending notifications refuse the end or are abandoned on the
//! record, and after the end nothing is appended or dispatched: every new notify,
//! publish and ack is refused, while a retry of one journaled before the end gets the
//! truthful answer (a duplicate, or a collision) until the session is purged — in this
//! process, in a restarted one, and after a purge.

// Tests unwrap freely, helpers included: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::sync::Arc;

use notify_journal::{
    JournalBackend, JournalRead, RedbJournal, RedbOptions, SessionState, purge, replay_all,
};
use notify_loop::LoopConfig;
use notify_session::{
    AckError, EndError, IfPending, PublishError, Published, Session, SessionConsumer, restore,
};
use notify_testkit::sample::{lifecycle, notification};
use notify_testkit::{AppendFault, FaultyJournal, MemoryJournal};
use notify_types::{
    CommandId, Disposition, JournalRecord, LoopId, NotificationConsumed, Notified, NotifyError,
    ProcessCompletionNotification, ProcessLifecycleKind, ProcessNotification, SessionEvent,
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

/// Notifications racing the end: each is either taken before the end (then it is
/// consumed or abandoned on the record) or refused as `SessionEnded` — none is
/// journaled and left unrecorded.
///
/// The race is made to happen, and checked: a stream of notifications, one after
/// another, runs from before `end` is called until one is refused, beside 64 sent at
/// once; every journal call takes a millisecond, so calls are in flight while the end
/// runs. A round counts as a race when some notification was decided while `end` was
/// running (called before `end` returned, answered after it was called); rounds are
/// repeated (at most 20) until one is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_racing_the_end_are_recorded_or_refused() {
    let mut raced = Vec::new();
    for _ in 0..20 {
        let n = race_the_end().await;
        raced.push(n);
        if n > 0 {
            break;
        }
    }
    eprintln!("notifications decided while the end ran, by round: {raced:?}");
    assert!(
        raced.last().is_some_and(|n| *n > 0),
        "no notification was decided while the end ran, in {} rounds: the race never \
         happened",
        raced.len()
    );
}

/// One round of [`notifications_racing_the_end_are_recorded_or_refused`]; returns how
/// many notifications were decided while `end` ran.
async fn race_the_end() -> usize {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    let journal = MemoryJournal::new();
    let faulty = notify_testkit::FaultyJournal::new(journal.clone());
    faulty
        .control()
        .set_latency(std::time::Duration::from_millis(1));
    let (session, loop_id, _consumer) = one_loop(Arc::new(faulty));
    let end_called = Arc::new(AtomicBool::new(false));
    let end_returned = Arc::new(AtomicBool::new(false));
    let taken = Arc::new(AtomicUsize::new(0));
    // One notification: its ID, its answer, and whether it was decided while the end
    // ran.
    let send = {
        let (session, end_called, end_returned, taken) = (
            session.clone(),
            Arc::clone(&end_called),
            Arc::clone(&end_returned),
            Arc::clone(&taken),
        );
        move || {
            let (session, end_called, end_returned, taken) = (
                session.clone(),
                Arc::clone(&end_called),
                Arc::clone(&end_returned),
                Arc::clone(&taken),
            );
            async move {
                let n = notification(session.id(), loop_id);
                let id = n.command_id;
                let before_return = !end_returned.load(SeqCst);
                let answer = session.notify_process_completion(n).await;
                let during = before_return && end_called.load(SeqCst);
                if !matches!(answer, Err(NotifyError::SessionEnded { .. })) {
                    taken.fetch_add(1, SeqCst);
                }
                (id, answer, during)
            }
        }
    };
    let stream = tokio::spawn({
        let send = send.clone();
        async move {
            let mut answers = Vec::new();
            // Bounded: the end comes within a few journal calls.
            for _ in 0..100_000 {
                let answer = send().await;
                let refused = matches!(answer.1, Err(NotifyError::SessionEnded { .. }));
                answers.push(answer);
                if refused {
                    break;
                }
            }
            answers
        }
    });
    let burst: Vec<_> = (0..64).map(|_| tokio::spawn(send())).collect();
    // The stream is under way (something was taken) before the end is called.
    while taken.load(SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    end_called.store(true, SeqCst);
    let ended = session.end(IfPending::Abandon).await.unwrap();
    end_returned.store(true, SeqCst);

    let mut answers = stream.await.unwrap();
    assert!(
        matches!(
            answers.last(),
            Some((_, Err(NotifyError::SessionEnded { .. }), _))
        ),
        "the stream ended unrefused"
    );
    for task in burst {
        answers.push(task.await.unwrap());
    }
    let mut accepted: HashSet<CommandId> = HashSet::new();
    let mut refused = 0;
    let mut during = 0;
    for (id, answer, decided_during) in answers {
        during += usize::from(decided_during);
        match answer {
            Ok(_) => {
                accepted.insert(id);
            }
            // Appended before the end, the loop full: journaled, so abandoned.
            Err(NotifyError::DeliveryStopped {
                cause: notify_types::StopCause::Full,
                ..
            }) => {
                accepted.insert(id);
            }
            Err(e) => {
                assert_ended(&e, session.id(), false);
                refused += 1;
            }
        }
    }
    assert!(!accepted.is_empty() && refused > 0);
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
    during
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
    use notify_journal::{JournalError, RedbJournal, RedbOptions};
    use notify_testkit::tamper;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.redb");
    let (session_id, loop_id) = (SessionId::new(), LoopId::new());
    {
        let journal = RedbJournal::open(&path, RedbOptions::default()).unwrap();
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
    let journal = RedbJournal::open(&path, RedbOptions::default()).unwrap();
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

impl notify_journal::layer::JournalReadLayer for Interloper {
    type Inner = MemoryJournal;
    fn inner(&self) -> &MemoryJournal {
        &self.inner
    }
}

impl notify_journal::layer::JournalLayer for Interloper {
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
    fn append_all(
        &self,
        session: SessionId,
        records: Vec<JournalRecord>,
        if_head: Option<u64>,
    ) -> notify_journal::BoxFuture<
        '_,
        Result<Vec<notify_journal::AppendOutcome>, notify_journal::AppendError>,
    > {
        let foreign = if records.iter().any(|r| r.type_name() == self.on) {
            self.foreign.lock().unwrap().pop_front()
        } else {
            None
        };
        Box::pin(async move {
            if let Some(foreign) = foreign {
                self.inner.append(session, foreign).await.unwrap();
            }
            self.inner.append_all(session, records, if_head).await
        })
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

/// One appended after the reading, just before the group of abandonments and marker,
/// moves the session's head: the group, conditional on the head the end read, writes
/// nothing, and the next reading abandons that one too.
/// (While the abandonments and the marker were appended one by one, this notification
/// was reported unresolved: journaled, neither consumed nor abandoned.)
#[tokio::test]
async fn a_notification_appended_just_before_the_marker_is_abandoned_too() {
    let (ended, foreign, journal) = end_with_interloper("SessionEnded", 1).await;
    assert!(ended.unresolved.is_empty(), "{ended:?}");
    assert!(ended.abandoned.contains(&foreign[0]), "{ended:?}");
    let kinds = kinds(&journal, ended.session_id).await;
    assert_eq!(
        kinds,
        [
            "ProcessNotification",
            "ProcessNotification",
            "NotificationAbandoned",
            "NotificationAbandoned",
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

/// The commands of `session`'s log journaled both as consumed and as abandoned.
async fn consumed_and_abandoned(
    journal: &dyn JournalBackend,
    session: SessionId,
) -> Vec<CommandId> {
    let frames = replay_all(journal, session).await.unwrap();
    let mut consumed = HashSet::new();
    let mut abandoned = HashSet::new();
    for (_, record) in &frames {
        match record {
            JournalRecord::Event(SessionEvent::NotificationConsumed(c)) => {
                consumed.insert(c.cause());
            }
            JournalRecord::Event(SessionEvent::NotificationAbandoned(a)) => {
                abandoned.insert(a.cause());
            }
            _ => {}
        }
    }
    consumed.intersection(&abandoned).copied().collect()
}

/// After an end that failed, a consumer asks for more: it must get nothing. Should it
/// get something anyway, it acknowledges it, as a consumer would, so that the journal
/// shows what that costs.
async fn receive_after_a_failed_end(consumer: &mut SessionConsumer) -> Option<CommandId> {
    let received = consumer.recv().await?;
    let id = received.notification().command_id();
    // Refused if the session ended; journaled otherwise.
    let _ = received.ack().await;
    Some(id)
}

/// `end(Abandon)` whose group (abandonments and marker) the journal fails, then the
/// same end again; on any backend, with the failure `fault`.
async fn a_failed_end_is_whole_or_nothing<B>(journal: B, fault: AppendFault)
where
    B: JournalBackend + Clone + 'static,
{
    let faulty = FaultyJournal::new(journal.clone());
    let control = faulty.control();
    let (session, loop_id, mut consumer) = one_loop(Arc::new(faulty));
    let mut pending = Vec::new();
    for _ in 0..2 {
        let n = notification(session.id(), loop_id);
        session.notify_process_completion(n.clone()).await.unwrap();
        pending.push(n.command_id);
    }
    let persisted = matches!(fault, AppendFault::PersistedButFailed);
    control.fail_key(*notify_types::ended_event_id(session.id()).as_uuid(), fault);
    match session.end(IfPending::Abandon).await {
        Err(EndError::Journal(notify_journal::AppendError::CommitFailed(_))) => {}
        other => panic!("want the injected CommitFailed, got {other:?}"),
    }
    assert_eq!(control.stats().faults_injected, 1, "the fault never fired");
    // Nothing abandoned (perhaps) is delivered after the failed end.
    let delivered = receive_after_a_failed_end(&mut consumer).await;
    let twice = consumed_and_abandoned(&journal, session.id()).await;
    assert!(
        twice.is_empty(),
        "consumed and abandoned both journaled for {twice:?}"
    );
    assert_eq!(
        delivered, None,
        "a notification was delivered after the failed end"
    );
    // The abandonments and the marker committed together, or neither did.
    let journaled = kinds(&journal, session.id()).await;
    let head = if persisted {
        vec![
            "ProcessNotification",
            "ProcessNotification",
            "NotificationAbandoned",
            "NotificationAbandoned",
            "SessionEnded",
        ]
    } else {
        vec!["ProcessNotification", "ProcessNotification"]
    };
    assert_eq!(journaled, head);
    // Ending again completes it.
    let ended = session.end(IfPending::Abandon).await.unwrap();
    assert_eq!(ended.already, persisted, "{ended:?}");
    if !persisted {
        assert_eq!(ended.abandoned, pending);
    }
    assert_eq!(ended.seq, 5);
    assert_eq!(
        kinds(&journal, session.id()).await,
        [
            "ProcessNotification",
            "ProcessNotification",
            "NotificationAbandoned",
            "NotificationAbandoned",
            "SessionEnded",
        ]
    );
    assert!(consumer.recv().await.is_none());
    assert!(
        consumed_and_abandoned(&journal, session.id())
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn a_failed_end_delivers_nothing_abandoned_on_memory() {
    for fault in [
        AppendFault::commit_failed(),
        AppendFault::PersistedButFailed,
    ] {
        a_failed_end_is_whole_or_nothing(MemoryJournal::new(), fault).await;
    }
}

#[tokio::test]
async fn a_failed_end_delivers_nothing_abandoned_on_redb() {
    for fault in [
        AppendFault::commit_failed(),
        AppendFault::PersistedButFailed,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let journal = RedbJournal::open(dir.path().join("j.redb"), RedbOptions::default()).unwrap();
        a_failed_end_is_whole_or_nothing(journal.clone(), fault).await;
        journal.close();
    }
}

#[tokio::test]
async fn a_failed_end_delivers_nothing_abandoned_on_postgres() {
    use notify_journal::{PgJournal, PgOptions};
    let Some(url) = notify_testkit::postgres::database_url("a failed end on PostgreSQL") else {
        return;
    };
    let schema = format!("ns_end_atomic_{}", notify_types::Uuid::now_v7().simple());
    let options = PgOptions::default().schema(&schema);
    for fault in [
        AppendFault::commit_failed(),
        AppendFault::PersistedButFailed,
    ] {
        let journal = Arc::new(PgJournal::connect(&url, options.clone()).await.unwrap());
        a_failed_end_is_whole_or_nothing(Arc::clone(&journal), fault).await;
        journal.close().await;
    }
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

/// When the write [`HoldTheEnd`] holds reaches the journal.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Commit {
    /// Never.
    Never,
    /// Before the hold: the write committed, its answer never came.
    Before,
    /// Just before the next write: the write was on its way (queued in the engine)
    /// when its future was dropped.
    Later,
}

/// A journal that holds the append carrying a session's end marker forever (once,
/// while armed), committing it as `commit` says: an `end` whose future is dropped
/// right there.
#[derive(Clone)]
struct HoldTheEnd {
    inner: MemoryJournal,
    commit: Commit,
    armed: Arc<std::sync::atomic::AtomicBool>,
    reached: Arc<tokio::sync::Notify>,
    /// The held write, with `Commit::Later`, until the next one.
    later: Arc<std::sync::Mutex<Option<HeldWrite>>>,
}

/// A write [`HoldTheEnd`] keeps for later: its session and records.
type HeldWrite = (SessionId, Vec<JournalRecord>);

impl HoldTheEnd {
    fn holds(&self, records: &[JournalRecord]) -> bool {
        records.iter().any(|r| r.type_name() == "SessionEnded")
            && self.armed.swap(false, std::sync::atomic::Ordering::SeqCst)
    }

    /// Commits (or, with `Commit::Later`, keeps for later) the held write, then
    /// holds forever.
    async fn hold(&self, session: SessionId, records: Vec<JournalRecord>) {
        match self.commit {
            Commit::Before => {
                self.inner.append_all(session, records, None).await.unwrap();
            }
            Commit::Later => *self.later.lock().unwrap() = Some((session, records)),
            Commit::Never => {}
        }
        self.reached.notify_one();
        std::future::pending::<()>().await;
    }

    /// Lets a write kept for later land.
    async fn land(&self) {
        let later = self.later.lock().unwrap().take();
        if let Some((session, records)) = later {
            self.inner.append_all(session, records, None).await.unwrap();
        }
    }
}

impl notify_journal::layer::JournalReadLayer for HoldTheEnd {
    type Inner = MemoryJournal;
    fn inner(&self) -> &MemoryJournal {
        &self.inner
    }
}

impl notify_journal::layer::JournalLayer for HoldTheEnd {
    fn append(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> notify_journal::BoxFuture<
        '_,
        Result<notify_journal::AppendOutcome, notify_journal::AppendError>,
    > {
        let hold = self.holds(std::slice::from_ref(&record));
        Box::pin(async move {
            if hold {
                self.hold(session, vec![record.clone()]).await;
            }
            self.land().await;
            self.inner.append(session, record).await
        })
    }
    fn append_all(
        &self,
        session: SessionId,
        records: Vec<JournalRecord>,
        if_head: Option<u64>,
    ) -> notify_journal::BoxFuture<
        '_,
        Result<Vec<notify_journal::AppendOutcome>, notify_journal::AppendError>,
    > {
        let hold = self.holds(&records);
        Box::pin(async move {
            if hold {
                self.hold(session, records.clone()).await;
            }
            self.land().await;
            self.inner.append_all(session, records, if_head).await
        })
    }
}

/// An `end(Abandon)` whose future is dropped while the append of its end marker is
/// in flight (committed, never committed, or committing after the next end read the
/// journal): the consumer receives nothing, no command is both consumed and
/// abandoned, and ending again completes the end and answers the marker's seq.
///
/// postmortem (`Commit::Later`, found by the model test): the next end, refused
/// because the dropped end's group committed after its reading, answered the head of
/// that reading as the marker's seq.
#[tokio::test]
async fn an_end_dropped_midway_delivers_nothing_abandoned() {
    for commit in [Commit::Never, Commit::Before, Commit::Later] {
        let memory = MemoryJournal::new();
        let journal = HoldTheEnd {
            inner: memory.clone(),
            commit,
            armed: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            reached: Arc::new(tokio::sync::Notify::new()),
            later: Arc::new(std::sync::Mutex::new(None)),
        };
        let reached = Arc::clone(&journal.reached);
        let (session, loop_id, mut consumer) = one_loop(Arc::new(journal));
        let mut pending = Vec::new();
        for _ in 0..2 {
            let n = notification(session.id(), loop_id);
            session.notify_process_completion(n.clone()).await.unwrap();
            pending.push(n.command_id);
        }
        {
            let end = session.end(IfPending::Abandon);
            tokio::select! {
                ended = end => panic!("the end finished while its marker was held: {ended:?}"),
                () = reached.notified() => {}
            }
            // The end future is dropped here, its marker's append in flight.
        }
        let delivered = receive_after_a_failed_end(&mut consumer).await;
        let twice = consumed_and_abandoned(&memory, session.id()).await;
        assert!(
            twice.is_empty(),
            "{commit:?}: consumed and abandoned both journaled for {twice:?}"
        );
        assert_eq!(
            delivered, None,
            "{commit:?}: delivered after the dropped end"
        );
        let ended = session.end(IfPending::Abandon).await.unwrap();
        assert_eq!(
            ended.already,
            commit != Commit::Never,
            "{commit:?}: {ended:?}"
        );
        if commit == Commit::Never {
            assert_eq!(ended.abandoned, pending);
        }
        assert_eq!(ended.seq, 5, "{commit:?}: {ended:?}");
        assert_eq!(
            kinds(&memory, session.id()).await,
            [
                "ProcessNotification",
                "ProcessNotification",
                "NotificationAbandoned",
                "NotificationAbandoned",
                "SessionEnded",
            ]
        );
        assert!(consumer.recv().await.is_none());
    }
}
