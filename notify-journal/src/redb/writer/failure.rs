//! Why a write transaction wrote nothing (or may have): a batch's failure, a chore's
//! failure, and the helpers that build them from storage errors and damage found.

use crate::error::{AppendError, Corruption, JournalError, StorageError};
use crate::integrity::corrupt;

use crate::redb::format::keys::sid;
use crate::redb::format::positions::FoldError;

/// Why a whole batch (or a chore's transaction) failed.
#[derive(Clone)]
pub(super) enum BatchFailure {
    /// Before the commit: the transaction was dropped, nothing written.
    BeforeCommit(StorageError),
    /// The commit itself failed: outcome unknown.
    Commit(StorageError),
    /// The batch found damage (an entry it writes was already there: a damaged page
    /// hid it) in `session` at `seq`: dropped, nothing written. The journal is poisoned
    /// for damage, not for a commit failure.
    Damaged {
        /// The session of the request that found it.
        session: u128,
        /// The seq it was writing.
        seq: u64,
        /// What it found.
        detail: String,
    },
    /// The journal was poisoned (by damage found) while the batch gathered:
    /// dropped before its commit, nothing written.
    Refused,
}

impl BatchFailure {
    /// The storage error of a failed write: `None` for damage found or a refusal.
    pub(super) fn storage_error(&self) -> Option<&StorageError> {
        match self {
            Self::BeforeCommit(e) | Self::Commit(e) => Some(e),
            Self::Damaged { .. } | Self::Refused => None,
        }
    }

    /// What the appenders of a batch that failed on a storage error are told.
    pub(super) fn into_append_error(self) -> Option<AppendError> {
        match self {
            Self::BeforeCommit(e) => Some(AppendError::Storage(e)),
            Self::Commit(e) => Some(AppendError::CommitFailed(e)),
            Self::Damaged { .. } | Self::Refused => None,
        }
    }
}

impl From<FoldError> for BatchFailure {
    fn from(e: FoldError) -> Self {
        match e {
            FoldError::Storage(e) => Self::BeforeCommit(StorageError::new("fold the tail", e)),
            FoldError::Replaced { session, seq } => Self::Damaged {
                session,
                seq,
                detail: format!(
                    "folding the log's tail found a positions entry already there for seq {seq} (a damaged page hid it); nothing written"
                ),
            },
        }
    }
}

/// Maps a storage error met before the commit to [`BatchFailure::BeforeCommit`].
pub(super) fn before<E>(context: &'static str) -> impl Fn(E) -> BatchFailure
where
    E: std::error::Error + Send + Sync + 'static,
{
    move |e| BatchFailure::BeforeCommit(StorageError::new(context, e))
}

/// Why a chore wrote nothing.
pub(crate) enum ChoreFailure {
    /// The stored data is damaged; nothing was written and the handle stays usable.
    Damaged(JournalError),
    /// A storage failure before the commit; nothing was written.
    Storage(StorageError),
}

/// Maps a storage error met by a chore to [`ChoreFailure::Storage`].
pub(super) fn storage<E>(context: &'static str) -> impl Fn(E) -> ChoreFailure
where
    E: std::error::Error + Send + Sync + 'static,
{
    move |e| ChoreFailure::Storage(StorageError::new(context, e))
}

pub(super) fn damaged(session: u128, seq: u64, cause: Corruption) -> ChoreFailure {
    ChoreFailure::Damaged(corrupt(sid(session), seq, cause))
}

pub(super) fn inconsistent(session: u128, seq: u64, what: String) -> ChoreFailure {
    damaged(session, seq, Corruption::Inconsistent(what))
}

/// What a chore is told once the handle is poisoned: by `damage` found (the scrub's
/// or the writer's finding), else by an earlier commit failure.
pub(super) fn poisoned(damage: Option<&str>) -> JournalError {
    JournalError::Storage(StorageError::msg(match damage {
        Some(detail) => format!("journal is poisoned by damage found ({detail}); verify it"),
        None => "journal is poisoned by an earlier commit failure; reopen it".to_owned(),
    }))
}
