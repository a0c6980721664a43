//! The session's error types, one per operation.

use notify_journal::{AppendError, JournalError};
use notify_types::{
    CommandId, EventId, JournalFailure, JournalFailureKind, LoopId, NotifyError, SessionId,
    ValidationField,
};

/// Why a loop could not be registered.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// A loop with this ID is already registered.
    #[error("loop {loop_id} is already registered")]
    AlreadyRegistered {
        /// The loop.
        loop_id: LoopId,
    },
    /// The loop's configuration names another session.
    #[error("loop configured for session {got}, registered in session {want}")]
    SessionMismatch {
        /// This session.
        want: SessionId,
        /// The session the configuration names.
        got: SessionId,
    },
    /// The session has ended: nothing would ever be delivered to the loop.
    #[error("session {session_id} has ended")]
    SessionEnded {
        /// The session.
        session_id: SessionId,
    },
}

/// Why a lifecycle event was not published.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The metadata names another session.
    #[error("event for session {got} published to session {want}")]
    OwnerMismatch {
        /// This session.
        want: SessionId,
        /// The session the metadata names.
        got: SessionId,
    },
    /// The metadata failed validation.
    #[error("invalid lifecycle metadata: field `{field}`")]
    Invalid {
        /// The first failing field.
        field: ValidationField,
    },
    /// The event ID names a different journaled record: fail closed.
    #[error("event {event_id} collides with journal frame {seq}")]
    Collision {
        /// The reused event ID.
        event_id: EventId,
        /// The original frame's sequence.
        seq: u64,
    },
    /// The session has ended (or was purged): nothing was journaled or broadcast.
    /// Never retry.
    #[error("session {session_id} has ended{}", if *purged { " and was purged" } else { "" })]
    SessionEnded {
        /// The session.
        session_id: SessionId,
        /// Whether its log was purged.
        purged: bool,
    },
    /// The journal append failed; nothing was broadcast.
    #[error("journal append failed")]
    Journal(#[source] AppendError),
    /// The session's host runtime no longer holds its lease (see
    /// [`NotifyError::NotOwner`]): nothing was journaled or broadcast. Publish it
    /// again at the session's new owner.
    #[error("this host no longer owns session {session_id}")]
    NotOwner {
        /// The session.
        session_id: SessionId,
        /// The lease holder that took the session over, when known.
        owner: Option<notify_types::Uuid>,
    },
}

/// Why an acknowledgement failed. See each variant for what became of the
/// notification.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AckError {
    /// Journaling the consumption failed; the notification was not released and is
    /// handed to the consumer again: acknowledge it again later.
    #[error("journaling the consumption failed")]
    Journal(#[source] AppendError),
    /// The session has ended: the consumption was not journaled (the notification was
    /// abandoned when the session ended, or the end refused while it was pending).
    #[error("session {session_id} has ended")]
    SessionEnded {
        /// The session.
        session_id: SessionId,
    },
    /// The consumption was journaled but the loop had already exited; restore will not
    /// redeliver it.
    #[error("loop exited before the release")]
    LoopExited(#[source] notify_loop::LoopAckError),
    /// The session's host runtime no longer holds its lease: the consumption was not
    /// journaled, and the session's new owner redelivers the notification.
    #[error("this host no longer owns session {session_id}")]
    NotOwner {
        /// The session.
        session_id: SessionId,
        /// The lease holder that took the session over, when known.
        owner: Option<notify_types::Uuid>,
    },
    /// The journal answered a batch's group of consumptions with another number of
    /// answers than it had records (a journal breaking its contract): nothing was
    /// released, every notification is handed back; acknowledging them again finds
    /// out which were journaled.
    #[error("the journal answered {answers} of the {records} consumptions of session {session_id}")]
    AnswerCount {
        /// The session.
        session_id: SessionId,
        /// Consumptions in the group.
        records: usize,
        /// Answers the journal gave.
        answers: usize,
    },
}

/// Why a transactional acknowledgement (`SessionReceived::ack_with` on redb,
/// `ack_in_pg` on PostgreSQL) failed. Unless [`AckError::LoopExited`], nothing was
/// acknowledged and the notification is handed to the consumer again.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TxAckError {
    /// As [`SessionReceived::ack`](crate::SessionReceived::ack) fails.
    #[error(transparent)]
    Ack(#[from] AckError),
    /// The application's write failed (or used up its budget): rolled back with the
    /// acknowledgement.
    #[error("the application's write failed; nothing was acknowledged")]
    Write(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The application's write panicked: rolled back with the acknowledgement.
    #[error("the application's write panicked; nothing was acknowledged: {0}")]
    Panicked(String),
}

/// Why restore failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RestoreError {
    /// Replaying the journal failed (for example, a frame does not decode).
    #[error("replaying the journal failed")]
    Replay(#[source] JournalError),
}

/// Why declaring an orphaned process lost failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DeclareLostError {
    /// The `LostOnRestore` completion could not be journaled (for example, its loop is
    /// not registered: register the loops of a restored session first).
    #[error("the lost-on-restore completion was not journaled")]
    Notify(#[source] notify_types::NotifyError),
    /// The `ProcessLost` event could not be published.
    #[error("the ProcessLost event was not published")]
    Publish(#[source] PublishError),
}

/// Why [`Session::end`](crate::Session::end) did not end the session.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum EndError {
    /// Notifications are pending (appended, never consumed) and the caller did not ask
    /// to abandon them: nothing was written. Consume them, or end with
    /// [`IfPending::Abandon`](crate::IfPending::Abandon).
    #[error("{count} notification(s) still pending; consume or abandon them first")]
    Pending {
        /// How many.
        count: usize,
    },
    /// The journal could not be read to find what is pending.
    #[error("reading the journal failed")]
    Read(#[source] JournalError),
    /// Journaling an abandonment or the end marker failed. What was journaled before
    /// stays; ending again continues where this stopped.
    #[error("journaling the end failed")]
    Journal(#[source] AppendError),
}

/// The notifier's answer for a notification `command_id` whose append failed: the
/// session's ended and collision refusals as such, every other failure a journal
/// failure of the kind a caller acts on (retry, reopen, give up).
pub(crate) fn notify_error(command_id: CommandId, e: AppendError) -> NotifyError {
    let kind = match &e {
        AppendError::SessionEnded { session, purged } => {
            return NotifyError::SessionEnded {
                session_id: *session,
                purged: *purged,
            };
        }
        AppendError::Collision { seq, .. } => {
            return NotifyError::Collision {
                command_id,
                seq: *seq,
            };
        }
        AppendError::CommitFailed(_)
        | AppendError::SchemaTooNew {
            outcome_unknown: true,
            ..
        } => JournalFailureKind::OutcomeUnknown,
        AppendError::SchemaTooNew { .. } | AppendError::Closed => JournalFailureKind::Unavailable,
        AppendError::Poisoned | AppendError::Damaged { .. } => JournalFailureKind::Poisoned,
        AppendError::Fenced { .. } => JournalFailureKind::Fenced,
        AppendError::TooLarge { .. } => JournalFailureKind::TooLarge,
        AppendError::Invalid(_)
        | AppendError::SessionMismatch { .. }
        | AppendError::Storage(_)
        | AppendError::Corrupt { .. }
        | AppendError::GroupRefused { .. }
        | AppendError::HeadMoved { .. } => JournalFailureKind::Other,
        // A variant added to the journal later (the enum is non-exhaustive).
        _ => JournalFailureKind::Other,
    };
    NotifyError::Journal(JournalFailure::new(kind, e))
}
