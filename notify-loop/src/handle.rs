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

    /// Whether the loop no longer accepts deliveries (shut down, every handle gone, or
    /// its consumer dropped).
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.producers.0.is_closed()
    }
}
