//! A failing journal: the error is returned, nothing is dispatched, and a retry after
//! an unknown-outcome commit ends accepted exactly once.

// Tests unwrap freely, helpers included: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use notify_journal::{AppendError, JournalRead, replay_all};
use notify_loop::LoopConfig;
use notify_session::{AckError, PublishError, Session, SessionConsumer};
use notify_testkit::sample::{lifecycle, notification};
use notify_testkit::{AppendFault, FaultControl, FaultyJournal, MemoryJournal};
use notify_types::{
    JournalFailureKind, LoopId, Notified, NotifyError, ProcessLifecycleKind, SessionId,
};

fn faulty() -> (
    Session,
    MemoryJournal,
    FaultControl,
    LoopId,
    SessionConsumer,
) {
    let memory = MemoryJournal::new();
    let journal = FaultyJournal::new(memory.clone());
    let control = journal.control();
    let session = Session::new(SessionId::new(), Arc::new(journal));
    let loop_id = LoopId::new();
    let consumer = session
        .register_loop(LoopConfig::new(session.id(), loop_id))
        .unwrap();
    (session, memory, control, loop_id, consumer)
}

async fn assert_next_is(
    session: &Session,
    loop_id: LoopId,
    consumer: &mut SessionConsumer,
    expect_first: Option<notify_types::CommandId>,
) {
    let sentinel = notification(session.id(), loop_id);
    session
        .notify_process_completion(sentinel.clone())
        .await
        .unwrap();
    let first = consumer.recv().await.unwrap();
    let want = expect_first.unwrap_or(sentinel.command_id);
    assert_eq!(
        first.command_id(),
        want,
        "the loop received something it should not have"
    );
    first.ack().await.unwrap();
}

#[tokio::test]
async fn a_failed_append_is_returned_and_nothing_is_dispatched() {
    let (session, memory, control, loop_id, mut consumer) = faulty();
    for (fault, kind) in [
        (
            AppendFault::Error(AppendError::Poisoned),
            JournalFailureKind::Poisoned,
        ),
        (
            AppendFault::commit_failed(),
            JournalFailureKind::OutcomeUnknown,
        ),
    ] {
        let before = memory.frame_count();
        control.fail_next_append(fault);
        let n = notification(session.id(), loop_id);
        let err = session.notify_process_completion(n).await.unwrap_err();
        match &err {
            NotifyError::Journal(failure) => assert_eq!(failure.kind(), kind),
            other => panic!("expected a journal error, got {other:?}"),
        }
        assert_eq!(err.disposition(), None);
        assert_eq!(memory.frame_count(), before, "nothing appended");
        assert_next_is(&session, loop_id, &mut consumer, None).await;
    }
}

#[tokio::test]
async fn persisted_but_reported_failed_then_retried_is_accepted_once() {
    let (session, memory, control, loop_id, mut consumer) = faulty();
    let n = notification(session.id(), loop_id);
    control.fail_next_append(AppendFault::PersistedButFailed);
    let err = session
        .notify_process_completion(n.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, NotifyError::Journal(f) if f.kind() == JournalFailureKind::OutcomeUnknown)
    );
    // The supervisor retries with the same ID: the frame was in fact written.
    assert_eq!(
        session.notify_process_completion(n.clone()).await.unwrap(),
        Notified::Accepted
    );
    let frames = replay_all(&memory, session.id()).await.unwrap();
    assert_eq!(
        frames
            .iter()
            .filter(|(_, r)| r.key() == *n.command_id.as_uuid())
            .count(),
        1
    );
    assert_next_is(&session, loop_id, &mut consumer, Some(n.command_id)).await;
}

#[tokio::test]
async fn a_failed_consumption_append_keeps_the_notification_live() {
    let (session, memory, control, loop_id, mut consumer) = faulty();
    let n = notification(session.id(), loop_id);
    session.notify_process_completion(n.clone()).await.unwrap();
    let got = consumer.recv().await.unwrap();
    control.fail_next_append(AppendFault::Error(AppendError::Poisoned));
    assert!(matches!(
        got.ack().await,
        Err(AckError::Journal(AppendError::Poisoned))
    ));
    // Not released: handed to the consumer again, and a retry is still a duplicate.
    let again = consumer.recv().await.unwrap();
    assert_eq!(again.command_id(), n.command_id);
    assert_eq!(
        session.notify_process_completion(n.clone()).await.unwrap(),
        Notified::Duplicate
    );
    again.ack().await.unwrap();
    assert_eq!(
        memory.last_seq(session.id()).await.unwrap(),
        2,
        "the command and one consumption"
    );
}

#[tokio::test]
async fn a_failed_lifecycle_append_is_typed_and_not_broadcast() {
    let (session, _memory, control, loop_id, _consumer) = faulty();
    let mut events = session.subscribe();
    control.fail_next_append(AppendFault::Error(AppendError::Poisoned));
    let m = lifecycle(session.id(), loop_id, ProcessLifecycleKind::Started);
    assert!(matches!(
        session.publish_lifecycle(m.clone()).await,
        Err(PublishError::Journal(AppendError::Poisoned))
    ));
    assert!(events.try_recv().is_err());
    session.publish_lifecycle(m).await.unwrap();
    assert!(events.try_recv().is_ok());
}
