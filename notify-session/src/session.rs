//! The session: routing, ownership, append-before-dispatch and lifecycle events.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use notify_journal::{AppendError, JournalBackend, SessionState};
use notify_loop::{Delivery, LoopConfig};
use notify_types::{
    JournalRecord, LoopId, Notified, NotifyError, NotifyFuture, ProcessCompletionNotification,
    ProcessCompletionNotifier, ProcessLifecycleMetadata, ProcessNotification, SessionEvent,
    SessionId, consumed_event_id,
};
use tokio::sync::broadcast;
use tracing::Instrument as _;

use crate::append::{answer_after_end, append};
use crate::consumer::SessionConsumer;
use crate::error::{PublishError, RegisterError};
use crate::shared::{LoopEntry, Published, Shared};

/// One agent session: the front door for process completion notifications.
///
/// A session has one [`SessionId`], an optional journal (none = headless) and a
/// registry of loops. Cloning is cheap and clones share everything.
///
/// ```
/// # use std::sync::Arc;
/// # use notify_session::*;
/// # use notify_types::*;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let session = Session::headless(SessionId::new());
/// let loop_id = LoopId::new();
/// let mut consumer = session.register_loop(notify_loop::LoopConfig::new(session.id(), loop_id))?;
///
/// let n = ProcessCompletionNotification {
///     command_id: CommandId::new(),
///     session_id: session.id(),
///     loop_id,
///     process_handle: "build-42".into(),
///     state: ProcessLifecycleState::Exited,
///     reason: ProcessTerminalReason::Exited,
/// };
/// assert_eq!(session.notify_process_completion(n.clone()).await?, Notified::Accepted);
/// assert_eq!(session.notify_process_completion(n).await?, Notified::Duplicate);
///
/// let received = consumer.recv().await.ok_or("loop exited")?;
/// received.ack().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Session {
    pub(crate) shared: Arc<Shared>,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.shared.id)
            .field("headless", &self.shared.journal.is_none())
            .finish_non_exhaustive()
    }
}

/// Shares `journal`, without wrapping an `Arc<dyn JournalBackend>` a second time.
fn into_shared<J: JournalBackend + 'static>(journal: J) -> Arc<dyn JournalBackend> {
    let mut journal = Some(journal);
    if let Some(shared) =
        (&mut journal as &mut dyn Any).downcast_mut::<Option<Arc<dyn JournalBackend>>>()
        && let Some(shared) = shared.take()
    {
        return shared;
    }
    match journal {
        Some(journal) => Arc::new(journal),
        // ok: `journal` is `Some` unless the downcast above took it and returned.
        None => unreachable!("the journal was taken only when returned"),
    }
}

impl Session {
    /// A session whose notifications and events are journaled in `journal`: any
    /// [`JournalBackend`], by value or shared (`RedbJournal`, `Arc<RedbJournal>`,
    /// `Arc<dyn JournalBackend>`, the testkit's `MemoryJournal`, ...).
    ///
    /// Keep a clone (or an `Arc`) of the journal to [`restore`](crate::restore) from it
    /// later; [`journal`](Self::journal) also returns it.
    ///
    /// ```
    /// # use notify_session::prelude::*;
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let journal = RedbJournal::open(dir.path().join("notify.redb"), RedbOptions::default())?;
    /// let session = Session::new(SessionId::new(), journal.clone());
    /// # let _ = session;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn new(id: SessionId, journal: impl JournalBackend + 'static) -> Self {
        Self::build(id, Some(into_shared(journal)))
    }

    /// A session without a journal: the loops' guards alone detect duplicates, and
    /// nothing survives a crash.
    #[must_use]
    pub fn headless(id: SessionId) -> Self {
        Self::build(id, None)
    }

    fn build(id: SessionId, journal: Option<Arc<dyn JournalBackend>>) -> Self {
        Self {
            shared: Arc::new(Shared::new(id, journal)),
        }
    }

    /// This session's ID.
    #[must_use]
    pub fn id(&self) -> SessionId {
        self.shared.id
    }

    /// The journal, unless headless.
    #[must_use]
    pub fn journal(&self) -> Option<&Arc<dyn JournalBackend>> {
        self.shared.journal.as_ref()
    }

    /// Spawns a native loop on the current tokio runtime, registers it and returns its
    /// consumer side. Seed `config` from a [`RestoreReport`](crate::RestoreReport) to
    /// redeliver what a crash left pending.
    ///
    /// # Errors
    ///
    /// [`RegisterError`] if the ID is taken, `config` names another session, or the
    /// session has ended. The end is checked under the lock [`end`](Self::end) takes
    /// to shut the loops down, so a loop registered while a session ends is either
    /// refused or shut down with the others.
    pub fn register_loop(&self, config: LoopConfig) -> Result<SessionConsumer, RegisterError> {
        let (loop_id, session_id) = (config.loop_id(), config.session_id());
        if session_id != self.shared.id {
            return Err(RegisterError::SessionMismatch {
                want: self.shared.id,
                got: session_id,
            });
        }
        let mut loops = self.shared.loops.write().unwrap_or_else(|p| p.into_inner());
        self.refuse_if_ended()?;
        if loops.contains_key(&loop_id) {
            return Err(RegisterError::AlreadyRegistered { loop_id });
        }
        let seeded = config.seeded().len();
        let (handle, consumer) = notify_loop::spawn(config);
        loops.insert(loop_id, LoopEntry::Native(handle));
        drop(loops);
        crate::metrics::redelivered(seeded);
        Ok(SessionConsumer::new(
            Arc::clone(&self.shared),
            loop_id,
            consumer,
        ))
    }

    /// Registers a loop of a foreign engine: notifications for it answer
    /// [`NotifyError::Unsupported`].
    ///
    /// # Errors
    ///
    /// [`RegisterError::AlreadyRegistered`] if the ID is taken,
    /// [`RegisterError::SessionEnded`] if the session has ended.
    pub fn register_foreign_loop(&self, loop_id: LoopId) -> Result<(), RegisterError> {
        let mut loops = self.shared.loops.write().unwrap_or_else(|p| p.into_inner());
        self.refuse_if_ended()?;
        if loops.contains_key(&loop_id) {
            return Err(RegisterError::AlreadyRegistered { loop_id });
        }
        loops.insert(loop_id, LoopEntry::Foreign);
        Ok(())
    }

    /// Called with the loops' write lock held. `end` marks the session ended before it
    /// reads the loops to shut them down, so a registration either sees the mark or is
    /// in the registry that reading finds.
    fn refuse_if_ended(&self) -> Result<(), RegisterError> {
        if self.shared.is_ended() {
            return Err(RegisterError::SessionEnded {
                session_id: self.shared.id,
            });
        }
        Ok(())
    }

    /// Removes a loop from the registry and shuts a native one down. Later
    /// notifications for it answer [`NotifyError::LoopNotFound`]. Returns whether the
    /// loop was registered.
    ///
    /// # Cancel safety
    ///
    /// The loop is unregistered before the first await; cancelling only skips waiting
    /// for its shutdown.
    pub async fn remove_loop(&self, loop_id: LoopId) -> bool {
        let entry = self
            .shared
            .loops
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&loop_id);
        match entry {
            Some(LoopEntry::Native(handle)) => {
                handle.shutdown().await;
                // Its consumer may still acknowledge what it holds: still pending.
                self.shared.retire(handle);
                true
            }
            Some(LoopEntry::Foreign) => true,
            None => false,
        }
    }

    /// Shuts a native loop down but keeps it registered: later notifications for it
    /// answer `DeliveryStopped` (cause `Exited`), as for a loop whose owner is gone.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: shutting down is idempotent.
    pub async fn shutdown_loop(&self, loop_id: LoopId) -> bool {
        match self.entry(loop_id) {
            Some(LoopEntry::Native(handle)) => {
                handle.shutdown().await;
                true
            }
            _ => false,
        }
    }

    /// The registered loops, in no particular order.
    #[must_use]
    pub fn loops(&self) -> Vec<LoopId> {
        self.shared
            .loops
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .copied()
            .collect()
    }

    pub(crate) fn entry(&self, loop_id: LoopId) -> Option<LoopEntry> {
        self.shared
            .loops
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&loop_id)
            .cloned()
    }

    /// Delivers a completion notification: validate, check ownership, find the loop,
    /// append to the journal under `n.command_id`, then dispatch.
    ///
    /// The outcome table is [`NotifyError`]'s; `Ok` is `Accepted` or `Duplicate`.
    ///
    /// After the session's [end](Self::end) nothing is journaled or dispatched, but a
    /// retry is answered truthfully: `Duplicate` if the identical notification was
    /// journaled before the end (consumed, abandoned or left unresolved on the
    /// record), [`NotifyError::Collision`] if another one was under its ID, and
    /// [`NotifyError::SessionEnded`] for an ID never journaled (for every ID once the
    /// session is purged, and for every ID of an ended headless session, which has no
    /// record to ask). A `Duplicate` found in a session another handle ended is not
    /// dispatched either.
    ///
    /// # Errors
    ///
    /// Every other disposition, as a typed [`NotifyError`].
    ///
    /// # Cancel safety
    ///
    /// If cancelled, the notification may or may not have been journaled and
    /// dispatched; retrying with the same ID and identical notification is safe: it
    /// never journals a second frame, and answers as a first attempt would now
    /// (`Accepted` or `Duplicate`, or `DeliveryStopped` if the loop is full or gone).
    pub async fn notify_process_completion(
        &self,
        n: ProcessCompletionNotification,
    ) -> Result<Notified, NotifyError> {
        let span = tracing::info_span!(
            "notify",
            session = %self.shared.id,
            loop_id = %n.loop_id,
            command_id = %n.command_id,
        );
        let answer = self.notify_inner(n).instrument(span).await;
        crate::metrics::notified(&answer);
        answer
    }

    async fn notify_inner(
        &self,
        n: ProcessCompletionNotification,
    ) -> Result<Notified, NotifyError> {
        n.validate()?;
        if n.session_id != self.shared.id {
            return Err(NotifyError::OwnerMismatch {
                want: self.shared.id,
                got: n.session_id,
            });
        }
        // A session its host stopped serving answers "not the owner" before anything
        // else about its loops (checked again under the gate, below).
        if let Some(owner) = self.shared.stopped_by_host() {
            return Err(NotifyError::NotOwner {
                session_id: self.shared.id,
                owner,
            });
        }
        let handle = match self.entry(n.loop_id) {
            None => return Err(NotifyError::LoopNotFound { loop_id: n.loop_id }),
            Some(LoopEntry::Foreign) => {
                return Err(NotifyError::Unsupported { loop_id: n.loop_id });
            }
            Some(LoopEntry::Native(handle)) => handle,
        };
        let command = ProcessNotification::new(n);
        let command_id = command.command_id();
        let gate = self.shared.end_gate.read().await;
        if let Some(owner) = self.shared.stopped_by_host() {
            return Err(NotifyError::NotOwner {
                session_id: self.shared.id,
                owner,
            });
        }
        if self.shared.is_ended() {
            // Nothing is appended or dispatched after the end; a retry of a
            // notification journaled before it still gets the truthful answer.
            let Some(journal) = &self.shared.journal else {
                return Err(NotifyError::SessionEnded {
                    session_id: self.shared.id,
                    purged: false,
                });
            };
            return answer_after_end(
                journal.as_ref(),
                self.shared.id,
                &JournalRecord::from(command),
            )
            .await
            .map(|_| Notified::Duplicate)
            .map_err(|e| crate::error::notify_error(command_id, e));
        }
        if let Some(journal) = &self.shared.journal {
            let outcome = append(journal.as_ref(), self.shared.id, command.clone().into())
                .await
                .map_err(|e| match (&e, self.shared.not_owner()) {
                    (AppendError::Fenced { .. }, Some(owner)) => NotifyError::NotOwner {
                        session_id: self.shared.id,
                        owner,
                    },
                    _ => crate::error::notify_error(command_id, e),
                })?;
            if !outcome.appended {
                let unavailable = |e| {
                    NotifyError::Journal(notify_types::JournalFailure::new(
                        notify_types::JournalFailureKind::Unavailable,
                        e,
                    ))
                };
                // Journaled before the session's end (by another handle sharing the
                // journal): consumed or abandoned on the record, never dispatched again.
                let state = journal
                    .session_state(self.shared.id)
                    .await
                    .map_err(unavailable)?;
                if state != SessionState::Live {
                    tracing::debug!("retry of a notification journaled before the end");
                    return Ok(Notified::Duplicate);
                }
                let consumed = journal
                    .lookup(self.shared.id, *consumed_event_id(command_id).as_uuid())
                    .await
                    .map_err(unavailable)?;
                if consumed.is_some() {
                    tracing::debug!("retry of a consumed notification");
                    return Ok(Notified::Duplicate);
                }
            }
        }
        // The gate stays held through the dispatch: an end waits for it, so a
        // notification it lets through is delivered before the end abandons what is
        // pending (a delivery never waits on the session, so this cannot deadlock).
        let delivery = dispatch(&handle, self.shared.id, command).await;
        drop(gate);
        match delivery {
            Delivery::Accepted => Ok(Notified::Accepted),
            Delivery::Duplicate => Ok(Notified::Duplicate),
            Delivery::Stopped(cause) => Err(NotifyError::DeliveryStopped {
                loop_id: handle.loop_id(),
                cause,
            }),
        }
    }

    /// Journals a lifecycle event under its `event_id`, then broadcasts it.
    ///
    /// After the session's [end](Self::end) nothing is journaled or broadcast: an event
    /// journaled before the end answers `Duplicate` (its original seq), another record
    /// under its ID [`PublishError::Collision`], and a new ID (any ID once purged)
    /// [`PublishError::SessionEnded`].
    ///
    /// # Errors
    ///
    /// [`PublishError`]: owner mismatch, invalid metadata, collision, session ended,
    /// journal failure.
    ///
    /// # Cancel safety
    ///
    /// If cancelled, the event may or may not be journaled and broadcast; publishing
    /// it again is safe (a journaled one answers `Duplicate`).
    pub async fn publish_lifecycle(
        &self,
        metadata: ProcessLifecycleMetadata,
    ) -> Result<Published, PublishError> {
        if metadata.session_id != self.shared.id {
            return Err(PublishError::OwnerMismatch {
                want: self.shared.id,
                got: metadata.session_id,
            });
        }
        metadata
            .validate()
            .map_err(|e| PublishError::Invalid { field: e.field() })?;
        let event = SessionEvent::Lifecycle(metadata);
        self.shared.journal_and_broadcast(event).await
    }

    /// A live stream of newly journaled events (lifecycle events and consumptions).
    ///
    /// Events journaled before the call are not included: read them with
    /// [`restore`](crate::restore) or the journal's replay. A subscriber more than 1024
    /// events behind sees `Lagged` and skips ahead.
    #[must_use]
    pub fn subscribe(&self) -> broadcast::Receiver<SessionEvent> {
        self.shared.events.subscribe()
    }
}

impl ProcessCompletionNotifier for Session {
    fn notify_process_completion(&self, n: ProcessCompletionNotification) -> NotifyFuture<'_> {
        Box::pin(Session::notify_process_completion(self, n))
    }
}

/// Hands a journaled notification to its loop's inbox, inside a `notify.dispatch`
/// span (info): `session`, `loop_id`, `command_id` and `outcome` (`accepted`,
/// `duplicate`, `stopped`), made in the caller's task under its span.
async fn dispatch(
    handle: &notify_loop::LoopHandle,
    session: SessionId,
    command: ProcessNotification,
) -> Delivery {
    let span = tracing::info_span!(
        "notify.dispatch",
        %session,
        loop_id = %handle.loop_id(),
        command_id = %command.command_id(),
        outcome = tracing::field::Empty,
    );
    let delivery = handle.deliver(command).instrument(span.clone()).await;
    span.record(
        "outcome",
        match delivery {
            Delivery::Accepted => "accepted",
            Delivery::Duplicate => "duplicate",
            Delivery::Stopped(_) => "stopped",
        },
    );
    delivery
}
