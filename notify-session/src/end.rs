//! Ending a session: refuse or abandon what is pending, journal the end marker, and
//! refuse everything after it.

use notify_journal::{AppendError, JournalBackend, JournalError, SessionState};
use notify_types::{
    CommandId, JournalRecord, NotificationAbandoned, ProcessNotification, SessionEnded,
    SessionEvent, SessionId,
};
use tracing::Instrument as _;

use crate::error::EndError;
use crate::restore::restore;
use crate::session::{LoopEntry, Session, append};

/// What [`Session::end`] does with notifications still pending (appended, never
/// consumed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum IfPending {
    /// Refuse to end while any is pending ([`EndError::Pending`] says how many).
    #[default]
    Refuse,
    /// Journal each as `NotificationAbandoned` first, then end: nothing disappears
    /// unrecorded, and none is ever delivered.
    Abandon,
}

/// What [`Session::end`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Ended {
    /// The session.
    pub session_id: SessionId,
    /// The end marker's sequence in the journal (0 for a headless session, and for a
    /// session found already purged: see [`already`](Self::already)).
    pub seq: u64,
    /// The notifications journaled as abandoned, in journal order.
    pub abandoned: Vec<CommandId>,
    /// Notifications another handle of the session (another process) appended after
    /// this end last read the journal and before its end marker: journaled, but
    /// neither consumed nor abandoned, since nothing is appended after the marker.
    /// Always empty when only this handle (and its clones) writes the session.
    pub unresolved: Vec<CommandId>,
    /// Whether the session's end marker was already journaled (by this handle earlier,
    /// or by another process): this call wrote no marker (only the abandonments it
    /// lists, if another process ended the session while it was abandoning).
    pub already: bool,
}

impl Session {
    /// Ends the session: journals its end marker (`SessionEnded`), after which nothing
    /// is appended, dispatched or broadcast; the native loops are shut down, and their
    /// consumers receive nothing more (`recv` answers `None`: an abandoned notification
    /// is never delivered). Notify, lifecycle publish and acknowledgement of a new ID
    /// answer that the session ended
    /// ([`NotifyError::SessionEnded`](notify_types::NotifyError::SessionEnded),
    /// [`PublishError::SessionEnded`](crate::PublishError::SessionEnded),
    /// [`AckError::SessionEnded`](crate::AckError::SessionEnded)); a retry of one
    /// journaled before the end gets the truthful answer: `Duplicate` for the identical
    /// record (an acknowledgement: `Ok`), a collision for another record under its ID.
    /// Once the session is purged, every ID answers `SessionEnded { purged: true }`.
    ///
    /// Notifications still pending (appended, never consumed, as [`restore`] computes
    /// them from the journal) refuse the end ([`EndError::Pending`]) unless `pending`
    /// is [`IfPending::Abandon`], which journals each as abandoned before the end
    /// marker. Notifications and events in flight on this handle (or its clones) when
    /// `end` is called finish first; later ones wait for the end and are refused.
    /// Another handle on the same session (in another process) is ordered only by the
    /// journal: `end` reads the journal again after abandoning, until a reading finds
    /// nothing pending, and a notification that handle appends after the last reading
    /// and before the marker is reported in [`Ended::unresolved`] (journaled, never
    /// delivered, not abandoned). End a session from the handle that owns it (on
    /// PostgreSQL, hold the session's lease: a writer without it is fenced). Ending an ended session is not an
    /// error ([`Ended::already`]). A headless session has no journal: it ends at once,
    /// with nothing to check or abandon.
    ///
    /// ```
    /// use notify_session::prelude::*;
    /// use notify_session::{EndError, IfPending};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let journal = RedbJournal::open(dir.path().join("notify.redb"), JournalOptions::default())?;
    /// let (session_id, loop_id) = (SessionId::new(), LoopId::new());
    /// let session = Session::new(session_id, journal);
    /// let _inbox = session.register_loop(LoopConfig::new(session_id, loop_id))?;
    /// let n = ProcessCompletionNotification {
    ///     command_id: CommandId::new(),
    ///     session_id,
    ///     loop_id,
    ///     process_handle: "build-42".into(),
    ///     state: ProcessLifecycleState::Exited,
    ///     reason: ProcessTerminalReason::Exited,
    /// };
    /// session.notify_process_completion(n.clone()).await?;
    ///
    /// // Never consumed: ending refuses, and says how many are pending.
    /// assert!(matches!(session.end(IfPending::Refuse).await, Err(EndError::Pending { count: 1 })));
    /// let ended = session.end(IfPending::Abandon).await?;
    /// assert_eq!(ended.abandoned, vec![n.command_id]);
    ///
    /// // After the end, a retry of the same notification is answered truthfully (it is
    /// // journaled, and abandoned on the record); a new one is refused, never retried.
    /// assert_eq!(session.notify_process_completion(n.clone()).await?, Notified::Duplicate);
    /// let new = ProcessCompletionNotification { command_id: CommandId::new(), ..n };
    /// let refused = session.notify_process_completion(new).await.unwrap_err();
    /// assert!(matches!(refused, NotifyError::SessionEnded { purged: false, .. }));
    /// assert!(!refused.is_retryable());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`EndError::Pending`] (nothing written), [`EndError::Read`] if the journal
    /// cannot be read, [`EndError::Journal`] if an append failed (the abandonments
    /// journaled before it stay; ending again continues).
    ///
    /// # Cancel safety
    ///
    /// If cancelled, some abandonments and perhaps the end marker may be journaled;
    /// calling `end` again is safe and completes the end (an abandoned notification is
    /// no longer pending, and the end marker deduplicates).
    pub async fn end(&self, pending: IfPending) -> Result<Ended, EndError> {
        let span = tracing::info_span!("end", session = %self.inner.id, ?pending);
        self.end_inner(pending).instrument(span).await
    }

    async fn end_inner(&self, pending: IfPending) -> Result<Ended, EndError> {
        let session_id = self.inner.id;
        // Held to the end: notifies, publishes and acks in flight finish first, and
        // later ones wait, then see the session ended.
        let gate = self.inner.end_gate.write().await;
        if self.inner.is_ended() {
            drop(gate);
            // An earlier call may have been cancelled while shutting the loops down.
            self.shutdown_loops().await;
            let seq = match &self.inner.journal {
                Some(journal) => match journal.session_state(session_id).await {
                    Ok(SessionState::Ended { last_seq, .. }) => last_seq,
                    Ok(_) => 0,
                    Err(e) => return Err(EndError::Read(e)),
                },
                None => 0,
            };
            return Ok(Ended {
                session_id,
                seq,
                abandoned: Vec::new(),
                unresolved: Vec::new(),
                already: true,
            });
        }
        // Called with the write guard held.
        let mark = || {
            self.inner
                .ended
                .store(true, std::sync::atomic::Ordering::Release);
        };
        let Some(journal) = self.inner.journal.clone() else {
            mark();
            self.shutdown_loops().await;
            return Ok(Ended {
                session_id,
                seq: 0,
                abandoned: Vec::new(),
                unresolved: Vec::new(),
                already: false,
            });
        };
        // Read what is pending, abandon it, and read again until a reading finds
        // nothing pending: a notification another handle appends meanwhile is found
        // by the next reading and abandoned too.
        let mut abandoned = Vec::new();
        let mut rounds = 0;
        let report = loop {
            let report = restore(session_id, journal.as_ref())
                .await
                .map_err(|crate::RestoreError::Replay(e)| EndError::Read(e))?;
            if report.state != SessionState::Live {
                mark();
                self.shutdown_loops().await;
                return Ok(Ended {
                    session_id,
                    seq: if report.state.is_purged() {
                        0
                    } else {
                        report.last_seq
                    },
                    // Abandonments of an earlier round stay journaled (and listed).
                    abandoned,
                    unresolved: Vec::new(),
                    already: true,
                });
            }
            let count = report.pending_count();
            if count == 0 || rounds == MAX_ROUNDS {
                break report;
            }
            if pending == IfPending::Refuse {
                return Err(EndError::Pending { count });
            }
            for (&loop_id, commands) in &report.pending {
                for command in commands {
                    let cause = command.command_id();
                    let event = NotificationAbandoned::new(session_id, loop_id, cause);
                    append(
                        journal.as_ref(),
                        session_id,
                        SessionEvent::from(event).into(),
                    )
                    .await
                    .map_err(EndError::Journal)?;
                    abandoned.push(cause);
                }
            }
            rounds += 1;
        };
        let marker = SessionEvent::from(SessionEnded::new(session_id));
        let (seq, already) = match append(journal.as_ref(), session_id, marker.clone().into()).await
        {
            Ok(outcome) => (outcome.seq, !outcome.appended),
            // Ended meanwhile by another process sharing the journal.
            Err(AppendError::SessionEnded { purged, .. }) => {
                let seq = if purged { 0 } else { report.last_seq };
                (seq, true)
            }
            Err(e) => return Err(EndError::Journal(e)),
        };
        // Frames between the last reading and the marker were appended by another
        // handle: the notifications among them can no longer be abandoned (nothing is
        // appended after the marker), so they are reported.
        let mut unresolved: Vec<CommandId> = if already {
            Vec::new()
        } else {
            // Still pending at the last reading: only after MAX_ROUNDS readings that
            // each found more (another handle kept appending).
            report
                .pending
                .values()
                .flatten()
                .map(ProcessNotification::command_id)
                .collect()
        };
        if !already && seq > report.last_seq + 1 {
            unresolved.extend(
                stragglers(journal.as_ref(), session_id, report.last_seq + 1, seq)
                    .await
                    .map_err(EndError::Read)?,
            );
        }
        if !unresolved.is_empty() {
            tracing::warn!(
                count = unresolved.len(),
                "notifications appended by another handle while the session ended were neither consumed nor abandoned"
            );
        }
        mark();
        drop(gate);
        if !already {
            // No subscribers is a normal state, not an error.
            let _ = self.inner.events.send(marker);
        }
        self.shutdown_loops().await;
        if !already {
            crate::metrics::ended(abandoned.len());
        }
        tracing::info!(seq, abandoned = abandoned.len(), "session ended");
        Ok(Ended {
            session_id,
            seq,
            abandoned,
            unresolved,
            already,
        })
    }

    /// Shuts every native loop down (they stay registered, answering `Exited`).
    async fn shutdown_loops(&self) {
        for loop_id in self.loops() {
            if let Some(LoopEntry::Native(handle)) = self.entry(loop_id) {
                handle.shutdown().await;
            }
        }
    }

    /// Whether this session has ended (through [`end`](Self::end) on this handle or a
    /// clone). A session ended by another process sharing the journal is found out at
    /// its next append.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads (it waits while an `end` is in progress).
    pub async fn is_ended(&self) -> bool {
        let _gate = self.inner.end_gate.read().await;
        self.inner.is_ended()
    }
}

/// Read-abandon rounds before the end marker goes regardless (another handle that
/// keeps appending would otherwise hold the end off forever); what is still pending
/// then, and what it appends after the last reading, is reported in
/// [`Ended::unresolved`].
const MAX_ROUNDS: usize = 8;

/// The commands among frames `from..to` of `session` that no frame in that range
/// consumes or abandons.
async fn stragglers(
    journal: &dyn JournalBackend,
    session: SessionId,
    from: u64,
    to: u64,
) -> Result<Vec<CommandId>, JournalError> {
    let limit = usize::try_from(to.saturating_sub(from)).unwrap_or(usize::MAX);
    let frames = journal.replay(session, from, limit).await?;
    let settled: Vec<CommandId> = frames
        .iter()
        .filter_map(|(_, r)| match r {
            JournalRecord::Event(SessionEvent::NotificationConsumed(c)) => Some(c.cause()),
            JournalRecord::Event(SessionEvent::NotificationAbandoned(a)) => Some(a.cause()),
            _ => None,
        })
        .collect();
    Ok(frames
        .iter()
        .filter_map(|(_, r)| match r {
            JournalRecord::Command(c) if !settled.contains(&c.command_id()) => Some(c.command_id()),
            _ => None,
        })
        .collect())
}
