//! Lifecycle events: journaled, then broadcast once; collisions and invalid metadata
//! are typed.

// Tests unwrap freely, helpers included: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use notify_session::{PublishError, Published, Session};
use notify_testkit::MemoryJournal;
use notify_testkit::sample::lifecycle;
use notify_types::{
    EventId, LoopId, ProcessLifecycleKind, SessionEvent, SessionId, ValidationField,
};
use tokio::sync::broadcast::error::TryRecvError;

#[tokio::test]
async fn published_once_and_a_duplicate_is_not_rebroadcast() {
    let journal = MemoryJournal::new();
    let session = Session::new(SessionId::new(), Arc::new(journal));
    let mut events = session.subscribe();
    let m = lifecycle(session.id(), LoopId::new(), ProcessLifecycleKind::Started);

    assert_eq!(
        session.publish_lifecycle(m.clone()).await.unwrap(),
        Published::New { seq: 1 }
    );
    assert_eq!(
        session.publish_lifecycle(m.clone()).await.unwrap(),
        Published::Duplicate { seq: 1 }
    );
    assert_eq!(events.recv().await.unwrap(), SessionEvent::Lifecycle(m));
    assert!(
        matches!(events.try_recv(), Err(TryRecvError::Empty)),
        "the duplicate was broadcast"
    );
}

#[tokio::test]
async fn collision_is_typed_and_not_broadcast() {
    let session = Session::new(SessionId::new(), Arc::new(MemoryJournal::new()));
    let mut events = session.subscribe();
    let loop_id = LoopId::new();
    let m = lifecycle(session.id(), loop_id, ProcessLifecycleKind::Started);
    session.publish_lifecycle(m.clone()).await.unwrap();
    let mut forged = lifecycle(session.id(), loop_id, ProcessLifecycleKind::Backgrounded);
    forged.event_id = m.event_id;
    let err = session.publish_lifecycle(forged).await.unwrap_err();
    assert!(
        matches!(err, PublishError::Collision { event_id, seq: 1 } if event_id == m.event_id),
        "{err:?}"
    );
    assert_eq!(events.recv().await.unwrap(), SessionEvent::Lifecycle(m));
    assert!(matches!(events.try_recv(), Err(TryRecvError::Empty)));
}

#[tokio::test]
async fn invalid_and_foreign_metadata_are_rejected_before_the_journal() {
    let journal = MemoryJournal::new();
    let session = Session::new(SessionId::new(), Arc::new(journal.clone()));
    let loop_id = LoopId::new();

    let mut bad = lifecycle(session.id(), loop_id, ProcessLifecycleKind::Started);
    bad.event_id = EventId::NIL;
    assert!(matches!(
        session.publish_lifecycle(bad).await,
        Err(PublishError::Invalid {
            field: ValidationField::EventId
        })
    ));
    let mut bad = lifecycle(session.id(), loop_id, ProcessLifecycleKind::Started);
    bad.diagnostic = Some("not allowed on Started".into());
    assert!(matches!(
        session.publish_lifecycle(bad).await,
        Err(PublishError::Invalid {
            field: ValidationField::Diagnostic
        })
    ));
    let foreign = lifecycle(SessionId::new(), loop_id, ProcessLifecycleKind::Started);
    assert!(matches!(
        session.publish_lifecycle(foreign).await,
        Err(PublishError::OwnerMismatch { .. })
    ));
    assert_eq!(journal.frame_count(), 0);
}

#[tokio::test]
async fn headless_sessions_broadcast_without_a_journal() {
    let session = Session::headless(SessionId::new());
    let mut events = session.subscribe();
    let m = lifecycle(session.id(), LoopId::new(), ProcessLifecycleKind::Started);
    assert_eq!(
        session.publish_lifecycle(m.clone()).await.unwrap(),
        Published::New { seq: 0 }
    );
    assert_eq!(events.recv().await.unwrap(), SessionEvent::Lifecycle(m));
}
