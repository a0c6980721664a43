//! The journal a hosted session appends through: the host's journal, refusing every
//! append unless the placement it was built for holds the session's lease right now.
//!
//! **Architecture Invariant:** every [`Session`](crate::Session) a host builds appends
//! through a [`Fence`] of its own placement (one open of the session on this host),
//! which refuses (`AppendError::Fenced`, nothing written) any append for another
//! session, or once that placement is not in the host's lease table (released, lost,
//! stopped, or replaced by a later placement of the same session) or is past its
//! renewal deadline. The same check tells the session's consumers to receive nothing
//! more. The engine's own check (PostgreSQL's in-transaction epoch check, the memory
//! journal's fence) stands behind it for an append already past the fence when the
//! lease is lost.

use std::sync::Arc;
use tokio::time::Instant;

use notify_journal::layer::{JournalLayer, JournalReadLayer};
use notify_journal::{AppendError, AppendOutcome, BoxFuture, JournalBackend};
use notify_types::{JournalRecord, SessionId};

use super::table::LeaseTable;
use crate::shared::Placement;

/// One placement of a session on a host: the session, its generation, and the
/// host's lease table that says whether it is still held.
#[derive(Debug)]
pub(crate) struct HostPlacement {
    pub(crate) session: SessionId,
    pub(crate) generation: u64,
    pub(crate) table: Arc<LeaseTable>,
}

impl Placement for HostPlacement {
    fn serving(&self) -> bool {
        self.table
            .may_append(self.session, self.generation, Instant::now())
    }
}

/// A host's journal behind one placement's lease.
pub(crate) struct Fence<J: ?Sized> {
    journal: Arc<J>,
    placement: Arc<HostPlacement>,
}

impl<J: ?Sized> Fence<J> {
    pub(crate) fn new(journal: Arc<J>, placement: Arc<HostPlacement>) -> Self {
        Self { journal, placement }
    }

    fn check(&self, session: SessionId) -> Result<(), AppendError> {
        if session == self.placement.session && self.placement.serving() {
            Ok(())
        } else {
            Err(AppendError::Fenced { session })
        }
    }
}

impl<J: JournalBackend + ?Sized> JournalReadLayer for Fence<J> {
    type Inner = J;
    fn inner(&self) -> &J {
        &self.journal
    }
}

impl<J: JournalBackend + ?Sized> JournalLayer for Fence<J> {
    fn append(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> BoxFuture<'_, Result<AppendOutcome, AppendError>> {
        if let Err(e) = self.check(session) {
            return Box::pin(async move { Err(e) });
        }
        JournalBackend::append(&*self.journal, session, record)
    }

    fn append_all(
        &self,
        session: SessionId,
        records: Vec<JournalRecord>,
        if_head: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<AppendOutcome>, AppendError>> {
        if let Err(e) = self.check(session) {
            return Box::pin(async move { Err(e) });
        }
        JournalBackend::append_all(&*self.journal, session, records, if_head)
    }
}
