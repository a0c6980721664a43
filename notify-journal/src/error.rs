//! Journal errors: one enum per operation family.

use std::error::Error as StdError;
use std::sync::Arc;

use notify_types::{DecodeError, SessionId, Uuid};

pub use crate::corruption::Corruption;

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
    /// One record of an atomic group ([`JournalBackend::append_all`]) was refused, so
    /// nothing of the group was written: `source` is that record's refusal (a
    /// collision, an ended session, an invalid record, damage, ...), `index` its place
    /// in the group. [`refusal`](Self::refusal) looks through to it.
    ///
    /// [`JournalBackend::append_all`]: crate::JournalBackend::append_all
    #[error("record {index} of an atomic group was refused; nothing of the group was written")]
    GroupRefused {
        /// The refused record's index in the group (the first refused one).
        index: usize,
        /// Why it was refused.
        #[source]
        source: Box<AppendError>,
    },
    /// An atomic group appended with an expected head
    /// ([`JournalBackend::append_all`]) found the session's log moved on: another
    /// writer appended since the caller read it. Nothing of the group was written;
    /// read again and retry.
    ///
    /// [`JournalBackend::append_all`]: crate::JournalBackend::append_all
    #[error(
        "session {session} moved on: its head is {found}, not the expected {expected}; nothing was written"
    )]
    HeadMoved {
        /// The session.
        session: SessionId,
        /// The head the caller expected.
        expected: u64,
        /// The head the group found.
        found: u64,
    },
    /// The journal's storage is at a newer schema version than this build
    /// understands: a newer build migrated it (a rolling upgrade). This handle
    /// refuses every later append. With `outcome_unknown` false the append was
    /// never sent: nothing was written. With it true the append was sent and
    /// answered in a way only the newer version defines: it may have committed.
    /// Either way, retry with the same record through a build that knows version
    /// `found` (the idempotency index makes that safe); retrying here cannot help.
    #[error(
        "journal schema version {found} is newer than this build's {supported}; {}",
        if *outcome_unknown {
            "this append's outcome is unknown: retry it with a newer build"
        } else {
            "nothing was written"
        }
    )]
    SchemaTooNew {
        /// The version the storage records.
        found: u32,
        /// The newest version this build knows.
        supported: u32,
        /// Whether the append may have committed (it was sent and answered by a
        /// newer schema's code).
        outcome_unknown: bool,
    },
    /// The journal found its file damaged after open: its background scrub
    /// ([`RedbVerifyOnOpen::Background`](crate::RedbVerifyOnOpen::Background)), or the
    /// writer itself (an insert that would have replaced an entry a damaged page hid;
    /// the append that found it got [`AppendError::Corrupt`]). This handle refuses every
    /// later append, and nothing of this one was written. `detail` names what was found
    /// and by whom (`the scrub found: …`, `the writer found: …`). Verify the file
    /// (`notify verify`) and repair it (export what reads, import into a new file)
    /// before writing again; [`RedbJournal::scrub_status`](crate::RedbJournal::scrub_status)
    /// says the same for the scrub's findings.
    #[error("the journal found its file damaged ({detail}); nothing was written")]
    Damaged {
        /// What was found, and by whom.
        detail: String,
    },
}

impl AppendError {
    /// Whether retrying the identical append (through this handle) may succeed.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::CommitFailed(_) | Self::Storage(_))
    }

    /// The error itself, or, for [`GroupRefused`](Self::GroupRefused), the refusal of
    /// the record that refused the group.
    #[must_use]
    pub fn refusal(&self) -> &AppendError {
        match self {
            Self::GroupRefused { source, .. } => source.refusal(),
            other => other,
        }
    }
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
    /// remains ([`JournalRead::session_state`](crate::JournalRead::session_state)
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
    /// The journal's storage is at a newer schema version than this build
    /// understands (a newer build migrated it); nothing was read. Use a build that
    /// knows version `found`.
    #[error("journal schema version {found} is newer than this build's {supported}")]
    SchemaTooNew {
        /// The version the storage records.
        found: u32,
        /// The newest version this build knows.
        supported: u32,
    },
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
    /// There is no file at the path. Only a read-only open,
    /// [`RedbJournal::verify_file`](crate::RedbJournal::verify_file) and
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
    /// A format-1 journal was not upgraded: the check of every frame, index entry and
    /// head left in its format-1 tables, which runs before the upgrade writes anything,
    /// found damage. Each problem names the session and the seq (or key) where it is.
    /// Nothing was written: the file is still of format 1, byte for byte (a file not
    /// closed cleanly was recovered by redb first; a format-1 build reads it as before).
    /// Restore the file from a backup, or export what is readable with the format-1
    /// build. `RedbJournal::verify_file` lists every problem without writing.
    #[error(
        "journal {path} of format 1 was not upgraded, nothing was written: {}{}",
        problems.first().map_or_else(|| "damaged".to_owned(), ToString::to_string),
        match problem_count.saturating_sub(1) {
            0 => String::new(),
            more => format!(" (and {more} more problems)"),
        }
    )]
    UpgradeRefused {
        /// The journal file.
        path: std::path::PathBuf,
        /// The first problems found (at most 8), in `(session, seq)` order.
        problems: Vec<crate::verify_report::Problem>,
        /// Every problem found.
        problem_count: u64,
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
