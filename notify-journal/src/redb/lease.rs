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
//!
//! Listing orphans never reads a session's state: in one snapshot per page, a
//! session with a log and no state row is live. The first listing after open that
//! reaches the end of the file walks it whole (what a host starting on the file
//! adopts); after that, since this process is the file's only writer, the orphans
//! are the live sessions found free before and the ones this handle released (both
//! kept aside and listed first while live and free), and sessions another handle of
//! this process started without a lease, which a listing finds by walking the file a
//! window of [`WALK_BUDGET`] sessions at a time, round robin: a host's poll costs a
//! bounded read however many (ended) sessions the file holds.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use notify_types::{SessionId, Uuid};
use tokio::sync::broadcast;

use super::RedbJournal;
use super::reads::on_blocking_pool;
use super::snapshot::{Snapshot, in_snapshot, storage};
use crate::backend::BoxFuture;
use crate::error::JournalError;
use crate::lease::{JournalLeases, Lease, LeaseError, LeaseInfo, Renewal};

/// The nominal lease duration a redb journal reports: its leases never expire
/// while it is open, so this only paces a host's renewals.
pub(crate) const REDB_LEASE_DURATION: Duration = Duration::from_secs(30);

/// How many sessions [`orphaned_sessions`](JournalLeases::orphaned_sessions) reads
/// per page (one snapshot) of the listing.
const PAGE: usize = 256;

/// How many sessions of the file a listing examines once a listing has walked it
/// whole (besides the free ones it keeps aside).
pub(crate) const WALK_BUDGET: usize = 4 * PAGE;

/// Where the orphan listings stand.
#[derive(Debug, Default)]
struct Listing {
    /// Whether a listing has walked the whole file since open.
    walked: bool,
    /// Where the next windowed walk resumes (`None`: at the start of the file).
    cursor: Option<SessionId>,
    /// Sessions found live and free, or released by this handle, while they stay
    /// so: listed first.
    free: BTreeSet<SessionId>,
}

/// This handle's leases: its holder identity, and per session the last epoch and
/// whether the lease is held; and its orphan listings.
#[derive(Debug)]
pub(crate) struct RedbLeases {
    holder: Uuid,
    leases: Mutex<HashMap<SessionId, (u64, bool)>>,
    listing: Mutex<Listing>,
    /// Sessions the orphan listings examined, in all (logged with each listing).
    examined: AtomicU64,
}

impl RedbLeases {
    pub(crate) fn new() -> Self {
        Self {
            holder: Uuid::now_v7(),
            leases: Mutex::new(HashMap::new()),
            listing: Mutex::new(Listing::default()),
            examined: AtomicU64::new(0),
        }
    }

    fn listing(&self) -> MutexGuard<'_, Listing> {
        // Plain fields, each write whole.
        self.listing.lock().unwrap_or_else(PoisonError::into_inner)
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
        let released = match self.lock().get_mut(&session) {
            Some(entry) if entry.1 => {
                entry.1 = false;
                true
            }
            _ => false,
        };
        if released {
            self.listing().free.insert(session);
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
    /// Up to `limit` orphans: first the sessions found free before or released by
    /// this handle that are still live and free, then those a walk of the file finds
    /// live and not leased here
    /// (the whole file until a listing reaches its end; after that one window of
    /// [`WALK_BUDGET`] sessions, round robin). No session's state is read: in one
    /// snapshot per page, a session with a log and no state row is live.
    fn orphans_blocking(&self, limit: usize) -> Result<Vec<SessionId>, JournalError> {
        let leases = &self.inner.leases;
        let mut found = Vec::new();
        if limit == 0 {
            return Ok(found);
        }
        let db = self.inner.db()?;
        let known: Vec<SessionId> = leases.listing().free.iter().copied().collect();
        let free = in_snapshot(&*db, "the free sessions", |s| {
            let mut free = Vec::new();
            for session in known {
                if !leases.held(session) && is_live(s, session)? {
                    free.push(session);
                }
            }
            Ok(free)
        })?;
        let mut examined = free.len();
        leases.listing().free = free.iter().copied().collect();
        found.extend(free.into_iter().take(limit));
        let mut listed: HashSet<SessionId> = found.iter().copied().collect();
        let (walked, cursor) = {
            let listing = leases.listing();
            (listing.walked, listing.cursor)
        };
        // The whole file (a first listing), or one window of it from the cursor.
        let budget = if walked { WALK_BUDGET } else { usize::MAX };
        let mut after = if walked { cursor } else { None };
        let mut wrapped = !walked;
        let mut walked_whole = false;
        let mut seen = 0usize;
        while found.len() < limit && seen < budget {
            let page = PAGE.min(budget - seen);
            let sessions = in_snapshot(&*db, "the live sessions", |s| live_page(s, after, page))?;
            let last = sessions.last().map(|(session, _)| *session);
            seen += sessions.len().max(1);
            let Some(last) = last else {
                // The end of the file: a first listing has walked it whole; a window
                // goes on from the start, once.
                walked_whole |= !walked;
                after = None;
                if wrapped {
                    break;
                }
                wrapped = true;
                continue;
            };
            examined += sessions.len();
            for (session, live) in sessions {
                if found.len() >= limit {
                    break;
                }
                if live && !leases.held(session) && listed.insert(session) {
                    found.push(session);
                    leases.listing().free.insert(session);
                }
            }
            after = Some(last);
        }
        {
            let mut listing = leases.listing();
            listing.walked |= walked_whole;
            listing.cursor = if walked_whole { None } else { after };
        }
        leases
            .examined
            .fetch_add(examined as u64, Ordering::Relaxed);
        tracing::debug!(examined, found = found.len(), "orphan listing");
        Ok(found)
    }
}

/// Up to `page` sessions after `after` in one snapshot, in ID order, each with
/// whether it is live (a log and no state row: ended and purged sessions have one).
fn live_page(
    s: &Snapshot,
    after: Option<SessionId>,
    page: usize,
) -> Result<Vec<(SessionId, bool)>, JournalError> {
    let sessions = s.sessions_after(after, page)?;
    let mut out = Vec::with_capacity(sessions.len());
    for session in sessions {
        let live = s
            .sessions
            .get(session.as_uuid().as_u128())
            .map_err(storage("read session row"))?
            .is_none();
        out.push((session, live));
    }
    Ok(out)
}

/// Whether `session` is live in the snapshot: it has a log and no state row.
fn is_live(s: &Snapshot, session: SessionId) -> Result<bool, JournalError> {
    let id = session.as_uuid().as_u128();
    let row = s
        .sessions
        .get(id)
        .map_err(storage("read session row"))?
        .is_some();
    Ok(!row && s.head(id)? > 0)
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
        let listing = on_blocking_pool(self, move |j| j.orphans_blocking(limit));
        Box::pin(async move { listing.await.map_err(lease_error) })
    }

    fn lease_changes(&self) -> Option<broadcast::Receiver<SessionId>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use notify_types::{JournalRecord, LoopId, SessionEnded, SessionEvent};

    use super::*;
    use crate::RedbOptions;

    fn journal() -> RedbJournal {
        RedbJournal::open_with_backend(
            redb::backends::InMemoryBackend::new(),
            RedbOptions::default(),
        )
        .unwrap()
    }

    /// `n` sessions, each one notification and its end, in one group apiece.
    async fn ended(j: &RedbJournal, n: usize) {
        let mut writes = tokio::task::JoinSet::new();
        for _ in 0..n {
            let j = j.clone();
            writes.spawn(async move {
                let s = SessionId::new();
                let end: JournalRecord = SessionEvent::from(SessionEnded::new(s)).into();
                let records = vec![notify_testkit::sample::command(s, LoopId::new()), end];
                j.append_all(s, records, None).await.unwrap();
            });
        }
        while let Some(write) = writes.join_next().await {
            write.unwrap();
        }
    }

    async fn live(j: &RedbJournal) -> SessionId {
        let s = SessionId::new();
        j.append(s, notify_testkit::sample::command(s, LoopId::new()))
            .await
            .unwrap();
        s
    }

    fn examined(j: &RedbJournal) -> u64 {
        j.inner.leases.examined.load(Ordering::Relaxed)
    }

    /// 1,500 ended sessions and one live: the first listing walks the file whole;
    /// after it each listing examines at most one window (and the free sessions it
    /// keeps), lists a free session every time, a released one at once, and finds a
    /// session written later within a round of windows. No listing reads a state row
    /// (a damaged one would fail it: see notify-session's host_redb tests).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn listings_after_the_first_examine_a_bounded_window() {
        let j = journal();
        ended(&j, 1_500).await;
        let first = live(&j).await;
        assert_eq!(j.orphaned_sessions(10).await.unwrap(), vec![first]);
        let walk = examined(&j);
        assert!(walk >= 1_501, "the first listing examined {walk} sessions");
        for _ in 0..3 {
            let before = examined(&j);
            assert_eq!(j.orphaned_sessions(10).await.unwrap(), vec![first]);
            let listing = examined(&j) - before;
            assert!(
                listing <= (WALK_BUDGET + 1) as u64,
                "a later listing examined {listing} sessions"
            );
        }
        j.acquire_lease(first).await.unwrap();
        assert!(j.orphaned_sessions(10).await.unwrap().is_empty());
        j.release_lease(first).await.unwrap();
        assert_eq!(j.orphaned_sessions(10).await.unwrap(), vec![first]);
        j.acquire_lease(first).await.unwrap();

        let later = live(&j).await;
        let rounds = 1_502usize.div_ceil(WALK_BUDGET) + 1;
        let mut found = false;
        for _ in 0..rounds {
            if j.orphaned_sessions(10).await.unwrap() == vec![later] {
                found = true;
                break;
            }
        }
        assert!(
            found,
            "a session written later was not listed in {rounds} listings"
        );
    }
}
