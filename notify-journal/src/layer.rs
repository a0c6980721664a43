//! Wrappers around a journal that change a method or two and forward the rest: a test
//! double injecting a fault, a tap counting reads, `Arc<J>` itself.
//!
//! A wrapper implements [`JournalReadLayer`] (naming the journal it wraps, and
//! overriding any read) and, over a full backend, [`JournalLayer`] (overriding any
//! write); every method it does not override forwards to the wrapped journal. The
//! blanket impls here then make it a [`JournalRead`] and a [`JournalBackend`]. A
//! method added to the traits is added here with its forwarding default, and no
//! wrapper changes.
//!
//! Import these traits only where a layer is implemented (or name them by path): on a
//! layer type, their methods and the journal traits' share names.
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//!
//! use notify_journal::layer::{JournalLayer, JournalReadLayer};
//! use notify_journal::{BoxFuture, JournalBackend, JournalError, RedbJournal};
//! use notify_types::SessionId;
//!
//! /// Counts `last_seq` calls; everything else goes straight to the journal.
//! struct Counted<J> {
//!     inner: J,
//!     heads: AtomicU64,
//! }
//!
//! impl<J: JournalBackend> JournalReadLayer for Counted<J> {
//!     type Inner = J;
//!     fn inner(&self) -> &J {
//!         &self.inner
//!     }
//!     fn last_seq(&self, session: SessionId) -> BoxFuture<'_, Result<u64, JournalError>> {
//!         self.heads.fetch_add(1, Ordering::Relaxed);
//!         self.inner.last_seq(session)
//!     }
//! }
//! impl<J: JournalBackend> JournalLayer for Counted<J> {}
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! let journal = RedbJournal::open(dir.path().join("notify.redb"), Default::default())?;
//! let counted = Counted { inner: journal, heads: AtomicU64::new(0) };
//! let backend: &dyn JournalBackend = &counted; // a backend like any other
//! assert_eq!(backend.last_seq(SessionId::new()).await?, 0);
//! assert_eq!(backend.sessions().await?, vec![]); // forwarded
//! assert_eq!(counted.heads.load(Ordering::Relaxed), 1);
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;

use notify_types::{JournalRecord, SessionId, Timestamp, Uuid};

use crate::backend::{AppendOutcome, BoxFuture, JournalBackend, JournalRead, SeqRecord};
use crate::error::{AppendError, JournalError};
use crate::retention::{PurgeStep, SessionState};

/// A wrapper around a [`JournalRead`]: every read it does not override is forwarded to
/// [`inner`](Self::inner). Implementing it makes the wrapper a [`JournalRead`]; see the
/// [module](self) for an example.
pub trait JournalReadLayer: Send + Sync {
    /// The journal this layer wraps.
    type Inner: JournalRead + ?Sized;

    /// The wrapped journal: what every method not overridden forwards to.
    fn inner(&self) -> &Self::Inner;

    /// [`JournalRead::lookup`]; forwards by default.
    fn lookup(
        &self,
        session: SessionId,
        key: Uuid,
    ) -> BoxFuture<'_, Result<Option<u64>, JournalError>> {
        self.inner().lookup(session, key)
    }

    /// [`JournalRead::replay`]; forwards by default.
    fn replay(
        &self,
        session: SessionId,
        from_seq: u64,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SeqRecord>, JournalError>> {
        self.inner().replay(session, from_seq, limit)
    }

    /// [`JournalRead::last_seq`]; forwards by default.
    fn last_seq(&self, session: SessionId) -> BoxFuture<'_, Result<u64, JournalError>> {
        self.inner().last_seq(session)
    }

    /// [`JournalRead::sessions`]; forwards by default.
    fn sessions(&self) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>> {
        self.inner().sessions()
    }

    /// [`JournalRead::sessions_after`]; forwards by default.
    fn sessions_after(
        &self,
        after: Option<SessionId>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>> {
        self.inner().sessions_after(after, limit)
    }

    /// [`JournalRead::session_state`]; forwards by default.
    fn session_state(
        &self,
        session: SessionId,
    ) -> BoxFuture<'_, Result<SessionState, JournalError>> {
        self.inner().session_state(session)
    }
}

/// A wrapper around a [`JournalBackend`]: every write it does not override is forwarded
/// to [`inner`](JournalReadLayer::inner) (its reads, as a [`JournalReadLayer`]).
/// Implementing both makes the wrapper a [`JournalBackend`]; see the [module](self).
pub trait JournalLayer: JournalReadLayer<Inner: JournalBackend> {
    /// [`JournalBackend::append`]; forwards by default.
    fn append(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> BoxFuture<'_, Result<AppendOutcome, AppendError>> {
        self.inner().append(session, record)
    }

    /// [`JournalBackend::append_all`]; forwards by default.
    fn append_all(
        &self,
        session: SessionId,
        records: Vec<JournalRecord>,
        if_head: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<AppendOutcome>, AppendError>> {
        self.inner().append_all(session, records, if_head)
    }

    /// [`JournalBackend::purge_step`]; forwards by default.
    fn purge_step(
        &self,
        ended_before: Timestamp,
        max_frames: usize,
    ) -> BoxFuture<'_, Result<PurgeStep, JournalError>> {
        self.inner().purge_step(ended_before, max_frames)
    }

    /// [`JournalBackend::drop_tombstones`]; forwards by default.
    fn drop_tombstones(
        &self,
        purged_before: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<u64, JournalError>> {
        self.inner().drop_tombstones(purged_before, limit)
    }
}

impl<L: JournalReadLayer> JournalRead for L {
    fn lookup(
        &self,
        session: SessionId,
        key: Uuid,
    ) -> BoxFuture<'_, Result<Option<u64>, JournalError>> {
        JournalReadLayer::lookup(self, session, key)
    }
    fn replay(
        &self,
        session: SessionId,
        from_seq: u64,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SeqRecord>, JournalError>> {
        JournalReadLayer::replay(self, session, from_seq, limit)
    }
    fn last_seq(&self, session: SessionId) -> BoxFuture<'_, Result<u64, JournalError>> {
        JournalReadLayer::last_seq(self, session)
    }
    fn sessions(&self) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>> {
        JournalReadLayer::sessions(self)
    }
    fn sessions_after(
        &self,
        after: Option<SessionId>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>> {
        JournalReadLayer::sessions_after(self, after, limit)
    }
    fn session_state(
        &self,
        session: SessionId,
    ) -> BoxFuture<'_, Result<SessionState, JournalError>> {
        JournalReadLayer::session_state(self, session)
    }
}

impl<L: JournalLayer> JournalBackend for L {
    fn append(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> BoxFuture<'_, Result<AppendOutcome, AppendError>> {
        JournalLayer::append(self, session, record)
    }
    fn append_all(
        &self,
        session: SessionId,
        records: Vec<JournalRecord>,
        if_head: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<AppendOutcome>, AppendError>> {
        JournalLayer::append_all(self, session, records, if_head)
    }
    fn purge_step(
        &self,
        ended_before: Timestamp,
        max_frames: usize,
    ) -> BoxFuture<'_, Result<PurgeStep, JournalError>> {
        JournalLayer::purge_step(self, ended_before, max_frames)
    }
    fn drop_tombstones(
        &self,
        purged_before: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<u64, JournalError>> {
        JournalLayer::drop_tombstones(self, purged_before, limit)
    }
}

/// A shared journal is the journal.
impl<T: JournalRead + ?Sized> JournalReadLayer for Arc<T> {
    type Inner = T;
    fn inner(&self) -> &T {
        self
    }
}

impl<T: JournalBackend + ?Sized> JournalLayer for Arc<T> {}
