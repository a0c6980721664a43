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
    /// The session has ended (its end marker is journaled) and the key is not in its
    /// log, or the session was purged (only its tombstone remains; then every key):
    /// nothing was written. Never retry. In an ended (not purged) session a key its log
    /// holds — a retry, after the end, of a record journaled before it, the end marker
    /// included — is answered as in a live session instead: the identical record is a
    /// duplicate (the original seq, `appended: false`), another one a
    /// [`Collision`](Self::Collision).
    #[error("session {session} has ended{}", if *purged { " and was purged" } else { "" })]
    SessionEnded {
        /// The session.
        session: SessionId,
        /// Whether its log was purged.
        purged: bool,
    },
    /// The journal's stored data for this append is damaged (the frame the index
    /// names fails its checksum, is missing or is another frame); nothing was written.
    /// Run a verify; never retry blindly.
    #[error("journal damaged at frame {seq} of session {session}")]
    Corrupt {
        /// The session.
        session: SessionId,
        /// The damaged frame's sequence.
        seq: u64,
        /// What is wrong.
        #[source]
        source: Corruption,
    },
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
            Self::SessionEnded { session, purged } => {
                return NotifyError::SessionEnded {
                    session_id: *session,
                    purged: *purged,
                };
            }
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
            Self::Invalid(_)
            | Self::SessionMismatch { .. }
            | Self::Storage(_)
            | Self::Corrupt { .. } => JournalFailureKind::Other,
        };
        NotifyError::Journal(JournalFailure::new(kind, self))
    }
}

/// What is wrong with a damaged frame, index entry or log (the cause of
/// [`JournalError::Corrupt`] and [`AppendError::Corrupt`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Corruption {
    /// The frame's stored checksum does not match its bytes.
    #[error("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        /// The checksum stored with the frame.
        stored: u32,
        /// The checksum of the bytes read.
        computed: u32,
    },
    /// The frame is shorter than its header or its stated length.
    #[error("frame is truncated ({len} bytes)")]
    Truncated {
        /// The bytes there are.
        len: usize,
    },
    /// The frame's bytes pass their checksum but do not decode to a valid record.
    #[error("frame does not decode")]
    Undecodable(#[source] DecodeError),
    /// The frame's body does not decode to a valid record (the redb journal's compact
    /// body encoding).
    #[error("frame body does not decode: {0}")]
    Body(String),
    /// A frame the log must hold is absent: a gap in the sequence, a log that ends
    /// before the session's head, or an index entry whose frame is gone.
    #[error("frame is missing")]
    Missing,
    /// The frame found where this one must be carries another identity (session, seq
    /// or key): an index entry or position that points at the wrong frame.
    #[error("frame found is another one: {found}")]
    Misplaced {
        /// What the frame found says it is.
        found: String,
    },
    /// A bookkeeping entry (index, position, head) disagrees with the frames.
    #[error("{0}")]
    Inconsistent(String),
}

/// Why a read (replay, lookup, listing) failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// The journal's bytes for this frame are damaged: a checksum mismatch, a frame
    /// that does not decode, a gap, a log ending before its head, or an index entry
    /// naming the wrong frame. Nothing is answered from damaged data.
    #[error("frame {seq} of session {session} is damaged")]
    Corrupt {
        /// The session.
        session: SessionId,
        /// The frame's sequence (for a gap or short log, the first missing one).
        seq: u64,
        /// What is wrong.
        #[source]
        source: Corruption,
    },
    /// The session was purged: its log is gone (or going) and only its tombstone
    /// remains ([`JournalBackend::session_state`](crate::JournalBackend::session_state)
    /// answers it). Nothing of the log is answered, never a partial one.
    #[error("session {session} was purged")]
    Purged {
        /// The session.
        session: SessionId,
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
    /// Another handle (in this or another process) has the file open. A read-only
    /// open ([`RedbReader::open`](crate::RedbReader::open)) gets it while a writer holds
    /// the file: the journal is in use.
    #[error("journal {path} is already open")]
    AlreadyOpen {
        /// The journal file.
        path: std::path::PathBuf,
    },
    /// There is no file at the path. Only a read-only open and
    /// [`RedbJournal::compact_file`](crate::RedbJournal::compact_file) answer this; a
    /// writable open creates the journal.
    #[error("no journal at {path}: the file does not exist")]
    Missing {
        /// The path.
        path: std::path::PathBuf,
    },
    /// The journal cannot be read without writing to it first, which a read-only open
    /// never does: it was not closed cleanly (a writable open runs redb's recovery), or
    /// it is of an older format (a writable open upgrades it). Nothing was changed.
    #[error("journal {path} needs a writable open first: {reason}")]
    NeedsWritableOpen {
        /// The journal file.
        path: std::path::PathBuf,
        /// Why.
        reason: String,
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
    /// The journal holds data of a later build that this build cannot honour (opening
    /// it would ignore it); use the newer build.
    #[error("journal {path} needs a newer build: {reason}")]
    UnsupportedContent {
        /// The journal file.
        path: std::path::PathBuf,
        /// What this build does not understand.
        reason: String,
    },
    /// The file is a journal (or a redb file) but damaged: cut short, failing redb's
    /// page checksums, or making the storage engine fail. Nothing was changed by the
    /// refused open; restore the file from a backup or inspect it with a verify.
    #[error("journal {path} is damaged: {reason}")]
    Damaged {
        /// The journal file.
        path: std::path::PathBuf,
        /// What was found.
        reason: String,
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
