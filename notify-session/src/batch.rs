//! Acknowledging many notifications at once: [`SessionConsumer::recv_many`] hands out
//! a [`SessionBatch`], and [`SessionBatch::ack`] journals every consumption of it as
//! one atomic group (one durable commit, however many), then releases each in
//! acceptance order. A consumer draining a backlog so pays one commit per batch, not
//! one per notification, and still releases nothing before its consumption is durable.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use notify_journal::{AppendError, AppendOutcome};
use notify_types::{CommandId, JournalRecord, NotificationConsumed, SessionEvent};

use crate::consumer::{SessionConsumer, SessionReceived, ack_error, ack_outcome, traced_ack};
use crate::error::AckError;
use crate::shared::Shared;

/// Why a batch acknowledgement failed, and what became of each notification of the
/// batch: those [`acknowledged`](Self::acknowledged) have their consumption journaled
/// (never delivered again), those [`returned`](Self::returned) are handed to the
/// consumer again, at the front and in acceptance order.
///
/// `E` is what failed: [`AckError`] for [`SessionBatch::ack`],
/// [`TxAckError`](crate::TxAckError) for [`SessionBatch::ack_with`].
#[derive(Debug, Clone, thiserror::Error)]
#[error("acknowledging a batch failed ({} acknowledged, {} handed back)", acknowledged.len(), returned.len())]
#[non_exhaustive]
pub struct AckBatchError<E = AckError> {
    /// What failed, as the single acknowledgement answers it.
    #[source]
    pub error: E,
    /// The notifications whose consumption is journaled, in batch order: done (a
    /// journaled one whose release found the loop exited is here too, with
    /// [`AckError::LoopExited`]).
    pub acknowledged: Vec<CommandId>,
    /// The notifications handed to the consumer again, in batch order: nothing of
    /// theirs was journaled (after a commit whose outcome is unknown, perhaps all of
    /// them were: acknowledging them again finds out, and journals nothing twice).
    pub returned: Vec<CommandId>,
}

/// Notifications of one loop received together ([`SessionConsumer::recv_many`]), in
/// acceptance order: read them through `Deref` (`batch.len()`, `batch.iter()`,
/// `batch[0]`), act on them, then acknowledge them all with [`ack`](Self::ack) (or
/// [`ack_with`](Self::ack_with) on redb) in one commit. Dropping the batch, or any of
/// its notifications taken out with [`into_vec`](Self::into_vec), hands them to the
/// consumer again (at the front).
#[must_use = "notifications that are not acknowledged are delivered again"]
pub struct SessionBatch {
    pub(crate) session: Arc<Shared>,
    pub(crate) items: Vec<SessionReceived>,
}

impl fmt::Debug for SessionBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionBatch")
            .field("session", &self.session.id)
            .field("items", &self.items)
            .finish()
    }
}

impl Deref for SessionBatch {
    type Target = [SessionReceived];

    fn deref(&self) -> &[SessionReceived] {
        &self.items
    }
}

impl SessionConsumer {
    /// Waits for the next live notification, as [`recv`](Self::recv) does, and takes
    /// with it those already queued behind it, up to `max` in all, in acceptance order:
    /// a batch to act on and acknowledge in one commit ([`SessionBatch::ack`]). It
    /// never waits for more than the first.
    ///
    /// An empty batch when `recv` would answer `None` (the loop exited with nothing
    /// left, the session ended or is ending, its host stopped serving it here), and at
    /// once when `max` is 0.
    ///
    /// ```
    /// use notify_session::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let journal = RedbJournal::open(dir.path().join("notify.redb"), RedbOptions::default())?;
    /// let (session_id, loop_id) = (SessionId::new(), LoopId::new());
    /// let session = Session::new(session_id, journal);
    /// let mut inbox = session.register_loop(LoopConfig::new(session_id, loop_id))?;
    /// for i in 0..3 {
    ///     let n = ProcessCompletionNotification {
    ///         command_id: CommandId::new(),
    ///         session_id,
    ///         loop_id,
    ///         process_handle: format!("build-{i}"),
    ///         state: ProcessLifecycleState::Exited,
    ///         reason: ProcessTerminalReason::Exited,
    ///     };
    ///     session.notify_process_completion(n).await?;
    /// }
    ///
    /// let batch = inbox.recv_many(100).await;
    /// let handles: Vec<_> = batch.iter().map(|r| r.completion().process_handle.clone()).collect();
    /// assert_eq!(handles, ["build-0", "build-1", "build-2"]);
    /// batch.ack().await?; // three consumptions, one durable commit, then released in order
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the notifications leave the queue only in the poll that returns
    /// them.
    pub async fn recv_many(&mut self, max: usize) -> SessionBatch {
        let mut batch = SessionBatch {
            session: self.session.clone(),
            items: Vec::new(),
        };
        if max == 0 || !self.session.delivers() {
            return batch;
        }
        let received = self.consumer.recv_many(max).await;
        if !self.session.delivers() {
            // Dropped here: handed back (or discarded by a loop that has ended).
            return batch;
        }
        batch.items = received
            .into_iter()
            .map(|received| SessionReceived {
                session: self.session.clone(),
                loop_id: self.loop_id,
                received,
            })
            .collect();
        batch
    }
}

impl SessionBatch {
    /// The notifications, to act on or acknowledge one by one; each dropped without
    /// an acknowledgement is handed to the consumer again.
    #[must_use]
    pub fn into_vec(self) -> Vec<SessionReceived> {
        self.items
    }

    /// Splits the batch at `at`: `self` keeps the first `at`, the rest is returned (a
    /// batch of its own, to acknowledge later or drop). `at` past the end takes nothing.
    pub fn split_off(&mut self, at: usize) -> SessionBatch {
        let at = at.min(self.items.len());
        SessionBatch {
            session: self.session.clone(),
            items: self.items.split_off(at),
        }
    }

    /// Acknowledges every notification of the batch: journals their consumptions
    /// (`NotificationConsumed`) as **one atomic group** ([`append_all`]: one durable
    /// commit, all or none), broadcasts each new one, then releases them in the loop in
    /// acceptance order. As for [`SessionReceived::ack`], a consumption journaled
    /// earlier (a retry) is a duplicate and is not broadcast again, and nothing is
    /// released before the commit that holds its consumption. An empty batch is `Ok`.
    ///
    /// [`append_all`]: notify_journal::JournalBackend::append_all
    ///
    /// # Errors
    ///
    /// [`AckBatchError`], whose `error` is what [`SessionReceived::ack`] would answer:
    ///
    /// * [`AckError::Journal`] (the journal refused or failed the group) and
    ///   [`AckError::NotOwner`] (the session's host stopped serving it here, or its
    ///   lease was fenced): nothing of the batch was journaled (after a commit whose
    ///   outcome is unknown, perhaps all of it), nothing released, every notification
    ///   is `returned`.
    /// * [`AckError::SessionEnded`]: the session ended before the batch was journaled.
    ///   Those of the batch journaled before the end (an earlier acknowledgement) are
    ///   `acknowledged`; the rest are `returned` (their consumer receives nothing more:
    ///   they were abandoned on the record, or the end refused while they were pending).
    /// * [`AckError::LoopExited`]: all were journaled (all `acknowledged`), but the loop
    ///   had exited before their release.
    /// * [`AckError::AnswerCount`]: the journal answered the group with another number
    ///   of outcomes than it had records; nothing released, every notification is
    ///   `returned`.
    ///
    /// # Cancel safety
    ///
    /// A cancelled batch acknowledgement **released none** of the batch: every
    /// notification is handed to the consumer again. The releases happen in the same
    /// poll as the journal's answer, so a cancellation can only come before them. The
    /// group may still commit (whole, never in part); acknowledging the notifications
    /// again is safe and finds their consumptions journaled (no second broadcast).
    pub async fn ack(self) -> Result<(), AckBatchError> {
        if self.items.is_empty() {
            return Ok(());
        }
        let span = self.ack_span();
        traced_ack(span, self.ack_inner(), |answer| {
            ack_outcome(answer.as_ref().err().map(|e| &e.error))
        })
        .await
    }

    async fn ack_inner(self) -> Result<(), AckBatchError> {
        let session = self.session.clone();
        let events: Vec<SessionEvent> = self.items.iter().map(consumption).collect();
        let gate = session.end_gate.read().await;
        if let Some(owner) = session.refused_by_host() {
            return Err(self.refuse(AckError::NotOwner {
                session_id: session.id,
                owner,
            }));
        }
        let count = self.items.len();
        let Some(journal) = &session.journal else {
            if session.is_ended() {
                return Err(self.refuse(AckError::SessionEnded {
                    session_id: session.id,
                }));
            }
            drop(gate);
            // Headless: nothing to journal; released at once.
            return self.release_new(events, &vec![true; count]);
        };
        let records: Vec<JournalRecord> = events.iter().cloned().map(Into::into).collect();
        let answer = if session.is_ended() {
            Err(AppendError::SessionEnded {
                session: session.id,
                purged: false,
            })
        } else {
            journal.append_all(session.id, records.clone(), None).await
        };
        match answer {
            Ok(outcomes) => {
                drop(gate);
                let appended: Vec<bool> = outcomes.iter().map(|o| o.appended).collect();
                self.release_new(events, &appended)
            }
            Err(e) if matches!(e.refusal(), AppendError::SessionEnded { .. }) => {
                let answers = self.answers_after_end(&records).await;
                drop(gate);
                self.settle_ended(answers)
            }
            Err(e) => Err(self.refuse(ack_error(&session, e))),
        }
    }

    /// The `notify.ack` span (info) of a batch acknowledgement, in the caller's task
    /// under its span: `session`, `loop_id`, `notifications` (how many), and `outcome`
    /// once answered, as [`SessionReceived::ack`]'s.
    pub(crate) fn ack_span(&self) -> tracing::Span {
        let loop_id = self.items.first().map(|r| r.loop_id.to_string());
        tracing::info_span!(
            "notify.ack",
            session = %self.session.id,
            loop_id = %loop_id.unwrap_or_default(),
            notifications = self.items.len(),
            outcome = tracing::field::Empty,
        )
    }

    /// What each record answers once the session ended (here, or in another process):
    /// a consumption journaled before the end is a duplicate, the rest are refused
    /// ([`Shared::answer_ended`]).
    pub(crate) async fn answers_after_end(
        &self,
        records: &[JournalRecord],
    ) -> Vec<Result<AppendOutcome, AppendError>> {
        let mut answers = Vec::with_capacity(records.len());
        for record in records {
            answers.push(self.session.answer_ended(record).await);
        }
        answers
    }

    /// `Err(`[`AckError::AnswerCount`]`)` unless the journal answered one outcome for
    /// each notification of the batch: a journal that answers fewer (or more) broke
    /// its contract, and no notification is paired with another's answer or left out.
    fn check_answers(&self, answers: usize) -> Result<(), AckError> {
        if answers == self.items.len() {
            return Ok(());
        }
        Err(AckError::AnswerCount {
            session_id: self.session.id,
            records: self.items.len(),
            answers,
        })
    }

    /// Refuses the whole batch with `error`: every notification is handed back.
    pub(crate) fn refuse<E>(self, error: E) -> AckBatchError<E> {
        let returned = self.items.iter().map(SessionReceived::command_id).collect();
        // Dropped here: each goes back to the consumer at its acceptance place.
        drop(self.items);
        AckBatchError {
            error,
            acknowledged: Vec::new(),
            returned,
        }
    }

    /// Broadcasts the consumptions that are new (`appended[i]`), then releases every
    /// notification in order (all are journaled). One answer per notification, or
    /// none is released: every one is handed back with [`AckError::AnswerCount`].
    pub(crate) fn release_new(
        self,
        events: Vec<SessionEvent>,
        appended: &[bool],
    ) -> Result<(), AckBatchError> {
        if let Err(e) = self.check_answers(appended.len()) {
            return Err(self.refuse(e));
        }
        for (event, &new) in events.into_iter().zip(appended) {
            if new {
                crate::metrics::consumed();
                // No subscribers is a normal state, not an error.
                let _ = self.session.events.send(event);
            }
        }
        let duplicates = appended.iter().map(|new| !new).collect::<Vec<_>>();
        self.release_all(&duplicates)
    }

    /// Releases every notification, all journaled (`duplicate[i]`: journaled earlier),
    /// in order. Completes without yielding: each release completes on its first poll.
    fn release_all(self, duplicate: &[bool]) -> Result<(), AckBatchError> {
        let acknowledged: Vec<CommandId> =
            self.items.iter().map(SessionReceived::command_id).collect();
        let mut failed = None;
        for (item, &duplicate) in self.items.into_iter().zip(duplicate) {
            if let Err(e) = item.release_now(duplicate) {
                failed.get_or_insert(e);
            }
        }
        match failed {
            None => Ok(()),
            Some(error) => Err(AckBatchError {
                error,
                acknowledged,
                returned: Vec::new(),
            }),
        }
    }

    /// The answer once the session ended: each journaled one (answered as a duplicate)
    /// is released (the ended loop has nothing left to release), the others handed
    /// back with the first refusal. One answer per notification, or none is released
    /// (as [`release_new`](Self::release_new)).
    pub(crate) fn settle_ended(
        self,
        answers: Vec<Result<AppendOutcome, AppendError>>,
    ) -> Result<(), AckBatchError> {
        if let Err(e) = self.check_answers(answers.len()) {
            return Err(self.refuse(e));
        }
        let session = self.session.clone();
        let mut error = None;
        let mut acknowledged = Vec::new();
        let mut returned = Vec::new();
        for (item, answer) in self.items.into_iter().zip(answers) {
            match answer {
                Ok(_) => {
                    acknowledged.push(item.command_id());
                    if let Err(e) = item.release_now(true) {
                        error.get_or_insert(e);
                    }
                }
                Err(e) => {
                    returned.push(item.command_id());
                    error.get_or_insert(ack_error(&session, e));
                    // Dropped: handed back, if the loop still takes anything back.
                    drop(item);
                }
            }
        }
        match error {
            None => Ok(()),
            Some(error) => Err(AckBatchError {
                error,
                acknowledged,
                returned,
            }),
        }
    }
}

/// The consumption event of one notification.
pub(crate) fn consumption(received: &SessionReceived) -> SessionEvent {
    SessionEvent::NotificationConsumed(NotificationConsumed::new(
        received.session.id,
        received.loop_id,
        received.command_id(),
    ))
}
