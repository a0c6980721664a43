//! The consumer side: receives accepted notifications in order and releases them.

use std::fmt;
use std::sync::Arc;

use notify_types::{CommandId, LoopId, ProcessNotification, SessionId};
use tokio::sync::{mpsc, oneshot};

use crate::actor::{Control, Pending};

/// Why [`Received::ack`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AckError {
    /// The loop task has exited (its consumer was dropped); there is nothing left to
    /// release. In-process state is gone, so the notification cannot be delivered
    /// again by this loop either.
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
    control: mpsc::UnboundedSender<Control>,
}

impl LoopConsumer {
    pub(crate) fn new(
        session_id: SessionId,
        loop_id: LoopId,
        control: mpsc::UnboundedSender<Control>,
    ) -> Self {
        Self {
            session_id,
            loop_id,
            control,
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
    /// Cancel safe: if the future is dropped, no notification is lost. One the loop had
    /// already handed to this call goes back to the front of the queue and the next
    /// `recv` returns it.
    pub async fn recv(&mut self) -> Option<Received> {
        let (reply, received) = oneshot::channel();
        self.control.send(Control::Recv { reply }).ok()?;
        received.await.ok()
    }
}

impl Drop for LoopConsumer {
    fn drop(&mut self) {
        // The loop may already be gone; then there is nobody to tell.
        let _ = self.control.send(Control::ConsumerDropped);
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
    /// The notification, shared with the loop's queue when requeued.
    command: Arc<ProcessNotification>,
    /// Reaches the loop from `ack` and from `Drop`.
    control: mpsc::UnboundedSender<Control>,
    /// False once released or handed back; then `Drop` does nothing.
    armed: bool,
}

impl Received {
    pub(crate) fn new(pending: Pending, control: mpsc::UnboundedSender<Control>) -> Self {
        Self {
            seq: pending.seq,
            command: pending.command,
            control,
            armed: true,
        }
    }

    /// Disarms this value and returns what it holds, without telling the loop.
    pub(crate) fn into_pending(mut self) -> Pending {
        self.armed = false;
        Pending {
            seq: self.seq,
            command: Arc::clone(&self.command),
        }
    }

    /// The notification.
    #[must_use]
    pub fn command(&self) -> &ProcessNotification {
        &self.command
    }

    /// Its command ID.
    #[must_use]
    pub fn command_id(&self) -> CommandId {
        self.command.command_id()
    }

    /// Releases the notification: removes it from the live set (freeing capacity) and
    /// remembers its ID as consumed, so a redelivery answers `Duplicate` while the ID
    /// is remembered.
    ///
    /// This is the second step of the two-step acknowledgement: the session records
    /// the consumption durably first, then calls `ack`. The release is queued to the
    /// loop without waiting for a reply; every delivery that starts after `ack`
    /// returned observes it.
    ///
    /// # Errors
    ///
    /// [`AckError::LoopExited`] if the loop task has already exited.
    ///
    /// # Cancel safety
    ///
    /// Completes on its first poll. If the future is dropped before it is polled, the
    /// `Received` inside it is dropped unacknowledged and goes back to the queue, so
    /// the consumer sees it again rather than losing it.
    pub async fn ack(mut self) -> Result<(), AckError> {
        self.armed = false;
        let command_id = self.command_id();
        self.control
            .send(Control::Ack { command_id })
            .map_err(|_| AckError::LoopExited {
                loop_id: self.command.loop_id(),
                command_id,
            })
    }
}

impl Drop for Received {
    fn drop(&mut self) {
        if self.armed {
            self.armed = false;
            let pending = Pending {
                seq: self.seq,
                command: Arc::clone(&self.command),
            };
            // A loop that has exited has no queue to return it to.
            let _ = self.control.send(Control::Requeue(pending));
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
