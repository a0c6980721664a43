//! The retry helper retries only stopped deliveries, with the identical notification,
//! a bounded number of times.

// Tests unwrap freely, helpers included: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Mutex;

use notify_session::{RetryPolicy, notify_with_retry};
use notify_testkit::sample::notification;
use notify_types::{
    LoopId, Notified, NotifyError, NotifyFuture, ProcessCompletionNotification,
    ProcessCompletionNotifier, SessionId, StopCause, ValidationField,
};

/// Answers from a script and records every notification it was handed.
struct Scripted {
    answers: Mutex<Vec<Result<Notified, NotifyError>>>,
    seen: Mutex<Vec<ProcessCompletionNotification>>,
}

impl Scripted {
    fn new(mut answers: Vec<Result<Notified, NotifyError>>) -> Self {
        answers.reverse();
        Self {
            answers: Mutex::new(answers),
            seen: Mutex::new(Vec::new()),
        }
    }
    fn calls(&self) -> Vec<ProcessCompletionNotification> {
        self.seen.lock().unwrap().clone()
    }
}

impl ProcessCompletionNotifier for Scripted {
    fn notify_process_completion(&self, n: ProcessCompletionNotification) -> NotifyFuture<'_> {
        self.seen.lock().unwrap().push(n);
        let answer = self
            .answers
            .lock()
            .unwrap()
            .pop()
            .unwrap_or(Ok(Notified::Accepted));
        Box::pin(async move { answer })
    }
}

fn stopped(cause: StopCause) -> Result<Notified, NotifyError> {
    Err(NotifyError::DeliveryStopped {
        loop_id: LoopId::new(),
        cause,
    })
}

#[tokio::test(start_paused = true)]
async fn retries_stopped_with_the_identical_notification() {
    let n = notification(SessionId::new(), LoopId::new());
    let notifier = Scripted::new(vec![
        stopped(StopCause::Full),
        stopped(StopCause::Exited),
        Ok(Notified::Accepted),
    ]);
    let got = notify_with_retry(&notifier, &n, RetryPolicy::default())
        .await
        .unwrap();
    assert_eq!(got, Notified::Accepted);
    let calls = notifier.calls();
    assert_eq!(calls.len(), 3);
    assert!(
        calls.iter().all(|c| c == &n),
        "every attempt carries the same ID and payload"
    );
}

#[tokio::test(start_paused = true)]
async fn gives_up_after_max_attempts() {
    let n = notification(SessionId::new(), LoopId::new());
    let notifier = Scripted::new((0..10).map(|_| stopped(StopCause::Full)).collect());
    let policy = RetryPolicy {
        max_attempts: 4,
        ..RetryPolicy::default()
    };
    let err = notify_with_retry(&notifier, &n, policy).await.unwrap_err();
    assert!(matches!(
        err,
        NotifyError::DeliveryStopped {
            cause: StopCause::Full,
            ..
        }
    ));
    assert_eq!(notifier.calls().len(), 4);
}

#[tokio::test(start_paused = true)]
async fn never_retries_what_cannot_succeed() {
    let n = notification(SessionId::new(), LoopId::new());
    for answer in [
        Err(NotifyError::Invalid {
            field: ValidationField::ProcessHandle,
        }),
        Err(NotifyError::LoopNotFound {
            loop_id: LoopId::new(),
        }),
        Err(NotifyError::Unsupported {
            loop_id: LoopId::new(),
        }),
        Err(NotifyError::Collision {
            command_id: n.command_id,
            seq: 1,
        }),
        stopped(StopCause::Refused),
    ] {
        let notifier = Scripted::new(vec![answer]);
        assert!(
            notify_with_retry(&notifier, &n, RetryPolicy::default())
                .await
                .is_err()
        );
        assert_eq!(notifier.calls().len(), 1);
    }
}

#[test]
fn backoff_grows_exponentially_to_its_cap() {
    let p = RetryPolicy::default();
    let ceilings: Vec<_> = (0..9).map(|i| p.ceiling(i).as_millis()).collect();
    assert_eq!(ceilings, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
    assert_eq!(p.ceiling(u32::MAX), p.max_backoff);
}
