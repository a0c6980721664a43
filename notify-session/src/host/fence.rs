//! The journal a hosted session appends through: the host's journal, refusing every
//! append for a session whose lease this host does not hold right now.
//!
//! **Architecture Invariant:** every [`Session`](crate::Session) a host builds appends
//! through a [`Fence`], which refuses (`AppendError::Fenced`, nothing written) any
//! session not in the host's lease table or past its renewal deadline. The engine's
//! own check (PostgreSQL's in-transaction epoch check, the memory journal's fence)
//! stands behind it for an append already past the fence when the lease is lost.

use std::sync::Arc;
use tokio::time::Instant;

use notify_journal::layer::{JournalLayer, JournalReadLayer};
use notify_journal::{AppendError, AppendOutcome, BoxFuture, JournalBackend};
use notify_types::{JournalRecord, SessionId};

use super::table::LeaseTable;

/// A host's journal behind its lease table.
pub(crate) struct Fence<J: ?Sized> {
    journal: Arc<J>,
    table: Arc<LeaseTable>,
}

impl<J: ?Sized> Fence<J> {
    pub(crate) fn new(journal: Arc<J>, table: Arc<LeaseTable>) -> Self {
        Self { journal, table }
    }

    fn check(&self, session: SessionId) -> Result<(), AppendError> {
        if self.table.may_append(session, Instant::now()) {
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
