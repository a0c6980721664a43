//! Why a write transaction wrote nothing (or may have): a batch's failure, a chore's
//! failure, and the helpers that build them from storage errors and damage found.

use crate::error::{AppendError, Corruption, JournalError, StorageError};
use crate::integrity::corrupt;

use super::keys::sid;

/// Why a whole batch (or a chore's transaction) failed.
#[derive(Clone)]
pub(super) enum BatchFailure {
    /// Before the commit: the transaction was dropped, nothing written.
    BeforeCommit(StorageError),
    /// The commit itself failed: outcome unknown.
    Commit(StorageError),
}

impl BatchFailure {
    pub(super) fn error(&self) -> &StorageError {
        match self {
            Self::BeforeCommit(e) | Self::Commit(e) => e,
        }
    }

    pub(super) fn into_append_error(self) -> AppendError {
        match self {
            Self::BeforeCommit(e) => AppendError::Storage(e),
            Self::Commit(e) => AppendError::CommitFailed(e),
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

/// What a chore is told once the handle is poisoned.
pub(super) fn poisoned() -> JournalError {
    JournalError::Storage(StorageError::msg(
        "journal is poisoned by an earlier commit failure; reopen it",
    ))
}
