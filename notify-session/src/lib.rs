//! The session: the front door for process completion notifications.
//!
//! A supervisor hands a [`Session`] a
//! [`ProcessCompletionNotification`](notify_types::ProcessCompletionNotification); the
//! session validates it, checks that it owns it, finds the loop, **appends it to the
//! journal first** under its own command ID, and only then dispatches it to the loop's
//! bounded inbox. The answer is `Ok(`[`Notified`](notify_types::Notified)`)` or a
//! typed [`NotifyError`](notify_types::NotifyError), each standing for one of the four
//! dispositions:
//!
//! | outcome | meaning | caller action |
//! | --- | --- | --- |
//! | `Ok(Accepted)` | journaled (or headless) and the loop took ownership | done |
//! | `Ok(Duplicate)` | the same ID and payload were already journaled or accepted | done; keep the ID |
//! | `Err(Collision)` | the ID names a different journaled payload | fail closed |
//! | `Err(DeliveryStopped)` (full, exited) | the loop is full or gone; the frame stays journaled | retry, same ID ([`notify_with_retry`]) |
//! | other `Err` | refused, unknown or foreign loop, bad input, storage failure | see [`NotifyError`](notify_types::NotifyError): never retry blindly |
//!
//! Most users need one import, [`prelude`]: `use notify_session::prelude::*;`.
//!
//! The loop's consumer acknowledges each notification through the session
//! ([`SessionReceived::ack`]), which journals `NotificationConsumed` before releasing
//! it. After a crash, [`restore`] reports what was appended and never consumed (to seed
//! the re-registered loops) and which processes were left running
//! ([`Session::declare_lost`]). Lifecycle events are journaled and streamed with
//! [`Session::publish_lifecycle`] and [`Session::subscribe`]. [`Supervisor`] runs real
//! OS processes and drives all of it.
//!
//! No blocking lock is held across an `.await`. The one lock that is, by design, is the
//! session's end gate: notify, publish and acknowledge hold it for reading through their
//! append (notify through its dispatch too), so that [`Session::end`] orders against
//! them. One session serves many loops and many sessions share one journal.
//!
//! Across hosts, [`SessionHost`] (the host runtime) places, keeps, moves and retires
//! sessions: it opens one in one call (lease, restore, [`HostApp::started`]), renews
//! all its leases together, stops a session at once when its lease is lost (callers
//! then get [`NotifyError::NotOwner`](notify_types::NotifyError::NotOwner)), adopts
//! orphaned sessions, hands sessions off at shutdown and runs retention.
//!
//! Inside: `session.rs` (routing and the notify path), `shared.rs` (the state a
//! session's handles and consumers share, the end gate among it), `append.rs`,
//! `consumer.rs`, `txack.rs`, `txack_pg.rs` and `txack_pg_with.rs` (acknowledging in
//! the consumer's own transaction), `end.rs`, `restore.rs`, `retry.rs`, `supervisor.rs`, `error.rs`,
//! `metrics.rs` and `host/` (the host runtime); the `notify` command line is
//! `src/bin/notify/` (feature `cli`).
//!
//! ```
//! # use std::sync::Arc;
//! # use notify_session::*;
//! # use notify_types::*;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! let journal = Arc::new(notify_journal::RedbJournal::open(
//!     dir.path().join("notify.redb"),
//!     notify_journal::RedbOptions::default(),
//! )?);
//! let session = Session::new(SessionId::new(), journal.clone());
//! let loop_id = LoopId::new();
//! let mut consumer = session.register_loop(notify_loop::LoopConfig::new(session.id(), loop_id))?;
//!
//! let n = ProcessCompletionNotification {
//!     command_id: CommandId::new(),
//!     session_id: session.id(),
//!     loop_id,
//!     process_handle: "build-42".into(),
//!     state: ProcessLifecycleState::Exited,
//!     reason: ProcessTerminalReason::Exited,
//! };
//! assert_eq!(session.notify_process_completion(n.clone()).await?, Notified::Accepted);
//!
//! // Crash before the consumer acknowledges: restore hands it back.
//! drop((session, consumer));
//! let report = restore(n.session_id, journal.as_ref()).await?;
//! assert_eq!(report.pending[&loop_id].len(), 1);
//! # Ok(())
//! # }
//! ```
#![deny(unsafe_code)]

mod append;
mod batch;
mod consumer;
mod end;
mod error;
mod host;
mod metrics;
mod received;
mod restore;
mod retry;
#[cfg(feature = "serve")]
pub mod serve;
mod session;
mod shared;
mod supervisor;
mod txack;
mod txack_batch;
#[cfg(feature = "postgres")]
mod txack_pg;
#[cfg(feature = "postgres")]
mod txack_pg_with;

/// The README's usage example and every guide page (`docs/*.md`): their Rust examples
/// are compiled (and run, unless marked `no_run`) as doctests, where they are read.
/// A new page goes in this list.
#[cfg(doctest)]
pub mod guide_doctests {
    #[doc = include_str!("../../README.md")]
    pub struct Readme;
    #[doc = include_str!("../../docs/benchmarks.md")]
    pub struct Benchmarks;
    #[doc = include_str!("../../docs/concepts.md")]
    pub struct Concepts;
    #[doc = include_str!("../../docs/development.md")]
    pub struct Development;
    #[doc = include_str!("../../docs/effectively-once.md")]
    pub struct EffectivelyOnce;
    #[doc = include_str!("../../docs/hosts.md")]
    pub struct Hosts;
    #[doc = include_str!("../../docs/integrity.md")]
    pub struct Integrity;
    #[doc = include_str!("../../docs/limits.md")]
    pub struct Limits;
    #[doc = include_str!("../../docs/metrics.md")]
    pub struct Metrics;
    #[doc = include_str!("../../docs/operating.md")]
    pub struct Operating;
    #[doc = include_str!("../../docs/postgres-deployment.md")]
    pub struct PostgresDeployment;
    #[doc = include_str!("../../docs/retention.md")]
    pub struct Retention;
    #[doc = include_str!("../../docs/when-to-use.md")]
    pub struct WhenToUse;
}

pub use notify_journal;
pub use notify_loop;
pub use notify_types;

pub use batch::{AckBatchError, SessionBatch};
pub use consumer::{SessionConsumer, SessionReceived};
pub use end::{Ended, IfPending};
pub use error::{
    AckError, DeclareLostError, EndError, PublishError, RegisterError, RestoreError, TxAckError,
};
pub use host::{
    AppError, DEFAULT_CAPACITY, HostApp, HostBuilder, HostError, HostStatus, RetentionSchedule,
    SessionHost, SessionStatus, StopReason,
};
pub use restore::{LostOutcome, RestoreReport, StoppedDelivery, completed_event, restore};
pub use retry::{RetryPolicy, notify_with_retry};
pub use session::Session;
pub use shared::Published;
pub use supervisor::{
    ProcessOutcome, ProcessSpec, StopSignal, SuperviseError, SupervisedProcess, Supervisor,
};
#[cfg(feature = "postgres")]
pub use txack_pg::{PgAck, PgAckPending, PgAckStatement};
#[cfg(feature = "postgres")]
pub use txack_pg_with::PgAcked;

pub mod prelude {
    //! What a session user needs, in one import: `use notify_session::prelude::*;`.
    //!
    //! The IDs, the notification and its enums, the answers ([`Notified`],
    //! [`NotifyError`], [`Disposition`]), the redb journal, the session, its loops'
    //! configuration and consumers, restore, the retry helper, the supervisor and the
    //! host runtime ([`SessionHost`], [`HostApp`]). The
    //! three crates underneath are re-exported too (`notify_session::notify_types`,
    //! `::notify_journal`, `::notify_loop`) for everything else.
    //!
    //! No name here clashes with another crate's prelude-worthy name: the loop's own
    //! acknowledgement error is [`notify_loop::LoopAckError`], the session's is
    //! [`AckError`].
    //!
    //! ```
    //! use notify_session::prelude::*;
    //!
    //! # #[tokio::main(flavor = "current_thread")]
    //! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    //! let session = Session::headless(SessionId::new());
    //! let loop_id = LoopId::new();
    //! let _inbox = session.register_loop(LoopConfig::new(session.id(), loop_id))?;
    //! let n = ProcessCompletionNotification {
    //!     command_id: CommandId::new(),
    //!     session_id: session.id(),
    //!     loop_id,
    //!     process_handle: "build-42".into(),
    //!     state: ProcessLifecycleState::Exited,
    //!     reason: ProcessTerminalReason::Exited,
    //! };
    //! assert_eq!(session.notify_process_completion(n).await?, Notified::Accepted);
    //! # Ok(())
    //! # }
    //! ```

    pub use notify_journal::{JournalBackend, JournalRead, RedbJournal, RedbOptions};
    pub use notify_loop::LoopConfig;
    pub use notify_types::{
        CommandId, Disposition, EventId, ExecutionId, LoopId, Notified, NotifyError,
        ProcessCompletionNotification, ProcessCompletionNotifier, ProcessLifecycleKind,
        ProcessLifecycleMetadata, ProcessLifecycleState, ProcessNotification,
        ProcessTerminalReason, SessionEvent, SessionId, StopCause, Timestamp,
    };

    pub use crate::{
        AckBatchError, AckError, EndError, Ended, HostApp, HostError, IfPending, ProcessOutcome,
        ProcessSpec, RestoreReport, RetryPolicy, Session, SessionBatch, SessionConsumer,
        SessionHost, SessionReceived, StopReason, StopSignal, SupervisedProcess, Supervisor,
        TxAckError, completed_event, notify_with_retry, restore,
    };
}
