//! Acknowledging a notification in the same transaction as the consumer's own write
//! (effectively once), on redb: [`SessionReceived::ack_with`]. The PostgreSQL
//! counterpart is `txack_pg.rs`.

use notify_journal::{AppTables, AppTxnError, AppWriteResult, AppendOutcome, RedbJournal};
use notify_types::{JournalRecord, NotificationConsumed, SessionEvent};

use crate::consumer::{SessionReceived, ack_error, traced_ack};
use crate::error::TxAckError;
use crate::shared::Shared;

impl SessionReceived {
    /// Acknowledges the notification **and** runs `write` on the application's own
    /// tables in the journal's file, in one write transaction: the consumption
    /// (`NotificationConsumed`) and the application's rows commit together, durably,
    /// or neither does. Then, as [`ack`](Self::ack) does, broadcasts the event and
    /// releases the notification in the loop.
    ///
    /// `journal` must be the session's own journal (the handle, or a clone of it, the
    /// session was built with): the consumption is journaled there. `write` is run by
    /// the journal's writer ([`RedbJournal::append_with`]: application tables only,
    /// within a budget, possibly more than once, no effect outside the tables). It
    /// does not run when the consumption was already journaled (a retry after a
    /// commit): its rows committed then.
    ///
    /// After a crash at any point, either both committed (the notification is never
    /// redelivered) or neither did (restore hands it back). Read the rows back with
    /// [`RedbJournal::read_app_tables`].
    ///
    /// # Errors
    ///
    /// [`TxAckError::Write`] / [`TxAckError::Panicked`] when `write` failed: nothing
    /// committed, the notification is handed to the consumer again.
    /// [`TxAckError::Ack`] as [`ack`](Self::ack) answers ([`AckError::Journal`](crate::AckError::Journal):
    /// nothing committed, handed again; [`AckError::SessionEnded`](crate::AckError::SessionEnded);
    /// [`AckError::NotOwner`](crate::AckError::NotOwner) once the session's host stopped serving it here:
    /// nothing committed, `write` not run;
    /// [`AckError::LoopExited`](crate::AckError::LoopExited): both committed).
    ///
    /// # Cancel safety
    ///
    /// If cancelled, the transaction may or may not commit (both parts or neither);
    /// the notification is not released and is handed to the consumer again.
    /// Acknowledging it again is safe: once committed, the retry finds the
    /// consumption journaled and does not run `write` again.
    pub async fn ack_with<F>(self, journal: &RedbJournal, write: F) -> Result<(), TxAckError>
    where
        F: FnMut(&AppTables<'_>) -> AppWriteResult + Send + 'static,
    {
        let span = self.ack_span();
        traced_ack(span, self.ack_with_inner(journal, write), |answer| {
            if answer.is_ok() {
                "acknowledged"
            } else {
                "failed"
            }
        })
        .await
    }

    async fn ack_with_inner<F>(self, journal: &RedbJournal, write: F) -> Result<(), TxAckError>
    where
        F: FnMut(&AppTables<'_>) -> AppWriteResult + Send + 'static,
    {
        let event = SessionEvent::NotificationConsumed(NotificationConsumed::new(
            self.session.id,
            self.loop_id,
            self.command_id(),
        ));
        let record = JournalRecord::from(event.clone());
        let gate = self.session.end_gate.read().await;
        // Stopped by its host (lease lost, released, shut down): nothing is written,
        // not the application's rows either. Checked under the gate, so a stop either
        // came first (refused here) or waits for this transaction to finish.
        self.check_served().map_err(TxAckError::Ack)?;
        let answer = if self.session.is_ended() {
            // Nothing is written after the end; a consumption journaled before it is
            // answered truthfully (its rows committed with it).
            self.session
                .answer_ended(&record)
                .await
                .map_err(AppTxnError::Append)
        } else {
            journal.append_with(self.session.id, record, write).await
        };
        drop(gate);
        let duplicate = match answer {
            Ok(AppendOutcome { appended: true, .. }) => {
                crate::metrics::consumed();
                // No subscribers is a normal state, not an error.
                let _ = self.session.events.send(event);
                false
            }
            Ok(AppendOutcome {
                appended: false, ..
            }) => true,
            Err(e) => return Err(TxAckError::from_app_txn(&self.session, e)),
        };
        self.release(duplicate).await.map_err(TxAckError::Ack)
    }
}

impl TxAckError {
    /// The session's answer for a transactional append's failure.
    pub(crate) fn from_app_txn(session: &Shared, e: AppTxnError) -> Self {
        match e {
            AppTxnError::Append(e) => Self::Ack(ack_error(session, e)),
            AppTxnError::Write(e) => Self::Write(e),
            AppTxnError::Panicked(m) => Self::Panicked(m),
            // A later kind of failure: nothing committed, as for every other.
            other => Self::Write(Box::new(other)),
        }
    }
}
