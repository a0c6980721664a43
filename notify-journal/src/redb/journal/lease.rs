//! [`JournalLeases`] for [`RedbJournal`]: the file lock is the lease.
//!
//! redb locks its file exclusively, so the process that opened the journal is its
//! only writer: no other holder can exist, and a lease on any of its sessions is
//! this handle's for as long as it stays open. So acquiring always succeeds,
//! renewing renews every lease held (nothing can have been lost), releasing only
//! forgets, and nothing is announced ([`lease_changes`](JournalLeases::lease_changes)
//! is `None`). Epochs are kept in memory only, per open: a session's first lease
//! after opening has epoch 1, and each acquisition after a release one more;
//! nothing about leases is written to the file. Appends are not checked against
//! leases here (a host runtime fences its own writes; the file lock fences other
//! processes).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use notify_types::{SessionId, Uuid};
use tokio::sync::broadcast;

use super::RedbJournal;
use crate::backend::{BoxFuture, JournalRead};
use crate::lease::{JournalLeases, Lease, LeaseError, LeaseInfo, Renewal};
use crate::retention::SessionState;

/// The nominal lease duration a redb journal reports: its leases never expire
/// while it is open, so this only paces a host's renewals.
pub(crate) const REDB_LEASE_DURATION: Duration = Duration::from_secs(30);

/// How many sessions [`orphaned_sessions`](JournalLeases::orphaned_sessions) reads
/// per page of the listing.
const PAGE: usize = 256;

/// This handle's leases: its holder identity, and per session the last epoch and
/// whether the lease is held.
#[derive(Debug)]
pub(crate) struct RedbLeases {
    holder: Uuid,
    leases: Mutex<HashMap<SessionId, (u64, bool)>>,
}

impl RedbLeases {
    pub(crate) fn new() -> Self {
        Self {
            holder: Uuid::now_v7(),
            leases: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<SessionId, (u64, bool)>> {
        // The map stays consistent even if a holder panicked (single inserts).
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn acquire(&self, session: SessionId) -> Lease {
        let mut leases = self.lock();
        let entry = leases.entry(session).or_insert((0, false));
        if !entry.1 {
            *entry = (entry.0.saturating_add(1), true);
        }
        Lease::new(session, entry.0)
    }

    fn renew(&self) -> Renewal {
        let renewed = self
            .lock()
            .iter()
            .filter(|(_, (_, held))| *held)
            .map(|(s, (epoch, _))| Lease::new(*s, *epoch))
            .collect();
        Renewal {
            renewed,
            lost: Vec::new(),
        }
    }

    fn release(&self, session: SessionId) {
        if let Some(entry) = self.lock().get_mut(&session) {
            entry.1 = false;
        }
    }

    fn info(&self, session: SessionId) -> LeaseInfo {
        let (epoch, held) = self.lock().get(&session).copied().unwrap_or((0, false));
        LeaseInfo {
            epoch,
            holder: held.then_some(self.holder),
            live: held,
            expires_in: held.then_some(REDB_LEASE_DURATION),
        }
    }

    fn held(&self, session: SessionId) -> bool {
        self.lock().get(&session).is_some_and(|(_, held)| *held)
    }
}

impl RedbJournal {
    /// Pages through the sessions in ID order, keeping those neither ended nor
    /// purged that this handle does not lease, up to `limit`.
    async fn orphans(&self, limit: usize) -> Result<Vec<SessionId>, LeaseError> {
        let mut found = Vec::new();
        let mut after = None;
        while found.len() < limit {
            let page = self
                .sessions_after(after, PAGE)
                .await
                .map_err(lease_error)?;
            let Some(last) = page.last().copied() else {
                break;
            };
            for session in page {
                if found.len() >= limit {
                    break;
                }
                if self.inner.leases.held(session) {
                    continue;
                }
                let state = self.session_state(session).await.map_err(lease_error)?;
                if matches!(state, SessionState::Live) {
                    found.push(session);
                }
            }
            after = Some(last);
        }
        Ok(found)
    }
}

/// A read's failure as a lease operation's.
fn lease_error(e: crate::error::JournalError) -> LeaseError {
    match e {
        crate::error::JournalError::Closed => LeaseError::Closed,
        crate::error::JournalError::Storage(s) => LeaseError::Storage(s),
        other => LeaseError::Storage(crate::error::StorageError::msg(other.to_string())),
    }
}

impl JournalLeases for RedbJournal {
    fn holder_id(&self) -> Uuid {
        self.inner.leases.holder
    }

    fn lease_duration(&self) -> Duration {
        REDB_LEASE_DURATION
    }

    fn acquire_lease(&self, session: SessionId) -> BoxFuture<'_, Result<Lease, LeaseError>> {
        let result = if self.inner.db().is_err() {
            Err(LeaseError::Closed)
        } else {
            Ok(self.inner.leases.acquire(session))
        };
        Box::pin(std::future::ready(result))
    }

    fn renew_leases(&self) -> BoxFuture<'_, Result<Renewal, LeaseError>> {
        let result = if self.inner.db().is_err() {
            Err(LeaseError::Closed)
        } else {
            Ok(self.inner.leases.renew())
        };
        Box::pin(std::future::ready(result))
    }

    fn release_lease(&self, session: SessionId) -> BoxFuture<'_, Result<(), LeaseError>> {
        self.inner.leases.release(session);
        Box::pin(std::future::ready(Ok(())))
    }

    fn lease_info(&self, session: SessionId) -> BoxFuture<'_, Result<LeaseInfo, LeaseError>> {
        Box::pin(std::future::ready(Ok(self.inner.leases.info(session))))
    }

    fn orphaned_sessions(&self, limit: usize) -> BoxFuture<'_, Result<Vec<SessionId>, LeaseError>> {
        Box::pin(self.orphans(limit))
    }

    fn lease_changes(&self) -> Option<broadcast::Receiver<SessionId>> {
        None
    }
}
