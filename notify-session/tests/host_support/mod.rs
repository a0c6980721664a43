//! Support for the host runtime's tests: leases over the testkit's in-memory journal
//! shared by several "hosts" (each a handle with its own holder ID, real epochs and
//! expiry by the wall clock, appends of a lost lease fenced), a wrapper counting and
//! failing renewals, an application that registers one seeded loop per session, and
//! notifications.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use notify_journal::layer::{JournalLayer, JournalReadLayer};
use notify_journal::{
    AppendError, AppendOutcome, BoxFuture, JournalBackend, JournalLeases, JournalRead, Lease,
    LeaseError, LeaseInfo, Renewal, SessionState, StorageError,
};
use notify_loop::LoopConfig;
use notify_session::{AppError, HostApp, RestoreReport, Session, SessionConsumer, StopReason};
use notify_testkit::MemoryJournal;
use notify_types::{
    CommandId, JournalRecord, LoopId, ProcessCompletionNotification, ProcessLifecycleState,
    ProcessTerminalReason, SessionId, Uuid,
};
use tokio::sync::{broadcast, mpsc};

/// A generous bound on every wait for an event (never a timing assertion).
pub(crate) const WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy)]
struct Row {
    epoch: u64,
    holder: Option<Uuid>,
    expires: Instant,
}

/// The lease rows every handle of one shared journal sees.
#[derive(Debug)]
struct Registry {
    rows: Mutex<HashMap<SessionId, Row>>,
    changes: broadcast::Sender<SessionId>,
}

/// One host's handle on a shared in-memory journal with leases.
#[derive(Debug, Clone)]
pub(crate) struct Leased {
    journal: MemoryJournal,
    registry: Arc<Registry>,
    holder: Uuid,
    duration: Duration,
    /// The leases this handle acquired and has not released, by epoch.
    mine: Arc<Mutex<HashMap<SessionId, u64>>>,
}

impl Leased {
    /// A first handle on a new journal.
    pub(crate) fn new(duration: Duration) -> Self {
        let (changes, _) = broadcast::channel(1024);
        Self {
            journal: MemoryJournal::new(),
            registry: Arc::new(Registry {
                rows: Mutex::new(HashMap::new()),
                changes,
            }),
            holder: Uuid::new_v4(),
            duration,
            mine: Arc::default(),
        }
    }

    /// This handle's holder ID.
    pub(crate) fn holder_id_for_test(&self) -> Uuid {
        self.holder
    }

    /// Another host's handle on the same journal.
    pub(crate) fn another(&self) -> Self {
        Self {
            holder: Uuid::new_v4(),
            mine: Arc::default(),
            ..self.clone()
        }
    }

    /// Ends `session`'s lease now, as an engine whose clock ran past it would (its
    /// holder's next renewal finds it lost).
    pub(crate) fn expire(&self, session: SessionId) {
        if let Some(row) = self.registry.rows.lock().unwrap().get_mut(&session) {
            row.expires = Instant::now();
        }
    }

    /// The shared journal itself (no lease checks).
    pub(crate) fn memory(&self) -> &MemoryJournal {
        &self.journal
    }

    fn live_for(&self, session: SessionId, now: Instant) -> Option<u64> {
        let rows = self.registry.rows.lock().unwrap();
        rows.get(&session)
            .filter(|r| r.holder == Some(self.holder) && r.expires > now)
            .map(|r| r.epoch)
    }

    fn fence(&self, session: SessionId) -> Result<(), AppendError> {
        match self.live_for(session, Instant::now()) {
            Some(_) => Ok(()),
            None => Err(AppendError::Fenced { session }),
        }
    }
}

impl JournalReadLayer for Leased {
    type Inner = MemoryJournal;
    fn inner(&self) -> &MemoryJournal {
        &self.journal
    }
}

impl JournalLayer for Leased {
    fn append(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> BoxFuture<'_, Result<AppendOutcome, AppendError>> {
        if let Err(e) = self.fence(session) {
            return Box::pin(async move { Err(e) });
        }
        JournalBackend::append(&self.journal, session, record)
    }
    fn append_all(
        &self,
        session: SessionId,
        records: Vec<JournalRecord>,
        if_head: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<AppendOutcome>, AppendError>> {
        if let Err(e) = self.fence(session) {
            return Box::pin(async move { Err(e) });
        }
        JournalBackend::append_all(&self.journal, session, records, if_head)
    }
}

impl JournalLeases for Leased {
    fn holder_id(&self) -> Uuid {
        self.holder
    }
    fn lease_duration(&self) -> Duration {
        self.duration
    }
    fn acquire_lease(&self, session: SessionId) -> BoxFuture<'_, Result<Lease, LeaseError>> {
        let now = Instant::now();
        let mut rows = self.registry.rows.lock().unwrap();
        let row = rows.entry(session).or_insert(Row {
            epoch: 0,
            holder: None,
            expires: now,
        });
        let answer = if row.holder == Some(self.holder) && row.expires > now {
            row.expires = now + self.duration;
            Ok(Lease::new(session, row.epoch))
        } else if row.holder.is_some() && row.expires > now {
            Err(LeaseError::Held {
                session,
                epoch: row.epoch,
                holder: row.holder,
                expires_in: Some(row.expires - now),
            })
        } else {
            row.epoch += 1;
            row.holder = Some(self.holder);
            row.expires = now + self.duration;
            Ok(Lease::new(session, row.epoch))
        };
        if let Ok(lease) = &answer {
            self.mine.lock().unwrap().insert(session, lease.epoch());
        }
        Box::pin(async move { answer })
    }
    fn renew_leases(&self) -> BoxFuture<'_, Result<Renewal, LeaseError>> {
        let now = Instant::now();
        let mut renewal = Renewal::default();
        let mut rows = self.registry.rows.lock().unwrap();
        self.mine
            .lock()
            .unwrap()
            .retain(|session, epoch| match rows.get_mut(session) {
                Some(row)
                    if row.holder == Some(self.holder)
                        && row.epoch == *epoch
                        && row.expires > now =>
                {
                    row.expires = now + self.duration;
                    renewal.renewed.push(Lease::new(*session, *epoch));
                    true
                }
                _ => {
                    renewal.lost.push(*session);
                    false
                }
            });
        drop(rows);
        Box::pin(async move { Ok(renewal) })
    }
    fn release_lease(&self, session: SessionId) -> BoxFuture<'_, Result<(), LeaseError>> {
        let now = Instant::now();
        let answer = {
            let mut rows = self.registry.rows.lock().unwrap();
            match rows.get_mut(&session) {
                Some(row) if row.holder == Some(self.holder) && row.expires > now => {
                    row.holder = None;
                    Ok(true)
                }
                Some(row) if row.holder == Some(self.holder) => Err(LeaseError::Lost { session }),
                _ => Ok(false),
            }
        };
        self.mine.lock().unwrap().remove(&session);
        if let Ok(true) = answer {
            let _ = self.registry.changes.send(session);
        }
        Box::pin(async move { answer.map(|_| ()) })
    }
    fn lease_info(&self, session: SessionId) -> BoxFuture<'_, Result<LeaseInfo, LeaseError>> {
        let now = Instant::now();
        let info = match self.registry.rows.lock().unwrap().get(&session) {
            None => LeaseInfo {
                epoch: 0,
                holder: None,
                live: false,
                expires_in: None,
            },
            Some(row) => {
                let live = row.holder.is_some() && row.expires > now;
                LeaseInfo {
                    epoch: row.epoch,
                    holder: row.holder,
                    live,
                    expires_in: live.then(|| row.expires - now),
                }
            }
        };
        Box::pin(async move { Ok(info) })
    }
    fn orphaned_sessions(&self, limit: usize) -> BoxFuture<'_, Result<Vec<SessionId>, LeaseError>> {
        Box::pin(async move {
            let sessions = self
                .journal
                .sessions()
                .await
                .map_err(|e| LeaseError::Storage(StorageError::new("sessions", e)))?;
            let now = Instant::now();
            let mut out = Vec::new();
            for session in sessions {
                if out.len() == limit {
                    break;
                }
                let state = self
                    .journal
                    .session_state(session)
                    .await
                    .map_err(|e| LeaseError::Storage(StorageError::new("state", e)))?;
                if state != SessionState::Live {
                    continue;
                }
                let live = self
                    .registry
                    .rows
                    .lock()
                    .unwrap()
                    .get(&session)
                    .is_some_and(|r| r.holder.is_some() && r.expires > now);
                if !live {
                    out.push(session);
                }
            }
            Ok(out)
        })
    }
    fn lease_changes(&self) -> Option<broadcast::Receiver<SessionId>> {
        Some(self.registry.changes.subscribe())
    }
}

/// A journal with leases whose renewals are counted, and fail while `failing` is set.
pub(crate) struct Counting<J> {
    pub(crate) inner: J,
    pub(crate) renewals: AtomicUsize,
    pub(crate) failing: AtomicBool,
}

impl<J> Counting<J> {
    pub(crate) fn new(inner: J) -> Self {
        Self {
            inner,
            renewals: AtomicUsize::new(0),
            failing: AtomicBool::new(false),
        }
    }
}

impl<J: JournalLeases> JournalReadLayer for Counting<J> {
    type Inner = J;
    fn inner(&self) -> &J {
        &self.inner
    }
}

impl<J: JournalLeases> JournalLayer for Counting<J> {}

impl<J: JournalLeases> JournalLeases for Counting<J> {
    fn holder_id(&self) -> Uuid {
        self.inner.holder_id()
    }
    fn lease_duration(&self) -> Duration {
        self.inner.lease_duration()
    }
    fn acquire_lease(&self, session: SessionId) -> BoxFuture<'_, Result<Lease, LeaseError>> {
        self.inner.acquire_lease(session)
    }
    fn renew_leases(&self) -> BoxFuture<'_, Result<Renewal, LeaseError>> {
        self.renewals.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Box::pin(async {
                Err(LeaseError::Storage(StorageError::msg(
                    "renewal refused by the test",
                )))
            });
        }
        self.inner.renew_leases()
    }
    fn release_lease(&self, session: SessionId) -> BoxFuture<'_, Result<(), LeaseError>> {
        self.inner.release_lease(session)
    }
    fn lease_info(&self, session: SessionId) -> BoxFuture<'_, Result<LeaseInfo, LeaseError>> {
        self.inner.lease_info(session)
    }
    fn orphaned_sessions(&self, limit: usize) -> BoxFuture<'_, Result<Vec<SessionId>, LeaseError>> {
        self.inner.orphaned_sessions(limit)
    }
    fn lease_changes(&self) -> Option<broadcast::Receiver<SessionId>> {
        self.inner.lease_changes()
    }
}

/// What the test application saw: each session started (with its consumer and how
/// many notifications were seeded) and each stop.
pub(crate) enum Seen {
    Started {
        session: SessionId,
        seeded: usize,
        consumer: SessionConsumer,
    },
    Stopped {
        session: SessionId,
        why: StopReason,
    },
}

/// An application that registers loop `LOOP` in every session, seeded from the
/// report, and reports what it saw on a channel.
pub(crate) struct OneLoop {
    pub(crate) loop_id: LoopId,
    pub(crate) seen: mpsc::UnboundedSender<Seen>,
}

impl OneLoop {
    pub(crate) fn new(loop_id: LoopId) -> (Self, mpsc::UnboundedReceiver<Seen>) {
        let (seen, rx) = mpsc::unbounded_channel();
        (Self { loop_id, seen }, rx)
    }
}

impl HostApp for OneLoop {
    fn started<'a>(
        &'a self,
        session: &'a Session,
        report: RestoreReport,
    ) -> BoxFuture<'a, Result<(), AppError>> {
        Box::pin(async move {
            let pending = report
                .pending
                .get(&self.loop_id)
                .cloned()
                .unwrap_or_default();
            let seeded = pending.len();
            let consumer =
                session.register_loop(LoopConfig::new(session.id(), self.loop_id).seed(pending))?;
            let _ = self.seen.send(Seen::Started {
                session: session.id(),
                seeded,
                consumer,
            });
            Ok(())
        })
    }

    fn stopped(&self, session: SessionId, why: StopReason) {
        let _ = self.seen.send(Seen::Stopped { session, why });
    }
}

/// The next thing the application saw, within [`WAIT`].
pub(crate) async fn next_seen(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("the application saw nothing within the bound")
        .expect("the host dropped the application")
}

/// A valid completion notification for `loop_id` in `session`.
pub(crate) fn notification(session: SessionId, loop_id: LoopId) -> ProcessCompletionNotification {
    ProcessCompletionNotification {
        command_id: CommandId::new(),
        session_id: session,
        loop_id,
        process_handle: "build-42".into(),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }
}
