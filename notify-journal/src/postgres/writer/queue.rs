//! What the writers' channel carries (single appends and atomic groups), and the
//! queue the writers share, with its in-flight count and commit counters.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use notify_types::{SessionId, Uuid};
use tokio::sync::{Mutex as AsyncMutex, Notify, mpsc, oneshot};

use crate::backend::AppendOutcome;
use crate::error::AppendError;
use crate::stats::CommitStats;

/// One append waiting for its batch.
pub(crate) struct AppendReq {
    pub(crate) session: Uuid,
    pub(crate) key: Uuid,
    pub(crate) kind: &'static str,
    pub(crate) bytes: Vec<u8>,
    /// [`frame_checksum`](crate::integrity::frame_checksum) of `bytes`, as PostgreSQL's `int4`.
    pub(crate) checksum: i32,
    /// The epoch of this journal's lease on the session when the append was made;
    /// `None` when it held none.
    pub(crate) epoch: Option<u64>,
    pub(crate) reply: oneshot::Sender<Result<AppendOutcome, AppendError>>,
}

/// An atomic group of appends to one session
/// ([`JournalBackend::append_all`](crate::JournalBackend::append_all)).
pub(crate) struct GroupReq {
    pub(crate) session: SessionId,
    /// In order; each answered through its own `reply`, all alike when the group is
    /// refused or fails.
    pub(crate) requests: Vec<AppendReq>,
    /// The head the group expects to find (its first new frame at `if_head + 1`).
    pub(crate) if_head: Option<u64>,
}

/// What the writers' channel carries.
pub(crate) enum Job {
    /// An append, committed in a batch with others.
    One(AppendReq),
    /// An atomic group, committed in a transaction of its own.
    Group(GroupReq),
}

/// The writers' shared queue, and how many of them have a batch in flight.
pub(crate) struct Queue {
    pub(super) rx: AsyncMutex<mpsc::Receiver<Job>>,
    pub(super) in_flight: AtomicUsize,
    pub(super) done: Notify,
    /// How many writers share the queue.
    pub(super) writers: usize,
    /// Successful batches, for [`CommitStats`].
    pub(super) commits: AtomicU64,
    /// Appends answered by successful batches, for [`CommitStats`].
    pub(super) committed_appends: AtomicU64,
}

impl Queue {
    pub(crate) fn new(rx: mpsc::Receiver<Job>, writers: usize) -> Self {
        Self {
            writers,
            rx: AsyncMutex::new(rx),
            in_flight: AtomicUsize::new(0),
            done: Notify::new(),
            commits: AtomicU64::new(0),
            committed_appends: AtomicU64::new(0),
        }
    }

    /// The commit counters of every writer on this queue.
    pub(crate) fn stats(&self) -> CommitStats {
        CommitStats {
            commits: self.commits.load(Ordering::Relaxed),
            appends: self.committed_appends.load(Ordering::Relaxed),
            writer_wakeups: 0,
        }
    }
}
