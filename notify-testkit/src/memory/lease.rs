//! [`JournalLeases`] for [`MemoryJournal`]: real holders, epochs and expiry, kept
//! in the shared store, judged by a lease clock the test can move forward
//! ([`MemoryJournal::advance_lease_clock`]), and appends fenced like PostgreSQL's.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use notify_journal::{AppendError, BoxFuture, JournalLeases, Lease, LeaseError, LeaseInfo, Renewal};
use notify_types::{SessionId, Uuid};
use tokio::sync::broadcast;

use super::MemoryJournal;

/// The default lease duration of a memory journal's handles (PostgreSQL's).
pub(crate) const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(30);

/// Announcements a slow receiver of lease changes may fall behind by.
const CHANGES: usize = 1024;

/// A session's lease in the store, as PostgreSQL keeps it in the session's row.
#[derive(Debug, Clone, Copy, Default)]
struct LeaseRow {
    /// The latest epoch handed out (0: never leased).
    epoch: u64,
    /// The holder and expiry, until released.
    held: Option<(Uuid, Instant)>,
}

/// The store's leases, shared by every handle on it.
#[derive(Debug)]
pub(crate) struct LeaseTable {
    rows: Mutex<HashMap<SessionId, LeaseRow>>,
    /// How far the lease clock is ahead of the real one.
    offset: Mutex<Duration>,
    changes: broadcast::Sender<SessionId>,
}

impl LeaseTable {
    pub(crate) fn new() -> Self {
        Self {
            rows: Mutex::new(HashMap::new()),
            offset: Mutex::new(Duration::ZERO),
            changes: broadcast::channel(CHANGES).0,
        }
    }

    fn rows(&self) -> MutexGuard<'_, HashMap<SessionId, LeaseRow>> {
        self.rows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lease clock.
    fn now(&self) -> Instant {
        Instant::now() + *self.offset.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn announce(&self, session: SessionId) {
        // Nobody listening is fine.
        let _ = self.changes.send(session);
    }
}

/// One handle's side: its identity and the leases it acquired (an entry outlives a
/// lost lease, which keeps fencing until acquired again), shared by its clones.
#[derive(Debug)]
pub(crate) struct Holder {
    id: Uuid,
    /// Session -> (epoch, known lost).
    book: Mutex<HashMap<SessionId, (u64, bool)>>,
}

impl Holder {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            id: Uuid::now_v7(),
            book: Mutex::new(HashMap::new()),
        })
    }

    fn book(&self) -> MutexGuard<'_, HashMap<SessionId, (u64, bool)>> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl MemoryJournal {
    /// The fence check of an append to `session`, made under the store's lock in
    /// the step that writes: with a lease of this handle's, it must still be live
    /// under its epoch; without one, no other holder may have a live lease.
    pub(super) fn fence(&self, session: SessionId) -> Result<(), AppendError> {
        let mine = self.holder.book().get(&session).map(|(epoch, _)| *epoch);
        let table = self.lease_table();
        let now = table.now();
        let row = table.rows().get(&session).copied().unwrap_or_default();
        let live = row.held.filter(|(_, expires)| *expires > now);
        let fenced = match mine {
            Some(epoch) => !matches!(live, Some((h, _)) if h == self.holder.id && row.epoch == epoch),
            None => live.is_some_and(|(h, _)| h != self.holder.id),
        };
        if fenced {
            Err(AppendError::Fenced { session })
        } else {
            Ok(())
        }
    }

    /// Moves the store's lease clock forward by `by` (every handle on the store sees
    /// it): leases expire without the test waiting.
    pub fn advance_lease_clock(&self, by: Duration) {
        let mut offset = self
            .lease_table()
            .offset
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *offset = offset.saturating_add(by);
    }

    fn acquire_now(&self, session: SessionId) -> Result<Lease, LeaseError> {
        let table = self.lease_table();
        let now = table.now();
        let me = self.holder.id;
        let mut rows = table.rows();
        let row = rows.entry(session).or_default();
        let epoch = match row.held {
            Some((h, expires)) if expires > now && h != me => {
                return Err(LeaseError::Held {
                    session,
                    epoch: row.epoch,
                    holder: Some(h),
                    expires_in: Some(expires - now),
                });
            }
            Some((h, expires)) if expires > now && h == me => row.epoch,
            _ => row.epoch + 1,
        };
        *row = LeaseRow {
            epoch,
            held: Some((me, now + self.lease_duration)),
        };
        drop(rows);
        self.holder.book().insert(session, (epoch, false));
        Ok(Lease::new(session, epoch))
    }

    fn renew_now(&self) -> Renewal {
        let table = self.lease_table();
        let now = table.now();
        let me = self.holder.id;
        let mut book = self.holder.book();
        let mut rows = table.rows();
        let mut renewal = Renewal::default();
        for (session, (epoch, lost)) in book.iter_mut() {
            if *lost {
                continue;
            }
            match rows.get_mut(session) {
                Some(row)
                    if row.epoch == *epoch
                        && matches!(row.held, Some((h, e)) if h == me && e > now) =>
                {
                    row.held = Some((me, now + self.lease_duration));
                    renewal.renewed.push(Lease::new(*session, *epoch));
                }
                _ => {
                    *lost = true;
                    renewal.lost.push(*session);
                }
            }
        }
        drop(rows);
        for session in &renewal.lost {
            table.announce(*session);
        }
        renewal
    }

    fn release_now(&self, session: SessionId) -> Result<(), LeaseError> {
        let mut book = self.holder.book();
        let Some((epoch, _)) = book.get(&session).copied() else {
            return Ok(());
        };
        let table = self.lease_table();
        let now = table.now();
        let me = self.holder.id;
        let mut rows = table.rows();
        match rows.get_mut(&session) {
            Some(row)
                if row.epoch == epoch
                    && matches!(row.held, Some((h, e)) if h == me && e > now) =>
            {
                row.held = None;
                drop(rows);
                book.remove(&session);
                table.announce(session);
                Ok(())
            }
            _ => {
                if let Some(entry) = book.get_mut(&session) {
                    entry.1 = true;
                }
                Err(LeaseError::Lost { session })
            }
        }
    }

    fn info_now(&self, session: SessionId) -> LeaseInfo {
        let table = self.lease_table();
        let now = table.now();
        let row = table.rows().get(&session).copied().unwrap_or_default();
        let live = row.held.filter(|(_, e)| *e > now);
        LeaseInfo {
            epoch: row.epoch,
            holder: row.held.map(|(h, _)| h),
            live: live.is_some(),
            expires_in: live.map(|(_, e)| e - now),
        }
    }

    /// Sessions neither ended nor purged (with frames, or only ever leased) whose
    /// lease is not live: no expiry first (never leased, released), then the
    /// longest expired, then by ID.
    fn orphans_now(&self, limit: usize) -> Vec<SessionId> {
        // Read before the lease table is locked (the store's lock comes first).
        let open = self.open_states();
        let table = self.lease_table();
        let now = table.now();
        let rows = table.rows();
        let candidates: HashSet<SessionId> = open
            .iter()
            .filter(|(_, open)| **open)
            .map(|(s, _)| *s)
            .chain(rows.keys().copied().filter(|s| !open.contains_key(s)))
            .collect();
        let mut found: Vec<(Option<Instant>, SessionId)> = candidates
            .into_iter()
            .filter_map(|s| {
                let expiry = rows.get(&s).and_then(|r| r.held.map(|(_, e)| e));
                match expiry {
                    Some(e) if e > now => None,
                    other => Some((other, s)),
                }
            })
            .collect();
        found.sort();
        found.into_iter().take(limit).map(|(_, s)| s).collect()
    }
}

impl JournalLeases for MemoryJournal {
    fn holder_id(&self) -> Uuid {
        self.holder.id
    }

    fn lease_duration(&self) -> Duration {
        self.lease_duration
    }

    fn acquire_lease(&self, session: SessionId) -> BoxFuture<'_, Result<Lease, LeaseError>> {
        Box::pin(std::future::ready(self.acquire_now(session)))
    }

    fn renew_leases(&self) -> BoxFuture<'_, Result<Renewal, LeaseError>> {
        Box::pin(std::future::ready(Ok(self.renew_now())))
    }

    fn release_lease(&self, session: SessionId) -> BoxFuture<'_, Result<(), LeaseError>> {
        Box::pin(std::future::ready(self.release_now(session)))
    }

    fn lease_info(&self, session: SessionId) -> BoxFuture<'_, Result<LeaseInfo, LeaseError>> {
        Box::pin(std::future::ready(Ok(self.info_now(session))))
    }

    fn orphaned_sessions(
        &self,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SessionId>, LeaseError>> {
        Box::pin(std::future::ready(Ok(self.orphans_now(limit))))
    }

    fn lease_changes(&self) -> Option<broadcast::Receiver<SessionId>> {
        Some(self.lease_table().changes.subscribe())
    }
}
