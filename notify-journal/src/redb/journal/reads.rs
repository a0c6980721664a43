//! [`RedbJournal`]'s reads (the blocking family of `snapshot/database.rs` and its async hop), its
//! deep check, and the offline verify and compaction of a file.

use std::future::Future;
use std::path::Path;

use notify_types::{SessionId, Uuid};
use redb::Database;

use super::RedbJournal;
use crate::backend::{BoxFuture, SeqRecord};
use crate::error::{JournalError, OpenError};
use crate::redb::check::verify;
use crate::redb::file::compact;
use crate::redb::file::compact::CompactReport;
use crate::redb::snapshot::blocking_pool;
use crate::redb::snapshot::database::Reads;
use crate::retention::SessionState;
use crate::verify_report::VerifyReport;

impl RedbJournal {
    /// Runs `f` on the journal's reads (`snapshot/database.rs`), on the calling thread.
    fn reads<T>(
        &self,
        f: impl FnOnce(&Reads<'_, Database>) -> Result<T, JournalError>,
    ) -> Result<T, JournalError> {
        let db = self.inner.db()?;
        f(&Reads {
            db: &*db,
            census: self.inner.census.as_deref(),
        })
    }

    /// [`JournalRead::lookup`](crate::JournalRead::lookup), on the calling thread (a short blocking read). A hit
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
        self.reads(|r| r.lookup(session, key))
    }

    /// [`JournalRead::replay`](crate::JournalRead::replay), on the calling thread. Every frame is checked
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
        self.reads(|r| r.replay(session, from_seq, limit))
    }

    /// [`JournalRead::last_seq`](crate::JournalRead::last_seq), on the calling thread.
    ///
    /// # Errors
    ///
    /// [`JournalError::Closed`] or [`JournalError::Storage`].
    pub fn last_seq_blocking(&self, session: SessionId) -> Result<u64, JournalError> {
        self.reads(|r| r.last_seq(session))
    }

    /// [`JournalRead::session_state`](crate::JournalRead::session_state), on the calling thread: one point read of the
    /// session's state row.
    ///
    /// # Errors
    ///
    /// [`JournalError::Corrupt`] when the row is damaged; [`JournalError::Closed`] or
    /// [`JournalError::Storage`].
    pub fn session_state_blocking(&self, session: SessionId) -> Result<SessionState, JournalError> {
        self.reads(|r| r.session_state(session))
    }

    /// [`JournalRead::sessions`](crate::JournalRead::sessions), on the calling thread.
    ///
    /// # Errors
    ///
    /// [`JournalError::Closed`] or [`JournalError::Storage`].
    pub fn sessions_blocking(&self) -> Result<Vec<SessionId>, JournalError> {
        self.reads(|r| r.sessions())
    }

    /// [`JournalRead::sessions_after`](crate::JournalRead::sessions_after), on the calling thread: one seek per session
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
        self.reads(|r| r.sessions_after(after, limit))
    }

    /// The format version and the lengths of the log and the index (no scan), as
    /// [`RedbReader::stats_blocking`](crate::RedbReader::stats_blocking) answers them.
    ///
    /// # Errors
    ///
    /// [`JournalError::Closed`] or [`JournalError::Storage`].
    pub fn stats_blocking(&self) -> Result<crate::RedbStats, JournalError> {
        self.reads(|r| r.stats())
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
    /// A [`close`](Self::close) (on any clone) stops a check under way: it answers
    /// [`JournalError::Closed`], and the file is released without waiting for it.
    ///
    /// # Errors
    ///
    /// [`JournalError::Closed`] (closed before or during the check) or
    /// [`JournalError::Storage`] when the check itself cannot read; damage is
    /// reported in the report, not as an error.
    pub fn verify_blocking(&self, max_problems: usize) -> Result<VerifyReport, JournalError> {
        let inner = &self.inner;
        verify::database(&*inner.db()?, max_problems, &mut || !inner.is_closing())
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
    /// use notify_journal::{RedbOptions, RedbJournal};
    ///
    /// # let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("journal.redb");
    /// RedbJournal::open(&path, RedbOptions::default())?.close();
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
    /// [`RedbVerifyOnOpen::Pages`](crate::redb::options::RedbVerifyOnOpen::Pages) (redb's page check: a
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
        blocking_pool::on_blocking_pool(self, f)
    }
}

blocking_pool::journal_read_by_blocking!(RedbJournal);

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
