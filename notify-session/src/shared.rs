//! The state every handle of one session shares: the [`Session`](crate::Session) and
//! its clones, its consumers and the notifications they hand out. Both the session and
//! its consumers work through it, so neither needs the other.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use notify_journal::{AppendError, AppendOutcome, JournalBackend};
use notify_loop::LoopHandle;
use notify_types::{JournalRecord, LoopId, SessionEvent, SessionId, Uuid};
use tokio::sync::broadcast;

use crate::append::{answer_after_end, append};
use crate::error::PublishError;

/// How many events a slow subscriber may fall behind before it sees
/// [`broadcast::error::RecvError::Lagged`].
const DEFAULT_EVENT_BUFFER: usize = 1024;

/// A registered loop.
#[derive(Clone)]
pub(crate) enum LoopEntry {
    /// A loop of this engine, reached through its handle.
    Native(LoopHandle),
    /// A loop of another engine: it exists, but cannot take process notifications.
    Foreign,
}

/// The result of publishing a lifecycle event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// A new frame was journaled (at this seq; 0 when headless) and broadcast.
    New {
        /// The frame's sequence (0 for a headless session).
        seq: u64,
    },
    /// The identical event was already journaled; nothing was broadcast again.
    Duplicate {
        /// The original frame's sequence.
        seq: u64,
    },
}

/// A host runtime's placement of a session on this process: whether it may still
/// serve the session now.
pub(crate) trait Placement: Send + Sync {
    /// Whether this placement still holds the session's lease here, its deadline
    /// ahead.
    fn serving(&self) -> bool;

    /// Who holds the session's lease instead, as the engine last said when an append
    /// was refused here (`None`: not known).
    fn owner(&self) -> Option<Uuid>;
}

/// One session's shared state.
pub(crate) struct Shared {
    pub(crate) id: SessionId,
    /// `None` for a headless session.
    pub(crate) journal: Option<Arc<dyn JournalBackend>>,
    /// Never held across an `.await`: lookups clone the handle and drop the guard.
    pub(crate) loops: RwLock<HashMap<LoopId, LoopEntry>>,
    pub(crate) events: broadcast::Sender<SessionEvent>,
    /// The end gate. Every journal append of the session (notify, publish, ack) holds a
    /// read guard across it and checks `ended` under it; `Session::end` holds the
    /// write guard while it checks what is pending and journals the end, so nothing
    /// slips in between.
    pub(crate) end_gate: tokio::sync::RwLock<()>,
    /// Whether the session has ended: set (once, never cleared) under the write guard
    /// of `end_gate`. Read without waiting where the gate is not needed (a consumer
    /// stops receiving at once).
    ended: AtomicBool,
    /// Whether an end has begun abandoning: set (once, never cleared) under the write
    /// guard of `end_gate` before the abandonments are journaled, so that no consumer
    /// receives what is being abandoned, even if that end then fails or is cancelled
    /// before they commit (a later end completes it).
    sealed: AtomicBool,
    /// Whether a host runtime stopped serving the session here (it released or lost
    /// the lease): set (once, never cleared) before the host takes the end gate's
    /// write guard, so every append that checks it under a read guard afterwards sees
    /// it, and every one in flight has finished when the host goes on.
    host_stopped: AtomicBool,
    /// The lease holder that took the session over, when the host knows it.
    new_owner: Mutex<Option<Uuid>>,
    /// The host runtime's placement, when one serves the session (its appends go
    /// through that placement's fence): a fenced append then means "not the owner",
    /// and consumers receive nothing once the placement no longer serves.
    hosted: OnceLock<Arc<dyn Placement>>,
    /// Native loops removed from the registry while notifications were still live in
    /// them (their consumers may still acknowledge those): counted as pending until
    /// they are released. Never held across an `.await`.
    retired: Mutex<Vec<LoopHandle>>,
}

impl Shared {
    /// A session with no loops, not ended.
    pub(crate) fn new(id: SessionId, journal: Option<Arc<dyn JournalBackend>>) -> Self {
        let (events, _) = broadcast::channel(DEFAULT_EVENT_BUFFER);
        Self {
            id,
            journal,
            loops: RwLock::new(HashMap::new()),
            events,
            end_gate: tokio::sync::RwLock::new(()),
            ended: AtomicBool::new(false),
            sealed: AtomicBool::new(false),
            host_stopped: AtomicBool::new(false),
            new_owner: Mutex::new(None),
            hosted: OnceLock::new(),
            retired: Mutex::new(Vec::new()),
        }
    }

    /// Notifications handed to the loops here (seeded or accepted) and not yet
    /// released: what a host's status reports as pending. Read from the loops' own
    /// live sets, so every path that releases one (a plain or transactional
    /// acknowledgement, new or a retry of a journaled one) is counted by the same
    /// release, and a seed the loop skipped never is. None once the session has ended
    /// (each was consumed or abandoned on the record) or its host stopped serving it
    /// here (the next owner's restore hands them back).
    pub(crate) fn pending(&self) -> u64 {
        if self.is_ended() || self.host_stopped.load(Ordering::Acquire) {
            return 0;
        }
        let registered: usize = self
            .loops
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|entry| match entry {
                LoopEntry::Native(handle) => handle.live(),
                LoopEntry::Foreign => 0,
            })
            .sum();
        let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        retired.retain(|handle| handle.live() > 0);
        let retired: usize = retired.iter().map(LoopHandle::live).sum();
        (registered + retired) as u64
    }

    /// Keeps counting what `handle`, a native loop just removed from the registry,
    /// still holds (its consumer may acknowledge it yet).
    pub(crate) fn retire(&self, handle: LoopHandle) {
        let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        retired.retain(|handle| handle.live() > 0);
        if handle.live() > 0 {
            retired.push(handle);
        }
    }

    /// Marks the session as served by a host runtime under `placement` (before
    /// anyone else sees it).
    pub(crate) fn mark_hosted(&self, placement: Arc<dyn Placement>) {
        let _ = self.hosted.set(placement);
    }

    /// What a fenced append of a hosted session answers: the host's stop, or (the
    /// fence refused before the host stopped the session) "not the owner" with the
    /// owner unknown. `None` for a session no host runs.
    pub(crate) fn not_owner(&self) -> Option<Option<Uuid>> {
        let placement = self.hosted.get()?;
        Some(
            self.stopped_by_host()
                .flatten()
                .or_else(|| placement.owner()),
        )
    }

    /// `Some(new owner, if known)` once a host runtime stopped serving the session
    /// here; `None` while it serves it (or for a session no host runs).
    pub(crate) fn stopped_by_host(&self) -> Option<Option<Uuid>> {
        if !self.host_stopped.load(Ordering::Acquire) {
            return None;
        }
        Some(*self.new_owner.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// What an acknowledgement (or a retried event) must be refused with before it
    /// writes: the host's stop, as [`stopped_by_host`](Self::stopped_by_host), or a
    /// placement that no longer holds the lease (past its deadline, released or
    /// replaced; the host stops the session next), unless the session has ended, whose
    /// answer is the ended path's (nothing is written after the end; an event
    /// journaled before it is answered truthfully) however its host stopped it
    /// afterwards. A transactional ack writes through the application's own journal
    /// handle, not the host's fence, so this is its fence.
    pub(crate) fn refused_by_host(&self) -> Option<Option<Uuid>> {
        if self.is_ended() {
            return None;
        }
        self.stopped_by_host().or_else(|| {
            self.hosted
                .get()
                .filter(|p| !p.serving())
                .map(|p| p.owner())
        })
    }

    /// Marks the session stopped by its host, naming the new owner when known. The
    /// host then takes the end gate's write guard to wait out appends in flight.
    pub(crate) fn stop_by_host(&self, owner: Option<Uuid>) {
        *self.new_owner.lock().unwrap_or_else(|p| p.into_inner()) = owner;
        self.host_stopped.store(true, Ordering::Release);
    }

    /// The new owner of a session its host stopped, learnt after the stop: every
    /// `NotOwner` answer names it from here on.
    pub(crate) fn learn_owner(&self, owner: Uuid) {
        *self.new_owner.lock().unwrap_or_else(|p| p.into_inner()) = Some(owner);
    }

    /// The answer to a record offered after the session ended: nothing is written; one
    /// journaled before the end is answered as a duplicate, any other
    /// [`AppendError::SessionEnded`] (always, for a session with no journal).
    pub(crate) async fn answer_ended(
        &self,
        record: &JournalRecord,
    ) -> Result<AppendOutcome, AppendError> {
        match &self.journal {
            Some(journal) => answer_after_end(journal.as_ref(), self.id, record).await,
            None => Err(AppendError::SessionEnded {
                session: self.id,
                purged: false,
            }),
        }
    }

    /// Whether the session has ended.
    pub(crate) fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Whether consumers may still receive: not once the session ended, nor once an
    /// end began abandoning, nor once its host stopped serving it or its placement's
    /// lease is past its deadline (the host stops it then; another host may already
    /// be redelivering what this one would hand out).
    pub(crate) fn delivers(&self) -> bool {
        !self.is_ended()
            && !self.sealed.load(Ordering::Acquire)
            && !self.host_stopped.load(Ordering::Acquire)
            && self.hosted.get().is_none_or(|p| p.serving())
    }

    /// Marks the session ended. Only `Session::end` calls it, with the end gate's write
    /// guard held.
    pub(crate) fn mark_ended(&self) {
        self.ended.store(true, Ordering::Release);
    }

    /// Seals the session: consumers receive nothing more. Only `Session::end` calls it,
    /// with the end gate's write guard held, before anything is abandoned.
    pub(crate) fn seal(&self) {
        self.sealed.store(true, Ordering::Release);
    }

    /// Journals `event` (unless headless) and broadcasts it if it is new.
    pub(crate) async fn journal_and_broadcast(
        &self,
        event: SessionEvent,
    ) -> Result<Published, PublishError> {
        let event_id = event.event_id();
        let gate = self.end_gate.read().await;
        if let Some(owner) = self.refused_by_host() {
            return Err(PublishError::NotOwner {
                session_id: self.id,
                owner,
            });
        }
        let ended = self.is_ended();
        if ended && self.journal.is_none() {
            return Err(PublishError::SessionEnded {
                session_id: self.id,
                purged: false,
            });
        }
        let seq = match &self.journal {
            Some(journal) => {
                let answer = if ended {
                    // Nothing is appended or broadcast after the end; a retry of an
                    // event journaled before it still gets the truthful answer.
                    let record = JournalRecord::from(event.clone());
                    answer_after_end(journal.as_ref(), self.id, &record).await
                } else {
                    append(journal.as_ref(), self.id, event.clone().into()).await
                };
                match answer {
                    Ok(AppendOutcome {
                        seq,
                        appended: true,
                    }) => seq,
                    Ok(AppendOutcome {
                        seq,
                        appended: false,
                    }) => {
                        return Ok(Published::Duplicate { seq });
                    }
                    Err(AppendError::Collision { seq, .. }) => {
                        return Err(PublishError::Collision { event_id, seq });
                    }
                    Err(AppendError::SessionEnded { session, purged }) => {
                        return Err(PublishError::SessionEnded {
                            session_id: session,
                            purged,
                        });
                    }
                    Err(AppendError::Fenced { .. }) if self.not_owner().is_some() => {
                        return Err(PublishError::NotOwner {
                            session_id: self.id,
                            owner: self.not_owner().flatten(),
                        });
                    }
                    Err(e) => return Err(PublishError::Journal(e)),
                }
            }
            None => 0,
        };
        drop(gate);
        // No subscribers is a normal state, not an error.
        let _ = self.events.send(event);
        Ok(Published::New { seq })
    }
}
