//! The bounded loop inbox: where a process-completion notification ends up.
//!
//! A loop is one piece of shared state behind a `std` mutex, reached through two
//! halves returned by [`spawn`]:
//!
//! * [`LoopHandle`] (cloneable, the producer side) [`deliver`](LoopHandle::deliver)s
//!   a [`ProcessNotification`](notify_types::ProcessNotification) and gets exactly
//!   one [`Delivery`] back: `Accepted`, `Duplicate`, or `Stopped` with a
//!   [`StopCause`](notify_types::StopCause) (`Full`, `Exited`, `Refused`). A producer
//!   answered `Full` can await [`wait_for_room`](LoopHandle::wait_for_room) before
//!   delivering again.
//! * [`LoopConsumer`] (one per loop) [`recv`](LoopConsumer::recv)s accepted
//!   notifications in acceptance order, restore-seeded ones first. Each comes as a
//!   [`Received`], which must be [`ack`](Received::ack)ed to release it; dropping it
//!   unacknowledged puts it back at the front of the queue.
//!
//! **State ownership.** Every piece of loop state (live set, consumed memory,
//! capacity, whether it accepts, the consumer queue) sits in one structure under a
//! lock that is never held across `.await`. Each delivery is decided exactly once,
//! by its caller under that lock, in the order the deliveries take it; an `ack`
//! applies its release under the same lock before it returns, so every delivery made
//! after it observes it. No task runs: a delivery costs no hand-off but the wake-up
//! of a waiting consumer. The reasons and invariants are documented in the private
//! `inbox` module.
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

mod config;
mod consumer;
mod decide;
mod delivery;
mod handle;
mod inbox;
mod metrics;

pub use config::{DEFAULT_CAPACITY, DEFAULT_CONSUMED_MEMORY, LoopConfig};
pub use consumer::{LoopAckError, LoopConsumer, Received};
pub use delivery::Delivery;
pub use handle::LoopHandle;

/// Starts a loop and returns its two halves. It runs no task of its own, so it needs
/// no runtime; its halves are used from async code.
#[must_use]
pub fn spawn(config: LoopConfig) -> (LoopHandle, LoopConsumer) {
    let (session_id, loop_id) = (config.session_id, config.loop_id);
    let inbox = std::sync::Arc::new(inbox::Inbox::start(config));
    (
        LoopHandle::new(session_id, loop_id, std::sync::Arc::clone(&inbox)),
        LoopConsumer::new(session_id, loop_id, inbox),
    )
}
