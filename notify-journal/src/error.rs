//! Journal errors: one enum per operation family.

use std::error::Error as StdError;
use std::sync::Arc;

use notify_types::{
    CommandId, DecodeError, JournalFailure, JournalFailureKind, NotifyError, SessionId, Uuid,
};

/// A storage engine's error, kept opaque so no engine type leaks into the API.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{context}")]
pub struct StorageError {
    context: String,
    #[source]
    source: Option<Arc<dyn StdError + Send + Sync + 'static>>,
}

impl StorageError {
    /// A storage error described by `context`, caused by `source`.
    pub fn new(context: impl Into<String>, source: impl StdError + Send + Sync + 'static) -> Self {
        Self {
            context: context.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// A storage error with no underlying cause.
    pub fn msg(context: impl Into<String>) -> Self {
        Self {
            context: context.into(),
            source: None,
        }
    }
}

/// Why an append failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// The key is journaled with a different record; nothing was written.
    #[error("idempotency collision: key {key} is journaled at seq {seq} with a different record")]
    Collision {
        /// The reused key.
        key: Uuid,
        /// The original frame's sequence.
        seq: u64,
    },
    /// The record would not decode (see [`JournalRecord::validate`]); nothing was
    /// written. A journal never makes durable a frame that restore could not read.
    ///
    /// [`JournalRecord::validate`]: notify_types::JournalRecord::validate
    #[error("record does not validate")]
    Invalid(#[source] DecodeError),
    /// The encoded record exceeds the journal's size cap; nothing was written.
    #[error("record is {len} bytes, over the {max}-byte cap")]
    TooLarge {
        /// The encoded length.
        len: usize,
        /// The cap.
        max: usize,
    },
    /// The record names another session than the one appended to.
    #[error("record for session {record} appended to session {session}")]
    SessionMismatch {
        /// The session appended to.
        session: SessionId,
        /// The session the record names.
        record: SessionId,
    },
    /// The commit of this append's batch failed. Its outcome is unknown (it may still
    /// have become durable): retry with the same record; the index makes that safe.
    #[error("commit failed; outcome unknown, retry with the same record")]
    CommitFailed(#[source] StorageError),
    /// An earlier commit failed and the journal refuses every write until reopened.
    #[error("journal is poisoned by an earlier commit failure; reopen it")]
    Poisoned,
    /// This writer no longer holds the session's write lease; nothing was written.
    #[error("writer fenced off session {session}")]
    Fenced {
        /// The session.
        session: SessionId,
    },
    /// The journal has been closed.
    #[error("journal is closed")]
    Closed,
    /// Any other storage failure before the commit; nothing was written.
    #[error(transparent)]
    Storage(StorageError),
}

impl AppendError {
    /// Whether retrying the identical append may succeed.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::CommitFailed(_) | Self::Storage(_))
    }

    /// Converts to the notifier's error for a command `command_id`.
    #[must_use]
    pub fn into_notify_error(self, command_id: CommandId) -> NotifyError {
        let kind = match &self {
            Self::Collision { seq, .. } => {
                return NotifyError::Collision {
                    command_id,
                    seq: *seq,
                };
            }
            Self::CommitFailed(_) => JournalFailureKind::OutcomeUnknown,
            Self::Poisoned => JournalFailureKind::Poisoned,
            Self::Fenced { .. } => JournalFailureKind::Fenced,
            Self::TooLarge { .. } => JournalFailureKind::TooLarge,
            Self::Closed => JournalFailureKind::Unavailable,
            Self::Invalid(_) | Self::SessionMismatch { .. } | Self::Storage(_) => {
                JournalFailureKind::Other
            }
        };
        NotifyError::Journal(JournalFailure::new(kind, self))
    }
}

/// Why a read (replay, lookup, listing) failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// A frame does not decode.
    #[error("frame {seq} of session {session} does not decode")]
    Corrupt {
        /// The session.
        session: SessionId,
        /// The frame's sequence.
        seq: u64,
        /// Why it does not decode.
        #[source]
        source: DecodeError,
    },
    /// The journal has been closed.
    #[error("journal is closed")]
    Closed,
    /// A storage failure.
    #[error(transparent)]
    Storage(StorageError),
}

/// Why [`RedbJournal::open`](crate::RedbJournal::open) failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// Another handle (in this or another process) has the file open.
    #[error("journal {path} is already open")]
    AlreadyOpen {
        /// The journal file.
        path: std::path::PathBuf,
    },
    /// The file exists but is not a notify journal (not a redb file, or a redb file
    /// without the journal's metadata or tables).
    #[error("{path} is not a notify journal: {reason}")]
    NotAJournal {
        /// The file.
        path: std::path::PathBuf,
        /// What gave it away.
        reason: String,
    },
    /// The file is a notify journal of a format version this build does not read.
    #[error("journal {path} has format version {found}; this build reads version {supported}")]
    UnsupportedFormatVersion {
        /// The journal file.
        path: std::path::PathBuf,
        /// The version recorded in the file.
        found: u64,
        /// The version this build reads and writes.
        supported: u64,
    },
    /// An I/O or storage-engine failure while opening, creating or recovering the file.
    #[error("cannot open journal {path}")]
    Storage {
        /// The journal file.
        path: std::path::PathBuf,
        /// The underlying failure.
        #[source]
        source: StorageError,
    },
}
