//! Acknowledging a notification in the same transaction as the consumer's own write
//! (effectively once), on PostgreSQL: the consumption is appended inside a transaction
//! the application runs on its own connection ([`SessionReceived::ack_in_pg`]), or
//! handed out as a statement for another driver ([`SessionReceived::pg_ack_statement`]).
//! Either answers [`PgAck`] **before the application writes**: `Write` (write the rows
//! in the same transaction, commit, then [`PgAckPending::committed`]) or
//! `AlreadyConsumed` (an earlier transaction committed the consumption and its rows,
//! say one whose `COMMIT` answer was lost: write nothing). `txack_pg_with.rs` runs the
//! same transaction whole, pipelined.

use notify_journal::{AppendOutcome, PgAppendStatement, PgJournal};
use notify_types::{JournalRecord, NotificationConsumed, SessionEvent};

use crate::consumer::{SessionReceived, ack_error, traced_ack};
use crate::error::TxAckError;

/// What a transactional acknowledgement on PostgreSQL found, answered before the
/// application writes anything: whether to write.
///
/// Append the consumption first, then match: the application's rows go into the
/// transaction only on [`Write`](Self::Write). A consumer that runs the same code again
/// for a notification handed back after a `COMMIT` whose answer it never got (the
/// commit may have happened) is answered [`AlreadyConsumed`](Self::AlreadyConsumed) if
/// it did, and so never writes its rows twice.
#[must_use = "write the application's rows only on `PgAck::Write`, then commit and call `committed`"]
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "answered once per acknowledgement and matched at once: boxing would allocate on every one"
)]
pub enum PgAck {
    /// The consumption is written inside the transaction, not committed: write the
    /// application's rows in the same transaction, commit it, then call
    /// [`PgAckPending::committed`]. After a rollback (or any failure), drop it: nothing
    /// was acknowledged and the notification is handed to the consumer again.
    Write(PgAckPending),
    /// An earlier transaction committed the consumption, and with it the application's
    /// rows (a retry after a `COMMIT` whose outcome the application did not learn):
    /// write nothing. The notification has been released in the loop; the
    /// transaction holds nothing of the acknowledgement (commit or roll it back).
    AlreadyConsumed,
}

/// A notification whose consumption is written inside the application's PostgreSQL
/// transaction, not yet released. After the transaction **commits**, call
/// [`committed`](Self::committed). After a rollback (or any failure), drop it: nothing
/// was acknowledged and the notification is handed to the consumer again.
#[must_use = "dropping it hands the notification to the consumer again"]
#[derive(Debug)]
pub struct PgAckPending {
    received: SessionReceived,
    event: SessionEvent,
}

/// The consumption's append as a statement, for a transaction the application runs
/// with another driver (sqlx, ...): run [`statement`](Self::statement) in that
/// transaction **before** the application's writes, hand its row to
/// [`answer`](Self::answer), and write only on [`PgAck::Write`].
#[must_use = "dropping it hands the notification to the consumer again"]
#[derive(Debug)]
pub struct PgAckStatement {
    received: SessionReceived,
    event: SessionEvent,
    statement: PgAppendStatement,
}

impl SessionReceived {
    /// Appends the consumption (`NotificationConsumed`) inside `tx`, the application's
    /// own transaction on its own connection to the journal's database, with the
    /// journal's checks (duplicate, lease fencing, ended session:
    /// [`PgJournal::append_in`]), and answers whether the application should write:
    ///
    /// * [`PgAck::Write`]: write the application's rows in `tx`, commit it, then call
    ///   [`PgAckPending::committed`]: the rows and the consumption commit together or
    ///   not at all.
    /// * [`PgAck::AlreadyConsumed`]: an earlier transaction committed the consumption
    ///   and its rows; write nothing (the notification is released).
    ///
    /// Call it **before** writing the application's rows: that order is what lets a
    /// retry after a `COMMIT` whose answer was lost skip its rows.
    ///
    /// `journal` must be the session's own journal. The append locks the session's
    /// journal row until `tx` ends: keep the transaction short. One acknowledgement of
    /// a notification per transaction: after dropping a [`PgAck::Write`], roll `tx`
    /// back.
    ///
    /// ```no_run
    /// # use notify_session::{PgAck, SessionReceived};
    /// # async fn consume(
    /// #     journal: &notify_session::notify_journal::PgJournal,
    /// #     app: &mut tokio_postgres::Client,
    /// #     received: SessionReceived,
    /// # ) -> Result<(), Box<dyn std::error::Error>> {
    /// let command = *received.command_id().as_uuid();
    /// let line = format!("{} exited", received.completion().process_handle);
    /// let tx = app.transaction().await?;
    /// // The consumption first: it answers whether this notification is already consumed.
    /// match received.ack_in_pg(journal, &tx).await? {   // Err: drop tx (rolls back)
    ///     PgAck::Write(pending) => {
    ///         tx.execute(
    ///             "INSERT INTO conversation (command, line) VALUES ($1, $2)",
    ///             &[&command, &line],
    ///         )
    ///         .await?;
    ///         tx.commit().await?;   // Err: it comes back; the retry finds out
    ///         pending.committed().await?;                // releases it in the loop
    ///     }
    ///     // Committed earlier with its row (that COMMIT's answer was lost).
    ///     PgAck::AlreadyConsumed => {}
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`TxAckError::Ack`] with [`AckError::Journal`](crate::AckError::Journal) (a
    /// fenced lease, a failed statement, ...) or
    /// [`AckError::SessionEnded`](crate::AckError::SessionEnded), or
    /// [`AckError::NotOwner`](crate::AckError::NotOwner) once the session's host
    /// stopped serving it here (nothing written): roll `tx` back; the notification is
    /// handed to the consumer again. [`AckError::LoopExited`](crate::AckError::LoopExited)
    /// when it was already consumed and the loop had exited.
    ///
    /// # Cancel safety
    ///
    /// If cancelled, the statement's outcome inside `tx` is unknown: roll `tx` back.
    /// The notification is handed to the consumer again.
    pub async fn ack_in_pg(
        self,
        journal: &PgJournal,
        tx: &tokio_postgres::Transaction<'_>,
    ) -> Result<PgAck, TxAckError> {
        let span = self.ack_span();
        traced_ack(
            span,
            self.ack_in_pg_inner(journal, tx),
            |answer| match answer {
                Ok(PgAck::Write(_)) => "written",
                Ok(PgAck::AlreadyConsumed) => "already_consumed",
                Err(_) => "failed",
            },
        )
        .await
    }

    async fn ack_in_pg_inner(
        self,
        journal: &PgJournal,
        tx: &tokio_postgres::Transaction<'_>,
    ) -> Result<PgAck, TxAckError> {
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
            self.session.answer_ended(&record).await
        } else {
            journal.append_in(tx, self.session.id, &record).await
        }
        .map_err(|e| TxAckError::Ack(ack_error(&self.session, e)))?;
        self.decide(event, outcome).await
    }

    /// The consumption's append as a statement and parameters
    /// ([`PgAckStatement::statement`]), for a transaction the application runs with
    /// another driver (sqlx, ...): run it in that transaction before the
    /// application's writes, hand its row to [`PgAckStatement::answer`] (roll back on
    /// an error), and go on as its [`PgAck`] says.
    ///
    /// # Errors
    ///
    /// [`TxAckError::Ack`] when the journal refuses before any statement (closed, or
    /// a required lease not held), or with [`AckError::NotOwner`](crate::AckError::NotOwner)
    /// once the session's host stopped serving it here: the notification is handed to
    /// the consumer again.
    pub fn pg_ack_statement(self, journal: &PgJournal) -> Result<PgAckStatement, TxAckError> {
        let (event, record) = self.consumption();
        self.check_served().map_err(TxAckError::Ack)?;
        let statement = journal
            .append_statement(self.session.id, &record)
            .map_err(|e| TxAckError::Ack(ack_error(&self.session, e)))?;
        Ok(PgAckStatement {
            received: self,
            event,
            statement,
        })
    }

    pub(crate) fn consumption(&self) -> (SessionEvent, JournalRecord) {
        let event = SessionEvent::NotificationConsumed(NotificationConsumed::new(
            self.session.id,
            self.loop_id,
            self.command_id(),
        ));
        let record = JournalRecord::from(event.clone());
        (event, record)
    }

    /// The consumption `event` committed with the application's writes: broadcast
    /// and released ([`PgAckPending::committed`]).
    pub(crate) async fn committed(self, event: SessionEvent) -> Result<(), TxAckError> {
        PgAckPending {
            received: self,
            event,
        }
        .committed()
        .await
    }

    /// What the append's `outcome` means: appended inside the transaction (write,
    /// then commit), or committed earlier (release now: nothing to write).
    async fn decide(
        self,
        event: SessionEvent,
        outcome: AppendOutcome,
    ) -> Result<PgAck, TxAckError> {
        if outcome.appended {
            return Ok(PgAck::Write(PgAckPending {
                received: self,
                event,
            }));
        }
        self.release(true).await.map_err(TxAckError::Ack)?;
        Ok(PgAck::AlreadyConsumed)
    }
}

impl PgAckStatement {
    /// The notification.
    pub fn received(&self) -> &SessionReceived {
        &self.received
    }

    /// The statement to run in the application's transaction, before its writes.
    #[must_use]
    pub fn statement(&self) -> &PgAppendStatement {
        &self.statement
    }

    /// Records the statement's row (`o_status`, `o_seq`) and answers whether the
    /// application should write ([`PgAck`]): on [`PgAck::Write`] write its rows in the
    /// same transaction, commit, then call [`PgAckPending::committed`]; on
    /// [`PgAck::AlreadyConsumed`] write nothing (the notification is released).
    ///
    /// # Errors
    ///
    /// [`TxAckError::Ack`] when the append was refused: roll the transaction back (the
    /// notification is handed to the consumer again);
    /// [`AckError::LoopExited`](crate::AckError::LoopExited) when it was already
    /// consumed and the loop had exited.
    ///
    /// # Cancel safety
    ///
    /// If cancelled, the notification is handed to the consumer again: roll the
    /// transaction back; acknowledging it again finds out what committed.
    pub async fn answer(self, status: i16, seq: i64) -> Result<PgAck, TxAckError> {
        let outcome = match self.statement.answer(status, seq) {
            Ok(outcome) => outcome,
            Err(e) => return Err(TxAckError::Ack(ack_error(&self.received.session, e))),
        };
        self.received.decide(self.event, outcome).await
    }
}

impl PgAckPending {
    /// The notification.
    pub fn received(&self) -> &SessionReceived {
        &self.received
    }

    /// The transaction committed: broadcasts `NotificationConsumed` and releases the
    /// notification in the loop, as [`SessionReceived::ack`] does after journaling.
    /// Call it only after the commit succeeded; released without a commit, the
    /// notification would be delivered again only after a restart. After a `COMMIT`
    /// whose outcome is unknown, drop this instead: the notification is handed again,
    /// and acknowledging it again answers [`PgAck::AlreadyConsumed`] if it committed.
    ///
    /// # Errors
    ///
    /// [`TxAckError::Ack`] with [`AckError::LoopExited`](crate::AckError::LoopExited):
    /// the consumption is journaled, the loop had already exited.
    ///
    /// # Cancel safety
    ///
    /// If cancelled before the release, the notification is handed to the consumer
    /// again; acknowledging it again answers [`PgAck::AlreadyConsumed`].
    pub async fn committed(self) -> Result<(), TxAckError> {
        crate::metrics::consumed();
        // No subscribers is a normal state, not an error.
        let _ = self.received.session.events.send(self.event);
        self.received.release(false).await.map_err(TxAckError::Ack)
    }
}
