//! The notifier contract: what a supervisor calls and the typed errors it gets back.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::id::{CommandId, LoopId, SessionId};
use crate::notification::ProcessCompletionNotification;
use crate::state::{Disposition, Notified};
use crate::validation::{ValidationError, ValidationField};
use uuid::Uuid;

/// Why a loop refused delivery with `Stopped`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum StopCause {
    /// The loop's bounded live set is full; retry after the consumer catches up.
    Full,
    /// The loop has exited (shut down, or its consumer side dropped).
    Exited,
    /// The loop refused the command as invalid or addressed to another owner.
    Refused,
}

impl fmt::Display for StopCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Full => "live set full",
            Self::Exited => "loop exited",
            Self::Refused => "refused by the loop",
        })
    }
}

/// What kind of journal failure a [`JournalFailure`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JournalFailureKind {
    /// A commit failed and its outcome is unknown: retry with the same ID and payload.
    OutcomeUnknown,
    /// The journal refuses all writes after an earlier failure.
    Poisoned,
    /// Another writer holds the session (a fenced or stale writer).
    Fenced,
    /// The record is larger than the journal accepts.
    TooLarge,
    /// The journal could not be reached or read.
    Unavailable,
    /// Any other storage failure.
    Other,
}

/// A journal failure surfaced through [`NotifyError::Journal`]; nothing was dispatched.
///
/// The backend's own error is kept as the [`source`](StdError::source).
#[derive(Debug, Clone, thiserror::Error)]
#[error("journal append failed ({kind:?})")]
pub struct JournalFailure {
    kind: JournalFailureKind,
    #[source]
    source: Arc<dyn StdError + Send + Sync + 'static>,
}

impl JournalFailure {
    /// Wraps a backend error.
    pub fn new(kind: JournalFailureKind, source: impl StdError + Send + Sync + 'static) -> Self {
        Self {
            kind,
            source: Arc::new(source),
        }
    }

    /// The kind of failure.
    #[must_use]
    pub fn kind(&self) -> JournalFailureKind {
        self.kind
    }
}

/// Why a completion notification was not accepted.
///
/// What to do with each answer (the same table is in the README and ARCHITECTURE.md):
///
/// | answer | disposition | caller action |
/// | --- | --- | --- |
/// | `Ok(Accepted)` | Accepted | done |
/// | `Ok(Duplicate)` | Duplicate | done: treat as success, keep the ID (after the session's end too: it was journaled before the end) |
/// | `DeliveryStopped` (`Full`, `Exited`) | Stopped | retry later with the same ID and identical DTO ([`is_retryable`](Self::is_retryable)) |
/// | `DeliveryStopped` (`Refused`) | Stopped | never retry: the loop refused it as invalid or misaddressed |
/// | `LoopNotFound` | Stopped | do not retry blindly: register the loop (e.g. after restore), then retry with the same ID |
/// | `Unsupported` (foreign engine) | Stopped | never retry |
/// | `SessionEnded` | Stopped | never retry: the session ended and this ID was never journaled in it, or the session was purged (`purged: true`, for every ID); nothing was appended |
/// | `NotOwner` | Stopped | retry with the same ID and identical DTO at the session's new owner (`owner`, when known), or here later: this host no longer holds the session's lease; nothing was appended |
/// | `Collision` | Collision | fail closed; investigate ID reuse or forgery (before or after the session's end) |
/// | `Invalid`, `OwnerMismatch` | none | fix the bug; never retry |
/// | `Journal` | none | surface it; an `OutcomeUnknown` commit may be retried with the same ID |
///
/// ```
/// use notify_types::{Disposition, LoopId, NotifyError, StopCause};
///
/// fn next_step(answer: &NotifyError) -> &'static str {
///     if answer.is_retryable() {
///         return "retry later with the same notification";
///     }
///     match answer.disposition() {
///         Some(Disposition::Collision) => "fail closed",
///         Some(Disposition::Stopped) => "give up on this loop",
///         _ => "report the bug or the storage failure",
///     }
/// }
///
/// let full = NotifyError::DeliveryStopped { loop_id: LoopId::new(), cause: StopCause::Full };
/// assert_eq!(full.disposition(), Some(Disposition::Stopped));
/// assert_eq!(next_step(&full), "retry later with the same notification");
/// let foreign = NotifyError::Unsupported { loop_id: LoopId::new() };
/// assert_eq!(next_step(&foreign), "give up on this loop");
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum NotifyError {
    /// The notification failed validation.
    #[error("invalid notification: field `{field}`")]
    Invalid {
        /// The first failing field.
        field: ValidationField,
    },
    /// The notification names another session.
    #[error("notification for session {got} sent to session {want}")]
    OwnerMismatch {
        /// This session.
        want: SessionId,
        /// The session the notification names.
        got: SessionId,
    },
    /// No loop with this ID is registered in the session.
    #[error("loop {loop_id} not found")]
    LoopNotFound {
        /// The loop.
        loop_id: LoopId,
    },
    /// The loop belongs to a foreign engine that cannot take notifications.
    #[error("loop {loop_id} does not support process notifications")]
    Unsupported {
        /// The loop.
        loop_id: LoopId,
    },
    /// The loop did not take the notification; the durable frame (if any) remains.
    #[error("delivery to loop {loop_id} stopped: {cause}")]
    DeliveryStopped {
        /// The loop.
        loop_id: LoopId,
        /// Why.
        cause: StopCause,
    },
    /// The session has ended (its end marker is journaled) and this command ID was
    /// never journaled in it, or the session was purged (only its tombstone remains;
    /// then every ID answers this): nothing was appended or dispatched. Never retry: no
    /// later attempt can succeed. (A retry, after the end, of a notification journaled
    /// before it is answered truthfully instead: `Ok(Duplicate)` for the identical
    /// notification, [`Collision`](Self::Collision) for another one.)
    #[error("session {session_id} has ended{}", if *purged { " and was purged" } else { "" })]
    SessionEnded {
        /// The ended session.
        session_id: SessionId,
        /// Whether its log was purged (only its tombstone remains).
        purged: bool,
    },
    /// The command ID names a different persisted payload.
    #[error("command {command_id} collides with journal frame {seq}")]
    Collision {
        /// The reused command ID.
        command_id: CommandId,
        /// The sequence of the original frame.
        seq: u64,
    },
    /// The journal append failed; nothing was dispatched.
    #[error(transparent)]
    Journal(#[from] JournalFailure),
    /// This host does not (any longer) hold the session's lease: it lost it (a renewal
    /// failed past its deadline, or another host took it over) or gave it up (released,
    /// shut down). Nothing was appended or dispatched. Retryable: send the identical
    /// notification, same ID, to the session's owner — `owner`, the new holder's
    /// identity when this host knows it — or retry here later (a host that adopts the
    /// session again answers it).
    #[error("this host no longer owns session {session_id}{}", match owner { Some(o) => format!(" (owner: {o})"), None => String::new() })]
    NotOwner {
        /// The session.
        session_id: SessionId,
        /// The lease holder that took the session over, when known.
        owner: Option<Uuid>,
    },
}

impl NotifyError {
    /// The disposition this error stands for, if any.
    #[must_use]
    pub fn disposition(&self) -> Option<Disposition> {
        match self {
            Self::LoopNotFound { .. }
            | Self::Unsupported { .. }
            | Self::DeliveryStopped { .. }
            | Self::SessionEnded { .. }
            | Self::NotOwner { .. } => Some(Disposition::Stopped),
            Self::Collision { .. } => Some(Disposition::Collision),
            Self::Invalid { .. } | Self::OwnerMismatch { .. } | Self::Journal(_) => None,
        }
    }

    /// Whether retrying with the same command ID and identical notification may succeed.
    /// [`DeliveryStopped`](Self::DeliveryStopped) (full or exited) is retryable (later,
    /// here), and so is [`NotOwner`](Self::NotOwner) (at the session's new owner); a
    /// loop that refused the command as invalid or misaddressed is not.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::DeliveryStopped {
                cause: StopCause::Full | StopCause::Exited,
                ..
            } | Self::NotOwner { .. }
        )
    }
}

impl From<ValidationError> for NotifyError {
    fn from(e: ValidationError) -> Self {
        Self::Invalid { field: e.field() }
    }
}

/// The future returned by [`ProcessCompletionNotifier::notify_process_completion`].
pub type NotifyFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Notified, NotifyError>> + Send + 'a>>;

/// Receives process completion notifications from a supervisor.
///
/// Object safe: `Arc<dyn ProcessCompletionNotifier>` works. Success is [`Notified`]
/// (`Accepted` or `Duplicate`); every other outcome is a [`NotifyError`], whose
/// [`disposition`](NotifyError::disposition) gives the rest.
///
/// ```
/// use std::sync::Arc;
/// use notify_types::*;
///
/// struct AlwaysAccept;
/// impl ProcessCompletionNotifier for AlwaysAccept {
///     fn notify_process_completion(&self, n: ProcessCompletionNotification) -> NotifyFuture<'_> {
///         Box::pin(async move {
///             n.validate()?;
///             Ok(Notified::Accepted)
///         })
///     }
/// }
/// let notifier: Arc<dyn ProcessCompletionNotifier> = Arc::new(AlwaysAccept);
/// # let _ = notifier;
/// ```
pub trait ProcessCompletionNotifier: Send + Sync {
    /// Delivers `notification` and reports its disposition.
    fn notify_process_completion(
        &self,
        notification: ProcessCompletionNotification,
    ) -> NotifyFuture<'_>;
}

impl<T: ProcessCompletionNotifier + ?Sized> ProcessCompletionNotifier for Arc<T> {
    fn notify_process_completion(
        &self,
        notification: ProcessCompletionNotification,
    ) -> NotifyFuture<'_> {
        (**self).notify_process_completion(notification)
    }
}
