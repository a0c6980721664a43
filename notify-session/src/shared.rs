//! The state every handle of one session shares: the [`Session`](crate::Session) and
//! its clones, its consumers and the notifications they hand out. Both the session and
//! its consumers work through it, so neither needs the other.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use notify_journal::{AppendError, AppendOutcome, JournalBackend};
use notify_loop::LoopHandle;
use notify_types::{JournalRecord, LoopId, SessionEvent, SessionId};
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
        }
    }

    /// Whether the session has ended.
    pub(crate) fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Whether consumers may still receive: not once the session ended, nor once an
    /// end began abandoning.
    pub(crate) fn delivers(&self) -> bool {
        !self.is_ended() && !self.sealed.load(Ordering::Acquire)
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
