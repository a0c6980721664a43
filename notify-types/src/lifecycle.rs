//! Process lifecycle metadata: the payload of the five lifecycle events.

use jiff::Timestamp;

use crate::id::{EventId, ExecutionId, LoopId, SessionId};
use crate::state::{
    ProcessLifecycleKind as K, ProcessLifecycleState as S, ProcessTerminalReason as R,
    is_completion_pair,
};
use crate::validation::{
    MAX_PROCESS_DIAGNOSTIC_BYTES, ValidationError, ValidationField as F, check, is_valid_handle,
};

/// The zero time (`0001-01-01T00:00:00Z`) the reference writes for "unset".
pub const ZERO_TIME: Timestamp = Timestamp::constant(-62_135_596_800, 0);

/// Bounded, secret-free metadata about one step in a supervised process's life.
///
/// Fields are public, as in the reference DTO; call [`validate`](Self::validate) before
/// trusting a value. On the wire the exit code is the pair `has_exit_code`/`exit_code`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ProcessLifecycleMetadata {
    /// The event's ID (its idempotency key in the journal).
    pub event_id: EventId,
    /// Which lifecycle event this is.
    pub kind: K,
    /// The owning session.
    pub session_id: SessionId,
    /// The owning loop.
    pub loop_id: LoopId,
    /// The opaque process handle.
    pub process_handle: String,
    /// The execution that started the process.
    pub origin_execution_id: ExecutionId,
    /// The process's state at this event.
    pub state: S,
    /// When the process was created; never unset (the zero time, or anything before
    /// it, is invalid).
    pub process_created_at: Timestamp,
    /// When the process started running.
    pub process_started_at: Option<Timestamp>,
    /// When the process finished.
    pub process_finished_at: Option<Timestamp>,
    /// The exit code, for a process that exited on its own.
    pub exit_code: Option<i32>,
    /// Why the process ended or is being stopped.
    pub reason: Option<R>,
    /// A short diagnostic (at most 512 bytes), only for failed or lost processes.
    pub diagnostic: Option<String>,
}

impl ProcessLifecycleMetadata {
    /// Checks every field, returning the first failing one in the specification's
    /// order: `event_id`, `session_id`, `loop_id`, `process_handle`,
    /// `origin_execution_id`, `process_created_at`, `process_started_at`,
    /// `process_finished_at`, `diagnostic` (size, then presence), `exit_code`,
    /// `state_reason`, `lifecycle_fields`.
    ///
    /// # Errors
    ///
    /// A [`ValidationError`] naming the first failing field.
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.validate_wire(false)
    }

    /// Validation with the wire-only "exit code without `has_exit_code`" flag, which a
    /// Rust value cannot express but a decoded document can.
    pub(crate) fn validate_wire(&self, orphan_exit_code: bool) -> Result<(), ValidationError> {
        check(!self.event_id.is_nil(), F::EventId)?;
        check(!self.session_id.is_nil(), F::SessionId)?;
        check(!self.loop_id.is_nil(), F::LoopId)?;
        check(is_valid_handle(&self.process_handle), F::ProcessHandle)?;
        check(!self.origin_execution_id.is_nil(), F::OriginExecutionId)?;
        let created = self.process_created_at;
        // Before the zero time is not representable in RFC 3339 (years 0000-9999) either.
        check(created > ZERO_TIME, F::ProcessCreatedAt)?;
        check(
            self.process_started_at.is_none_or(|s| s >= created),
            F::ProcessStartedAt,
        )?;
        check(
            self.process_finished_at
                .is_none_or(|f| f >= created && self.process_started_at.is_none_or(|s| f >= s)),
            F::ProcessFinishedAt,
        )?;
        if let Some(d) = &self.diagnostic {
            check(d.len() <= MAX_PROCESS_DIAGNOSTIC_BYTES, F::Diagnostic)?;
            let allowed = matches!(
                (self.kind, self.state),
                (K::Completed, S::Failed) | (K::Lost, _)
            );
            check(allowed, F::Diagnostic)?;
        }
        check(!orphan_exit_code, F::ExitCode)?;
        check(self.state_reason_ok(), F::StateReason)?;
        check(self.lifecycle_fields_ok(), F::LifecycleFields)
    }

    fn state_reason_ok(&self) -> bool {
        match self.kind {
            K::Started | K::Backgrounded => self.state == S::Running && self.reason.is_none(),
            K::StopRequested => {
                matches!(self.state, S::Starting | S::Running)
                    && matches!(
                        self.reason,
                        Some(R::Interrupted | R::Terminated | R::Killed)
                    )
            }
            K::Completed => self.reason.is_some_and(|r| {
                self.state != S::LostOnRestore && is_completion_pair(self.state, r)
            }),
            K::Lost => self.state == S::LostOnRestore && self.reason == Some(R::LostOnRestore),
        }
    }

    fn lifecycle_fields_ok(&self) -> bool {
        let started = self.process_started_at.is_some();
        let finished = self.process_finished_at.is_some();
        let exit = self.exit_code.is_some();
        match self.kind {
            K::Started | K::Backgrounded => started && !finished && !exit,
            K::StopRequested => {
                started == (self.state == S::Running)
                    && !finished
                    && !exit
                    && self.diagnostic.is_none()
            }
            K::Completed => {
                finished
                    && match self.state {
                        S::Exited => started && exit,
                        S::Failed => !exit,
                        _ => started && !exit,
                    }
            }
            K::Lost => finished && !exit,
        }
    }

    /// Whether this event ends the process's life (kind `Completed` or `Lost`).
    #[must_use]
    pub fn is_terminal(&self) -> bool {
        self.kind.is_terminal()
    }
}
