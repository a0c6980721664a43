//! The completion notification DTO and its command envelope.

use crate::id::{CommandId, LoopId, SessionId};
use crate::state::{ProcessLifecycleState, ProcessTerminalReason, is_completion_pair};
use crate::validation::{ValidationError, ValidationField as F, check, is_valid_handle};

/// A metadata-only message from a process supervisor to the loop that owns a process:
/// "this process ended, in this state, for this reason".
///
/// It never carries the command line, output, stdin, environment, a host path or an OS
/// PID. Fields are public, as in the reference DTO; call [`validate`](Self::validate)
/// before trusting a value.
///
/// ```
/// use notify_types::*;
///
/// let n = ProcessCompletionNotification {
///     command_id: CommandId::new(),
///     session_id: SessionId::new(),
///     loop_id: LoopId::new(),
///     process_handle: "build-42".into(),
///     state: ProcessLifecycleState::Exited,
///     reason: ProcessTerminalReason::Exited,
/// };
/// assert!(n.validate().is_ok());
///
/// let bad = ProcessCompletionNotification { process_handle: "a/b".into(), ..n };
/// assert_eq!(bad.validate().unwrap_err().field(), ValidationField::ProcessHandle);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ProcessCompletionNotification {
    /// The stable command ID, allocated by the publisher before publishing.
    pub command_id: CommandId,
    /// The session that owns the process.
    pub session_id: SessionId,
    /// The loop that owns the process.
    pub loop_id: LoopId,
    /// An opaque, URL-safe handle (`[A-Za-z0-9_-]`, 1 to 128 bytes).
    pub process_handle: String,
    /// The terminal state.
    pub state: ProcessLifecycleState,
    /// The terminal reason; must form a completion pair with `state`.
    pub reason: ProcessTerminalReason,
}

impl ProcessCompletionNotification {
    /// Checks every field, returning the first failing one in wire order:
    /// `command_id`, `session_id`, `loop_id`, `process_handle`, `state_reason`.
    ///
    /// # Errors
    ///
    /// A [`ValidationError`] naming the first failing field.
    pub fn validate(&self) -> Result<(), ValidationError> {
        check(!self.command_id.is_nil(), F::CommandId)?;
        check(!self.session_id.is_nil(), F::SessionId)?;
        check(!self.loop_id.is_nil(), F::LoopId)?;
        check(is_valid_handle(&self.process_handle), F::ProcessHandle)?;
        check(is_completion_pair(self.state, self.reason), F::StateReason)
    }
}

/// The durable command that carries a [`ProcessCompletionNotification`] to a loop.
///
/// Its command ID always equals the nested notification's: the constructor copies it,
/// and the decoder refuses a mismatch. The command does not validate the notification
/// (a loop must be able to hold and refuse an invalid one); the codec does.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
// With serde, a command is its notification: the envelope's ID is derived from it, so
// no serialized form can break the invariant.
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(
        from = "ProcessCompletionNotification",
        into = "ProcessCompletionNotification"
    )
)]
pub struct ProcessNotification {
    command_id: CommandId,
    notification: ProcessCompletionNotification,
}

impl ProcessNotification {
    /// The wire `type` of the command.
    pub const TYPE: &'static str = "ProcessNotification";

    /// Wraps `notification`, copying its command ID to the envelope.
    #[must_use]
    pub fn new(notification: ProcessCompletionNotification) -> Self {
        Self {
            command_id: notification.command_id,
            notification,
        }
    }

    /// The command ID (equal to the notification's).
    #[must_use]
    pub fn command_id(&self) -> CommandId {
        self.command_id
    }

    /// The wrapped notification.
    #[must_use]
    pub fn notification(&self) -> &ProcessCompletionNotification {
        &self.notification
    }

    /// Unwraps the notification.
    #[must_use]
    pub fn into_notification(self) -> ProcessCompletionNotification {
        self.notification
    }

    /// The owning session.
    #[must_use]
    pub fn session_id(&self) -> SessionId {
        self.notification.session_id
    }

    /// The owning loop.
    #[must_use]
    pub fn loop_id(&self) -> LoopId {
        self.notification.loop_id
    }

    /// Validates the wrapped notification.
    ///
    /// # Errors
    ///
    /// See [`ProcessCompletionNotification::validate`].
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.notification.validate()
    }
}

impl From<ProcessCompletionNotification> for ProcessNotification {
    fn from(n: ProcessCompletionNotification) -> Self {
        Self::new(n)
    }
}

impl From<ProcessNotification> for ProcessCompletionNotification {
    fn from(c: ProcessNotification) -> Self {
        c.into_notification()
    }
}
