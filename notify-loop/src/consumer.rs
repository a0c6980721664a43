//! The consumer side: receives accepted notifications in order and releases them.

use std::fmt;
use std::sync::Arc;

use notify_types::{
    CommandId, LoopId, ProcessCompletionNotification, ProcessNotification, SessionId,
};

use crate::decide::Pending;
use crate::inbox::Inbox;

/// Why [`Received::ack`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoopAckError {
    /// The loop has ended (its consumer was dropped, or it was shut down and nothing
    /// is live); there is nothing left to release. In-process state is gone, so the notification cannot
    /// be delivered again by this loop either.
    #[error("loop {loop_id} has exited; command {command_id} was not released")]
    LoopExited {
        /// The loop that exited.
        loop_id: LoopId,
        /// The notification that was being acknowledged.
        command_id: CommandId,
    },
}

/// The consumer side of a loop: receives accepted notifications in acceptance order.
///
/// There is exactly one per loop. Dropping it ends the loop: later deliveries answer
/// `Stopped(Exited)`.
pub struct LoopConsumer {
    session_id: SessionId,
    loop_id: LoopId,
    inbox: Arc<Inbox>,
}

impl LoopConsumer {
    pub(crate) fn new(session_id: SessionId, loop_id: LoopId, inbox: Arc<Inbox>) -> Self {
        Self {
            session_id,
            loop_id,
            inbox,
        }
    }

    /// The session that owns the loop.
    #[must_use]
    pub fn session_id(&self) -> SessionId {
        self.session_id
    }

    /// The loop's ID.
    #[must_use]
    pub fn loop_id(&self) -> LoopId {
        self.loop_id
    }

    /// Waits for the next live notification that is not currently handed out.
    ///
    /// Notifications come in acceptance order (seeded ones first, in the given order).
    /// One that was received and dropped without [`ack`](Received::ack) comes back
    /// ahead of every notification not yet received. While a [`Received`] is
    /// outstanding, it is not handed out again.
    ///
    /// Returns `None` once the loop has exited and nothing is left: after
    /// [`LoopHandle::shutdown`](crate::LoopHandle::shutdown) (or once every handle is
    /// dropped), as soon as every live notification has been acknowledged.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped, no notification is lost. A notification
    /// leaves the queue only in the same poll that returns it, so a `recv` dropped
    /// while waiting has taken nothing, and the next `recv` returns what it would have.
    pub async fn recv(&mut self) -> Option<Received> {
        let pending = std::future::poll_fn(|cx| self.inbox.poll_next(cx)).await?;
        Some(Received::new(pending, &self.inbox))
    }

    /// Waits for the next live notification, as [`recv`](Self::recv) does, then takes
    /// with it those already queued behind it, up to `max` in all, in acceptance
    /// order: a batch for a consumer that acknowledges many at once. It never waits
    /// for more than the first.
    ///
    /// Returns an empty `Vec` once the loop has exited and nothing is left (when
    /// `recv` returns `None`), and at once when `max` is 0.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as `recv`: the notifications leave the queue only in the poll that
    /// returns them.
    pub async fn recv_many(&mut self, max: usize) -> Vec<Received> {
        if max == 0 {
            return Vec::new();
        }
        let taken = std::future::poll_fn(|cx| self.inbox.poll_many(cx, max)).await;
        taken
            .unwrap_or_default()
            .into_iter()
            .map(|pending| Received::new(pending, &self.inbox))
            .collect()
    }
}

impl Drop for LoopConsumer {
    fn drop(&mut self) {
        // If the loop has already exited this only marks it; nobody is waiting.
        self.inbox.consumer_dropped();
    }
}

impl fmt::Debug for LoopConsumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoopConsumer")
            .field("session_id", &self.session_id)
            .field("loop_id", &self.loop_id)
            .finish_non_exhaustive()
    }
}

/// One notification handed to the consumer, still live in the loop until acknowledged.
///
/// Call [`ack`](Self::ack) once it has been acted on (the session journals the
/// consumption first, then acks). Dropping it without `ack` returns it to the front of
/// the consumer queue: nothing accepted is lost in-process.
#[must_use = "dropping a Received without ack() puts it back in the queue"]
pub struct Received {
    /// Acceptance order, so a requeue lands at the right place.
    seq: u64,
    /// The notification (owned: handing it out and acknowledging it copy nothing; only
    /// the rare drop without `ack` clones it back into the queue).
    notification: ProcessNotification,
    /// The loop's consumer queue, for `ack` and for the requeue in `Drop`.
    inbox: Arc<Inbox>,
    /// False once released; then `Drop` does nothing.
    armed: bool,
}

impl Received {
    pub(crate) fn new(pending: Pending, inbox: &Arc<Inbox>) -> Self {
        Self {
            seq: pending.seq,
            notification: pending.notification,
            inbox: Arc::clone(inbox),
            armed: true,
        }
    }

    /// The notification.
    #[must_use]
    pub fn notification(&self) -> &ProcessNotification {
        &self.notification
    }

    /// The completion notification it carries (the DTO the supervisor reported):
    /// `received.completion()` for `received.completion()`.
    #[must_use]
    pub fn completion(&self) -> &ProcessCompletionNotification {
        self.notification.notification()
    }

    /// Its command ID.
    #[must_use]
    pub fn command_id(&self) -> CommandId {
        self.notification.command_id()
    }

    /// Releases the notification: removes it from the live set (freeing capacity) and
    /// remembers its ID as consumed, so a redelivery answers `Duplicate` while the ID
    /// is remembered.
    ///
    /// This is the second step of the two-step acknowledgement: the session records
    /// the consumption durably first, then calls `ack`. The release is recorded for the
    /// loop without waiting for it; the loop applies it before it decides any delivery
    /// sent after `ack` returned, so every such delivery observes it.
    ///
    /// # Errors
    ///
    /// [`LoopAckError::LoopExited`] if the loop has already ended.
    ///
    /// # Cancel safety
    ///
    /// Completes on its first poll. If the future is dropped before it is polled, the
    /// `Received` inside it is dropped unacknowledged and goes back to the queue, so
    /// the consumer sees it again rather than losing it.
    pub async fn ack(self) -> Result<(), LoopAckError> {
        self.release()
    }

    /// Releases the notification at once: [`ack`](Self::ack) without a future, for a
    /// caller that must release many in one go (a batch whose consumptions were
    /// journaled together) with no point between them where it could be cancelled.
    ///
    /// # Errors
    ///
    /// [`LoopAckError::LoopExited`] if the loop has already ended.
    pub fn release(mut self) -> Result<(), LoopAckError> {
        self.armed = false;
        let command_id = self.command_id();
        if self.inbox.ack(command_id) {
            Ok(())
        } else {
            Err(LoopAckError::LoopExited {
                loop_id: self.notification.loop_id(),
                command_id,
            })
        }
    }
}

impl Drop for Received {
    fn drop(&mut self) {
        if self.armed {
            self.armed = false;
            // The rare path: a copy goes back, so that `notification` needs no shared
            // owner.
            // A loop that has exited has no queue to return it to; then it is discarded.
            self.inbox.requeue(Pending {
                seq: self.seq,
                notification: self.notification.clone(),
            });
        }
    }
}

impl fmt::Debug for Received {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Received")
            .field("command_id", &self.command_id())
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}
