//! The blocking read family both redb handles answer, written once: [`Reads`] over a
//! writable ([`RedbJournal`](crate::RedbJournal)) or read-only
//! ([`RedbReader`](crate::RedbReader)) database, each read in one snapshot; and the hop
//! of a blocking read onto tokio's blocking pool.

use notify_types::{SessionId, Uuid};
use redb::{ReadableDatabase, ReadableTableMetadata};

use crate::backend::{BoxFuture, SeqRecord};
use crate::error::{JournalError, StorageError};
use crate::redb::census::Census;
use crate::redb::contain::contain;
use crate::redb::format::{FORMAT_KEY, META};
use crate::redb::snapshot::{Snapshot, in_snapshot, storage};
use crate::redb::verify;
use crate::retention::SessionState;
use crate::verify_report::VerifyReport;

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
        // Read before the snapshot begins (see `census.rs`).
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

    /// The deep integrity check, in one snapshot.
    pub(crate) fn verify(&self, max_problems: usize) -> Result<VerifyReport, JournalError> {
        verify::contained(|| verify::logical(self.db, max_problems))
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
            })
        })
        .unwrap_or_else(|panic| Err(JournalError::Storage(panic.storage("counting"))))
    }
}

/// Runs the blocking read `f` on a clone of `handle` on tokio's blocking pool when
/// called inside a runtime, else inline.
pub(crate) fn on_blocking_pool<H, T, F>(
    handle: &H,
    f: F,
) -> BoxFuture<'static, Result<T, JournalError>>
where
    H: Clone + Send + 'static,
    T: Send + 'static,
    F: FnOnce(&H) -> Result<T, JournalError> + Send + 'static,
{
    let this = handle.clone();
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => Box::pin(async move {
            runtime
                .spawn_blocking(move || f(&this))
                .await
                .map_err(|e| JournalError::Storage(StorageError::new("read task failed", e)))?
        }),
        Err(_) => {
            let result = f(&this);
            Box::pin(async move { result })
        }
    }
}

/// [`JournalRead`](crate::JournalRead) for a redb handle, each read its `*_blocking`
/// method run by its `read` (on tokio's blocking pool).
macro_rules! journal_read_by_blocking {
    ($handle:ty) => {
        impl $crate::backend::JournalRead for $handle {
            fn lookup(
                &self,
                session: ::notify_types::SessionId,
                key: ::notify_types::Uuid,
            ) -> $crate::backend::BoxFuture<'_, Result<Option<u64>, $crate::error::JournalError>>
            {
                self.read(move |h| h.lookup_blocking(session, key))
            }

            fn replay(
                &self,
                session: ::notify_types::SessionId,
                from_seq: u64,
                limit: usize,
            ) -> $crate::backend::BoxFuture<
                '_,
                Result<Vec<$crate::backend::SeqRecord>, $crate::error::JournalError>,
            > {
                self.read(move |h| h.replay_blocking(session, from_seq, limit))
            }

            fn last_seq(
                &self,
                session: ::notify_types::SessionId,
            ) -> $crate::backend::BoxFuture<'_, Result<u64, $crate::error::JournalError>> {
                self.read(move |h| h.last_seq_blocking(session))
            }

            fn sessions(
                &self,
            ) -> $crate::backend::BoxFuture<
                '_,
                Result<Vec<::notify_types::SessionId>, $crate::error::JournalError>,
            > {
                self.read(|h| h.sessions_blocking())
            }

            fn sessions_after(
                &self,
                after: Option<::notify_types::SessionId>,
                limit: usize,
            ) -> $crate::backend::BoxFuture<
                '_,
                Result<Vec<::notify_types::SessionId>, $crate::error::JournalError>,
            > {
                self.read(move |h| h.sessions_after_blocking(after, limit))
            }

            fn session_state(
                &self,
                session: ::notify_types::SessionId,
            ) -> $crate::backend::BoxFuture<
                '_,
                Result<$crate::retention::SessionState, $crate::error::JournalError>,
            > {
                self.read(move |h| h.session_state_blocking(session))
            }
        }
    };
}
pub(crate) use journal_read_by_blocking;
