//! Acknowledging on PostgreSQL in a transaction the acknowledgement runs whole
//! ([`SessionReceived::ack_in_pg_with`]): the consumption and the application's
//! writes in two round trips ([`PgJournal::append_with`]) instead of the four of the
//! step-by-step [`SessionReceived::ack_in_pg`].

use notify_journal::{AppendError, PgAppendWithError, PgAppendedWith, PgJournal, StorageError};

use crate::consumer::{SessionReceived, ack_error, traced_ack};
use crate::error::{AckError, TxAckError};

/// What [`SessionReceived::ack_in_pg_with`] did. Either way the notification is
/// acknowledged and released in its loop.
#[derive(Debug)]
#[must_use = "the application's answer is in `Committed`"]
pub enum PgAcked<T> {
    /// The consumption and the application's writes committed together: what the
    /// application's `write` answered.
    Committed(T),
    /// An earlier transaction committed the consumption, and with it the
    /// application's rows (a retry after a `COMMIT` whose answer was lost): this
    /// transaction, the application's writes included, was rolled back.
    AlreadyConsumed,
}

impl SessionReceived {
    /// Acknowledges in **one transaction that this call runs on `client`** (the
    /// application's own connection to the journal's database): the consumption
    /// (`NotificationConsumed`, with the journal's checks) and the application's
    /// `write` commit together or not at all, and the notification is released once
    /// they have. Effectively once, as [`ack_in_pg`](Self::ack_in_pg), in two round
    /// trips instead of four: `BEGIN`, the consumption and `write`'s first statement
    /// go to the server together, then `COMMIT` ([`PgJournal::append_with`]).
    ///
    /// * [`PgAcked::Committed`]: committed; what `write` answered.
    /// * [`PgAcked::AlreadyConsumed`]: an earlier transaction committed the
    ///   consumption and its rows. `write` may have run, but this transaction was
    ///   **rolled back**, so its rows are not written twice.
    ///
    /// `write` runs its statements on the `&Client` it is handed, inside the
    /// transaction; it must not begin, commit or roll back one itself, and `client`
    /// must not be inside a transaction when this is called. `journal` must be the
    /// session's own journal. The consumption locks the session's journal row until
    /// the transaction ends: keep `write` short.
    ///
    /// ```no_run
    /// # use notify_session::{PgAcked, SessionReceived};
    /// # async fn consume(
    /// #     journal: &notify_session::notify_journal::PgJournal,
    /// #     app: &mut tokio_postgres::Client,
    /// #     insert: &tokio_postgres::Statement,  // app.prepare(..) once per connection
    /// #     received: SessionReceived,
    /// # ) -> Result<(), Box<dyn std::error::Error>> {
    /// let command = *received.command_id().as_uuid();
    /// let line = format!("{} exited", received.completion().process_handle);
    /// // INSERT INTO conversation (command, line) VALUES ($1, $2), prepared once.
    /// let acked = received
    ///     .ack_in_pg_with(journal, app, async |tx| tx.execute(insert, &[&command, &line]).await)
    ///     .await?;                          // Err: rolled back; it comes back
    /// match acked {
    ///     PgAcked::Committed(rows) => assert_eq!(rows, 1),
    ///     PgAcked::AlreadyConsumed => {}   // its row committed earlier
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`ack_in_pg`](Self::ack_in_pg) ([`TxAckError::Ack`]), and
    /// [`TxAckError::Write`] when `write` fails. Nothing was acknowledged (the
    /// transaction was rolled back) and the notification is handed to the consumer
    /// again, unless [`AckError::LoopExited`](crate::AckError::LoopExited); a `COMMIT`
    /// that failed or whose answer was lost is
    /// [`AckError::Journal`](crate::AckError::Journal) with
    /// [`AppendError::CommitFailed`](notify_journal::AppendError::CommitFailed): it
    /// may have committed, and acknowledging the notification again (it is handed
    /// back) answers [`PgAcked::AlreadyConsumed`] if it did.
    ///
    /// # Cancel safety
    ///
    /// If cancelled, the transaction is rolled back unless its `COMMIT` was already
    /// sent ([`PgJournal::append_with`]); the notification is handed to the consumer
    /// again, and acknowledging it again finds out what committed.
    pub async fn ack_in_pg_with<T, E, W>(
        self,
        journal: &PgJournal,
        client: &mut tokio_postgres::Client,
        write: W,
    ) -> Result<PgAcked<T>, TxAckError>
    where
        W: AsyncFnOnce(&tokio_postgres::Client) -> Result<T, E>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let span = self.ack_span();
        let work = async move {
            let (event, record) = self.consumption();
            // Not under the end gate, for the reason `ack_in_pg` gives.
            self.check_served().map_err(TxAckError::Ack)?;
            let written = if self.session.is_ended() {
                // Nothing is written after the end; a consumption journaled before it is
                // answered truthfully, and `write` does not run.
                let outcome = self
                    .session
                    .answer_ended(&record)
                    .await
                    .map_err(|e| TxAckError::Ack(ack_error(&self.session, e)))?;
                if outcome.appended {
                    // `answer_ended` never appends; answered as the end it reports.
                    return Err(TxAckError::Ack(AckError::SessionEnded {
                        session_id: self.session.id,
                    }));
                }
                None
            } else {
                match journal
                    .append_with(client, self.session.id, &record, write)
                    .await
                {
                    Ok(PgAppendedWith::Committed { written, .. }) => Some(written),
                    Ok(PgAppendedWith::Duplicate { .. }) => None,
                    Err(PgAppendWithError::Append(e)) => {
                        return Err(TxAckError::Ack(ack_error(&self.session, e)));
                    }
                    Err(PgAppendWithError::Write(e)) => return Err(TxAckError::Write(e.into())),
                    Err(e) => {
                        return Err(TxAckError::Ack(AckError::Journal(AppendError::Storage(
                            StorageError::msg(e.to_string()),
                        ))));
                    }
                }
            };
            match written {
                Some(written) => {
                    self.committed(event).await?;
                    Ok(PgAcked::Committed(written))
                }
                None => {
                    self.release(true).await.map_err(TxAckError::Ack)?;
                    Ok(PgAcked::AlreadyConsumed)
                }
            }
        };
        traced_ack(span, work, |answer| match answer {
            Ok(PgAcked::Committed(_)) => "written",
            Ok(PgAcked::AlreadyConsumed) => "already_consumed",
            Err(_) => "failed",
        })
        .await
    }
}
