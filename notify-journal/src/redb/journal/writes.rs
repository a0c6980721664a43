//! [`RedbJournal`]'s writes: appends and groups queued to the writer, purge steps,
//! tombstone drops and imported states, and its [`JournalBackend`] impl.

use std::future::Future;
use std::sync::Arc;

use notify_types::{JournalRecord, SessionEvent, SessionId, Timestamp};
use tokio::sync::oneshot;
use tracing::Instrument;

use super::RedbJournal;
use crate::backend::{AppendOutcome, BoxFuture, JournalBackend};
use crate::error::{AppendError, JournalError};
use crate::integrity::{check_append, check_group};
use crate::redb::format::body;
use crate::redb::writer::lead::Claim;
use crate::redb::writer::{self, Chore, Group, Queued, Request};
use crate::retention::{ImportStateError, PurgeStep, SessionState, check_importable};

/// The writer's request for a checked `record`, and where its answer arrives.
pub(super) fn request(
    session: SessionId,
    record: &JournalRecord,
) -> (Request, oneshot::Receiver<writer::Reply>) {
    let mut body = Vec::new();
    body::encode(record, &mut body);
    let (reply, rx) = oneshot::channel();
    let request = Request {
        session: session.as_uuid().as_u128(),
        key: record.key().as_u128(),
        body,
        ends: matches!(record, JournalRecord::Event(SessionEvent::SessionEnded(_))),
        reply,
    };
    (request, rx)
}

impl RedbJournal {
    /// Appends `record` to `session`'s log under `record.key()`; resolves once the
    /// batch holding it has committed durably.
    ///
    /// The request is queued when this is called, not when the future is first polled.
    /// An append that finds the writer idle is written by this future itself when first
    /// polled, under the handle of a multi-thread runtime of two workers or more: it
    /// then blocks its thread for its own batch's commit, like a synchronous write (see
    /// `docs/design.md`, "The lone appender leads"). Any other append, or this future
    /// dropped, hands it to the writer thread. A future that took the lead but is polled
    /// late, never, or leaked still has its record written: the writer thread takes a
    /// lead left pending for a few ms over (about 8 ms at most), so awaiting something
    /// that waits for this record before awaiting this future only delays it that much.
    ///
    /// # Blocking
    ///
    /// The first poll of a lone append (the writer idle) blocks the calling thread for
    /// one durable commit: an fsync, a millisecond or more on a slow disk. Meanwhile the
    /// runtime's other workers can steal the tasks queued on that worker, but not the
    /// one in its LIFO slot (a task it just woke), which waits for the commit. On a
    /// runtime of one worker the whole runtime would stall, timers included, so there
    /// the append never writes inline (it hands its batch to the writer thread); nor on
    /// a current-thread runtime or outside any. On a thread that runs a current-thread
    /// runtime or a `LocalSet` while a multi-thread runtime's handle is entered (tokio
    /// reports the entered handle), the append does write inline, and that thread's
    /// local tasks stall for the commit. Where that matters, run appends on the
    /// multi-thread runtime's own tasks.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel the write: the record may or may not be
    /// journaled. Retrying with the identical record is always safe.
    ///
    /// # Errors
    ///
    /// See [`AppendError`].
    pub fn append(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> impl Future<Output = Result<AppendOutcome, AppendError>> + Send + 'static {
        let key = record.key();
        let span = tracing::debug_span!("journal.append", %session, %key);
        let submitted = span.in_scope(|| self.submit(session, &record));
        let answer = async move {
            let (mut rx, claim) = submitted?;
            if let Some(claim) = claim
                && let Some(reply) = claim.lead(&mut rx)
            {
                return reply;
            }
            match rx.await {
                Ok(reply) => reply,
                // The writer is gone without answering: it has stopped.
                Err(_) => Err(AppendError::Closed),
            }
        };
        crate::metrics::counted(crate::metrics::REDB, answer).instrument(span)
    }

    fn submit(
        &self,
        session: SessionId,
        record: &JournalRecord,
    ) -> Result<(oneshot::Receiver<writer::Reply>, Option<Claim>), AppendError> {
        check_append(session, record, self.inner.max_record_bytes)?;
        let (request, rx) = request(session, record);
        let lead = self.inner.queue.submit(Queued::One(request), true)?;
        Ok((rx, lead.map(|n| Claim(Arc::clone(&self.inner.lead), n))))
    }

    /// [`JournalBackend::append_all`]: appends `records` to `session`'s log as one
    /// atomic group, resolved inside the writer's batch like any append (other
    /// appenders' appends in the same batch are unaffected by its fate); resolves once
    /// that batch has committed durably.
    ///
    /// The group is queued when this is called, not when the future is first polled.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel the write: the group may or may not be
    /// journaled, whole or not at all. Retrying the identical group is safe.
    ///
    /// # Errors
    ///
    /// See [`JournalBackend::append_all`].
    pub fn append_all(
        &self,
        session: SessionId,
        records: Vec<JournalRecord>,
        if_head: Option<u64>,
    ) -> impl Future<Output = Result<Vec<AppendOutcome>, AppendError>> + Send + 'static {
        let span = tracing::debug_span!("journal.append_all", %session, records = records.len());
        let submitted = span.in_scope(|| self.submit_group(session, &records, if_head));
        let answer = async move {
            let receivers = submitted?;
            let mut outcomes = Vec::with_capacity(receivers.len());
            let mut refusal = None;
            for rx in receivers {
                // Every request of a group is answered alike when the group is refused.
                match rx.await {
                    Ok(Ok(outcome)) => outcomes.push(outcome),
                    Ok(Err(e)) => {
                        refusal.get_or_insert(e);
                    }
                    // The writer is gone without answering: it has stopped.
                    Err(_) => {
                        refusal.get_or_insert(AppendError::Closed);
                    }
                }
            }
            let result = match refusal {
                Some(e) => Err(e),
                None => Ok(outcomes),
            };
            crate::metrics::record_group(crate::metrics::REDB, &result);
            result
        };
        answer.instrument(span)
    }

    fn submit_group(
        &self,
        session: SessionId,
        records: &[JournalRecord],
        if_head: Option<u64>,
    ) -> Result<Vec<oneshot::Receiver<writer::Reply>>, AppendError> {
        check_group(session, records, self.inner.max_record_bytes)?;
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let (requests, receivers) = records.iter().map(|r| request(session, r)).unzip();
        self.inner.queue.submit(
            Queued::Group(Group {
                session: session.as_uuid().as_u128(),
                requests,
                if_head,
            }),
            false,
        )?;
        Ok(receivers)
    }

    /// [`JournalBackend::purge_step`]: one bounded step of a purge, run by the writer
    /// thread as its own write transaction between two append batches (so an append
    /// waits for at most one step). The step is queued when this is called.
    ///
    /// A frame, position or index entry of the session found damaged stops the step
    /// (nothing of it is written) with [`JournalError::Corrupt`]: the purge does not
    /// remove what it cannot account for. Since an unfinished purge is finished first,
    /// later steps answer the same until the file is repaired; appends go on.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel the step: it commits or not, and the next
    /// step continues from whatever committed.
    ///
    /// # Errors
    ///
    /// [`JournalError::Corrupt`] for damage; [`JournalError::Storage`] for a storage
    /// failure (the handle is then poisoned, as after a failed append batch);
    /// [`JournalError::Closed`].
    pub fn purge_step(
        &self,
        ended_before: Timestamp,
        max_frames: usize,
    ) -> impl Future<Output = Result<PurgeStep, JournalError>> + Send + 'static {
        let (reply, rx) = oneshot::channel();
        self.inner.queue.submit_chore(Chore::Purge {
            ended_before,
            max_frames,
            reply,
        });
        async move { rx.await.unwrap_or(Err(JournalError::Closed)) }
    }

    /// [`JournalBackend::drop_tombstones`]: drops up to `limit` tombstones of finished
    /// purges that began before `purged_before`, oldest first, answering how many it
    /// dropped. The drop runs in steps of at most [`RedbOptions::drop_step`](crate::redb::options::RedbOptions::drop_step)
    /// tombstones (default 1,024), each its own write transaction run by the writer
    /// thread between two append batches, so an append waits for at most one step
    /// however large `limit` is. The drop is queued when this is called; it ends at the
    /// first step that finds fewer than a step's worth due, or at `limit`, or when the
    /// journal closes (then the answer is what the steps before dropped).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel the drop: it runs on step by step, each
    /// step committing whole or not at all.
    ///
    /// # Errors
    ///
    /// As [`purge_step`](Self::purge_step). An error in a later step leaves the
    /// earlier steps' drops committed (those sessions are unknown again); the
    /// tombstones still due are dropped by the next call.
    pub fn drop_tombstones(
        &self,
        purged_before: Timestamp,
        limit: usize,
    ) -> impl Future<Output = Result<u64, JournalError>> + Send + 'static {
        let (reply, rx) = oneshot::channel();
        self.inner.queue.submit_chore(Chore::DropTombstones {
            purged_before,
            limit,
            dropped: 0,
            reply,
        });
        async move { rx.await.unwrap_or(Err(JournalError::Closed)) }
    }

    /// Writes the states of sessions moved here from another journal (`notify
    /// import`), so that they answer as they did there: an ended session keeps its
    /// original end time (and so its place in the retention order), a purged one comes
    /// back as its tombstone (end time, purge time, last seq, frame count), refusing a
    /// late append with [`AppendError::SessionEnded`] `{ purged: true }`.
    ///
    /// For [`SessionState::Ended`], the session's frames must be imported first, its
    /// end marker last (which ends it, at the time of that append): the row is then
    /// rewritten with the given end time. For [`SessionState::Purged`], the session must
    /// be unknown to the journal (no frame, no state). A state the journal already holds
    /// exactly is left as it is, so an interrupted import can be run again.
    ///
    /// All the states are written in one write transaction, run by the writer thread
    /// between two append batches, or none is. Appends still queued are not waited for:
    /// await them first.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel the import: it commits or not.
    ///
    /// # Errors
    ///
    /// [`ImportStateError::Invalid`] for a state no import can write;
    /// [`ImportStateError::Conflict`] when the journal holds a session otherwise (not
    /// ended at that last seq, or known at all for a tombstone);
    /// [`ImportStateError::Journal`] for damage found ([`JournalError::Corrupt`]), a
    /// storage failure (the handle is then poisoned, as after a failed batch) or a
    /// closed journal. Nothing is written on any error.
    pub fn import_states(
        &self,
        states: Vec<(SessionId, SessionState)>,
    ) -> impl Future<Output = Result<(), ImportStateError>> + Send + 'static {
        let checked = states
            .iter()
            .try_for_each(|(session, state)| check_importable(*session, state));
        let (reply, rx) = oneshot::channel();
        if checked.is_ok() {
            self.inner
                .queue
                .submit_chore(Chore::ImportStates { states, reply });
        }
        async move {
            checked?;
            rx.await.unwrap_or(Err(JournalError::Closed.into()))
        }
    }
}

impl JournalBackend for RedbJournal {
    fn append(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> BoxFuture<'_, Result<AppendOutcome, AppendError>> {
        Box::pin(RedbJournal::append(self, session, record))
    }

    fn append_all(
        &self,
        session: SessionId,
        records: Vec<JournalRecord>,
        if_head: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<AppendOutcome>, AppendError>> {
        Box::pin(RedbJournal::append_all(self, session, records, if_head))
    }

    fn purge_step(
        &self,
        ended_before: Timestamp,
        max_frames: usize,
    ) -> BoxFuture<'_, Result<PurgeStep, JournalError>> {
        Box::pin(RedbJournal::purge_step(self, ended_before, max_frames))
    }

    fn drop_tombstones(
        &self,
        purged_before: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<u64, JournalError>> {
        Box::pin(RedbJournal::drop_tombstones(self, purged_before, limit))
    }
}
