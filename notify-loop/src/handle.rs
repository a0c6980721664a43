//! The producer side: a cloneable handle that delivers notifications to a loop, and
//! the requests it sends the loop task.

use notify_types::{Disposition, LoopId, ProcessNotification, SessionId, StopCause};
use tokio::sync::{mpsc, oneshot};

/// What a [`LoopHandle`] asks of the loop task, over a bounded channel (producers get
/// back-pressure).
pub(crate) enum Request {
    /// Offer a notification; the answer comes back on `reply`.
    Deliver {
        notification: ProcessNotification,
        reply: oneshot::Sender<Delivery>,
    },
    /// Stop accepting; `reply` fires once the loop refuses further deliveries.
    Shutdown { reply: oneshot::Sender<()> },
}

/// The loop's answer to one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Delivery {
    /// The notification joined the live set and the consumer queue.
    Accepted,
    /// The command ID is already live, or remembered as consumed; nothing changed.
    Duplicate,
    /// The loop did not take the notification: it is full ([`StopCause::Full`], retry
    /// later with the same ID), gone ([`StopCause::Exited`]) or refused it as invalid
    /// or misaddressed ([`StopCause::Refused`], never retry).
    Stopped(StopCause),
}

impl Delivery {
    /// The wire disposition: `Accepted`, `Duplicate` or `Stopped`.
    #[must_use]
    pub fn disposition(self) -> Disposition {
        match self {
            Self::Accepted => Disposition::Accepted,
            Self::Duplicate => Disposition::Duplicate,
            Self::Stopped(_) => Disposition::Stopped,
        }
    }
}

/// The producer side of a loop: delivers notifications and shuts the loop down.
///
/// Cheap to clone; every clone talks to the same loop task through one bounded
/// channel. When every handle is dropped the loop stops accepting (as after
/// [`shutdown`](Self::shutdown)).
#[derive(Debug, Clone)]
pub struct LoopHandle {
    session_id: SessionId,
    loop_id: LoopId,
    requests: mpsc::Sender<Request>,
}

impl LoopHandle {
    pub(crate) fn new(
        session_id: SessionId,
        loop_id: LoopId,
        requests: mpsc::Sender<Request>,
    ) -> Self {
        Self {
            session_id,
            loop_id,
            requests,
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
    /// has been applied. If the channel is momentarily full this waits for room
    /// (back-pressure); it never waits on the consumer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in the sense that matters for retries: if the future is dropped
    /// before the request entered the channel, nothing was delivered; if it is dropped
    /// after, the loop still decides it, and the answer is lost. Either way, retrying
    /// with the same notification answers `Duplicate` (it was accepted) or what a first
    /// delivery would have answered.
    pub async fn deliver(&self, notification: ProcessNotification) -> Delivery {
        let answer = self.decide(notification).await;
        if let Delivery::Stopped(cause) = answer {
            crate::metrics::stopped(cause);
        }
        answer
    }

    /// [`deliver`](Self::deliver) without the metrics.
    async fn decide(&self, notification: ProcessNotification) -> Delivery {
        let (reply, answer) = oneshot::channel();
        if self
            .requests
            .send(Request::Deliver {
                notification,
                reply,
            })
            .await
            .is_err()
        {
            return Delivery::Stopped(StopCause::Exited);
        }
        // The loop drops the reply sender only when it exits without deciding.
        answer.await.unwrap_or(Delivery::Stopped(StopCause::Exited))
    }

    /// Stops the loop accepting: every later delivery answers `Stopped(Exited)`, and
    /// [`is_closed`](Self::is_closed) is true once this returns.
    ///
    /// Deliveries made before the shutdown are decided normally. Notifications already
    /// accepted are not lost: the consumer can still receive and acknowledge them, and
    /// [`LoopConsumer::recv`](crate::LoopConsumer::recv) returns `None` once none is
    /// live; the task then ends. Shutting down an exited loop returns at once.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped, the loop either shuts down anyway or was
    /// never told to; calling `shutdown` again is harmless.
    pub async fn shutdown(&self) {
        let (reply, done) = oneshot::channel();
        if self
            .requests
            .send(Request::Shutdown { reply })
            .await
            .is_ok()
        {
            // An error means the loop exited meanwhile, which is what was asked.
            let _ = done.await;
        }
    }

    /// Whether the loop no longer accepts deliveries (shut down, every handle gone, or
    /// its consumer dropped and the exit already processed).
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.requests.is_closed()
    }
}
