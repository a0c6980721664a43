//! What the writers' channels carry (single appends and atomic groups), the
//! channels themselves with the routing of a session to its writer, and the commit
//! counters the writers share.

use std::sync::atomic::{AtomicU64, Ordering};

use notify_types::{SessionId, Uuid};
use tokio::sync::{mpsc, oneshot};

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

/// The writers' channels: one per writer, each append to a session always on the
/// same one ([`Senders::route`]), so that no two writers of this journal ever hold
/// batches that touch the same session row (see `docs/postgres.md`, "Group
/// commit").
pub(crate) struct Senders {
    channels: Vec<mpsc::Sender<Job>>,
}

impl Senders {
    /// `writers` channels of `capacity` each, and their receiving ends in order.
    pub(crate) fn new(writers: usize, capacity: usize) -> (Self, Vec<mpsc::Receiver<Job>>) {
        let (channels, receivers) = (0..writers.max(1)).map(|_| mpsc::channel(capacity)).unzip();
        (Self { channels }, receivers)
    }

    /// The channel of the writer that commits every append to `session`: a fixed
    /// function of the session's ID and the number of writers.
    pub(crate) fn route(&self, session: &Uuid) -> &mpsc::Sender<Job> {
        let v = session.as_u128();
        // Session IDs are mostly random bits (UUIDv4 or the tail of a UUIDv7);
        // mixing both halves spreads even sequential test IDs.
        let mixed = ((v as u64) ^ ((v >> 64) as u64)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let n = self.channels.len() as u64;
        // `n` >= 1 by construction; the index is below `n`.
        &self.channels[((mixed >> 32) % n) as usize]
    }
}

/// What the writers share: the commit counters.
pub(crate) struct Queue {
    /// Successful batches, for [`CommitStats`].
    pub(super) commits: AtomicU64,
    /// Appends answered by successful batches, for [`CommitStats`].
    pub(super) committed_appends: AtomicU64,
}

impl Queue {
    pub(crate) fn new() -> Self {
        Self {
            commits: AtomicU64::new(0),
            committed_appends: AtomicU64::new(0),
        }
    }

    /// The commit counters of every writer of the journal.
    pub(crate) fn stats(&self) -> CommitStats {
        CommitStats {
            commits: self.commits.load(Ordering::Relaxed),
            appends: self.committed_appends.load(Ordering::Relaxed),
            writer_wakeups: 0,
        }
    }
}
