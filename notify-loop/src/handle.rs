//! The producer side: a cloneable handle that delivers notifications to a loop.

use std::sync::Arc;

use notify_types::{LoopId, ProcessNotification, SessionId};

use crate::delivery::Delivery;
use crate::inbox::Inbox;

/// The producer side of a loop: delivers notifications and shuts the loop down.
///
/// Cheap to clone; every clone decides its deliveries against the same loop state.
/// When every handle is dropped the loop stops accepting (as after
/// [`shutdown`](Self::shutdown)).
#[derive(Clone)]
pub struct LoopHandle {
    session_id: SessionId,
    loop_id: LoopId,
    producers: Arc<Producers>,
}

/// What every clone of one loop's handle shares: dropping the last one stops the loop
/// accepting.
struct Producers(Arc<Inbox>);

impl Drop for Producers {
    fn drop(&mut self) {
        self.0.stop_accepting();
    }
}

impl std::fmt::Debug for LoopHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopHandle")
            .field("session_id", &self.session_id)
            .field("loop_id", &self.loop_id)
            .finish_non_exhaustive()
    }
}

impl LoopHandle {
    pub(crate) fn new(session_id: SessionId, loop_id: LoopId, inbox: Arc<Inbox>) -> Self {
        Self {
            session_id,
            loop_id,
            producers: Arc::new(Producers(inbox)),
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

    /// Offers `notification` to the loop and returns its answer, decided in this order:
    ///
    /// 1. loop shut down, or its consumer dropped -> `Stopped(Exited)`;
    /// 2. invalid, or addressed to another session or loop -> `Stopped(Refused)`, with
    ///    a `tracing` warning;
    /// 3. command ID live (accepted, not yet acknowledged) or remembered as consumed ->
    ///    `Duplicate`;
    /// 4. live set at capacity -> `Stopped(Full)`;
    /// 5. otherwise `Accepted`: it joins the live set and the consumer queue.
    ///
    /// Deliveries from one task are decided in the order they are made, and every
    /// [`Received::ack`](crate::Received::ack) that returned before this call started
    /// has been applied. The decision is made by the caller, under the loop's lock (a
    /// few map operations): it never waits on the consumer, nor on a task.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it completes on its first poll, so a future dropped before it was
    /// polled delivered nothing, and one that was polled has its answer. Retrying with
    /// the same notification answers `Duplicate` (it was accepted) or what a first
    /// delivery would have answered.
    pub async fn deliver(&self, notification: ProcessNotification) -> Delivery {
        let answer = self.producers.0.deliver(notification);
        if let Delivery::Stopped(cause) = answer {
            crate::metrics::stopped(cause);
        }
        answer
    }

    /// Waits until the loop has room for a new notification, or no longer accepts.
    ///
    /// For a producer answered `Stopped(Full)`: await this, then deliver again. It
    /// resolves at once if a delivery of a new command ID would not answer `Full` now,
    /// or if the loop is closed ([`is_closed`](Self::is_closed): shut down, every handle
    /// gone, or its consumer dropped), so it never waits on a loop that has stopped.
    /// Otherwise it waits, and is woken with hysteresis, so that refilling a full inbox
    /// costs about one wake-up per batch rather than one per acknowledgement: once the
    /// consumer's acknowledgements have drained the live set to half the capacity (for a
    /// capacity of at most 4, as soon as a slot is free), once the consumer waits on an
    /// empty queue while a slot is free, or once the loop closes. Every waiter is woken
    /// then; those that find the room taken by others wait again.
    ///
    /// Room is not reserved: the next delivery may still answer `Full` if other
    /// producers filled the inbox in between; deliver and wait again. With a capacity of
    /// `0` it waits until the loop closes.
    ///
    /// ```
    /// use notify_loop::{Delivery, LoopConfig, spawn};
    /// use notify_types::*;
    ///
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let (session_id, loop_id) = (SessionId::new(), LoopId::new());
    /// let (handle, mut consumer) = spawn(LoopConfig::new(session_id, loop_id).capacity(1));
    /// let note = move || {
    ///     ProcessNotification::new(ProcessCompletionNotification {
    ///         command_id: CommandId::new(),
    ///         session_id,
    ///         loop_id,
    ///         process_handle: "build-42".into(),
    ///         state: ProcessLifecycleState::Exited,
    ///         reason: ProcessTerminalReason::Exited,
    ///     })
    /// };
    /// let producer = tokio::spawn(async move {
    ///     for notification in [note(), note(), note()] {
    ///         let full = Delivery::Stopped(StopCause::Full);
    ///         while handle.deliver(notification.clone()).await == full {
    ///             handle.wait_for_room().await;
    ///         }
    ///     }
    /// });
    /// for _ in 0..3 {
    ///     consumer.recv().await.ok_or("loop exited")?.ack().await?;
    /// }
    /// producer.await?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it reserves and changes nothing, and a dropped wait leaves no
    /// waiter (nor its waker) behind in the loop; waiting again works as before.
    pub async fn wait_for_room(&self) {
        self.producers.0.wait_for_room().await;
    }

    /// Stops the loop accepting: every later delivery answers `Stopped(Exited)`, and
    /// [`is_closed`](Self::is_closed) is true once this returns.
    ///
    /// Deliveries made before the shutdown are decided normally. Notifications already
    /// accepted are not lost: the consumer can still receive and acknowledge them, and
    /// [`LoopConsumer::recv`](crate::LoopConsumer::recv) returns `None` once none is
    /// live; the loop then ends. Shutting down an exited loop returns at once.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it completes on its first poll; calling `shutdown` again is
    /// harmless.
    pub async fn shutdown(&self) {
        self.producers.0.stop_accepting();
    }

    /// How many notifications are live in the loop: accepted or seeded and not yet
    /// released by [`Received::ack`](crate::Received::ack), whether queued or handed
    /// out. What the consumer still has to acknowledge; a loop that ended with some
    /// unreleased (its consumer dropped) keeps counting them.
    #[must_use]
    pub fn live(&self) -> usize {
        self.producers.0.live()
    }

    /// Whether the loop no longer accepts deliveries (shut down, every handle gone, or
    /// its consumer dropped).
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.producers.0.is_closed()
    }
}
