//! The bounded loop inbox: where a process-completion notification ends up.
//!
//! A loop is one tokio task that owns its state (the mini-redis actor pattern). It is
//! reached through two halves returned by [`spawn`]:
//!
//! * [`LoopHandle`] (cloneable, the producer side) [`deliver`](LoopHandle::deliver)s
//!   a [`ProcessNotification`](notify_types::ProcessNotification) over a bounded
//!   channel and gets exactly one [`Delivery`] back: `Accepted`, `Duplicate`, or
//!   `Stopped` with a [`StopCause`](notify_types::StopCause) (`Full`, `Exited`,
//!   `Refused`).
//! * [`LoopConsumer`] (one per loop) [`recv`](LoopConsumer::recv)s accepted
//!   notifications in acceptance order, restore-seeded ones first. Each comes as a
//!   [`Received`], which must be [`ack`](Received::ack)ed to release it; dropping it
//!   unacknowledged puts it back at the front of the queue.
//!
//! **State ownership.** The loop task owns every piece of loop state (live set,
//! consumed memory, capacity, whether it accepts) and is the single decider of every
//! delivery, exactly once, in the order the requests reach it. The one exception is
//! the consumer queue of accepted, not yet received notifications: it sits in a small
//! structure shared with the consumer side under a `std` mutex that is never held
//! across `.await`, so that `recv` and `ack` are not round trips to the task. Only the
//! task appends to it, and only what it has accepted; acknowledgements are recorded
//! there and applied by the task before it decides any delivery sent after them. The
//! reasons and invariants are documented in the private `inbox` module.
//!
//! The loop keeps a bounded **live set** (accepted, not yet acknowledged; default 64)
//! and a bounded first-in-first-out **memory of consumed IDs** (default 4096) for
//! duplicate detection. An ID that has been forgotten is accepted again if delivered
//! again; see [`LoopConfig::consumed_memory`].
//!
//! **Architecture Invariant:** this crate depends on `notify-types` only. It knows
//! nothing of the journal: durability (journaling before dispatch, journaling the
//! consumption before [`Received::ack`]) is the session's job.
//!
//! ```
//! use notify_loop::{Delivery, LoopConfig, spawn};
//! use notify_types::*;
//!
//! # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
//! let (session_id, loop_id) = (SessionId::new(), LoopId::new());
//! let (handle, mut consumer) = spawn(LoopConfig::new(session_id, loop_id));
//!
//! let notification = ProcessNotification::new(ProcessCompletionNotification {
//!     command_id: CommandId::new(),
//!     session_id,
//!     loop_id,
//!     process_handle: "build-42".into(),
//!     state: ProcessLifecycleState::Exited,
//!     reason: ProcessTerminalReason::Exited,
//! });
//! assert_eq!(handle.deliver(notification.clone()).await, Delivery::Accepted);
//! assert_eq!(handle.deliver(notification.clone()).await, Delivery::Duplicate);
//!
//! let received = consumer.recv().await.ok_or("loop exited")?;
//! assert_eq!(received.notification(), &notification);
//! received.ack().await?;
//! assert_eq!(handle.deliver(notification).await, Delivery::Duplicate); // remembered
//!
//! handle.shutdown().await;
//! assert!(consumer.recv().await.is_none());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(unsafe_code)]

mod actor;
mod config;
mod consumer;
mod handle;
mod inbox;
mod metrics;

pub use config::{DEFAULT_CAPACITY, DEFAULT_CONSUMED_MEMORY, LoopConfig};
pub use consumer::{LoopAckError, LoopConsumer, Received};
pub use handle::{Delivery, LoopHandle};

/// Spawns the loop task on the current tokio runtime and returns its two halves.
///
/// # Panics
///
/// Like [`tokio::spawn`], when called outside a tokio runtime.
#[must_use]
pub fn spawn(config: LoopConfig) -> (LoopHandle, LoopConsumer) {
    actor::spawn(config)
}
