//! The supervisor-side retry helper.

use std::time::Duration;

use notify_types::{
    Notified, NotifyError, ProcessCompletionNotification, ProcessCompletionNotifier,
};

/// How [`notify_with_retry`] retries a stopped delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (at least 1).
    pub max_attempts: u32,
    /// The backoff ceiling before the first retry.
    pub initial_backoff: Duration,
    /// The largest backoff ceiling.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    /// 8 attempts, backoff from 10 ms doubling to at most 1 s.
    fn default() -> Self {
        Self {
            max_attempts: 8,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_secs(1),
        }
    }
}

impl RetryPolicy {
    /// The backoff ceiling before retry number `retry` (0-based): exponential, capped.
    #[must_use]
    pub fn ceiling(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX);
        self.initial_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }
}

/// "Equal jitter": a uniformly random wait in `[ceiling / 2, ceiling]`, so that many
/// supervisors stopped by the same full loop do not retry in lockstep.
fn jittered(ceiling: Duration) -> Duration {
    let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
    let half = nanos / 2;
    let random = uuid::Uuid::new_v4().as_u64_pair().0;
    let extra = if half == 0 { 0 } else { random % (half + 1) };
    Duration::from_nanos(half + extra)
}

/// Delivers `notification`, retrying only retryable
/// [`DeliveryStopped`](NotifyError::DeliveryStopped) answers, with the identical
/// notification (same command ID), at most `policy.max_attempts` times, waiting an
/// exponentially growing, jittered backoff between attempts.
///
/// Every other error is returned at once: retrying it cannot help.
///
/// ```
/// use std::time::Duration;
/// use notify_session::prelude::*;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let session = Session::headless(SessionId::new());
/// let loop_id = LoopId::new();
/// let mut inbox = session.register_loop(LoopConfig::new(session.id(), loop_id).capacity(1))?;
/// let completion = |handle: &str| ProcessCompletionNotification {
///     command_id: CommandId::new(), // once per notification, reused on every retry
///     session_id: session.id(),
///     loop_id,
///     process_handle: handle.into(),
///     state: ProcessLifecycleState::Exited,
///     reason: ProcessTerminalReason::Exited,
/// };
/// session.notify_process_completion(completion("first")).await?; // the inbox is now full
///
/// // The consumer catches up a moment later; the retries wait for it.
/// let consumer = async {
///     tokio::time::sleep(Duration::from_millis(20)).await;
///     let received = inbox.recv().await.ok_or("loop exited")?;
///     received.ack().await?;
///     Ok::<_, Box<dyn std::error::Error>>(())
/// };
/// let second = completion("second");
/// let policy = RetryPolicy { max_attempts: 50, ..RetryPolicy::default() };
/// let (answer, consumed) = tokio::join!(notify_with_retry(&session, &second, policy), consumer);
/// consumed?;
/// assert_eq!(answer?, Notified::Accepted);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// The first non-retryable error, or the last `DeliveryStopped` once attempts run out.
///
/// # Cancel safety
///
/// Cancel safe in the sense that matters: every attempt carries the same command ID,
/// so calling again after a cancellation can only answer `Accepted` or `Duplicate`
/// for work already done.
pub async fn notify_with_retry<N: ProcessCompletionNotifier + ?Sized>(
    notifier: &N,
    notification: &ProcessCompletionNotification,
    policy: RetryPolicy,
) -> Result<Notified, NotifyError> {
    let attempts = policy.max_attempts.max(1);
    let mut retry = 0;
    loop {
        match notifier
            .notify_process_completion(notification.clone())
            .await
        {
            Err(e) if e.is_retryable() && retry + 1 < attempts => {
                let wait = jittered(policy.ceiling(retry));
                tracing::debug!(attempt = retry + 1, ?wait, error = %e, "delivery stopped; retrying");
                tokio::time::sleep(wait).await;
                retry += 1;
            }
            other => return other,
        }
    }
}
