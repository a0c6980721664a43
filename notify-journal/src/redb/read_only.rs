//! [`RedbReader`]: a redb journal opened read-only, for tools that inspect a journal
//! without changing it (the `notify` command line). It never writes, never recovers
//! and never upgrades: the file's bytes and modification time stay as they were.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use notify_types::{SessionId, Uuid};
use redb::{DatabaseError, ReadOnlyDatabase};

use crate::backend::{BoxFuture, SeqRecord};
use crate::error::{JournalError, OpenError, StorageError};
use crate::redb::app_tables::{AppTableError, AppTablesRead, read_tables};
use crate::redb::census::Census;
use crate::redb::check::verify;
use crate::redb::file::open::{self, contain};
use crate::redb::snapshot::blocking_pool;
use crate::redb::snapshot::database::{Reads, RedbStats};
use crate::retention::SessionState;
use crate::verify_report::VerifyReport;

/// A redb journal file opened read-only: every read of [`RedbJournal`] and its deep
/// check, and nothing that writes.
///
/// Opening takes redb's shared lock, so any number of readers may have the file at
/// once, but not while a [`RedbJournal`] (a writer, in this or another process) has
/// it: then the open is [`OpenError::AlreadyOpen`], at once, never a wait. The reads
/// check every frame as [`RedbJournal`]'s do. It implements [`JournalRead`](crate::JournalRead) alone: it
/// has no append or purge to refuse.
///
/// A read-only open runs no page check, and a damaged page number can make the
/// storage engine allocate up to 4 GiB before it finds the page beyond the file's end:
/// where that allocation fails, the process aborts, which no error can report
/// (`docs/design.md`, "What remains"). A tool that reads files it does not trust reads
/// them in a child process, as the `notify` command line does, or checks them first
/// with [`RedbJournal::verify_file`](crate::RedbJournal::verify_file).
///
/// ```
/// use notify_journal::{RedbOptions, OpenError, RedbJournal, RedbReader};
///
/// # let dir = tempfile::tempdir()?;
/// let path = dir.path().join("journal.redb");
/// let journal = RedbJournal::open(&path, RedbOptions::default())?;
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

impl RedbReader {
    /// The read-only database (for `app_tables/read.rs`).
    pub(crate) fn db(&self) -> &ReadOnlyDatabase {
        &self.db
    }

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

    /// The reader's reads (`snapshot/database.rs`).
    fn reads(&self) -> Reads<'_, ReadOnlyDatabase> {
        Reads {
            db: &*self.db,
            census: Some(&*self.census),
        }
    }

    /// [`JournalRead::lookup`](crate::JournalRead::lookup), on the calling thread.
    ///
    /// # Errors
    ///
    /// As [`RedbJournal::lookup_blocking`](crate::RedbJournal::lookup_blocking).
    pub fn lookup_blocking(
        &self,
        session: SessionId,
        key: Uuid,
    ) -> Result<Option<u64>, JournalError> {
        self.reads().lookup(session, key)
    }

    /// [`JournalRead::replay`](crate::JournalRead::replay), on the calling thread; every frame checked.
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
        self.reads().replay(session, from_seq, limit)
    }

    /// [`JournalRead::last_seq`](crate::JournalRead::last_seq), on the calling thread.
    ///
    /// # Errors
    ///
    /// [`JournalError::Storage`].
    pub fn last_seq_blocking(&self, session: SessionId) -> Result<u64, JournalError> {
        self.reads().last_seq(session)
    }

    /// [`JournalRead::session_state`](crate::JournalRead::session_state), on the calling thread.
    ///
    /// # Errors
    ///
    /// [`JournalError::Corrupt`] for a damaged session row, [`JournalError::Storage`].
    pub fn session_state_blocking(&self, session: SessionId) -> Result<SessionState, JournalError> {
        self.reads().session_state(session)
    }

    /// [`JournalRead::sessions`](crate::JournalRead::sessions), on the calling thread.
    ///
    /// # Errors
    ///
    /// [`JournalError::Storage`].
    pub fn sessions_blocking(&self) -> Result<Vec<SessionId>, JournalError> {
        self.reads().sessions()
    }

    /// [`JournalRead::sessions_after`](crate::JournalRead::sessions_after), on the calling thread.
    ///
    /// # Errors
    ///
    /// [`JournalError::Storage`].
    pub fn sessions_after_blocking(
        &self,
        after: Option<SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionId>, JournalError> {
        self.reads().sessions_after(after, limit)
    }

    /// The format version and the lengths of the log and the index (no scan).
    ///
    /// # Errors
    ///
    /// [`JournalError::Storage`].
    pub fn stats_blocking(&self) -> Result<RedbStats, JournalError> {
        self.reads().stats()
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
        verify::database(self.db(), max_problems, &mut || true)
    }

    /// Runs a blocking read on tokio's blocking pool inside a runtime, else inline.
    fn read<T, F>(&self, f: F) -> BoxFuture<'static, Result<T, JournalError>>
    where
        T: Send + 'static,
        F: FnOnce(&RedbReader) -> Result<T, JournalError> + Send + 'static,
    {
        blocking_pool::on_blocking_pool(self, f)
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

impl RedbReader {
    /// Reads the application's tables in one read transaction, as
    /// [`RedbJournal::read_app_tables`](crate::RedbJournal::read_app_tables) does, from a
    /// file opened read-only.
    ///
    /// # Errors
    ///
    /// Whatever `f` returns.
    pub fn read_app_tables<T, E>(
        &self,
        f: impl FnOnce(&AppTablesRead) -> Result<T, E>,
    ) -> Result<T, E>
    where
        E: From<AppTableError>,
    {
        read_tables(self.db(), f)
    }
}

blocking_pool::journal_read_by_blocking!(RedbReader);

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
    match open::journal_layout(db, path)? {
        // `journal_layout` refuses a fresh database.
        // A format-2 file is read as it is: no tail, every frame in the positions table.
        open::Layout::Current | open::Layout::Format2 | open::Layout::Fresh => Ok(()),
        open::Layout::Format1 => Err(needs_upgrade(
            "it is of format version 1; opening it for writing upgrades it to version 3 in place",
        )),
        open::Layout::Upgrading => Err(needs_upgrade(
            "its upgrade from format version 1 is unfinished; opening it for writing completes it",
        )),
    }
}
