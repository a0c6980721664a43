//! [`RedbJournal`], here: the handle, what its clones share, closing it. Its methods,
//! by what they do: opening it (`open.rs`), its reads and deep check (`reads.rs`), its
//! writes and its [`JournalBackend`](crate::JournalBackend) impl (`writes.rs`), the
//! application's tables (`app_tables.rs`: `append_with`, `read_app_tables`) and its
//! leases (`lease.rs`: the file lock is the lease).

mod app_tables;
mod lease;
mod open;
mod reads;
mod writes;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;

use redb::Database;

use crate::error::JournalError;
use crate::redb::census;
use crate::redb::check::scrub;
use crate::redb::writer::Queue;
use crate::redb::writer::lead::Lead;
use crate::stats::CommitStats;

/// A durable, group-committed journal of many sessions in one redb file.
///
/// `RedbJournal` is a cheap [`Clone`] handle: clones share one database and one writer
/// thread. The writer stops, and the file is released, on [`close`](Self::close) or when
/// the last clone is dropped (both wait for the commit in flight).
///
/// After a failed commit the journal is poisoned: every later append fails with
/// [`AppendError::Poisoned`](crate::AppendError::Poisoned) (after damage found, by the background scrub or by the writer, with
/// [`AppendError::Damaged`](crate::AppendError::Damaged); see [`scrub_status`](Self::scrub_status)). Close it and open the file again (redb then runs its
/// crash recovery); it never writes through a handle that has failed.
///
/// ```
/// use notify_journal::{JournalBackend, RedbOptions, RedbJournal};
/// use notify_types::*;
///
/// # let dir = tempfile::tempdir()?;
/// let journal = RedbJournal::open(dir.path().join("journal.redb"), RedbOptions::default())?;
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
    /// Set as [`close`](RedbJournal::close) begins: long reads (the deep verify) stop.
    closing: std::sync::atomic::AtomicBool,
    queue: Arc<Queue>,
    /// The writer's state, for appenders that lead (`writer/lead.rs`).
    lead: Arc<Lead>,
    writer: Mutex<Option<JoinHandle<()>>>,
    max_record_bytes: usize,
    /// Confirms index misses against the sessions' logs (`census/`); shared with the
    /// writer. `None` when [`RedbOptions::confirm_misses`] is off.
    census: Option<Arc<census::Census>>,
    /// The background scrub (`check/scrub.rs`), with [`RedbVerifyOnOpen::Background`].
    ///
    /// [`RedbVerifyOnOpen::Background`]: crate::RedbVerifyOnOpen::Background
    scrub: Option<scrub::Scrub>,
    /// This handle's leases (`journal/lease.rs`: the file lock is the lease).
    leases: lease::RedbLeases,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.close();
    }
}

impl Inner {
    fn close(&self) {
        self.closing
            .store(true, std::sync::atomic::Ordering::Release);
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
            // A writer that panicked has already answered its queue (see writer/lead.rs).
            let _ = handle.join();
        }
        self.db
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }

    /// Whether [`close`](RedbJournal::close) has begun (not a writer stopped by a
    /// panic: the file is still open and readable then).
    fn is_closing(&self) -> bool {
        self.closing.load(std::sync::atomic::Ordering::Acquire)
    }

    fn db(&self) -> Result<Arc<Database>, JournalError> {
        self.db
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or(JournalError::Closed)
    }
}

impl RedbJournal {
    /// The file this journal was opened from.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Whether an earlier commit failure, or damage found after open (by the background
    /// scrub or by the writer), has poisoned this handle.
    #[must_use]
    pub fn is_poisoned(&self) -> bool {
        self.inner.queue.is_poisoned()
    }

    /// What the background scrub ([`RedbVerifyOnOpen::Background`], the default) is doing
    /// and has found: [`ScrubState::Damaged`](scrub::ScrubState::Damaged) once it found
    /// the file damaged (appends then fail with [`AppendError::Damaged`](crate::AppendError::Damaged));
    /// [`ScrubState::Off`](scrub::ScrubState::Off) when no scrub runs.
    ///
    /// [`RedbVerifyOnOpen::Background`]: crate::RedbVerifyOnOpen::Background
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
}

#[cfg(test)]
impl RedbJournal {
    /// The writer's queue, for the writer's own tests (`writer/lead.rs`).
    pub(crate) fn queue_for_tests(&self) -> &Queue {
        &self.inner.queue
    }

    /// Who writes the next batch, for the writer's own tests (`writer/lead.rs`).
    pub(crate) fn lead_for_tests(&self) -> &Lead {
        &self.inner.lead
    }
}
