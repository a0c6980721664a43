//! The API as a user imports it: every crate glob-imported together resolves without
//! ambiguity, `Session::new` takes any journal, every public error is an `Error`.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; the helpers here are test
// code too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

// Every crate's names at once, as a user might write it: a name defined twice would
// be ambiguous where it is used below.
use notify_journal::*;
use notify_loop::*;
use notify_session::prelude::*;
use notify_session::*;
use notify_types::*;

use notify_testkit::MemoryJournal;

fn is_error<E: std::error::Error + Send + Sync + 'static>() {}

#[test]
fn every_public_error_type_is_an_error() {
    is_error::<AckError>();
    is_error::<LoopAckError>();
    is_error::<DeclareLostError>();
    is_error::<PublishError>();
    is_error::<RegisterError>();
    is_error::<RestoreError>();
    is_error::<SuperviseError>();
    is_error::<StoppedDelivery>();
    is_error::<NotifyError>();
    is_error::<JournalFailure>();
    is_error::<ValidationError>();
    is_error::<DecodeError>();
    is_error::<ParseIdError>();
    is_error::<AppendError>();
    is_error::<JournalError>();
    is_error::<OpenError>();
}

#[test]
fn stopped_delivery_says_what_stopped_and_becomes_the_notify_error() {
    let loop_id = LoopId::new();
    let stopped = StoppedDelivery {
        loop_id,
        cause: StopCause::Full,
    };
    assert_eq!(
        stopped.to_string(),
        format!("delivery to loop {loop_id} stopped: live set full")
    );
    let e = NotifyError::from(stopped);
    assert!(e.is_retryable());
    assert_eq!(e.disposition(), Some(Disposition::Stopped));
    assert!(matches!(
        e,
        NotifyError::DeliveryStopped { loop_id: l, cause: StopCause::Full } if l == loop_id
    ));
}

#[test]
fn notified_holds_only_the_two_successes() {
    assert_eq!(
        [Notified::Accepted, Notified::Duplicate].map(Disposition::from),
        [Disposition::Accepted, Disposition::Duplicate]
    );
    assert_eq!(Notified::Duplicate.to_string(), "Duplicate");
}

async fn accepts(session: &Session) {
    let loop_id = LoopId::new();
    let _inbox = session
        .register_loop(LoopConfig::new(session.id(), loop_id))
        .unwrap();
    let n = ProcessCompletionNotification {
        command_id: CommandId::new(),
        session_id: session.id(),
        loop_id,
        process_handle: "build-42".into(),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    };
    assert_eq!(
        session.notify_process_completion(n.clone()).await.unwrap(),
        Notified::Accepted
    );
    let journal = session.journal().unwrap();
    assert_eq!(
        journal
            .lookup(session.id(), *n.command_id.as_uuid())
            .await
            .unwrap(),
        Some(1)
    );
}

#[tokio::test]
async fn session_new_takes_any_journal() {
    // By value.
    let journal = MemoryJournal::new();
    accepts(&Session::new(SessionId::new(), journal.clone())).await;
    // Shared, concretely typed.
    accepts(&Session::new(SessionId::new(), Arc::new(journal.clone()))).await;
    // Shared as a trait object: used as it is, not wrapped a second time.
    let shared: Arc<dyn JournalBackend> = Arc::new(journal);
    let session = Session::new(SessionId::new(), shared.clone());
    assert!(Arc::ptr_eq(session.journal().unwrap(), &shared));
    accepts(&session).await;
}
