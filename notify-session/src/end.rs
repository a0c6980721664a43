//! Ending a session: refuse or abandon what is pending, journal the abandonments and
//! the end marker as one atomic group, and refuse everything after it.

use notify_journal::{AppendError, JournalBackend, JournalError, SessionState};
use notify_types::{
    CommandId, JournalRecord, NotificationAbandoned, SessionEnded, SessionEvent, SessionId,
};
use tracing::Instrument as _;

use crate::error::EndError;
use crate::restore::restore;
use crate::session::Session;
use crate::shared::LoopEntry;

/// What [`Session::end`] does with notifications still pending (appended, never
/// consumed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum IfPending {
    /// Refuse to end while any is pending ([`EndError::Pending`] says how many).
    #[default]
    Refuse,
    /// Journal each as `NotificationAbandoned`, in one atomic group with the end
    /// marker: nothing disappears unrecorded, and none is ever delivered.
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
    /// The notifications journaled as abandoned (with the end marker, in one atomic
    /// group), in journal order.
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
    /// is [`IfPending::Abandon`], which journals each as abandoned and the end marker
    /// in one atomic group ([`JournalBackend::append_all`]): both commit, or neither.
    /// Notifications and events in flight on this handle (or its clones) when `end` is
    /// called finish first; later ones wait for the end and are refused.
    ///
    /// Before anything is abandoned, the session is *sealed*: its consumers receive
    /// nothing more (`recv` answers `None`) and its native loops take nothing more. A
    /// seal is never undone. If the end then fails ([`EndError::Journal`]) or its
    /// future is dropped, the journal holds the whole group or none of it (an ack of a
    /// notification received before the seal is then journaled, or refused as the
    /// session ended), the session stays sealed, and calling `end` again completes it.
    /// Either way nothing abandoned is ever delivered, and no notification is both
    /// consumed and abandoned.
    ///
    /// Another handle on the same session (in another process) is ordered only by the
    /// journal: the group is conditional on the head `end` read, so if that handle
    /// appended meanwhile nothing is written and `end` reads again (a few times; then
    /// the group goes regardless), and a notification that handle appends after the
    /// last reading and before the group is reported in [`Ended::unresolved`]
    /// (journaled, never delivered, not abandoned). End a session from the handle that
    /// owns it (on PostgreSQL, hold the session's lease: a writer without it is
    /// fenced). Ending an ended session is not an error ([`Ended::already`]). A
    /// headless session has no journal: it ends at once, with nothing to check or
    /// abandon.
    ///
    /// ```
    /// use notify_session::prelude::*;
    /// use notify_session::{EndError, IfPending};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let journal = RedbJournal::open(dir.path().join("notify.redb"), RedbOptions::default())?;
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
    /// cannot be read, [`EndError::Journal`] if the group's append failed (nothing of
    /// it was journaled, or, after an unknown commit outcome, perhaps all of it; the
    /// session stays sealed, and ending again completes it).
    ///
    /// # Cancel safety
    ///
    /// If cancelled, the abandonments and the end marker are journaled together or not
    /// at all, and the session stays sealed if abandoning had begun; calling `end`
    /// again is safe and completes the end (it finds the session ended, or abandons
    /// what is still pending).
    pub async fn end(&self, pending: IfPending) -> Result<Ended, EndError> {
        let span = tracing::info_span!("end", session = %self.shared.id, ?pending);
        self.end_inner(pending).instrument(span).await
    }

    async fn end_inner(&self, pending: IfPending) -> Result<Ended, EndError> {
        let session_id = self.shared.id;
        // Held to the end: notifies, publishes and acks in flight finish first, and
        // later ones wait, then see the session ended.
        let gate = self.shared.end_gate.write().await;
        if self.shared.is_ended() {
            drop(gate);
            // An earlier call may have been cancelled while shutting the loops down.
            self.shutdown_loops().await;
            let seq = match &self.shared.journal {
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
        let mark = || self.shared.mark_ended();
        let Some(journal) = self.shared.journal.clone() else {
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
        let marker = SessionEvent::from(SessionEnded::new(session_id));
        // Read what is pending and journal its abandonments with the end marker as one
        // atomic group, conditional on the head read: if another handle appended
        // meanwhile, nothing is written and the next reading finds what it appended.
        let mut rounds = 0;
        let (report, abandoned, group) = loop {
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
                    abandoned: Vec::new(),
                    unresolved: Vec::new(),
                    already: true,
                });
            }
            let count = report.pending_count();
            if count > 0 && pending == IfPending::Refuse {
                return Err(EndError::Pending { count });
            }
            if count > 0 {
                // From here on nothing pending is delivered, whatever becomes of this
                // end: the abandonments may commit at any moment from the append on.
                self.seal().await;
            }
            let mut records = Vec::with_capacity(count + 1);
            let mut abandoned = Vec::with_capacity(count);
            for (&loop_id, commands) in &report.pending {
                for command in commands {
                    let cause = command.command_id();
                    let event = NotificationAbandoned::new(session_id, loop_id, cause);
                    records.push(SessionEvent::from(event).into());
                    abandoned.push(cause);
                }
            }
            records.push(marker.clone().into());
            // After MAX_ROUNDS readings that each found more, the group goes regardless
            // (another handle that keeps appending would hold the end off forever).
            let if_head = (rounds < MAX_ROUNDS).then_some(report.last_seq);
            let span =
                tracing::debug_span!("append_all", session = %session_id, records = records.len());
            match journal
                .append_all(session_id, records, if_head)
                .instrument(span)
                .await
            {
                Ok(outcomes) => break (report, abandoned, outcomes),
                Err(AppendError::HeadMoved { .. }) => rounds += 1,
                Err(e) => match e.refusal() {
                    // Ended meanwhile: by another process sharing the journal, or by an
                    // earlier `end` of this handle whose future was dropped after its
                    // group was sent (the group commits all the same).
                    AppendError::SessionEnded { .. } => {
                        let seq = match journal.session_state(session_id).await {
                            Ok(SessionState::Ended { last_seq, .. }) => last_seq,
                            Ok(_) => 0,
                            Err(e) => return Err(EndError::Read(e)),
                        };
                        mark();
                        self.shutdown_loops().await;
                        return Ok(Ended {
                            session_id,
                            seq,
                            abandoned: Vec::new(),
                            unresolved: Vec::new(),
                            already: true,
                        });
                    }
                    _ => return Err(EndError::Journal(e)),
                },
            }
        };
        let (first, seq, already) = match (group.first(), group.last()) {
            (Some(first), Some(last)) => (first.seq, last.seq, !last.appended),
            // One outcome per record, and the group is never empty.
            _ => (report.last_seq + 1, report.last_seq + 1, false),
        };
        let abandoned = if already { Vec::new() } else { abandoned };
        // Frames between the last reading and the group were appended by another
        // handle (only when the last round went regardless): the notifications among
        // them can no longer be abandoned (nothing is appended after the marker), so
        // they are reported.
        let mut unresolved = Vec::new();
        if !already && first > report.last_seq + 1 {
            unresolved = stragglers(journal.as_ref(), session_id, report.last_seq + 1, first)
                .await
                .map_err(EndError::Read)?;
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
            let _ = self.shared.events.send(marker);
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

    /// Stops every delivery before anything is abandoned: consumers receive nothing
    /// more and the native loops are shut down. Never undone: if this end fails, the
    /// next one completes it.
    async fn seal(&self) {
        self.shared.seal();
        self.shutdown_loops().await;
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
        let _gate = self.shared.end_gate.read().await;
        self.shared.is_ended()
    }
}

/// Readings whose conditional group found the head moved before the group goes
/// regardless (another handle that keeps appending would otherwise hold the end off
/// forever); what that handle appends after the last reading is reported in
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
