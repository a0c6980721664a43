//! [`RedbJournal`]: the redb engine of [`JournalBackend`](crate::JournalBackend). One file holds many
//! sessions' logs; `docs/design.md` is its format.

mod body;
mod census;
mod compact;
mod contain;
mod failure;
pub(crate) mod format;
mod frame;
mod import;
mod keys;
mod open;
pub(crate) mod options;
mod overlay;
mod purge;
mod read;
pub(crate) mod read_only;
pub(crate) mod scrub;
mod state;
mod upgrade;
mod verify;
pub(crate) mod writer;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;

use notify_types::{JournalRecord, SessionEvent, SessionId, Timestamp, Uuid};
use redb::{Database, StorageBackend};
use tokio::sync::oneshot;
use tracing::Instrument;

pub use self::compact::CompactReport;
use self::options::JournalOptions;
use self::read::Snapshot;
use self::writer::{Chore, Group, Queue, Queued, Request};
use crate::backend::{AppendOutcome, BoxFuture, JournalBackend, JournalRead, SeqRecord};
use crate::error::{AppendError, JournalError, OpenError, StorageError};
use crate::integrity::{check_append, check_group};
use crate::retention::{ImportStateError, PurgeStep, SessionState, check_importable};
use crate::stats::CommitStats;
use crate::verify::VerifyReport;

/// A durable, group-committed journal of many sessions in one redb file.
///
/// `RedbJournal` is a cheap [`Clone`] handle: clones share one database and one writer
/// thread. The writer stops, and the file is released, on [`close`](Self::close) or when
/// the last clone is dropped (both wait for the commit in flight).
///
/// After a failed commit the journal is poisoned: every later append fails with
/// [`AppendError::Poisoned`] (after damage the background scrub found, with
/// [`AppendError::Damaged`]; see [`scrub_status`](Self::scrub_status)). Close it and open the file again (redb then runs its
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
    /// Confirms index misses against the sessions' logs (`census.rs`); shared with the
    /// writer. `None` when [`JournalOptions::confirm_misses`] is off.
    census: Option<Arc<census::Census>>,
    /// The background scrub (`scrub.rs`), with [`VerifyOnOpen::Background`].
    ///
    /// [`VerifyOnOpen::Background`]: options::VerifyOnOpen::Background
    scrub: Option<scrub::Scrub>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.close();
    }
}

impl Inner {
    fn close(&self) {
        if let Some(scrub) = &self.scrub {
            scrub.stop();
        }
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

/// The writer's request for a checked `record`, and where its answer arrives.
fn request(
    session: SessionId,
    record: &JournalRecord,
) -> (Request, oneshot::Receiver<writer::Reply>) {
    let mut body = Vec::new();
    body::encode(record, &mut body);
    let (reply, rx) = oneshot::channel();
    let request = Request {
        session: session.as_uuid().as_u128(),
        key: record.key().as_u128(),
        body,
        ends: matches!(record, JournalRecord::Event(SessionEvent::SessionEnded(_))),
        reply,
    };
    (request, rx)
}

/// How many problems a refused verify at open names.
const DEFAULT_OPEN_PROBLEMS: usize = 8;

/// What the label of a journal opened on a custom backend is.
const BACKEND_LABEL: &str = "<custom storage backend>";

impl RedbJournal {
    /// Opens the journal at `path`, creating the file if it is missing. After a crash,
    /// redb's recovery runs first. What else opening reads is
    /// [`JournalOptions::verify_on_open`]'s choice: by default
    /// ([`VerifyOnOpen::Background`](options::VerifyOnOpen::Background)) only the
    /// metadata, never the log, and a background scrub then checks the journal while it
    /// runs (see [`scrub_status`](Self::scrub_status)); with
    /// [`VerifyOnOpen::Pages`](options::VerifyOnOpen::Pages) redb checks every page
    /// against its checksum first. A format-1 file is upgraded in place
    /// first (`docs/design.md`), after a read-only check of everything the upgrade will
    /// move: a damaged format-1 file is refused before anything is written.
    ///
    /// # Errors
    ///
    /// [`OpenError::AlreadyOpen`] if another handle has the file open;
    /// [`OpenError::NotAJournal`] for a file that is not a journal (an empty file
    /// included); [`OpenError::Damaged`] for a journal cut short or failing its checks;
    /// [`OpenError::UpgradeRefused`] for a format-1 journal whose check before the
    /// upgrade found damage (the file is left as it was, naming each damaged frame);
    /// [`OpenError::UnsupportedFormatVersion`] / [`OpenError::UnsupportedContent`] for a
    /// journal of a later build; [`OpenError::Storage`] for I/O and storage failures.
    pub fn open(path: impl AsRef<Path>, options: JournalOptions) -> Result<Self, OpenError> {
        let path = path.as_ref().to_path_buf();
        let db = open::open_file(&path, &options)?;
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
        let db = open::contain(&path, || {
            let db = open::builder(&options)
                .create_with_backend(backend)
                .map_err(|e| open::map_database_error(&path, e))?;
            open::prepare(&db, &path)?;
            Ok(db)
        })?;
        Self::start(db, path, options)
    }

    fn start(db: Database, path: PathBuf, options: JournalOptions) -> Result<Self, OpenError> {
        if options.verify_on_open == options::VerifyOnOpen::Full {
            let report = open::contain(&path, || {
                verify::logical(&db, DEFAULT_OPEN_PROBLEMS).map_err(|e| OpenError::Damaged {
                    path: path.clone(),
                    reason: format!("the verify at open could not read it: {e}"),
                })
            })?;
            if !report.is_clean() {
                return Err(OpenError::Damaged {
                    path,
                    reason: format!("the verify at open found: {report}"),
                });
            }
        }
        let db = Arc::new(db);
        let queue = Arc::new(Queue::new());
        let census = options
            .confirm_misses
            .then(|| Arc::new(census::Census::default()));
        let writer = {
            let (db, queue, options, census) = (
                Arc::clone(&db),
                Arc::clone(&queue),
                options.clone(),
                census.clone(),
            );
            std::thread::Builder::new()
                .name("notify-journal-writer".into())
                .spawn(move || writer::run(db, queue, options, census))
                .map_err(|e| OpenError::Storage {
                    path: path.clone(),
                    source: StorageError::new("spawn the writer thread", e),
                })?
        };
        let scrub = match options.verify_on_open {
            options::VerifyOnOpen::Background => match scrub::Scrub::start(
                Arc::clone(&db),
                Arc::clone(&queue),
                options.scrub_interval,
                options.scrub_pace,
            ) {
                Ok(scrub) => Some(scrub),
                Err(e) => {
                    // The writer drains and exits once closed: wait for it, so its hold
                    // on the database ends before the open fails.
                    queue.close();
                    let _ = writer.join();
                    return Err(OpenError::Storage {
                        path: path.clone(),
                        source: StorageError::new("spawn the scrub thread", e),
                    });
                }
            },
            _ => None,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                path,
                db: RwLock::new(Some(db)),
                queue,
                writer: Mutex::new(Some(writer)),
                max_record_bytes: options.max_record_bytes,
                census,
                scrub,
            }),
        })
    }

    /// The file this journal was opened from.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Whether an earlier commit failure, or damage the background scrub found, has
    /// poisoned this handle.
    #[must_use]
    pub fn is_poisoned(&self) -> bool {
        self.inner.queue.is_poisoned()
    }

    /// What the background scrub ([`VerifyOnOpen::Background`], the default) is doing
    /// and has found: [`ScrubState::Damaged`](scrub::ScrubState::Damaged) once it found
    /// the file damaged (appends then fail with [`AppendError::Damaged`]);
    /// [`ScrubState::Off`](scrub::ScrubState::Off) when no scrub runs.
    ///
    /// [`VerifyOnOpen::Background`]: options::VerifyOnOpen::Background
    #[must_use]
    pub fn scrub_status(&self) -> scrub::ScrubStatus {
        match &self.inner.scrub {
            Some(s) => s.status(),
            None => scrub::ScrubStatus {
                state: scrub::ScrubState::Off,
                clean_passes: 0,
                entries: 0,
            },
        }
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
        let answer = async move {
            let rx = submitted?;
            match rx.await {
                Ok(reply) => reply,
                // The writer is gone without answering: it has stopped.
                Err(_) => Err(AppendError::Closed),
            }
        };
        crate::metrics::counted(crate::metrics::REDB, answer).instrument(span)
    }

    fn submit(
        &self,
        session: SessionId,
        record: &JournalRecord,
    ) -> Result<oneshot::Receiver<writer::Reply>, AppendError> {
        check_append(session, record, self.inner.max_record_bytes)?;
        let (request, rx) = request(session, record);
        self.inner.queue.submit(Queued::One(request))?;
        Ok(rx)
    }

    /// [`JournalBackend::append_all`]: appends `records` to `session`'s log as one
    /// atomic group, resolved inside the writer's batch like any append (other
    /// appenders' appends in the same batch are unaffected by its fate); resolves once
    /// that batch has committed durably.
    ///
    /// The group is queued when this is called, not when the future is first polled.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel the write: the group may or may not be
    /// journaled, whole or not at all. Retrying the identical group is safe.
    ///
    /// # Errors
    ///
    /// See [`JournalBackend::append_all`].
    pub fn append_all(
        &self,
        session: SessionId,
        records: Vec<JournalRecord>,
        if_head: Option<u64>,
    ) -> impl Future<Output = Result<Vec<AppendOutcome>, AppendError>> + Send + 'static {
        let span = tracing::debug_span!("journal.append_all", %session, records = records.len());
        let submitted = span.in_scope(|| self.submit_group(session, &records, if_head));
        let answer = async move {
            let receivers = submitted?;
            let mut outcomes = Vec::with_capacity(receivers.len());
            let mut refusal = None;
            for rx in receivers {
                // Every request of a group is answered alike when the group is refused.
                match rx.await {
                    Ok(Ok(outcome)) => outcomes.push(outcome),
                    Ok(Err(e)) => {
                        refusal.get_or_insert(e);
                    }
                    // The writer is gone without answering: it has stopped.
                    Err(_) => {
                        refusal.get_or_insert(AppendError::Closed);
                    }
                }
            }
            let result = match refusal {
                Some(e) => Err(e),
                None => Ok(outcomes),
            };
            crate::metrics::record_group(crate::metrics::REDB, &result);
            result
        };
        answer.instrument(span)
    }

    fn submit_group(
        &self,
        session: SessionId,
        records: &[JournalRecord],
        if_head: Option<u64>,
    ) -> Result<Vec<oneshot::Receiver<writer::Reply>>, AppendError> {
        check_group(session, records, self.inner.max_record_bytes)?;
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let (requests, receivers) = records.iter().map(|r| request(session, r)).unzip();
        self.inner.queue.submit(Queued::Group(Group {
            session: session.as_uuid().as_u128(),
            requests,
            if_head,
        }))?;
        Ok(receivers)
    }

    /// Runs `f` on a consistent snapshot of the journal, on the calling thread. A panic
    /// of the storage engine (a damaged page it trusted) is contained and answered as
    /// [`JournalError::Storage`].
    fn snapshot<T>(
        &self,
        what: &'static str,
        f: impl FnOnce(&Snapshot) -> Result<T, JournalError>,
    ) -> Result<T, JournalError> {
        read::in_snapshot(&*self.inner.db()?, what, f)
    }

    /// [`JournalRead::lookup`], on the calling thread (a short blocking read). A hit
    /// is confirmed against its frame, and a miss against the session's log (the key
    /// census of `docs/design.md`: the first miss of a session after open reads its log
    /// once).
    ///
    /// # Errors
    ///
    /// [`JournalError::Corrupt`] when the index entry names a damaged, missing or other
    /// frame, or the index misses a key the session's log holds;
    /// [`JournalError::Closed`] or [`JournalError::Storage`].
    pub fn lookup_blocking(
        &self,
        session: SessionId,
        key: Uuid,
    ) -> Result<Option<u64>, JournalError> {
        let census = self.inner.census.as_deref();
        // Read before the snapshot begins (see `census.rs`).
        let generation = census.map_or(0, census::Census::generation);
        self.snapshot("the index", |s| {
            s.lookup(
                session.as_uuid().as_u128(),
                key.as_u128(),
                census.map(|c| (c, generation)),
            )
        })
    }

    /// [`JournalRead::replay`], on the calling thread. Every frame is checked
    /// (checksum, identity, decoding) and the page is contiguous from `from_seq`, ending
    /// at the session's head when shorter than `limit`.
    ///
    /// # Errors
    ///
    /// [`JournalError::Corrupt`] naming the first damaged or missing frame, or
    /// [`JournalError::Closed`] / [`JournalError::Storage`].
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
    /// [`JournalError::Closed`] or [`JournalError::Storage`].
    pub fn last_seq_blocking(&self, session: SessionId) -> Result<u64, JournalError> {
        self.snapshot("a session's head", |s| {
            s.last_seq(session.as_uuid().as_u128())
        })
    }

    /// [`JournalRead::session_state`], on the calling thread: one point read of the
    /// session's state row.
    ///
    /// # Errors
    ///
    /// [`JournalError::Corrupt`] when the row is damaged; [`JournalError::Closed`] or
    /// [`JournalError::Storage`].
    pub fn session_state_blocking(&self, session: SessionId) -> Result<SessionState, JournalError> {
        self.snapshot("a session's state", |s| {
            s.state(session.as_uuid().as_u128())
        })
    }

    /// [`JournalBackend::purge_step`]: one bounded step of a purge, run by the writer
    /// thread as its own write transaction between two append batches (so an append
    /// waits for at most one step). The step is queued when this is called.
    ///
    /// A frame, position or index entry of the session found damaged stops the step
    /// (nothing of it is written) with [`JournalError::Corrupt`]: the purge does not
    /// remove what it cannot account for. Since an unfinished purge is finished first,
    /// later steps answer the same until the file is repaired; appends go on.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel the step: it commits or not, and the next
    /// step continues from whatever committed.
    ///
    /// # Errors
    ///
    /// [`JournalError::Corrupt`] for damage; [`JournalError::Storage`] for a storage
    /// failure (the handle is then poisoned, as after a failed append batch);
    /// [`JournalError::Closed`].
    pub fn purge_step(
        &self,
        ended_before: Timestamp,
        max_frames: usize,
    ) -> impl Future<Output = Result<PurgeStep, JournalError>> + Send + 'static {
        let (reply, rx) = oneshot::channel();
        self.inner.queue.submit_chore(Chore::Purge {
            ended_before,
            max_frames,
            reply,
        });
        async move { rx.await.unwrap_or(Err(JournalError::Closed)) }
    }

    /// [`JournalBackend::drop_tombstones`]: drops up to `limit` tombstones of finished
    /// purges that began before `purged_before`, oldest first, answering how many it
    /// dropped. The drop runs in steps of at most [`JournalOptions::drop_step`]
    /// tombstones (default 1,024), each its own write transaction run by the writer
    /// thread between two append batches, so an append waits for at most one step
    /// however large `limit` is. The drop is queued when this is called; it ends at the
    /// first step that finds fewer than a step's worth due, or at `limit`, or when the
    /// journal closes (then the answer is what the steps before dropped).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel the drop: it runs on step by step, each
    /// step committing whole or not at all.
    ///
    /// # Errors
    ///
    /// As [`purge_step`](Self::purge_step). An error in a later step leaves the
    /// earlier steps' drops committed (those sessions are unknown again); the
    /// tombstones still due are dropped by the next call.
    pub fn drop_tombstones(
        &self,
        purged_before: Timestamp,
        limit: usize,
    ) -> impl Future<Output = Result<u64, JournalError>> + Send + 'static {
        let (reply, rx) = oneshot::channel();
        self.inner.queue.submit_chore(Chore::DropTombstones {
            purged_before,
            limit,
            dropped: 0,
            reply,
        });
        async move { rx.await.unwrap_or(Err(JournalError::Closed)) }
    }

    /// Writes the states of sessions moved here from another journal (`notify
    /// import`), so that they answer as they did there: an ended session keeps its
    /// original end time (and so its place in the retention order), a purged one comes
    /// back as its tombstone (end time, purge time, last seq, frame count), refusing a
    /// late append with [`AppendError::SessionEnded`] `{ purged: true }`.
    ///
    /// For [`SessionState::Ended`], the session's frames must be imported first, its
    /// end marker last (which ends it, at the time of that append): the row is then
    /// rewritten with the given end time. For [`SessionState::Purged`], the session must
    /// be unknown to the journal (no frame, no state). A state the journal already holds
    /// exactly is left as it is, so an interrupted import can be run again.
    ///
    /// All the states are written in one write transaction, run by the writer thread
    /// between two append batches, or none is. Appends still queued are not waited for:
    /// await them first.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel the import: it commits or not.
    ///
    /// # Errors
    ///
    /// [`ImportStateError::Invalid`] for a state no import can write;
    /// [`ImportStateError::Conflict`] when the journal holds a session otherwise (not
    /// ended at that last seq, or known at all for a tombstone);
    /// [`ImportStateError::Journal`] for damage found ([`JournalError::Corrupt`]), a
    /// storage failure (the handle is then poisoned, as after a failed batch) or a
    /// closed journal. Nothing is written on any error.
    pub fn import_states(
        &self,
        states: Vec<(SessionId, SessionState)>,
    ) -> impl Future<Output = Result<(), ImportStateError>> + Send + 'static {
        let checked = states
            .iter()
            .try_for_each(|(session, state)| check_importable(*session, state));
        let (reply, rx) = oneshot::channel();
        if checked.is_ok() {
            self.inner
                .queue
                .submit_chore(Chore::ImportStates { states, reply });
        }
        async move {
            checked?;
            rx.await.unwrap_or(Err(JournalError::Closed.into()))
        }
    }

    /// [`JournalRead::sessions`], on the calling thread.
    ///
    /// # Errors
    ///
    /// [`JournalError::Closed`] or [`JournalError::Storage`].
    pub fn sessions_blocking(&self) -> Result<Vec<SessionId>, JournalError> {
        self.snapshot("the sessions", Snapshot::sessions)
    }

    /// [`JournalRead::sessions_after`], on the calling thread: one seek per session
    /// returned.
    ///
    /// # Errors
    ///
    /// [`JournalError::Closed`] or [`JournalError::Storage`].
    pub fn sessions_after_blocking(
        &self,
        after: Option<SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionId>, JournalError> {
        self.snapshot("the sessions", |s| s.sessions_after(after, limit))
    }

    /// The deep integrity check of an open journal, in one consistent snapshot (appends
    /// go on meanwhile): every frame's checksum and decoding, every session's log
    /// contiguous from 1 to its head, index entries and frames in one-to-one
    /// correspondence, no key with two frames, no frame outside a session's log. Keeps
    /// the first `max_problems` problems and counts them all.
    ///
    /// redb's own page check needs the file to itself, so it is not run here
    /// ([`VerifyReport::engine`] says so); [`verify_file`](Self::verify_file) runs both
    /// on a journal no process has open.
    ///
    /// # Errors
    ///
    /// [`JournalError::Closed`] or [`JournalError::Storage`] when the check itself
    /// cannot read; damage is reported in the report, not as an error.
    pub fn verify_blocking(&self, max_problems: usize) -> Result<VerifyReport, JournalError> {
        let db = self.inner.db()?;
        verify::contained(|| verify::logical(db.as_ref(), max_problems))
    }

    /// The deep integrity check of [`verify_blocking`](Self::verify_blocking) plus
    /// redb's own check of every page's checksum, on the journal at `path`, which no
    /// process may have open. A file redb cannot open at all is reported as an engine
    /// problem.
    ///
    /// **It never writes to the file**: its bytes (and modification time) are as they
    /// were, whatever it finds. redb's page check runs as its integrity check at open,
    /// which opens the file as a writer does (its lock: a running writer makes this
    /// [`OpenError::AlreadyOpen`]), recovers a file not closed cleanly, rebuilds the
    /// allocator state and commits; every one of those writes goes to memory (a private
    /// overlay of the file, as large as what redb writes, not as the file), never to
    /// the file. A format-1 file (or one whose upgrade is unfinished) is checked as
    /// [`open`](Self::open)'s upgrade would check it (every frame decodes to its
    /// canonical bytes, continues its session's log and is indexed; heads and index
    /// entries agree), not upgraded. An empty redb database is not a journal.
    ///
    /// ```
    /// use notify_journal::{JournalOptions, RedbJournal};
    ///
    /// # let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("journal.redb");
    /// RedbJournal::open(&path, JournalOptions::default())?.close();
    /// let before = std::fs::read(&path)?;
    /// assert!(RedbJournal::verify_file(&path, 10)?.is_clean());
    /// assert_eq!(std::fs::read(&path)?, before);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`OpenError::Missing`] when there is no file at `path`;
    /// [`OpenError::AlreadyOpen`], [`OpenError::NotAJournal`] and the other refusals of
    /// [`open`](Self::open) for a file that is not a journal of a known format.
    pub fn verify_file(
        path: impl AsRef<Path>,
        max_problems: usize,
    ) -> Result<VerifyReport, OpenError> {
        verify::file(path.as_ref(), max_problems)
    }

    /// Offline compaction of the journal at `path`, which no process may have open:
    /// redb's `compact` moves pages toward the start of the file and truncates the
    /// freed end. A running journal reuses the pages purges free, so its file stops
    /// growing under a steady state; this gives the space back to the file system.
    /// Opening checks the file as [`open`](Self::open) does with
    /// [`VerifyOnOpen::Pages`](options::VerifyOnOpen::Pages) (redb's page check: a
    /// compaction moves every page, so it trusts none unchecked; a format-1 file is checked and upgraded first, a damaged one refused with
    /// [`OpenError::UpgradeRefused`] and left as it was).
    ///
    /// redb compacts in its own transactions (two-phase commits): a crash during it
    /// leaves the journal as it was or compacted, never damaged.
    ///
    /// # Errors
    ///
    /// The refusals of [`open`](Self::open); [`OpenError::Storage`] when the compaction
    /// itself fails (nothing is lost: each of its transactions commits or not).
    pub fn compact_file(path: impl AsRef<Path>) -> Result<CompactReport, OpenError> {
        compact::file(path.as_ref())
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

    fn append_all(
        &self,
        session: SessionId,
        records: Vec<JournalRecord>,
        if_head: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<AppendOutcome>, AppendError>> {
        Box::pin(RedbJournal::append_all(self, session, records, if_head))
    }

    fn purge_step(
        &self,
        ended_before: Timestamp,
        max_frames: usize,
    ) -> BoxFuture<'_, Result<PurgeStep, JournalError>> {
        Box::pin(RedbJournal::purge_step(self, ended_before, max_frames))
    }

    fn drop_tombstones(
        &self,
        purged_before: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<u64, JournalError>> {
        Box::pin(RedbJournal::drop_tombstones(self, purged_before, limit))
    }
}

impl JournalRead for RedbJournal {
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
    ) -> BoxFuture<'_, Result<Vec<SeqRecord>, JournalError>> {
        self.read(move |j| j.replay_blocking(session, from_seq, limit))
    }

    fn last_seq(&self, session: SessionId) -> BoxFuture<'_, Result<u64, JournalError>> {
        self.read(move |j| j.last_seq_blocking(session))
    }

    fn sessions(&self) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>> {
        self.read(|j| j.sessions_blocking())
    }

    fn sessions_after(
        &self,
        after: Option<SessionId>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>> {
        self.read(move |j| j.sessions_after_blocking(after, limit))
    }

    fn session_state(
        &self,
        session: SessionId,
    ) -> BoxFuture<'_, Result<SessionState, JournalError>> {
        self.read(move |j| j.session_state_blocking(session))
    }
}

impl RedbJournal {
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
        self.read(move |j| j.verify_blocking(max_problems))
    }
}
