//! Field-level validation errors.

use std::fmt;

/// The longest process handle, in bytes.
pub const MAX_PROCESS_HANDLE_BYTES: usize = 128;

/// The longest lifecycle diagnostic, in bytes.
pub const MAX_PROCESS_DIAGNOSTIC_BYTES: usize = 512;

/// The field a validation failure names, spelled as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ValidationField {
    /// `command_id`: nil.
    CommandId,
    /// `session_id`: nil.
    SessionId,
    /// `loop_id`: nil.
    LoopId,
    /// `process_handle`: empty, too long, or a byte outside `[A-Za-z0-9_-]`.
    ProcessHandle,
    /// `event_id`: nil.
    EventId,
    /// `origin_execution_id`: nil.
    OriginExecutionId,
    /// `process_created_at`: missing or the zero time.
    ProcessCreatedAt,
    /// `process_started_at`: before the creation time.
    ProcessStartedAt,
    /// `process_finished_at`: before the creation or start time.
    ProcessFinishedAt,
    /// `diagnostic`: too long, or present where the kind/state does not allow one.
    Diagnostic,
    /// `exit_code`: on the wire without `has_exit_code`.
    ExitCode,
    /// `state_reason`: the (state, reason) pair is not allowed here.
    StateReason,
    /// `lifecycle_fields`: timestamps or exit code do not fit the kind and state.
    LifecycleFields,
}

impl ValidationField {
    /// The wire spelling of the field.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::CommandId => "command_id",
            Self::SessionId => "session_id",
            Self::LoopId => "loop_id",
            Self::ProcessHandle => "process_handle",
            Self::EventId => "event_id",
            Self::OriginExecutionId => "origin_execution_id",
            Self::ProcessCreatedAt => "process_created_at",
            Self::ProcessStartedAt => "process_started_at",
            Self::ProcessFinishedAt => "process_finished_at",
            Self::Diagnostic => "diagnostic",
            Self::ExitCode => "exit_code",
            Self::StateReason => "state_reason",
            Self::LifecycleFields => "lifecycle_fields",
        }
    }
}

impl fmt::Display for ValidationField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A DTO failed validation; [`field`](Self::field) names the first failing field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid process lifecycle field `{field}`")]
pub struct ValidationError {
    field: ValidationField,
}

impl ValidationError {
    /// An error naming `field`.
    #[must_use]
    pub const fn new(field: ValidationField) -> Self {
        Self { field }
    }

    /// The first failing field.
    #[must_use]
    pub const fn field(&self) -> ValidationField {
        self.field
    }
}

impl From<ValidationField> for ValidationError {
    fn from(field: ValidationField) -> Self {
        Self::new(field)
    }
}

/// Whether `handle` is a valid opaque process handle.
#[must_use]
pub fn is_valid_handle(handle: &str) -> bool {
    !handle.is_empty()
        && handle.len() <= MAX_PROCESS_HANDLE_BYTES
        && handle
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Returns `Err(field)` when `ok` is false.
pub(crate) fn check(ok: bool, field: ValidationField) -> Result<(), ValidationError> {
    if ok {
        Ok(())
    } else {
        Err(ValidationError::new(field))
    }
}
