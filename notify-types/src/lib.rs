//! The process-completion notification contract.
//!
//! A process supervisor tells the agent loop that owns a process that the process
//! ended. This crate defines that message and everything around it, and nothing else:
//!
//! * typed IDs ([`CommandId`], [`SessionId`], [`LoopId`], [`EventId`], [`ExecutionId`]);
//! * the closed enums with their numeric wire codes ([`ProcessLifecycleState`],
//!   [`ProcessTerminalReason`], [`ProcessLifecycleKind`], [`Disposition`]);
//! * the DTOs with `validate()` reporting the first failing [`ValidationField`]
//!   ([`ProcessCompletionNotification`], [`ProcessLifecycleMetadata`]);
//! * the journaled records ([`ProcessNotification`], [`SessionEvent`],
//!   [`JournalRecord`]) with a strict, deterministic JSON codec;
//! * the notifier contract ([`ProcessCompletionNotifier`], its success [`Notified`] and
//!   its error [`NotifyError`]).
//!
//! It does no I/O and knows nothing of tokio or redb.
//!
//! With the `serde` feature, the IDs (serialized as their canonical strings), the enums
//! (by variant name), [`ProcessCompletionNotification`], [`ProcessLifecycleMetadata`],
//! [`ProcessNotification`] (as its notification), [`Notified`] and [`StopCause`]
//! implement `Serialize` and `Deserialize`, for embedding them in your own APIs. The
//! journal never uses that form: its encoding is the hand-written codec above, and a
//! value read through serde encodes to the same codec bytes as the original.
//!
//! ```
//! use notify_types::*;
//!
//! let n = ProcessCompletionNotification {
//!     command_id: CommandId::new(), // allocated before publishing, reused on retry
//!     session_id: SessionId::new(),
//!     loop_id: LoopId::new(),
//!     process_handle: "build-42".into(),
//!     state: ProcessLifecycleState::Exited,
//!     reason: ProcessTerminalReason::Exited,
//! };
//! n.validate()?;
//! let record = JournalRecord::from(ProcessNotification::new(n));
//! assert_eq!(JournalRecord::decode(&record.encode())?, record);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(unsafe_code)]
// On docs.rs (all features), mark what the `serde` feature adds.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod codec;
mod event;
mod id;
mod lifecycle;
mod notification;
mod notifier;
mod state;
mod validation;

pub use codec::{
    DecodeError, JournalRecord, MAX_DECODE_BYTES, MAX_FOUND_BYTES, MAX_TIMESTAMP, WIRE_VERSION,
};
pub use event::{
    NotificationAbandoned, NotificationConsumed, SessionEnded, SessionEvent, abandoned_event_id,
    consumed_event_id, ended_event_id, lost_command_id, lost_event_id,
};
pub use id::{CommandId, EventId, ExecutionId, LoopId, ParseIdError, SessionId};
pub use jiff::Timestamp;
pub use lifecycle::{ProcessLifecycleMetadata, ZERO_TIME};
pub use notification::{ProcessCompletionNotification, ProcessNotification};
pub use notifier::{
    JournalFailure, JournalFailureKind, NotifyError, NotifyFuture, ProcessCompletionNotifier,
    StopCause,
};
pub use state::{
    Disposition, Notified, ProcessLifecycleKind, ProcessLifecycleState, ProcessTerminalReason,
    is_completion_pair,
};
pub use uuid::Uuid;
pub use validation::{
    MAX_PROCESS_DIAGNOSTIC_BYTES, MAX_PROCESS_HANDLE_BYTES, ValidationError, ValidationField,
    is_valid_handle,
};
