//! [`RedbReader`]: a redb journal opened read-only, for tools that inspect a journal
//! without changing it (the `notify` command line). It never writes, never recovers
//! and never upgrades: the file's bytes and modification time stay as they were.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use notify_types::{SessionId, Uuid};
use redb::{DatabaseError, ReadOnlyDatabase, ReadableDatabase, ReadableTableMetadata};

use super::census::Census;
use super::contain::contain as contain_panic;
use super::format::{FORMAT_KEY, META};
use super::open::{self, contain};
use super::read::{Snapshot, in_snapshot, storage};
use super::verify;
use crate::backend::{BoxFuture, JournalRead, SeqRecord};
use crate::error::{JournalError, OpenError, StorageError};
use crate::retention::SessionState;
use crate::verify::VerifyReport;

/// A redb journal file opened read-only: every read of [`RedbJournal`] and its deep
/// check, and nothing that writes.
///
/// Opening takes redb's shared lock, so any number of readers may have the file at
/// once, but not while a [`RedbJournal`] (a writer, in this or another process) has
/// it: then the open is [`OpenError::AlreadyOpen`], at once, never a wait. The reads
/// check every frame as [`RedbJournal`]'s do. It implements [`JournalRead`] alone: it
/// has no append or purge to refuse.
///
/// ```
/// use notify_journal::{JournalOptions, OpenError, RedbJournal, RedbReader};
///
/// # let dir = tempfile::tempdir()?;
/// let path = dir.path().join("journal.redb");
/// let journal = RedbJournal::open(&path, JournalOptions::default())?;
/// // In use by a writer: refused at once.
/// assert!(matches!(RedbReader::open(&path), Err(OpenError::AlreadyOpen { .. })));
/// journal.close();
/// let reader = RedbReader::open(&path)?;
/// assert!(reader.sessions_blocking()?.is_empty());
/// assert_eq!(reader.stats_blocking()?.frames, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// [`RedbJournal`]: crate::RedbJournal
#[derive(Clone)]
pub struct RedbReader {
    path: PathBuf,
    db: Arc<ReadOnlyDatabase>,
    /// Confirms index misses against the sessions' logs, as [`RedbJournal`]'s lookups
    /// do (no writer: the file does not change while it is open).
    ///
    /// [`RedbJournal`]: crate::RedbJournal
    census: Arc<Census>,
}

impl std::fmt::Debug for RedbReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbReader")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

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

impl RedbReader {
    /// Opens the journal at `path` read-only. Reads only the file's metadata and table
    /// list; no page check (redb's runs only with the file open for writing: use
    /// [`RedbJournal::verify_file`](crate::RedbJournal::verify_file) for it).
    ///
    /// # Errors
    ///
    /// [`OpenError::Missing`] when there is no file at `path`;
    /// [`OpenError::AlreadyOpen`] while a writer has the file open;
    /// [`OpenError::NotAJournal`] for a file that is not a journal (an empty file or a
    /// directory included); [`OpenError::Damaged`] for a journal cut short or whose
    /// metadata or tables are damaged; [`OpenError::NeedsWritableOpen`] for a journal
    /// not closed cleanly or of an older format;
    /// [`OpenError::UnsupportedFormatVersion`] / [`OpenError::UnsupportedContent`] for a
    /// journal of a later build; [`OpenError::Storage`] for I/O failures.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, OpenError> {
        let path = path.as_ref().to_path_buf();
        match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(OpenError::Missing { path });
            }
            Err(e) => {
                return Err(OpenError::Storage {
                    path,
                    source: StorageError::new("read the file's metadata", e),
                });
            }
            Ok(m) if m.is_dir() => {
                return Err(OpenError::NotAJournal {
                    path,
                    reason: "a directory".to_owned(),
                });
            }
            Ok(m) if m.len() == 0 => {
                return Err(OpenError::NotAJournal {
                    path,
                    reason: "an empty file".to_owned(),
                });
            }
            Ok(_) => {}
        }
        let db = contain(&path, || {
            let db = redb::Builder::new()
                .open_read_only(&path)
                .map_err(|e| map_error(&path, e))?;
            check_layout(&db, &path)?;
            Ok(db)
        })?;
        Ok(Self {
            path,
            db: Arc::new(db),
            census: Arc::new(Census::default()),
        })
    }

    /// The file this reader was opened from.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on one consistent snapshot, containing a panic of the storage engine.
    fn snapshot<T>(
        &self,
        what: &'static str,
        f: impl FnOnce(&Snapshot) -> Result<T, JournalError>,
    ) -> Result<T, JournalError> {
        in_snapshot(&*self.db, what, f)
    }

    /// [`JournalRead::lookup`], on the calling thread.
    ///
    /// # Errors
    ///
    /// As [`RedbJournal::lookup_blocking`](crate::RedbJournal::lookup_blocking).
    pub fn lookup_blocking(
        &self,
        session: SessionId,
        key: Uuid,
    ) -> Result<Option<u64>, JournalError> {
        let generation = self.census.generation();
        self.snapshot("the index", |s| {
            s.lookup(
                session.as_uuid().as_u128(),
                key.as_u128(),
                Some((&self.census, generation)),
            )
        })
    }

    /// [`JournalRead::replay`], on the calling thread; every frame checked.
    ///
    /// # Errors
    ///
    /// As [`RedbJournal::replay_blocking`](crate::RedbJournal::replay_blocking).
    pub fn replay_blocking(
        &self,
        session: SessionId,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<SeqRecord>, JournalError> {
        self.snapshot("a session's log", |s| {
            s.replay(session.as_uuid().as_u128(), from_seq, limit)
        })
    }

    /// [`JournalRead::last_seq`], on the calling thread.
    ///
    /// # Errors
    ///
    /// [`JournalError::Storage`].
    pub fn last_seq_blocking(&self, session: SessionId) -> Result<u64, JournalError> {
        self.snapshot("a session's head", |s| {
            s.last_seq(session.as_uuid().as_u128())
        })
    }

    /// [`JournalRead::session_state`], on the calling thread.
    ///
    /// # Errors
    ///
    /// [`JournalError::Corrupt`] for a damaged session row, [`JournalError::Storage`].
    pub fn session_state_blocking(&self, session: SessionId) -> Result<SessionState, JournalError> {
        self.snapshot("a session's state", |s| {
            s.state(session.as_uuid().as_u128())
        })
    }

    /// [`JournalRead::sessions`], on the calling thread.
    ///
    /// # Errors
    ///
    /// [`JournalError::Storage`].
    pub fn sessions_blocking(&self) -> Result<Vec<SessionId>, JournalError> {
        self.snapshot("the sessions", Snapshot::sessions)
    }

    /// [`JournalRead::sessions_after`], on the calling thread.
    ///
    /// # Errors
    ///
    /// [`JournalError::Storage`].
    pub fn sessions_after_blocking(
        &self,
        after: Option<SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionId>, JournalError> {
        self.snapshot("the sessions", |s| s.sessions_after(after, limit))
    }

    /// The format version and the lengths of the log and the index (no scan).
    ///
    /// # Errors
    ///
    /// [`JournalError::Storage`].
    pub fn stats_blocking(&self) -> Result<RedbStats, JournalError> {
        contain_panic(|| {
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

    /// The journal's deep integrity check
    /// ([`RedbJournal::verify_blocking`](crate::RedbJournal::verify_blocking)), in one
    /// snapshot. redb's page check is not run ([`VerifyReport::engine`] is
    /// `NotRun`): it needs the file open for writing.
    ///
    /// # Errors
    ///
    /// [`JournalError::Storage`] when the check itself cannot read; damage is reported
    /// in the report.
    pub fn verify_blocking(&self, max_problems: usize) -> Result<VerifyReport, JournalError> {
        verify::contained(|| verify::logical(self.db.as_ref(), max_problems))
    }

    /// Runs a blocking read on tokio's blocking pool inside a runtime, else inline.
    fn read<T, F>(&self, f: F) -> BoxFuture<'static, Result<T, JournalError>>
    where
        T: Send + 'static,
        F: FnOnce(&RedbReader) -> Result<T, JournalError> + Send + 'static,
    {
        let this = self.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => Box::pin(async move {
                handle
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

    /// [`verify_blocking`](Self::verify_blocking) on tokio's blocking pool when called
    /// inside a runtime, else inline.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the report; the check only reads.
    ///
    /// # Errors
    ///
    /// As [`verify_blocking`](Self::verify_blocking).
    pub fn verify(
        &self,
        max_problems: usize,
    ) -> impl Future<Output = Result<VerifyReport, JournalError>> + Send + 'static {
        self.read(move |r| r.verify_blocking(max_problems))
    }
}

impl JournalRead for RedbReader {
    fn lookup(
        &self,
        session: SessionId,
        key: Uuid,
    ) -> BoxFuture<'_, Result<Option<u64>, JournalError>> {
        self.read(move |r| r.lookup_blocking(session, key))
    }

    fn replay(
        &self,
        session: SessionId,
        from_seq: u64,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SeqRecord>, JournalError>> {
        self.read(move |r| r.replay_blocking(session, from_seq, limit))
    }

    fn last_seq(&self, session: SessionId) -> BoxFuture<'_, Result<u64, JournalError>> {
        self.read(move |r| r.last_seq_blocking(session))
    }

    fn sessions(&self) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>> {
        self.read(|r| r.sessions_blocking())
    }

    fn sessions_after(
        &self,
        after: Option<SessionId>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>> {
        self.read(move |r| r.sessions_after_blocking(after, limit))
    }

    fn session_state(
        &self,
        session: SessionId,
    ) -> BoxFuture<'_, Result<SessionState, JournalError>> {
        self.read(move |r| r.session_state_blocking(session))
    }
}

/// redb's refusals of a read-only open, as [`OpenError`]s.
fn map_error(path: &Path, e: DatabaseError) -> OpenError {
    match e {
        // A read-only open refuses a file whose allocator state it cannot load: one
        // not closed cleanly (or cut short after its last clean close). redb would
        // have to repair it, which writes.
        DatabaseError::RepairAborted => OpenError::NeedsWritableOpen {
            path: path.to_path_buf(),
            reason: "redb must repair it first: it was not closed cleanly (the process that \
                     had it open stopped without closing it), or it is damaged (cut short); \
                     opening it for writing repairs it or reports the damage"
                .to_owned(),
        },
        other => open::map_database_error(path, other),
    }
}

/// The read-only counterpart of `open::prepare`: the metadata and tables checked,
/// nothing laid out or upgraded.
fn check_layout(db: &ReadOnlyDatabase, path: &Path) -> Result<(), OpenError> {
    let needs_upgrade = |reason: &str| OpenError::NeedsWritableOpen {
        path: path.to_path_buf(),
        reason: reason.to_owned(),
    };
    match open::layout(db, path)? {
        open::Layout::Current => Ok(()),
        open::Layout::Fresh => Err(OpenError::NotAJournal {
            path: path.to_path_buf(),
            reason: "a redb database without journal metadata".to_owned(),
        }),
        open::Layout::Format1 => Err(needs_upgrade(
            "it is of format version 1; opening it for writing upgrades it to version 2 in place",
        )),
        open::Layout::Upgrading => Err(needs_upgrade(
            "its upgrade from format version 1 is unfinished; opening it for writing completes it",
        )),
    }
}
