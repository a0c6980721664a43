//! What appenders queue for the writer, and how each is answered: appends, atomic
//! groups, transactional appends and chores (purge steps, tombstone drops, imported
//! states).

use notify_types::{SessionId, Timestamp};
use tokio::sync::oneshot;

use crate::backend::AppendOutcome;
use crate::error::{AppendError, JournalError, StorageError};
use crate::redb::app_tables::{AppGroupWrite, AppTxnError};
use crate::retention::{ImportStateError, PurgeStep, SessionState};

/// What an appender is told.
pub(crate) type Reply = Result<AppendOutcome, AppendError>;

/// One queued append.
pub(crate) struct Request {
    pub(crate) session: u128,
    pub(crate) key: u128,
    /// The record's frame body (`body/`): what the duplicate check compares.
    pub(crate) body: Vec<u8>,
    /// Whether the record is the session's end marker (its commit ends the session).
    pub(crate) ends: bool,
    pub(crate) reply: oneshot::Sender<Reply>,
}

/// An atomic group of appends to one session ([`JournalBackend::append_all`]):
/// resolved inside a batch like any append, and undone within it if one of its
/// records is refused (`resolve.rs`), so it commits whole or not at all.
///
/// [`JournalBackend::append_all`]: crate::JournalBackend::append_all
pub(crate) struct Group {
    pub(crate) session: u128,
    /// In order; each answered through its own `reply`, all alike when refused.
    pub(crate) requests: Vec<Request>,
    /// The head the group expects to find (its first new frame at `if_head + 1`).
    pub(crate) if_head: Option<u64>,
}

/// One entry of the queue: an append, or an atomic group, never split across batches.
pub(crate) enum Queued {
    One(Request),
    Group(Group),
}

impl Queued {
    /// Its requests, in order (for answering them).
    pub(super) fn into_requests(self) -> impl Iterator<Item = Request> {
        let (one, group) = match self {
            Self::One(req) => (Some(req), Vec::new()),
            Self::Group(g) => (None, g.requests),
        };
        one.into_iter().chain(group)
    }

    /// Answers every request with `error`.
    pub(super) fn refuse(self, error: &AppendError) {
        for req in self.into_requests() {
            // A vanished appender (dropped future) is a normal event.
            let _ = req.reply.send(Err(error.clone()));
        }
    }
}

/// What an appender of a transactional append is told: one outcome per record of
/// its group, in order.
pub(crate) type AppReply = Result<Vec<AppendOutcome>, AppTxnError>;

/// One queued transactional append: one record ([`append_with`]) or an atomic group
/// of one session's records ([`append_all_with`]), with the application's writes.
///
/// [`append_with`]: crate::RedbJournal::append_with
/// [`append_all_with`]: crate::RedbJournal::append_all_with
pub(crate) struct AppTxn {
    /// The records' appends, in order (their own `reply`s are not used: the answer
    /// goes to `reply`).
    pub(crate) requests: Vec<Request>,
    /// The application's writes, run only if a record is new, told which are (their
    /// indices in `requests`); may run more than once (only the run that commits
    /// counts).
    pub(crate) write: Box<AppGroupWrite>,
    pub(crate) reply: oneshot::Sender<AppReply>,
}

impl AppTxn {
    /// Answers it with `error` without running it.
    pub(crate) fn refuse(self, error: JournalError) {
        let answer = match error {
            JournalError::Closed => AppendError::Closed,
            JournalError::Storage(e) => AppendError::Storage(e),
            other => AppendError::Storage(StorageError::new("journal refused the append", other)),
        };
        let _ = self.reply.send(Err(AppTxnError::Append(answer)));
    }
}

/// A write the writer thread runs alone in its own transaction.
pub(crate) enum Chore {
    /// One [`PurgeStep`].
    Purge {
        ended_before: Timestamp,
        max_frames: usize,
        reply: oneshot::Sender<Result<PurgeStep, JournalError>>,
    },
    /// Drop up to `limit` more tombstones whose purge began before `purged_before`,
    /// `dropped` having been dropped by the earlier steps of the same call. One run
    /// drops at most the journal's drop step; while more are due, the writer queues
    /// the rest as a new chore behind the others, so appends run between the steps.
    DropTombstones {
        purged_before: Timestamp,
        limit: usize,
        dropped: u64,
        reply: oneshot::Sender<Result<u64, JournalError>>,
    },
    /// Write imported session states (`chores/import.rs`), all or none.
    ImportStates {
        states: Vec<(SessionId, SessionState)>,
        reply: oneshot::Sender<Result<(), ImportStateError>>,
    },
    /// An append with the application's writes, in one transaction (`app_txn.rs`).
    AppTxn(AppTxn),
}

impl Chore {
    /// Answers the chore with `error` without running it.
    pub(crate) fn refuse(self, error: JournalError) {
        // A vanished caller (dropped future) is a normal event.
        match self {
            Self::Purge { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            Self::DropTombstones { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            Self::ImportStates { reply, .. } => {
                let _ = reply.send(Err(error.into()));
            }
            Self::AppTxn(txn) => txn.refuse(error),
        }
    }
}
