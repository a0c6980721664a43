//! [`RedbJournal`]: the redb implementation of [`JournalBackend`].

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;

use notify_types::{JournalRecord, SessionId, Uuid};
use redb::{Database, DatabaseError, ReadableDatabase, ReadableTable, StorageBackend, TableHandle};
use tokio::sync::oneshot;
use tracing::Instrument;

use crate::backend::{
    AppendOutcome, BoxFuture, Frame, JournalBackend, decode_frame, encode_for_append,
};
use crate::error::{AppendError, JournalError, OpenError, StorageError};
use crate::options::JournalOptions;
use crate::tables::{FORMAT_KEY, FORMAT_VERSION, FRAMES, HEADS, INDEX, META};
use crate::writer::{self, CommitStats, Queue, Request};

/// A durable, group-committed journal of many sessions in one redb file.
///
/// `RedbJournal` is a cheap [`Clone`] handle: clones share one database and one writer
/// thread. The writer stops, and the file is released, on [`close`](Self::close) or when
/// the last clone is dropped (both wait for the commit in flight).
///
/// After a failed commit the journal is poisoned: every later append fails with
/// [`AppendError::Poisoned`]. Close it and open the file again (redb then runs its
/// crash recovery); it never writes through a handle that has failed.
///
/// ```
/// use notify_journal::{JournalBackend, JournalOptions, RedbJournal};
/// use notify_types::*;
///
/// # let dir = tempfile::tempdir()?;
/// let journal = RedbJournal::open(dir.path().join("journal.redb"), JournalOptions::default())?;
/// let n = ProcessCompletionNotification {
///     command_id: CommandId::new(),
///     session_id: SessionId::new(),
///     loop_id: LoopId::new(),
///     process_handle: "build-42".into(),
///     state: ProcessLifecycleState::Exited,
///     reason: ProcessTerminalReason::Exited,
/// };
/// let record = JournalRecord::from(ProcessNotification::new(n.clone()));
/// let rt = tokio::runtime::Builder::new_current_thread().build()?;
/// let first = rt.block_on(journal.append(n.session_id, record.clone()))?;
/// let again = rt.block_on(journal.append(n.session_id, record))?;
/// assert_eq!((first.seq, first.appended), (1, true));
/// assert_eq!((again.seq, again.appended), (1, false));
/// journal.close();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct RedbJournal {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedbJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbJournal")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

struct Inner {
    path: PathBuf,
    /// `None` once closed; readers clone the `Arc` for the length of one read.
    db: RwLock<Option<Arc<Database>>>,
    queue: Arc<Queue>,
    writer: Mutex<Option<JoinHandle<()>>>,
    max_record_bytes: usize,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.close();
    }
}

impl Inner {
    fn close(&self) {
        self.queue.close();
        let handle = self
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(handle) = handle {
            // A writer that panicked has already answered its queue (see writer::run).
            let _ = handle.join();
        }
        self.db
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }

    fn db(&self) -> Result<Arc<Database>, JournalError> {
        self.db
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or(JournalError::Closed)
    }
}

/// What the label of a journal opened on a custom backend is.
const BACKEND_LABEL: &str = "<custom storage backend>";

impl RedbJournal {
    /// Opens the journal at `path`, creating the file if it is missing. After a crash,
    /// redb's recovery runs first. Opening reads only the metadata, never the log.
    ///
    /// # Errors
    ///
    /// [`OpenError::AlreadyOpen`] if another handle has the file open;
    /// [`OpenError::NotAJournal`] for a file that is not a journal;
    /// [`OpenError::UnsupportedFormatVersion`] for a journal of another format version;
    /// [`OpenError::Storage`] for I/O and storage failures.
    pub fn open(path: impl AsRef<Path>, options: JournalOptions) -> Result<Self, OpenError> {
        let path = path.as_ref().to_path_buf();
        if !path.exists() {
            create_atomically(&path, &options)?;
        }
        let db = builder(&options)
            .create(&path)
            .map_err(|e| map_database_error(&path, e))?;
        Self::start(db, path, options)
    }

    /// Opens (or initialises) a journal on a custom redb storage backend, for fault
    /// injection in tests. Errors name the path `<custom storage backend>`.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open).
    pub fn open_with_backend(
        backend: impl StorageBackend,
        options: JournalOptions,
    ) -> Result<Self, OpenError> {
        let path = PathBuf::from(BACKEND_LABEL);
        let db = builder(&options)
            .create_with_backend(backend)
            .map_err(|e| map_database_error(&path, e))?;
        Self::start(db, path, options)
    }

    fn start(db: Database, path: PathBuf, options: JournalOptions) -> Result<Self, OpenError> {
        init_or_check(&db, &path)?;
        let db = Arc::new(db);
        let queue = Arc::new(Queue::new());
        let writer = {
            let (db, queue, options) = (Arc::clone(&db), Arc::clone(&queue), options.clone());
            std::thread::Builder::new()
                .name("notify-journal-writer".into())
                .spawn(move || writer::run(db, queue, options))
                .map_err(|e| OpenError::Storage {
                    path: path.clone(),
                    source: StorageError::new("spawn the writer thread", e),
                })?
        };
        Ok(Self {
            inner: Arc::new(Inner {
                path,
                db: RwLock::new(Some(db)),
                queue,
                writer: Mutex::new(Some(writer)),
                max_record_bytes: options.max_record_bytes,
            }),
        })
    }

    /// The file this journal was opened from.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Whether an earlier commit failure has poisoned this handle.
    #[must_use]
    pub fn is_poisoned(&self) -> bool {
        self.inner.queue.is_poisoned()
    }

    /// Group-commit counters since open: `appends / commits` is the mean batch size.
    #[must_use]
    pub fn commit_stats(&self) -> CommitStats {
        self.inner.queue.stats()
    }

    /// Stops the writer after the appends already queued, waits for it, and releases
    /// the file (once reads in progress end). Later calls on any clone fail with
    /// `Closed`. Idempotent.
    pub fn close(&self) {
        self.inner.close();
    }

    /// Appends `record` to `session`'s log under `record.key()`; resolves once the
    /// batch holding it has committed durably.
    ///
    /// The request is queued when this is called, not when the future is first polled.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel the write: the record may or may not be
    /// journaled. Retrying with the identical record is always safe.
    ///
    /// # Errors
    ///
    /// See [`AppendError`].
    pub fn append(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> impl Future<Output = Result<AppendOutcome, AppendError>> + Send + 'static {
        let key = record.key();
        let span = tracing::debug_span!("journal.append", %session, %key);
        let submitted = span.in_scope(|| self.submit(session, &record));
        async move {
            let rx = submitted?;
            match rx.await {
                Ok(reply) => reply,
                // The writer is gone without answering: it has stopped.
                Err(_) => Err(AppendError::Closed),
            }
        }
        .instrument(span)
    }

    fn submit(
        &self,
        session: SessionId,
        record: &JournalRecord,
    ) -> Result<oneshot::Receiver<writer::Reply>, AppendError> {
        let bytes = encode_for_append(session, record, self.inner.max_record_bytes)?;
        let (reply, rx) = oneshot::channel();
        self.inner.queue.submit(Request {
            session: session.as_uuid().as_u128(),
            key: record.key().as_u128(),
            bytes,
            reply,
        })?;
        Ok(rx)
    }

    /// [`JournalBackend::lookup`], on the calling thread (a short blocking read).
    ///
    /// # Errors
    ///
    /// [`JournalError::Closed`] or [`JournalError::Storage`].
    pub fn lookup_blocking(
        &self,
        session: SessionId,
        key: Uuid,
    ) -> Result<Option<u64>, JournalError> {
        let db = self.inner.db()?;
        let txn = db.begin_read().map_err(storage("begin read"))?;
        let index = txn.open_table(INDEX).map_err(storage("open index"))?;
        let seq = index
            .get((session.as_uuid().as_u128(), key.as_u128()))
            .map_err(storage("read index"))?
            .map(|g| g.value());
        Ok(seq)
    }

    /// [`JournalBackend::replay`], on the calling thread.
    ///
    /// # Errors
    ///
    /// [`JournalError::Corrupt`] naming the first frame that does not decode, or
    /// [`JournalError::Closed`] / [`JournalError::Storage`].
    pub fn replay_blocking(
        &self,
        session: SessionId,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<Frame>, JournalError> {
        let db = self.inner.db()?;
        let txn = db.begin_read().map_err(storage("begin read"))?;
        let frames = txn.open_table(FRAMES).map_err(storage("open frames"))?;
        let s = session.as_uuid().as_u128();
        let range = frames
            .range((s, from_seq)..=(s, u64::MAX))
            .map_err(storage("read frames"))?;
        let mut out = Vec::new();
        for entry in range.take(limit) {
            let (k, v) = entry.map_err(storage("read frame"))?;
            out.push(decode_frame(session, k.value().1, v.value())?);
        }
        Ok(out)
    }

    /// [`JournalBackend::last_seq`], on the calling thread.
    ///
    /// # Errors
    ///
    /// [`JournalError::Closed`] or [`JournalError::Storage`].
    pub fn last_seq_blocking(&self, session: SessionId) -> Result<u64, JournalError> {
        let db = self.inner.db()?;
        let txn = db.begin_read().map_err(storage("begin read"))?;
        let heads = txn.open_table(HEADS).map_err(storage("open heads"))?;
        let seq = heads
            .get(session.as_uuid().as_u128())
            .map_err(storage("read head"))?
            .map_or(0, |g| g.value());
        Ok(seq)
    }

    /// [`JournalBackend::sessions`], on the calling thread.
    ///
    /// # Errors
    ///
    /// [`JournalError::Closed`] or [`JournalError::Storage`].
    pub fn sessions_blocking(&self) -> Result<Vec<SessionId>, JournalError> {
        let db = self.inner.db()?;
        let txn = db.begin_read().map_err(storage("begin read"))?;
        let heads = txn.open_table(HEADS).map_err(storage("open heads"))?;
        let mut out = Vec::new();
        for entry in heads.iter().map_err(storage("read heads"))? {
            let (k, _) = entry.map_err(storage("read head"))?;
            out.push(SessionId::from_uuid(Uuid::from_u128(k.value())));
        }
        Ok(out)
    }

    /// Runs a blocking read on tokio's blocking pool when called inside a runtime, else
    /// inline.
    fn read<T, F>(&self, f: F) -> BoxFuture<'static, Result<T, JournalError>>
    where
        T: Send + 'static,
        F: FnOnce(&RedbJournal) -> Result<T, JournalError> + Send + 'static,
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
}

impl JournalBackend for RedbJournal {
    fn append(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> BoxFuture<'_, Result<AppendOutcome, AppendError>> {
        Box::pin(RedbJournal::append(self, session, record))
    }

    fn lookup(
        &self,
        session: SessionId,
        key: Uuid,
    ) -> BoxFuture<'_, Result<Option<u64>, JournalError>> {
        self.read(move |j| j.lookup_blocking(session, key))
    }

    fn replay(
        &self,
        session: SessionId,
        from_seq: u64,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<Frame>, JournalError>> {
        self.read(move |j| j.replay_blocking(session, from_seq, limit))
    }

    fn last_seq(&self, session: SessionId) -> BoxFuture<'_, Result<u64, JournalError>> {
        self.read(move |j| j.last_seq_blocking(session))
    }

    fn sessions(&self) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>> {
        self.read(|j| j.sessions_blocking())
    }
}

/// Lays out a new journal beside `path` and links it into place, so a crash during
/// creation never leaves a half-written file at `path`. Linking fails if `path` appeared
/// meanwhile (another creator won); then that file is used.
fn create_atomically(path: &Path, options: &JournalOptions) -> Result<(), OpenError> {
    let io = |context: &'static str| {
        move |e: std::io::Error| OpenError::Storage {
            path: path.to_path_buf(),
            source: StorageError::new(context, e),
        }
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let tmp = dir.join(format!(".{name}.creating-{}-{nanos}", std::process::id()));
    let result = (|| {
        {
            let db = builder(options)
                .create(&tmp)
                .map_err(|e| map_database_error(path, e))?;
            init_or_check(&db, path)?;
        }
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(io("sync the new journal"))?;
        match std::fs::hard_link(&tmp, path) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(io("link the new journal into place")(e));
            }
            _ => {}
        }
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(io("sync the journal's directory"))
    })();
    // The temporary name is only a staging name; losing it is harmless.
    let _ = std::fs::remove_file(&tmp);
    result
}

fn builder(options: &JournalOptions) -> redb::Builder {
    let mut b = Database::builder();
    b.set_cache_size(options.cache_size);
    b
}

fn storage<E>(context: &'static str) -> impl Fn(E) -> JournalError
where
    E: std::error::Error + Send + Sync + 'static,
{
    move |e| JournalError::Storage(StorageError::new(context, e))
}

fn map_database_error(path: &Path, e: DatabaseError) -> OpenError {
    let path = path.to_path_buf();
    match e {
        DatabaseError::DatabaseAlreadyOpen => OpenError::AlreadyOpen { path },
        DatabaseError::UpgradeRequired(v) => OpenError::NotAJournal {
            path,
            reason: format!("a redb file of old file format {v}"),
        },
        DatabaseError::Storage(redb::StorageError::Corrupted(reason)) => OpenError::NotAJournal {
            path,
            reason: format!("not a readable redb file ({reason})"),
        },
        // redb reports a wrong magic number as invalid data.
        DatabaseError::Storage(redb::StorageError::Io(e))
            if e.kind() == std::io::ErrorKind::InvalidData =>
        {
            OpenError::NotAJournal {
                path,
                reason: format!("not a redb file ({e})"),
            }
        }
        other => OpenError::Storage {
            path,
            source: StorageError::new("open the redb file", other),
        },
    }
}

/// Checks the metadata of an existing journal, or lays out a fresh one in an empty
/// database. Reads only the metadata table.
fn init_or_check(db: &Database, path: &Path) -> Result<(), OpenError> {
    let fail = |context: &'static str| {
        let path = path.to_path_buf();
        move |e: redb::Error| OpenError::Storage {
            path: path.clone(),
            source: StorageError::new(context, e),
        }
    };
    let not_a_journal = |reason: &str| OpenError::NotAJournal {
        path: path.to_path_buf(),
        reason: reason.to_owned(),
    };
    let txn = db.begin_read().map_err(|e| fail("begin read")(e.into()))?;
    let tables: Vec<String> = txn
        .list_tables()
        .map_err(|e| fail("list tables")(e.into()))?
        .map(|h| h.name().to_owned())
        .collect();
    let multimaps = txn
        .list_multimap_tables()
        .map_err(|e| fail("list tables")(e.into()))?
        .count();
    if tables.iter().any(|t| t == META.name()) {
        let meta = txn.open_table(META).map_err(|e| match e {
            redb::TableError::TableTypeMismatch { .. } => {
                not_a_journal("its metadata table has the wrong type")
            }
            other => fail("open metadata")(other.into()),
        })?;
        let version = meta
            .get(FORMAT_KEY)
            .map_err(|e| fail("read format version")(e.into()))?
            .map(|g| g.value());
        return match version {
            Some(FORMAT_VERSION) => {
                for def in [FRAMES.name(), INDEX.name(), HEADS.name()] {
                    if !tables.iter().any(|t| t == def) {
                        return Err(not_a_journal("a journal table is missing"));
                    }
                }
                Ok(())
            }
            Some(found) => Err(OpenError::UnsupportedFormatVersion {
                path: path.to_path_buf(),
                found,
                supported: FORMAT_VERSION,
            }),
            None => Err(not_a_journal("its metadata has no format version")),
        };
    }
    if !tables.is_empty() || multimaps > 0 {
        return Err(not_a_journal("a redb database without journal metadata"));
    }
    drop(txn);
    let txn = db
        .begin_write()
        .map_err(|e| fail("begin write")(e.into()))?;
    {
        let mut meta = txn
            .open_table(META)
            .map_err(|e| fail("create metadata")(e.into()))?;
        meta.insert(FORMAT_KEY, FORMAT_VERSION)
            .map_err(|e| fail("write format version")(e.into()))?;
        txn.open_table(FRAMES)
            .map_err(|e| fail("create frames")(e.into()))?;
        txn.open_table(INDEX)
            .map_err(|e| fail("create index")(e.into()))?;
        txn.open_table(HEADS)
            .map_err(|e| fail("create heads")(e.into()))?;
    }
    txn.commit().map_err(|e| fail("commit layout")(e.into()))
}
