//! The batch-acknowledgement scenarios (`SessionConsumer::recv_many`,
//! `SessionBatch::ack`), written once and run on each real engine: a redb file
//! (`batch_ack.rs`) and PostgreSQL (`batch_ack_postgres.rs`). Each takes a fresh
//! journal of the engine, wraps it in the testkit's `FaultyJournal` where a scenario
//! needs a refused commit or a slow one, and checks what the journal holds afterwards.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use notify_journal::{
    AppendError, JournalBackend, JournalRead, RedbJournal, RedbOptions, replay_all,
};
use notify_loop::LoopConfig;
use notify_session::{AckError, IfPending, Session, SessionBatch, SessionConsumer, restore};
use notify_testkit::{AppendFault, FaultControl, FaultyJournal};
use notify_types::{
    CommandId, JournalRecord, LoopId, ProcessCompletionNotification, ProcessLifecycleState,
    ProcessTerminalReason, SessionEvent, SessionId,
};
use tokio::sync::broadcast;

/// A fresh redb journal in a temporary directory (kept alive by the `TempDir`).
pub(crate) fn redb() -> (tempfile::TempDir, RedbJournal) {
    let dir = tempfile::tempdir().unwrap();
    let journal =
        RedbJournal::open(dir.path().join("notify.redb"), RedbOptions::default()).unwrap();
    (dir, journal)
}

/// A session over `journal` (wrapped in a `FaultyJournal`), one loop, `n` notified.
pub(crate) struct Fixture<J> {
    pub(crate) session: Session,
    pub(crate) consumer: SessionConsumer,
    pub(crate) journal: J,
    pub(crate) control: FaultControl,
    pub(crate) events: broadcast::Receiver<SessionEvent>,
    pub(crate) notified: Vec<CommandId>,
}

impl<J: JournalBackend + Clone + 'static> Fixture<J> {
    pub(crate) async fn new(journal: J, n: usize) -> Self {
        let faulty = FaultyJournal::new(journal.clone());
        let control = faulty.control();
        let session_id = SessionId::new();
        let loop_id = LoopId::new();
        let session = Session::new(session_id, faulty);
        let consumer = session
            .register_loop(LoopConfig::new(session_id, loop_id))
            .unwrap();
        let events = session.subscribe();
        let mut notified = Vec::new();
        for i in 0..n {
            let note = ProcessCompletionNotification {
                command_id: CommandId::new(),
                session_id,
                loop_id,
                process_handle: format!("build-{i}"),
                state: ProcessLifecycleState::Exited,
                reason: ProcessTerminalReason::Exited,
            };
            notified.push(note.command_id);
            session.notify_process_completion(note).await.unwrap();
        }
        Self {
            session,
            consumer,
            journal,
            control,
            events,
            notified,
        }
    }

    /// What restore hands back now (in order), read from the engine itself.
    pub(crate) async fn pending(&self) -> Vec<CommandId> {
        let report = restore(self.session.id(), &self.journal).await.unwrap();
        report
            .pending
            .values()
            .flatten()
            .map(|n| n.command_id())
            .collect()
    }

    /// The consumptions the engine holds, in journal order.
    pub(crate) async fn consumed(&self) -> Vec<CommandId> {
        consumed(&self.journal, self.session.id()).await
    }

    /// The `NotificationConsumed` events broadcast since the last call.
    pub(crate) fn broadcast(&mut self) -> Vec<CommandId> {
        let mut out = Vec::new();
        while let Ok(event) = self.events.try_recv() {
            if let SessionEvent::NotificationConsumed(c) = event {
                out.push(c.cause());
            }
        }
        out
    }

    /// The next batch, which must come at once.
    pub(crate) async fn batch(&mut self, max: usize) -> SessionBatch {
        tokio::time::timeout(Duration::from_secs(10), self.consumer.recv_many(max))
            .await
            .expect("a batch was ready")
    }
}

/// The consumptions `journal` holds for `session`, in journal order.
pub(crate) async fn consumed(journal: &impl JournalRead, session: SessionId) -> Vec<CommandId> {
    replay_all(journal, session)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|(_, r)| match r {
            JournalRecord::Event(SessionEvent::NotificationConsumed(c)) => Some(c.cause()),
            _ => None,
        })
        .collect()
}

pub(crate) fn ids(batch: &SessionBatch) -> Vec<CommandId> {
    batch.iter().map(|r| r.command_id()).collect()
}

/// Batches come in acceptance order up to their limit; one acknowledgement journals
/// the batch's consumptions together (consecutive frames, in order), broadcasts them
/// in order and releases them; what was dropped comes back, in order.
pub(crate) async fn order_is_kept<J: JournalBackend + Clone + 'static>(journal: J) {
    let mut f = Fixture::new(journal, 10).await;
    let first = f.batch(4).await;
    assert_eq!(ids(&first), f.notified[..4]);
    let rest = f.batch(100).await;
    assert_eq!(ids(&rest), f.notified[4..], "a batch takes what is ready");
    drop(rest);
    first.ack().await.unwrap();
    assert_eq!(f.consumed().await, f.notified[..4]);
    assert_eq!(f.broadcast(), f.notified[..4]);
    assert_eq!(f.pending().await, f.notified[4..]);
    let rest = f.batch(100).await;
    assert_eq!(
        ids(&rest),
        f.notified[4..],
        "the dropped batch came back in order"
    );
    rest.ack().await.unwrap();
    assert_eq!(f.consumed().await, f.notified);
    assert_eq!(f.broadcast(), f.notified[4..]);
    assert!(f.pending().await.is_empty());
    // The group is consecutive frames: one commit, in batch order.
    let frames = replay_all(&f.journal, f.session.id()).await.unwrap();
    let seqs: Vec<u64> = frames
        .iter()
        .filter(|(_, r)| {
            matches!(
                r,
                JournalRecord::Event(SessionEvent::NotificationConsumed(_))
            )
        })
        .map(|(seq, _)| *seq)
        .collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    assert!(
        SessionBatch::ack(f.batch(0).await).await.is_ok(),
        "an empty batch"
    );
}

/// A commit the journal fails releases nothing: every notification of the batch is
/// handed back in order and stays pending on the record; a commit that persisted but
/// was reported failed hands them back too, and acknowledging again finds them
/// journaled (no second consumption, no second broadcast).
pub(crate) async fn nothing_is_released_before_its_commit<J: JournalBackend + Clone + 'static>(
    journal: J,
) {
    let mut f = Fixture::new(journal, 5).await;
    let batch = f.batch(5).await;
    f.control.fail_next_append(AppendFault::commit_failed());
    let err = batch.ack().await.unwrap_err();
    assert!(
        matches!(err.error, AckError::Journal(AppendError::CommitFailed(_))),
        "{err:?}"
    );
    assert_eq!(err.returned, f.notified);
    assert!(err.acknowledged.is_empty());
    assert!(f.consumed().await.is_empty(), "nothing journaled");
    assert!(f.broadcast().is_empty());
    assert_eq!(f.pending().await, f.notified);

    let batch = f.batch(10).await;
    assert_eq!(ids(&batch), f.notified, "all handed back, in order");
    f.control.fail_next_append(AppendFault::PersistedButFailed);
    let err = batch.ack().await.unwrap_err();
    assert_eq!(
        err.returned, f.notified,
        "not released: its commit was not answered"
    );
    assert_eq!(f.consumed().await, f.notified, "the group committed whole");
    let batch = f.batch(10).await;
    assert_eq!(
        ids(&batch),
        f.notified,
        "handed back after the unanswered commit"
    );
    batch.ack().await.unwrap();
    assert_eq!(f.consumed().await, f.notified, "journaled once");
    assert!(f.broadcast().is_empty(), "duplicates are not broadcast");
    assert!(f.pending().await.is_empty());
}

/// A batch received before the session ended and acknowledged after: those of it
/// journaled before the end are acknowledged, the rest (abandoned by the end) are
/// refused, and none is both consumed and abandoned. `other_handle`: the end comes
/// from another handle of the session on the same journal (found out by the journal's
/// refusal), else from this session.
pub(crate) async fn a_batch_spanning_the_end<J: JournalBackend + Clone + 'static>(
    journal: J,
    other_handle: bool,
) {
    let mut f = Fixture::new(journal.clone(), 4).await;
    let mut batch = f.batch(4).await;
    let tail = batch.split_off(2);
    assert_eq!(ids(&tail), f.notified[2..]);
    // The first two journaled, but not released (their commit went unanswered).
    f.control.fail_next_append(AppendFault::PersistedButFailed);
    let err = batch.ack().await.unwrap_err();
    assert_eq!(err.returned, f.notified[..2]);
    drop(tail);
    let batch = f.batch(4).await;
    assert_eq!(ids(&batch), f.notified);
    let ended = if other_handle {
        Session::new(f.session.id(), journal)
            .end(IfPending::Abandon)
            .await
            .unwrap()
    } else {
        f.session.end(IfPending::Abandon).await.unwrap()
    };
    assert_eq!(ended.abandoned, f.notified[2..]);
    let err = batch.ack().await.unwrap_err();
    assert!(
        matches!(err.error, AckError::SessionEnded { .. }),
        "{err:?}"
    );
    assert_eq!(err.acknowledged, f.notified[..2]);
    assert_eq!(err.returned, f.notified[2..]);
    assert_eq!(
        f.consumed().await,
        f.notified[..2],
        "nothing written after the end"
    );
    let abandoned: Vec<CommandId> = replay_all(&f.journal, f.session.id())
        .await
        .unwrap()
        .into_iter()
        .filter_map(|(_, r)| match r {
            JournalRecord::Event(SessionEvent::NotificationAbandoned(a)) => Some(a.cause()),
            _ => None,
        })
        .collect();
    assert_eq!(abandoned, f.notified[2..]);
}

/// A cancelled batch acknowledgement released none of its batch: all come back at
/// once, in order; acknowledging them again journals each consumption once.
pub(crate) async fn a_cancelled_ack_released_none<J: JournalBackend + Clone + 'static>(journal: J) {
    let mut f = Fixture::new(journal, 4).await;
    let batch = f.batch(4).await;
    // Slow enough that the acknowledgement is cancelled before it reaches the engine.
    f.control.set_latency(Duration::from_secs(5));
    let cancelled = tokio::time::timeout(Duration::from_millis(50), batch.ack()).await;
    assert!(cancelled.is_err(), "the acknowledgement was not cancelled");
    f.control.set_latency(Duration::ZERO);
    let batch = f.batch(10).await;
    assert_eq!(
        ids(&batch),
        f.notified,
        "released none: all handed back in order"
    );
    assert!(f.consumed().await.is_empty());
    batch.ack().await.unwrap();
    assert_eq!(f.consumed().await, f.notified);
    assert_eq!(f.broadcast(), f.notified);
    assert!(f.pending().await.is_empty());
}

/// A journal that answers a group with fewer outcomes than it had records broke its
/// contract: the batch is refused whole with `AckError::AnswerCount` (no notification
/// paired with another's answer, none left out), nothing is released or broadcast,
/// every one is handed back in order, and acknowledging again finds them journaled.
pub(crate) async fn a_short_answer_is_refused_whole<J: JournalBackend + Clone + 'static>(
    journal: J,
) {
    let mut f = Fixture::new(journal, 4).await;
    let batch = f.batch(4).await;
    f.control.fail_next_append(AppendFault::ShortAnswer);
    let err = batch.ack().await.unwrap_err();
    assert!(
        matches!(
            err.error,
            AckError::AnswerCount {
                records: 4,
                answers: 3,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.returned, f.notified, "every one handed back");
    assert!(err.acknowledged.is_empty());
    assert!(f.broadcast().is_empty(), "nothing broadcast");
    let batch = f.batch(10).await;
    assert_eq!(ids(&batch), f.notified, "handed back in order, none lost");
    batch.ack().await.unwrap();
    assert_eq!(f.consumed().await, f.notified, "journaled once");
    assert!(f.pending().await.is_empty());
}
