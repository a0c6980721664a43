//! The retry helper retries only stopped deliveries, with the identical notification,
//! a bounded number of times.

// Tests unwrap freely, helpers included: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Mutex;
use std::time::Duration;

use notify_session::{RetryPolicy, notify_with_retry};
use notify_testkit::sample::notification;
use tokio::time::Instant;

use notify_types::{
    LoopId, Notified, NotifyError, NotifyFuture, ProcessCompletionNotification,
    ProcessCompletionNotifier, SessionId, StopCause, ValidationField,
};

/// Answers from a script and records every notification it was handed, and when (by
/// tokio's clock).
struct Scripted {
    answers: Mutex<Vec<Result<Notified, NotifyError>>>,
    seen: Mutex<Vec<ProcessCompletionNotification>>,
    at: Mutex<Vec<Instant>>,
}

impl Scripted {
    fn new(mut answers: Vec<Result<Notified, NotifyError>>) -> Self {
        answers.reverse();
        Self {
            answers: Mutex::new(answers),
            seen: Mutex::new(Vec::new()),
            at: Mutex::new(Vec::new()),
        }
    }
    fn calls(&self) -> Vec<ProcessCompletionNotification> {
        self.seen.lock().unwrap().clone()
    }
    /// The waits between consecutive calls.
    fn gaps(&self) -> Vec<Duration> {
        let at = self.at.lock().unwrap();
        at.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

impl ProcessCompletionNotifier for Scripted {
    fn notify_process_completion(&self, n: ProcessCompletionNotification) -> NotifyFuture<'_> {
        self.seen.lock().unwrap().push(n);
        self.at.lock().unwrap().push(Instant::now());
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

/// The waits between attempts follow the policy, measured on tokio's paused clock
/// (virtual time: exact, and nothing really sleeps): before retry `i` the helper waits
/// between half the ceiling and the ceiling ("equal jitter"), the ceilings doubling
/// from `initial_backoff` up to `max_backoff`; the waits are jittered, not all the
/// full ceiling.
#[tokio::test(start_paused = true)]
async fn attempts_are_spaced_by_the_jittered_backoff() {
    let n = notification(SessionId::new(), LoopId::new());
    let policy = RetryPolicy {
        max_attempts: 11,
        ..RetryPolicy::default()
    };
    let mut answers: Vec<_> = (0..10).map(|_| stopped(StopCause::Full)).collect();
    answers.push(Ok(Notified::Accepted));
    let notifier = Scripted::new(answers);
    let started = Instant::now();
    let got = notify_with_retry(&notifier, &n, policy).await.unwrap();
    assert_eq!(got, Notified::Accepted);
    let gaps = notifier.gaps();
    assert_eq!(gaps.len(), 10);
    let ceilings: Vec<Duration> = (0..10).map(|i| policy.ceiling(i)).collect();
    assert_eq!(
        ceilings.iter().map(Duration::as_millis).collect::<Vec<_>>(),
        [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]
    );
    // tokio's timer fires on whole milliseconds: a wait may end up to 1 ms late.
    let tick = Duration::from_millis(1);
    for (i, (gap, ceiling)) in gaps.iter().zip(&ceilings).enumerate() {
        assert!(
            *gap >= *ceiling / 2 && *gap <= *ceiling + tick,
            "wait before retry {i}: {gap:?}, not within [{:?}, {ceiling:?}]",
            *ceiling / 2
        );
    }
    assert!(
        gaps.iter().zip(&ceilings).any(|(g, c)| *g + tick < *c),
        "every wait was the full ceiling: no jitter ({gaps:?})"
    );
    // Nothing but the backoff passed: the first attempt was made at once.
    assert_eq!(started.elapsed(), gaps.iter().sum::<Duration>());

    // Giving up waits for nothing after the last attempt.
    let notifier = Scripted::new((0..3).map(|_| stopped(StopCause::Full)).collect());
    let policy = RetryPolicy {
        max_attempts: 3,
        ..RetryPolicy::default()
    };
    let started = Instant::now();
    notify_with_retry(&notifier, &n, policy).await.unwrap_err();
    assert_eq!(started.elapsed(), notifier.gaps().iter().sum::<Duration>());
    assert_eq!(notifier.gaps().len(), 2);
}
