//! Acknowledging a notification in the same transaction as the consumer's own write
//! (effectively once), on PostgreSQL: the consumption is appended inside a transaction
//! the application runs on its own connection ([`SessionReceived::ack_in_pg`]), or
//! handed out as a statement for another driver ([`SessionReceived::pg_ack_statement`]);
//! once the application has committed, [`PgAckPending::committed`] releases it.

use notify_journal::{AppendOutcome, PgAppendStatement, PgJournal};
use notify_types::{JournalRecord, NotificationConsumed, SessionEvent};

use crate::consumer::SessionReceived;
use crate::error::{AckError, TxAckError};

/// A notification whose consumption is written inside the application's PostgreSQL
/// transaction, not yet released. After the transaction **commits**, call
/// [`committed`](Self::committed). After a rollback (or any failure), drop it: nothing
/// was acknowledged and the notification is handed to the consumer again.
#[must_use = "dropping it hands the notification to the consumer again"]
#[derive(Debug)]
pub struct PgAckPending {
    received: SessionReceived,
    event: SessionEvent,
    /// The statement, when handed out for another driver.
    statement: Option<PgAppendStatement>,
    /// What the append answered (`None` until a handed-out statement is answered).
    outcome: Option<AppendOutcome>,
}

impl SessionReceived {
    /// Appends the consumption (`NotificationConsumed`) inside `tx`, the application's
    /// own transaction on its own connection to the journal's database, with the
    /// journal's checks (duplicate, lease fencing, ended session:
    /// [`PgJournal::append_in`]). Write the application's rows in `tx` too, commit it,
    /// then call [`PgAckPending::committed`]: the rows and the consumption commit
    /// together or not at all.
    ///
    /// `journal` must be the session's own journal. The append locks the session's
    /// journal row until `tx` ends: keep the transaction short.
    ///
    /// # Errors
    ///
    /// [`TxAckError::Ack`] with [`AckError::Journal`](crate::AckError::Journal) (a
    /// fenced lease, a failed statement, ...) or
    /// [`AckError::SessionEnded`](crate::AckError::SessionEnded), or
    /// [`AckError::NotOwner`] once the session's host stopped serving it here (nothing
    /// written): roll `tx` back; the notification is handed to the consumer again.
    ///
    /// # Cancel safety
    ///
    /// If cancelled, the statement's outcome inside `tx` is unknown: roll `tx` back.
    /// The notification is handed to the consumer again.
    pub async fn ack_in_pg(
        self,
        journal: &PgJournal,
        tx: &tokio_postgres::Transaction<'_>,
    ) -> Result<PgAckPending, TxAckError> {
        let (event, record) = self.consumption();
        // Not under the end gate: the statement locks the session's journal row until
        // `tx` ends, and an end (or a host's stop) holds the gate for writing while it
        // waits for that row, so an acknowledgement waiting for the gate inside a
        // transaction that already holds the row would deadlock. The journal orders
        // the rest under the row lock: a stop's release fences this statement
        // (answered `NotOwner`), an end committed first refuses it (`SessionEnded`).
        self.check_served().map_err(TxAckError::Ack)?;
        let outcome = if self.session.is_ended() {
            // Nothing is written after the end (however the host stopped the session
            // since); a consumption journaled before it is answered truthfully.
            self.answer_ended(&record).await
        } else {
            journal.append_in(tx, self.session.id, &record).await
        }
        .map_err(|e| TxAckError::Ack(self.refused(e)))?;
        Ok(PgAckPending {
            received: self,
            event,
            statement: None,
            outcome: Some(outcome),
        })
    }

    /// The consumption's append as a statement and parameters
    /// ([`PgAckPending::statement`]), for a transaction the application runs with
    /// another driver (sqlx, ...): run it in that transaction beside the application's
    /// writes, hand its row to [`PgAckPending::answer`] (roll back on an error),
    /// commit, then call [`PgAckPending::committed`].
    ///
    /// # Errors
    ///
    /// [`TxAckError::Ack`] when the journal refuses before any statement (closed, or
    /// a required lease not held), or with [`AckError::NotOwner`] once the session's
    /// host stopped serving it here: the notification is handed to the consumer again.
    pub fn pg_ack_statement(self, journal: &PgJournal) -> Result<PgAckPending, TxAckError> {
        let (event, record) = self.consumption();
        self.check_served().map_err(TxAckError::Ack)?;
        let statement = journal
            .append_statement(self.session.id, &record)
            .map_err(|e| TxAckError::Ack(self.refused(e)))?;
        Ok(PgAckPending {
            received: self,
            event,
            statement: Some(statement),
            outcome: None,
        })
    }

    fn consumption(&self) -> (SessionEvent, JournalRecord) {
        let event = SessionEvent::NotificationConsumed(NotificationConsumed::new(
            self.session.id,
            self.loop_id,
            self.command_id(),
        ));
        let record = JournalRecord::from(event.clone());
        (event, record)
    }
}

impl PgAckPending {
    /// The notification.
    pub fn received(&self) -> &SessionReceived {
        &self.received
    }

    /// The statement to run, when handed out by
    /// [`SessionReceived::pg_ack_statement`].
    #[must_use]
    pub fn statement(&self) -> Option<&PgAppendStatement> {
        self.statement.as_ref()
    }

    /// Records the handed-out statement's row (`o_status`, `o_seq`).
    ///
    /// # Errors
    ///
    /// [`TxAckError::Ack`] when the append was refused: roll the transaction back and
    /// drop this (the notification is handed to the consumer again).
    pub fn answer(&mut self, status: i16, seq: i64) -> Result<(), TxAckError> {
        let Some(statement) = &self.statement else {
            return Ok(());
        };
        let outcome = statement
            .answer(status, seq)
            .map_err(|e| TxAckError::Ack(self.received.refused(e)))?;
        self.outcome = Some(outcome);
        Ok(())
    }

    /// The transaction committed: broadcasts `NotificationConsumed` (if this append
    /// wrote it) and releases the notification in the loop, as
    /// [`SessionReceived::ack`] does after journaling. Call it only after the commit
    /// succeeded; released without a commit, the notification would be delivered again
    /// only after a restart.
    ///
    /// # Errors
    ///
    /// [`TxAckError::Ack`] with [`AckError::LoopExited`](crate::AckError::LoopExited):
    /// the consumption is journaled, the loop had already exited;
    /// [`AckError::NotAnswered`](crate::AckError::NotAnswered): a handed-out
    /// statement's successful row was never recorded with [`answer`](Self::answer)
    /// (the notification is not released).
    ///
    /// # Cancel safety
    ///
    /// If cancelled before the release, the notification is handed to the consumer
    /// again; acknowledging it again finds its consumption journaled.
    pub async fn committed(self) -> Result<(), TxAckError> {
        let duplicate = match self.outcome {
            Some(AppendOutcome { appended: true, .. }) => {
                crate::metrics::consumed();
                // No subscribers is a normal state, not an error.
                let _ = self.received.session.events.send(self.event);
                false
            }
            Some(AppendOutcome {
                appended: false, ..
            }) => true,
            // A handed-out statement whose successful row was not recorded:
            // nothing is known journaled, so the notification stays held (dropping
            // this hands it to the consumer again).
            None => {
                return Err(TxAckError::Ack(AckError::NotAnswered {
                    session_id: self.received.session.id,
                }));
            }
        };
        self.received
            .release(duplicate)
            .await
            .map_err(TxAckError::Ack)
    }
}
