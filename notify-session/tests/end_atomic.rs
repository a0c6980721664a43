//! An end that fails or is dropped midway is whole or nothing: the abandonments and the
//! end marker commit together or not at all, nothing abandoned is delivered, and ending
//! again completes the end — on memory, redb and PostgreSQL.

// Tests unwrap freely, helpers included: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod end_support;

use std::collections::HashSet;
use std::sync::Arc;

use end_support::hooked::{BeforeAppend, Hooked};
use end_support::{drop_schema, kinds, one_loop};
use notify_journal::{JournalBackend, RedbJournal, RedbOptions, replay_all};
use notify_session::{EndError, IfPending, Session, SessionConsumer};
use notify_testkit::sample::notification;
use notify_testkit::{AppendFault, FaultyJournal, MemoryJournal};
use notify_types::{CommandId, JournalRecord, LoopId, SessionEvent, SessionId};

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

/// The kinds of an ended session's frames: two notifications, both abandoned, then
/// the end marker.
const ENDED: [&str; 5] = [
    "ProcessNotification",
    "ProcessNotification",
    "NotificationAbandoned",
    "NotificationAbandoned",
    "SessionEnded",
];

/// Sends two notifications to `session`'s loop `loop_id`: their command IDs.
async fn two_pending(session: &Session, loop_id: LoopId) -> Vec<CommandId> {
    let mut pending = Vec::new();
    for _ in 0..2 {
        let n = notification(session.id(), loop_id);
        session.notify_process_completion(n.clone()).await.unwrap();
        pending.push(n.command_id);
    }
    pending
}

/// After `after` (an end that failed or was dropped), the consumer receives nothing
/// and no command of `session` is journaled both as consumed and as abandoned.
async fn nothing_delivered(
    consumer: &mut SessionConsumer,
    journal: &dyn JournalBackend,
    session: SessionId,
    after: &str,
) {
    let delivered = receive_after_a_failed_end(consumer).await;
    let twice = consumed_and_abandoned(journal, session).await;
    assert!(
        twice.is_empty(),
        "after {after}: consumed and abandoned both journaled for {twice:?}"
    );
    assert_eq!(
        delivered, None,
        "a notification was delivered after {after}"
    );
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
    let pending = two_pending(&session, loop_id).await;
    let persisted = matches!(fault, AppendFault::PersistedButFailed);
    control.fail_key(*notify_types::ended_event_id(session.id()).as_uuid(), fault);
    match session.end(IfPending::Abandon).await {
        Err(EndError::Journal(notify_journal::AppendError::CommitFailed(_))) => {}
        other => panic!("want the injected CommitFailed, got {other:?}"),
    }
    assert_eq!(control.stats().faults_injected, 1, "the fault never fired");
    // Nothing abandoned (perhaps) is delivered after the failed end.
    nothing_delivered(&mut consumer, &journal, session.id(), "the failed end").await;
    // The abandonments and the marker committed together, or neither did.
    let journaled = kinds(&journal, session.id()).await;
    let head = if persisted {
        ENDED.to_vec()
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
    assert_eq!(kinds(&journal, session.id()).await, ENDED);
    assert!(consumer.recv().await.is_none());
    assert!(
        consumed_and_abandoned(&journal, session.id())
            .await
            .is_empty()
    );
}

/// The failures each backend's end meets: a commit that failed, and one that persisted
/// but answered as failed.
fn faults() -> [AppendFault; 2] {
    [
        AppendFault::commit_failed(),
        AppendFault::PersistedButFailed,
    ]
}

#[tokio::test]
async fn a_failed_end_delivers_nothing_abandoned_on_memory() {
    for fault in faults() {
        a_failed_end_is_whole_or_nothing(MemoryJournal::new(), fault).await;
    }
}

#[tokio::test]
async fn a_failed_end_delivers_nothing_abandoned_on_redb() {
    for fault in faults() {
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
    for fault in faults() {
        let journal = Arc::new(PgJournal::connect(&url, options.clone()).await.unwrap());
        a_failed_end_is_whole_or_nothing(Arc::clone(&journal), fault).await;
        journal.close().await;
    }
    drop_schema(&url, &schema).await;
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

/// A hook that holds the append carrying a session's end marker forever (once, while
/// armed), committing it as `commit` says: an `end` whose future is dropped right
/// there.
struct HoldTheEnd {
    commit: Commit,
    armed: Arc<std::sync::atomic::AtomicBool>,
    reached: Arc<tokio::sync::Notify>,
    /// The held write, with `Commit::Later`, until the next one.
    later: Arc<std::sync::Mutex<Option<HeldWrite>>>,
}

/// A write [`HoldTheEnd`] keeps for later: its session and records.
type HeldWrite = (SessionId, Vec<JournalRecord>);

impl HoldTheEnd {
    /// Commits (or, with `Commit::Later`, keeps for later) the held write, then
    /// holds forever.
    async fn hold(&self, journal: &MemoryJournal, session: SessionId, records: Vec<JournalRecord>) {
        match self.commit {
            Commit::Before => {
                journal.append_all(session, records, None).await.unwrap();
            }
            Commit::Later => *self.later.lock().unwrap() = Some((session, records)),
            Commit::Never => {}
        }
        self.reached.notify_one();
        std::future::pending::<()>().await;
    }

    /// Lets a write kept for later land.
    async fn land(&self, journal: &MemoryJournal) {
        let later = self.later.lock().unwrap().take();
        if let Some((session, records)) = later {
            journal.append_all(session, records, None).await.unwrap();
        }
    }
}

impl BeforeAppend for HoldTheEnd {
    /// Whether this append is the one held.
    type Due = bool;

    fn due(&self, records: &[JournalRecord]) -> bool {
        records.iter().any(|r| r.type_name() == "SessionEnded")
            && self.armed.swap(false, std::sync::atomic::Ordering::SeqCst)
    }

    async fn run(
        &self,
        journal: &MemoryJournal,
        session: SessionId,
        records: &[JournalRecord],
        hold: bool,
    ) {
        if hold {
            self.hold(journal, session, records.to_vec()).await;
        }
        self.land(journal).await;
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
        let hold = HoldTheEnd {
            commit,
            armed: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            reached: Arc::new(tokio::sync::Notify::new()),
            later: Arc::new(std::sync::Mutex::new(None)),
        };
        let reached = Arc::clone(&hold.reached);
        let journal = Hooked {
            journal: memory.clone(),
            hook: hold,
        };
        let (session, loop_id, mut consumer) = one_loop(Arc::new(journal));
        let pending = two_pending(&session, loop_id).await;
        {
            let end = session.end(IfPending::Abandon);
            tokio::select! {
                ended = end => panic!("the end finished while its marker was held: {ended:?}"),
                () = reached.notified() => {}
            }
            // The end future is dropped here, its marker's append in flight.
        }
        let after = format!("the dropped end ({commit:?})");
        nothing_delivered(&mut consumer, &memory, session.id(), &after).await;
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
        assert_eq!(kinds(&memory, session.id()).await, ENDED);
        assert!(consumer.recv().await.is_none());
    }
}
