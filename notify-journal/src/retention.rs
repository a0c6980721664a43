//! Session end and retention: what a journal says of a session's life, and purging
//! ended sessions in bounded steps down to their tombstones.
//!
//! A session's log lives while the session does. Appending its
//! [`SessionEnded`](notify_types::SessionEnded) marker ends it: from the commit of that
//! frame the backend writes nothing more to the session and records when it ended: an
//! append of a key the log does not hold is refused
//! ([`AppendError::SessionEnded`](crate::AppendError::SessionEnded)), while a retry of
//! a record journaled before the end is still answered truthfully, a duplicate or a
//! collision. Once the end is older than a retention horizon, [`purge`](crate::purge)
//! removes the log in bounded steps ([`JournalBackend::purge_step`], each its own
//! transaction) and leaves a [`Tombstone`], so that a late retry for the session still
//! fails closed instead of starting a fresh log at seq 1. Tombstones can be dropped
//! after a second, longer horizon ([`JournalBackend::drop_tombstones`]); after that the
//! session is unknown again, and a late append would start a new log: the trade-off is
//! the tombstones' space (about a hundred bytes a session in the redb journal) against
//! how late a retry may come.
//!
//! [`JournalBackend::purge_step`]: crate::JournalBackend::purge_step
//! [`JournalBackend::drop_tombstones`]: crate::JournalBackend::drop_tombstones

use notify_types::{SessionId, Timestamp};

use crate::error::JournalError;

/// What a journal says of a session's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SessionState {
    /// Not ended: appends are taken (a session never written is live and empty).
    Live,
    /// Ended at `ended_at` (the commit of its end marker, by the backend's clock): its
    /// log is whole and readable, and nothing more is appended (a new key is refused;
    /// a key the log holds is a duplicate or a collision).
    Ended {
        /// When the end marker committed.
        ended_at: Timestamp,
        /// The session's last sequence: its end marker's.
        last_seq: u64,
    },
    /// Purged, or being purged: only the tombstone is answered. Reads of the log are
    /// [`JournalError::Purged`]; appends are refused.
    Purged(Tombstone),
}

impl SessionState {
    /// Whether the session has ended (and perhaps been purged).
    #[must_use]
    pub fn is_ended(&self) -> bool {
        !matches!(self, Self::Live)
    }

    /// Whether the session's log has been purged (only a tombstone remains).
    #[must_use]
    pub fn is_purged(&self) -> bool {
        matches!(self, Self::Purged(_))
    }
}

/// What remains of a purged session: enough to refuse a late append, and to say what
/// was there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tombstone {
    /// When the session's end marker committed.
    pub ended_at: Timestamp,
    /// When its purge began (the first purge step's commit).
    pub purged_at: Timestamp,
    /// The last sequence the session had (its end marker's).
    pub last_seq: u64,
    /// How many frames its log held (always `last_seq`: logs are gap-free from 1).
    pub frames: u64,
}

/// What one [`JournalBackend::purge_step`](crate::JournalBackend::purge_step) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PurgeStep {
    /// The session this step worked on; `None` when no ended session is due.
    pub session: Option<SessionId>,
    /// Frames removed by this step (with their positions and index entries).
    pub frames_removed: u64,
    /// Whether the session's log is now gone entirely (only its tombstone remains).
    pub finished: bool,
}

impl PurgeStep {
    /// The step that found nothing to purge.
    pub const IDLE: Self = Self {
        session: None,
        frames_removed: 0,
        finished: false,
    };
}

/// What a whole [`purge`](crate::purge) did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PurgeReport {
    /// Sessions whose log was removed entirely.
    pub sessions: u64,
    /// Frames removed.
    pub frames: u64,
    /// Steps (transactions) taken.
    pub steps: u64,
}

/// The default bound of one purge step: frames removed per transaction.
pub const DEFAULT_PURGE_STEP_FRAMES: usize = 1024;

/// Why an import of session states ([`RedbJournal::import_states`],
/// `PgJournal::import_states`) was refused. Nothing of the import was written.
///
/// [`RedbJournal::import_states`]: crate::RedbJournal::import_states
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ImportStateError {
    /// The state given is not one an import can write: [`SessionState::Live`] (a live
    /// session is its frames alone), a last seq of 0, or a tombstone whose frame count
    /// is not its last seq.
    #[error("session {session}: cannot import {reason}")]
    Invalid {
        /// The session whose state was refused.
        session: SessionId,
        /// What is wrong with the state.
        reason: &'static str,
    },
    /// The journal holds the session in a state the imported one contradicts: an ended
    /// state needs the session's log, ended at that last seq (its end marker imported
    /// first); a tombstone needs the session to be unknown (or the identical tombstone).
    #[error(
        "session {session}: the journal holds it as {held:?}, which the imported state contradicts"
    )]
    Conflict {
        /// The session whose state was refused.
        session: SessionId,
        /// What the journal holds ([`SessionState::Live`] for a session with frames
        /// that has not ended, or for one it does not know).
        held: SessionState,
    },
    /// The journal could not be read or written (damage, storage, closed).
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// The checks every backend makes on a state to import, before touching storage.
pub(crate) fn check_importable(
    session: SessionId,
    state: &SessionState,
) -> Result<(), ImportStateError> {
    let invalid = |reason| Err(ImportStateError::Invalid { session, reason });
    match state {
        SessionState::Live => invalid("a live state (a live session is its frames alone)"),
        SessionState::Ended { last_seq: 0, .. } => invalid("an ended state with last seq 0"),
        SessionState::Purged(t) if t.last_seq == 0 => invalid("a tombstone with last seq 0"),
        SessionState::Purged(t) if t.frames != t.last_seq => {
            invalid("a tombstone whose frame count is not its last seq")
        }
        SessionState::Ended { .. } | SessionState::Purged(_) => Ok(()),
    }
}
