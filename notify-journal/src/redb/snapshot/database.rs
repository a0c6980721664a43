//! The blocking read family both redb handles answer, written once: [`Reads`] over a
//! writable ([`RedbJournal`](crate::RedbJournal)) or read-only
//! ([`RedbReader`](crate::RedbReader)) database, each read in a snapshot of its own.

use notify_types::{SessionId, Uuid};
use redb::{ReadableDatabase, ReadableTableMetadata};

use crate::backend::SeqRecord;
use crate::error::JournalError;
use crate::redb::census::Census;
use crate::redb::contain::contain;
use crate::redb::contain::storage;
use crate::redb::format::{FORMAT_KEY, META};
use crate::redb::snapshot::{Snapshot, in_snapshot};
use crate::retention::SessionState;

/// Counts of a redb journal, from the tables' own lengths (no scan).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedbStats {
    /// The file's format version.
    pub format_version: u64,
    /// Frames in the log.
    pub frames: u64,
    /// Entries of the idempotency index.
    pub keys: u64,
    /// Frames in the log's tail: appended since the writer last folded the tail into
    /// the positions table (`RedbOptions::tail_max`); 0 in a format-2 file.
    pub tail: u64,
}

/// The reads of one redb database: `census` (when there is one) confirms index misses
/// against the sessions' logs.
pub(crate) struct Reads<'a, D> {
    pub(crate) db: &'a D,
    pub(crate) census: Option<&'a Census>,
}

impl<D: ReadableDatabase> Reads<'_, D> {
    /// A key's seq in `session`: a hit confirmed against its frame, a miss against the
    /// session's log (through the census).
    pub(crate) fn lookup(
        &self,
        session: SessionId,
        key: Uuid,
    ) -> Result<Option<u64>, JournalError> {
        // Read before the snapshot begins (see `census/`).
        let generation = self.census.map_or(0, Census::generation);
        in_snapshot(self.db, "the index", |s| {
            s.lookup(
                session.as_uuid().as_u128(),
                key.as_u128(),
                self.census.map(|c| (c, generation)),
            )
        })
    }

    /// A page of `session`'s log from `from_seq`, every frame checked.
    pub(crate) fn replay(
        &self,
        session: SessionId,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<SeqRecord>, JournalError> {
        in_snapshot(self.db, "a session's log", |s| {
            s.replay(session.as_uuid().as_u128(), from_seq, limit)
        })
    }

    /// `session`'s head (0: none).
    pub(crate) fn last_seq(&self, session: SessionId) -> Result<u64, JournalError> {
        in_snapshot(self.db, "a session's head", |s| {
            s.last_seq(session.as_uuid().as_u128())
        })
    }

    /// `session`'s state row.
    pub(crate) fn session_state(&self, session: SessionId) -> Result<SessionState, JournalError> {
        in_snapshot(self.db, "a session's state", |s| {
            s.state(session.as_uuid().as_u128())
        })
    }

    /// Every session with a log.
    pub(crate) fn sessions(&self) -> Result<Vec<SessionId>, JournalError> {
        in_snapshot(self.db, "the sessions", Snapshot::sessions)
    }

    /// Up to `limit` sessions after `after`, in order.
    pub(crate) fn sessions_after(
        &self,
        after: Option<SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionId>, JournalError> {
        in_snapshot(self.db, "the sessions", |s| s.sessions_after(after, limit))
    }

    /// The format version and the lengths of the log and the index (no scan).
    pub(crate) fn stats(&self) -> Result<RedbStats, JournalError> {
        contain(|| {
            let txn = self.db.begin_read().map_err(storage("begin read"))?;
            let format_version = txn
                .open_table(META)
                .map_err(storage("open metadata"))?
                .get(FORMAT_KEY)
                .map_err(storage("read format version"))?
                .map_or(0, |g| g.value());
            let snap = Snapshot::open(&txn)?;
            Ok(RedbStats {
                format_version,
                frames: snap.log.len().map_err(storage("count frames"))?,
                keys: snap.keys.len().map_err(storage("count keys"))?,
                tail: match &snap.tail {
                    Some(t) => t.len().map_err(storage("count tail"))?,
                    None => 0,
                },
            })
        })
        .unwrap_or_else(|panic| Err(JournalError::Storage(panic.storage("counting"))))
    }
}
