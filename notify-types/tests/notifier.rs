//! The notifier contract: `NotifyError`'s disposition and retry answers per the spec's
//! table, and an object-safe `Arc<dyn ProcessCompletionNotifier>`.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this crate's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(dead_code)]
mod common;

use std::collections::HashSet;
use std::error::Error as _;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use common::notification;
use notify_types::*;

fn journal_failure(kind: JournalFailureKind) -> JournalFailure {
    JournalFailure::new(kind, std::io::Error::other("disk on fire"))
}

#[test]
fn disposition_and_retry_follow_the_table() {
    let loop_id = LoopId::new();
    // (error, disposition, retryable)
    let table: Vec<(NotifyError, Option<Disposition>, bool)> = vec![
        (
            NotifyError::Invalid {
                field: ValidationField::ProcessHandle,
            },
            None,
            false,
        ),
        (
            NotifyError::OwnerMismatch {
                want: SessionId::new(),
                got: SessionId::new(),
            },
            None,
            false,
        ),
        (
            NotifyError::LoopNotFound { loop_id },
            Some(Disposition::Stopped),
            false,
        ),
        (
            NotifyError::Unsupported { loop_id },
            Some(Disposition::Stopped),
            false,
        ),
        (
            NotifyError::DeliveryStopped {
                loop_id,
                cause: StopCause::Full,
            },
            Some(Disposition::Stopped),
            true,
        ),
        (
            NotifyError::DeliveryStopped {
                loop_id,
                cause: StopCause::Exited,
            },
            Some(Disposition::Stopped),
            true,
        ),
        (
            // The crate's third cause (the loop refused the command as invalid or
            // misaddressed) is Stopped but, like `Invalid`, not worth retrying.
            NotifyError::DeliveryStopped {
                loop_id,
                cause: StopCause::Refused,
            },
            Some(Disposition::Stopped),
            false,
        ),
        (
            NotifyError::Collision {
                command_id: CommandId::new(),
                seq: 7,
            },
            Some(Disposition::Collision),
            false,
        ),
    ];
    let journal_kinds = [
        JournalFailureKind::OutcomeUnknown,
        JournalFailureKind::Poisoned,
        JournalFailureKind::Fenced,
        JournalFailureKind::TooLarge,
        JournalFailureKind::Unavailable,
        JournalFailureKind::Other,
    ];
    let journal = journal_kinds
        .into_iter()
        .map(|k| (NotifyError::Journal(journal_failure(k)), None, false));
    let mut cases = 0;
    for (err, disposition, retryable) in table.into_iter().chain(journal) {
        assert_eq!(err.disposition(), disposition, "{err:?}");
        assert_eq!(err.is_retryable(), retryable, "{err:?}");
        // Errors never stand for a success.
        assert!(!matches!(
            err.disposition(),
            Some(Disposition::Accepted | Disposition::Duplicate)
        ));
        assert!(!err.to_string().is_empty());
        cases += 1;
    }
    assert_eq!(cases, 14);
}

#[test]
fn errors_carry_their_fields_and_sources() {
    let err = NotifyError::from(ValidationError::new(ValidationField::StateReason));
    assert!(matches!(
        err,
        NotifyError::Invalid {
            field: ValidationField::StateReason
        }
    ));
    assert!(err.to_string().contains("state_reason"), "{err}");

    let failure = journal_failure(JournalFailureKind::Poisoned);
    assert_eq!(failure.kind(), JournalFailureKind::Poisoned);
    let err = NotifyError::from(failure);
    // `Journal` is transparent: its source is the backend's error.
    let source = err.source().unwrap();
    assert_eq!(source.to_string(), "disk on fire");
    let cloned = err.clone();
    assert_eq!(cloned.to_string(), err.to_string());

    let seq = 42;
    let id = CommandId::new();
    let err = NotifyError::Collision {
        command_id: id,
        seq,
    };
    assert!(err.to_string().contains(&id.to_string()));
    assert!(err.to_string().contains("42"));
}

/// Accepts each valid command ID once, answers Duplicate after, refuses invalid ones.
#[derive(Default)]
struct Trivial {
    seen: Mutex<HashSet<CommandId>>,
}

impl ProcessCompletionNotifier for Trivial {
    fn notify_process_completion(&self, n: ProcessCompletionNotification) -> NotifyFuture<'_> {
        Box::pin(async move {
            n.validate()?;
            let fresh = self.seen.lock().unwrap().insert(n.command_id);
            Ok(if fresh {
                Notified::Accepted
            } else {
                Notified::Duplicate
            })
        })
    }
}

/// Polls a future that is ready at once (no I/O, no timers) on a no-op waker.
fn ready<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the trivial notifier never waits"),
    }
}

fn assert_send<T: Send>(t: T) -> T {
    t
}

#[test]
fn arc_dyn_notifier_is_object_safe_and_works() {
    let notifier: Arc<dyn ProcessCompletionNotifier> = Arc::new(Trivial::default());
    let n = notification();

    let first = ready(assert_send(notifier.notify_process_completion(n.clone())));
    assert_eq!(first.unwrap(), Notified::Accepted);
    let again = ready(notifier.notify_process_completion(n.clone()));
    assert_eq!(again.unwrap(), Notified::Duplicate);

    let bad = ProcessCompletionNotification {
        session_id: SessionId::NIL,
        ..n
    };
    let err = ready(notifier.notify_process_completion(bad)).unwrap_err();
    assert!(matches!(
        err,
        NotifyError::Invalid {
            field: ValidationField::SessionId
        }
    ));
    assert_eq!(err.disposition(), None);
    assert!(!err.is_retryable());

    // Shared across threads, and usable through the blanket `Arc<T>` impl.
    let shared = Arc::clone(&notifier);
    let handle = std::thread::spawn(move || {
        let n = ProcessCompletionNotification {
            command_id: CommandId::new(),
            ..notification()
        };
        ready(shared.notify_process_completion(n))
    });
    assert_eq!(handle.join().unwrap().unwrap(), Notified::Accepted);
    let wrapped: Arc<Arc<dyn ProcessCompletionNotifier>> = Arc::new(notifier);
    let n = ProcessCompletionNotification {
        command_id: CommandId::new(),
        ..notification()
    };
    assert_eq!(
        ready(wrapped.notify_process_completion(n)).unwrap(),
        Notified::Accepted
    );
    let boxed: Box<dyn ProcessCompletionNotifier> = Box::new(Trivial::default());
    assert_eq!(
        ready(boxed.notify_process_completion(notification())).unwrap(),
        Notified::Accepted
    );
}
