//! Acknowledging a batch of notifications in the same redb transaction as the
//! consumer's own writes: [`SessionBatch::ack_with`], the batch form of
//! [`SessionReceived::ack_with`](crate::SessionReceived::ack_with).

use notify_journal::{AppTables, AppTxnError, AppWriteResult, AppendError, RedbJournal};
use notify_types::{JournalRecord, ProcessNotification, SessionEvent};

use crate::batch::{AckBatchError, SessionBatch, consumption};
use crate::consumer::{ack_outcome, traced_ack};
use crate::error::{AckError, TxAckError};

impl SessionBatch {
    /// Acknowledges every notification of the batch **and** runs `write` on the
    /// application's own tables in the journal's file, in one write transaction: the
    /// consumptions (one atomic group) and the application's rows commit together,
    /// durably, or nothing does. Then, as [`ack`](Self::ack) does, broadcasts each new
    /// consumption and releases the notifications in acceptance order.
    ///
    /// `write` is told the notifications whose consumption is new in this transaction,
    /// in batch order: all of them, unless some were journaled earlier (an earlier
    /// acknowledgement whose commit went unanswered: their rows committed then). It
    /// does not run when none is new. It is run by the journal's writer
    /// ([`RedbJournal::append_all_with`]: application tables only, within a budget,
    /// possibly more than once, no effect outside the tables). `journal` must be the
    /// session's own journal.
    ///
    /// ```
    /// use notify_session::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let journal = RedbJournal::open(dir.path().join("notify.redb"), RedbOptions::default())?;
    /// let (session_id, loop_id) = (SessionId::new(), LoopId::new());
    /// let session = Session::new(session_id, journal.clone());
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
    /// batch
    ///     .ack_with(&journal, |tables, new| {
    ///         let mut lines = tables.open_table::<u128, &str>("app/conversation")?;
    ///         for n in new {
    ///             lines.insert(n.command_id().as_uuid().as_u128(), "exited")?;
    ///         }
    ///         Ok(())
    ///     })
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`AckBatchError`] with a [`TxAckError`]: [`TxAckError::Write`] /
    /// [`TxAckError::Panicked`] when `write` failed (nothing committed, every
    /// notification handed back); [`TxAckError::Ack`] as [`ack`](Self::ack) answers
    /// (which notifications are `acknowledged` and which `returned` is said there).
    ///
    /// # Cancel safety
    ///
    /// As for [`ack`](Self::ack): a cancelled call **released none** of the batch,
    /// every notification is handed to the consumer again; the transaction may still
    /// commit (all of it or nothing), and acknowledging again finds the consumptions
    /// journaled and does not run `write` for them.
    pub async fn ack_with<F>(
        self,
        journal: &RedbJournal,
        write: F,
    ) -> Result<(), AckBatchError<TxAckError>>
    where
        F: FnMut(&AppTables<'_>, &[&ProcessNotification]) -> AppWriteResult + Send + 'static,
    {
        if self.items.is_empty() {
            return Ok(());
        }
        let span = self.ack_span();
        traced_ack(
            span,
            self.ack_with_inner(journal, write),
            |answer| match answer.as_ref().err().map(|e| &e.error) {
                None => ack_outcome(None),
                Some(TxAckError::Ack(e)) => ack_outcome(Some(e)),
                Some(_) => "failed",
            },
        )
        .await
    }

    async fn ack_with_inner<F>(
        self,
        journal: &RedbJournal,
        write: F,
    ) -> Result<(), AckBatchError<TxAckError>>
    where
        F: FnMut(&AppTables<'_>, &[&ProcessNotification]) -> AppWriteResult + Send + 'static,
    {
        let session = self.session.clone();
        let events: Vec<SessionEvent> = self.items.iter().map(consumption).collect();
        let records: Vec<JournalRecord> = events.iter().cloned().map(Into::into).collect();
        let gate = session.end_gate.read().await;
        // Stopped by its host: nothing is written, not the application's rows either.
        if let Some(owner) = session.refused_by_host() {
            return Err(self.refuse(TxAckError::Ack(AckError::NotOwner {
                session_id: session.id,
                owner,
            })));
        }
        let answer = if session.is_ended() {
            Err(AppTxnError::Append(AppendError::SessionEnded {
                session: session.id,
                purged: false,
            }))
        } else {
            let notes: Vec<ProcessNotification> = self
                .items
                .iter()
                .map(|r| r.notification().clone())
                .collect();
            let mut write = write;
            let write = move |tables: &AppTables<'_>, new: &[usize]| {
                let new: Vec<&ProcessNotification> =
                    new.iter().filter_map(|&i| notes.get(i)).collect();
                write(tables, &new)
            };
            journal
                .append_all_with(session.id, records.clone(), write)
                .await
        };
        let ended = |e: &AppTxnError| matches!(e, AppTxnError::Append(e) if matches!(e.refusal(), AppendError::SessionEnded { .. }));
        match answer {
            Ok(outcomes) => {
                drop(gate);
                let appended: Vec<bool> = outcomes.iter().map(|o| o.appended).collect();
                self.release_new(events, &appended).map_err(tx)
            }
            Err(e) if ended(&e) => {
                // A consumption journaled before the end is acknowledged (its rows
                // committed with it), the rest were not.
                let answers = self.answers_after_end(&records).await;
                drop(gate);
                self.settle_ended(answers).map_err(tx)
            }
            Err(e) => Err(self.refuse(TxAckError::from_app_txn(&session, e))),
        }
    }
}

/// A plain batch failure as the transactional one answers it.
fn tx(e: AckBatchError) -> AckBatchError<TxAckError> {
    AckBatchError {
        error: TxAckError::Ack(e.error),
        acknowledged: e.acknowledged,
        returned: e.returned,
    }
}
