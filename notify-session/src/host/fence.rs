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

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use notify_journal::layer::{JournalLayer, JournalReadLayer};
use notify_journal::{AppendError, AppendOutcome, BoxFuture, JournalBackend, JournalLeases};
use notify_types::{JournalRecord, SessionId, Uuid};

use super::table::LeaseTable;
use crate::shared::Placement;

/// One placement of a session on a host: the session, its generation, and the
/// host's lease table that says whether it is still held.
#[derive(Debug)]
pub(crate) struct HostPlacement {
    pub(crate) session: SessionId,
    pub(crate) generation: u64,
    pub(crate) table: Arc<LeaseTable>,
    /// Who holds the session's lease, as the engine last said when an append was
    /// refused here, and when it was asked (`None`: not asked yet).
    pub(crate) owner: Mutex<Option<(Option<Uuid>, Instant)>>,
}

/// How long an owner learnt at a refusal is taken as current before a later refusal
/// asks the engine again (refusals come in bursts: one question per burst).
const OWNER_FRESH_FOR: Duration = Duration::from_secs(1);

/// How long a refusal waits for the engine to say who holds the lease.
const OWNER_LOOKUP_LIMIT: Duration = Duration::from_millis(500);

impl HostPlacement {
    /// A placement of `session` under `generation` in `table`.
    pub(crate) fn new(session: SessionId, generation: u64, table: Arc<LeaseTable>) -> Self {
        Self {
            session,
            generation,
            table,
            owner: Mutex::new(None),
        }
    }

    fn owner_slot(&self) -> std::sync::MutexGuard<'_, Option<(Option<Uuid>, Instant)>> {
        self.owner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Placement for HostPlacement {
    fn serving(&self) -> bool {
        self.table
            .may_append(self.session, self.generation, Instant::now())
    }

    fn owner(&self) -> Option<Uuid> {
        self.owner_slot().and_then(|(owner, _)| owner)
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

impl<J: JournalLeases + ?Sized> Fence<J> {
    /// Refuses an append (`AppendError::Fenced`), first learning from the engine who
    /// holds the session's lease now (at most once per [`OWNER_FRESH_FOR`], bounded by
    /// [`OWNER_LOOKUP_LIMIT`]), so the session's `NotOwner` answer can name the owner
    /// even before the host's stop has asked. The one refusal of both
    /// [`append`](JournalLayer::append) and [`append_all`](JournalLayer::append_all).
    async fn refuse<T>(&self, e: AppendError) -> Result<T, AppendError> {
        self.learn_owner().await;
        Err(e)
    }

    async fn learn_owner(&self) {
        let placement = &self.placement;
        {
            let mut slot = placement.owner_slot();
            let now = Instant::now();
            if slot.is_some_and(|(_, at)| now.duration_since(at) < OWNER_FRESH_FOR) {
                return;
            }
            // Claimed before the lookup: the refusals of one burst ask once.
            let known = slot.and_then(|(owner, _)| owner);
            *slot = Some((known, now));
        }
        let me = self.journal.holder_id();
        let asked = tokio::time::timeout(
            OWNER_LOOKUP_LIMIT,
            self.journal.lease_info(placement.session),
        )
        .await;
        if let Ok(Ok(info)) = asked {
            let owner = info.holder.filter(|h| info.live && *h != me);
            if owner.is_some() {
                *placement.owner_slot() = Some((owner, Instant::now()));
            }
        }
    }
}

impl<J: JournalBackend + ?Sized> JournalReadLayer for Fence<J> {
    type Inner = J;
    fn inner(&self) -> &J {
        &self.journal
    }
}

impl<J: JournalLeases + ?Sized> JournalLayer for Fence<J> {
    fn append(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> BoxFuture<'_, Result<AppendOutcome, AppendError>> {
        if let Err(e) = self.check(session) {
            return Box::pin(self.refuse(e));
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
            return Box::pin(self.refuse(e));
        }
        JournalBackend::append_all(&*self.journal, session, records, if_head)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use notify_journal::{AppTxnError, AppendError};
    use notify_types::SessionId;

    use super::super::table::LeaseTable;
    use super::HostPlacement;
    use crate::consumer::ack_error;
    use crate::error::{AckError, TxAckError};
    use crate::shared::Shared;

    /// A hosted session whose placement is not in its host's lease table (released).
    fn hosted() -> Shared {
        let shared = Shared::new(SessionId::new(), None);
        let table = Arc::new(LeaseTable::default());
        shared.mark_hosted(Arc::new(HostPlacement::new(shared.id, 1, table)));
        shared
    }

    #[test]
    fn a_fenced_consumption_of_a_hosted_session_is_not_owner_on_every_path() {
        let shared = hosted();
        let fenced = AppendError::Fenced { session: shared.id };
        let grouped = AppendError::GroupRefused {
            index: 1,
            source: Box::new(fenced.clone()),
        };
        for e in [fenced, grouped] {
            assert!(
                matches!(ack_error(&shared, e.clone()), AckError::NotOwner { session_id, owner: None } if session_id == shared.id),
                "plain and batch: {e:?}"
            );
            let tx = TxAckError::from_app_txn(&shared, AppTxnError::Append(e.clone()));
            assert!(
                matches!(tx, TxAckError::Ack(AckError::NotOwner { .. })),
                "transactional, single and batch: {tx:?}"
            );
        }
    }

    /// A transactional ack (`ack_with`, `ack_in_pg`) writes through the application's
    /// own journal handle, not through the fence: the check it makes first must refuse
    /// a placement that no longer holds the lease even before the host has stopped the
    /// session, as the fence refuses a plain ack's append.
    #[test]
    fn a_placement_without_its_lease_refuses_acks_before_the_host_stops_it() {
        let shared = hosted();
        assert!(
            shared.stopped_by_host().is_none(),
            "not stopped by its host yet"
        );
        assert_eq!(shared.refused_by_host(), Some(None));
        let unhosted = Shared::new(SessionId::new(), None);
        assert_eq!(unhosted.refused_by_host(), None);
    }

    #[test]
    fn a_fenced_consumption_of_an_unhosted_session_is_a_journal_failure() {
        let shared = Shared::new(SessionId::new(), None);
        let e = ack_error(&shared, AppendError::Fenced { session: shared.id });
        assert!(
            matches!(e, AckError::Journal(AppendError::Fenced { .. })),
            "{e:?}"
        );
    }
}
