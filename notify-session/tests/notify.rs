//! The session's notify path: every disposition, in the reference's proof list.

// Tests unwrap freely, helpers included: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use notify_journal::{JournalBackend, JournalRead};
use notify_loop::LoopConfig;
use notify_session::{Session, SessionConsumer};
use notify_testkit::MemoryJournal;
use notify_testkit::sample::notification;
use notify_types::{
    CommandId, Disposition, LoopId, Notified, NotifyError, ProcessCompletionNotification,
    ProcessLifecycleState, ProcessTerminalReason, SessionId, StopCause, ValidationField,
};

fn journaled(capacity: usize) -> (Session, MemoryJournal, LoopId, SessionConsumer) {
    let journal = MemoryJournal::new();
    let session = Session::new(SessionId::new(), Arc::new(journal.clone()));
    let loop_id = LoopId::new();
    let consumer = session
        .register_loop(LoopConfig::new(session.id(), loop_id).capacity(capacity))
        .unwrap();
    (session, journal, loop_id, consumer)
}

/// Delivers a fresh sentinel and asserts it is the consumer's next notification:
/// proof that nothing else reached the loop before it.
async fn assert_loop_saw_nothing(
    session: &Session,
    loop_id: LoopId,
    consumer: &mut SessionConsumer,
) {
    let sentinel = notification(session.id(), loop_id);
    assert_eq!(
        session
            .notify_process_completion(sentinel.clone())
            .await
            .unwrap(),
        Notified::Accepted
    );
    let next = consumer.recv().await.unwrap();
    assert_eq!(
        next.command_id(),
        sentinel.command_id,
        "the loop received something before the sentinel"
    );
    next.ack().await.unwrap();
}

async fn frames_for(journal: &MemoryJournal, session: SessionId, id: CommandId) -> usize {
    notify_journal::replay_all(journal, session)
        .await
        .unwrap()
        .iter()
        .filter(|(_, r)| r.key() == *id.as_uuid())
        .count()
}

#[tokio::test]
async fn accepted_then_duplicate_with_one_frame() {
    let (session, journal, loop_id, mut consumer) = journaled(64);
    let n = notification(session.id(), loop_id);
    assert_eq!(
        session.notify_process_completion(n.clone()).await.unwrap(),
        Notified::Accepted
    );
    assert_eq!(
        session.notify_process_completion(n.clone()).await.unwrap(),
        Notified::Duplicate
    );
    assert_eq!(frames_for(&journal, session.id(), n.command_id).await, 1);
    let got = consumer.recv().await.unwrap();
    assert_eq!(got.completion(), &n);
    got.ack().await.unwrap();
    // After the ack the journal answers: consumed, so Duplicate without dispatch.
    assert_eq!(
        session.notify_process_completion(n.clone()).await.unwrap(),
        Notified::Duplicate
    );
    assert_eq!(frames_for(&journal, session.id(), n.command_id).await, 1);
    assert_loop_saw_nothing(&session, loop_id, &mut consumer).await;
}

#[tokio::test]
async fn headless_duplicate_by_the_loop_guard_alone() {
    let session = Session::headless(SessionId::new());
    let loop_id = LoopId::new();
    let mut consumer = session
        .register_loop(LoopConfig::new(session.id(), loop_id))
        .unwrap();
    let n = notification(session.id(), loop_id);
    assert_eq!(
        session.notify_process_completion(n.clone()).await.unwrap(),
        Notified::Accepted
    );
    assert_eq!(
        session.notify_process_completion(n.clone()).await.unwrap(),
        Notified::Duplicate
    );
    let got = consumer.recv().await.unwrap();
    assert_eq!(got.command_id(), n.command_id);
    got.ack().await.unwrap();
    // Remembered as consumed by the loop.
    assert_eq!(
        session.notify_process_completion(n).await.unwrap(),
        Notified::Duplicate
    );
    assert_loop_saw_nothing(&session, loop_id, &mut consumer).await;
}

#[tokio::test]
async fn collision_is_typed_and_never_dispatched() {
    let (session, journal, loop_id, mut consumer) = journaled(64);
    let n = notification(session.id(), loop_id);
    assert_eq!(
        session.notify_process_completion(n.clone()).await.unwrap(),
        Notified::Accepted
    );
    let first = consumer.recv().await.unwrap();
    first.ack().await.unwrap();

    let forged = ProcessCompletionNotification {
        state: ProcessLifecycleState::Killed,
        reason: ProcessTerminalReason::Killed,
        ..n.clone()
    };
    let err = session.notify_process_completion(forged).await.unwrap_err();
    assert!(
        matches!(err, NotifyError::Collision { command_id, seq: 1 } if command_id == n.command_id),
        "{err:?}"
    );
    assert_eq!(err.disposition(), Some(Disposition::Collision));
    assert!(!err.is_retryable());
    assert_eq!(frames_for(&journal, session.id(), n.command_id).await, 1);
    assert_loop_saw_nothing(&session, loop_id, &mut consumer).await;
}

#[tokio::test]
async fn collision_with_a_live_notification_is_not_dispatched_either() {
    let (session, _journal, loop_id, mut consumer) = journaled(64);
    let n = notification(session.id(), loop_id);
    session.notify_process_completion(n.clone()).await.unwrap();
    let forged = ProcessCompletionNotification {
        process_handle: "other".into(),
        ..n.clone()
    };
    assert!(matches!(
        session.notify_process_completion(forged).await,
        Err(NotifyError::Collision { .. })
    ));
    let got = consumer.recv().await.unwrap();
    assert_eq!(
        got.completion(),
        &n,
        "the original payload, not the forgery"
    );
    got.ack().await.unwrap();
    assert_loop_saw_nothing(&session, loop_id, &mut consumer).await;
}

#[tokio::test]
async fn inbox_full_is_stopped_twice_with_one_frame_then_accepted_after_an_ack() {
    let (session, journal, loop_id, mut consumer) = journaled(2);
    let a = notification(session.id(), loop_id);
    let b = notification(session.id(), loop_id);
    session.notify_process_completion(a.clone()).await.unwrap();
    session.notify_process_completion(b).await.unwrap();

    let extra = notification(session.id(), loop_id);
    for _ in 0..2 {
        let err = session
            .notify_process_completion(extra.clone())
            .await
            .unwrap_err();
        assert!(
            matches!(err, NotifyError::DeliveryStopped { cause: StopCause::Full, loop_id: l } if l == loop_id),
            "{err:?}"
        );
        assert_eq!(err.disposition(), Some(Disposition::Stopped));
        assert!(err.is_retryable());
    }
    assert_eq!(
        frames_for(&journal, session.id(), extra.command_id).await,
        1
    );

    let first = consumer.recv().await.unwrap();
    assert_eq!(first.command_id(), a.command_id);
    first.ack().await.unwrap();
    assert_eq!(
        session
            .notify_process_completion(extra.clone())
            .await
            .unwrap(),
        Notified::Accepted
    );
    assert_eq!(
        frames_for(&journal, session.id(), extra.command_id).await,
        1
    );
}

#[tokio::test]
async fn foreign_unknown_and_misaddressed_loops_append_nothing() {
    let (session, journal, loop_id, _consumer) = journaled(64);
    let foreign = LoopId::new();
    session.register_foreign_loop(foreign).unwrap();

    let err = session
        .notify_process_completion(notification(session.id(), foreign))
        .await
        .unwrap_err();
    assert!(
        matches!(err, NotifyError::Unsupported { loop_id } if loop_id == foreign),
        "{err:?}"
    );
    assert_eq!(err.disposition(), Some(Disposition::Stopped));
    assert!(!err.is_retryable());

    let unknown = LoopId::new();
    let err = session
        .notify_process_completion(notification(session.id(), unknown))
        .await
        .unwrap_err();
    assert!(
        matches!(err, NotifyError::LoopNotFound { loop_id } if loop_id == unknown),
        "{err:?}"
    );
    assert_eq!(err.disposition(), Some(Disposition::Stopped));

    let other = SessionId::new();
    let err = session
        .notify_process_completion(notification(other, loop_id))
        .await
        .unwrap_err();
    assert!(
        matches!(err, NotifyError::OwnerMismatch { want, got } if want == session.id() && got == other)
    );
    assert_eq!(err.disposition(), None);

    assert_eq!(
        journal.last_seq(session.id()).await.unwrap(),
        0,
        "nothing appended"
    );
    assert_eq!(journal.frame_count(), 0);
}

#[tokio::test]
async fn invalid_notifications_name_their_field_and_append_nothing() {
    let (session, journal, loop_id, _consumer) = journaled(64);
    type Breaker = fn(&mut ProcessCompletionNotification);
    let cases: [(Breaker, ValidationField); 5] = [
        (
            |n| n.command_id = CommandId::NIL,
            ValidationField::CommandId,
        ),
        (
            |n| n.session_id = SessionId::NIL,
            ValidationField::SessionId,
        ),
        (|n| n.loop_id = LoopId::NIL, ValidationField::LoopId),
        (
            |n| n.process_handle = "no/slashes".into(),
            ValidationField::ProcessHandle,
        ),
        (
            |n| n.state = ProcessLifecycleState::Running,
            ValidationField::StateReason,
        ),
    ];
    for (breaker, field) in cases {
        let mut n = notification(session.id(), loop_id);
        breaker(&mut n);
        let err = session.notify_process_completion(n).await.unwrap_err();
        assert!(
            matches!(err, NotifyError::Invalid { field: f } if f == field),
            "{field}: {err:?}"
        );
        assert_eq!(err.disposition(), None);
    }
    assert_eq!(journal.frame_count(), 0);
}

#[tokio::test]
async fn shut_down_loop_answers_stopped_exited_and_keeps_the_frame() {
    let (session, journal, loop_id, _consumer) = journaled(64);
    assert!(session.shutdown_loop(loop_id).await);
    let n = notification(session.id(), loop_id);
    let err = session
        .notify_process_completion(n.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            NotifyError::DeliveryStopped {
                cause: StopCause::Exited,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.is_retryable());
    assert_eq!(
        frames_for(&journal, session.id(), n.command_id).await,
        1,
        "the frame stays authoritative"
    );

    assert!(session.remove_loop(loop_id).await);
    let err = session.notify_process_completion(n).await.unwrap_err();
    assert!(matches!(err, NotifyError::LoopNotFound { .. }), "{err:?}");
}

#[tokio::test]
async fn registering_twice_or_for_another_session_is_refused() {
    let (session, _journal, loop_id, _consumer) = journaled(64);
    assert!(matches!(
        session.register_loop(LoopConfig::new(session.id(), loop_id)),
        Err(notify_session::RegisterError::AlreadyRegistered { .. })
    ));
    assert!(matches!(
        session.register_foreign_loop(loop_id),
        Err(notify_session::RegisterError::AlreadyRegistered { .. })
    ));
    assert!(matches!(
        session.register_loop(LoopConfig::new(SessionId::new(), LoopId::new())),
        Err(notify_session::RegisterError::SessionMismatch { .. })
    ));
}

#[tokio::test]
async fn an_ended_session_refuses_new_loops() {
    let (session, _journal, _loop_id, _consumer) = journaled(64);
    session
        .end(notify_session::IfPending::Abandon)
        .await
        .unwrap();
    let want = session.id();
    for refused in [
        session
            .register_loop(LoopConfig::new(want, LoopId::new()))
            .map(drop),
        session.register_foreign_loop(LoopId::new()),
    ] {
        assert!(
            matches!(
                refused,
                Err(notify_session::RegisterError::SessionEnded { session_id }) if session_id == want
            ),
            "{refused:?}"
        );
    }
}

#[tokio::test]
async fn many_loops_many_sessions_one_journal() {
    let journal = MemoryJournal::new();
    let shared: Arc<dyn JournalBackend> = Arc::new(journal.clone());
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let session = Session::new(SessionId::new(), shared.clone());
        for _ in 0..4 {
            let loop_id = LoopId::new();
            let mut consumer = session
                .register_loop(LoopConfig::new(session.id(), loop_id))
                .unwrap();
            let session = session.clone();
            tasks.push(tokio::spawn(async move {
                let sent: Vec<_> = (0..10)
                    .map(|_| notification(session.id(), loop_id))
                    .collect();
                for n in &sent {
                    assert_eq!(
                        session.notify_process_completion(n.clone()).await.unwrap(),
                        Notified::Accepted
                    );
                }
                for n in &sent {
                    let got = consumer.recv().await.unwrap();
                    assert_eq!(got.command_id(), n.command_id, "acceptance order");
                    got.ack().await.unwrap();
                }
                session.id()
            }));
        }
    }
    let mut sessions = Vec::new();
    for t in tasks {
        sessions.push(t.await.unwrap());
    }
    sessions.dedup();
    assert_eq!(sessions.len(), 4);
    for session in sessions {
        // 4 loops x 10 notifications, each with its consumption.
        assert_eq!(journal.last_seq(session).await.unwrap(), 80);
    }
}

#[tokio::test]
async fn the_session_is_an_object_safe_notifier() {
    let (session, _journal, loop_id, _consumer) = journaled(64);
    let notifier: Arc<dyn notify_types::ProcessCompletionNotifier> = Arc::new(session.clone());
    let n = notification(session.id(), loop_id);
    assert_eq!(
        notifier.notify_process_completion(n).await.unwrap(),
        Notified::Accepted
    );
}
