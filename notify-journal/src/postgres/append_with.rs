//! An append and the application's writes in one transaction that the journal runs
//! whole on the application's connection ([`PgJournal::append_with`]), pipelined:
//! `BEGIN`, the append and the application's first statement reach the server in one
//! round trip, then `COMMIT` (the append is new and the writes succeeded) or
//! `ROLLBACK` (anything else). The four round trips of the step-by-step transaction
//! (`append_in`: `BEGIN`, the append, the application's statement, `COMMIT`) become
//! two.
//!
//! The order is tokio-postgres's documented one: a request is sent when its future is
//! first polled, and requests run in the order they were first polled. So `BEGIN` and
//! the append are each polled once, in that order, before the application's closure
//! is polled at all: nothing of the application's can reach the server ahead of
//! `BEGIN` (and so outside the transaction) or ahead of the append.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use notify_types::{JournalRecord, SessionId};
use tokio_postgres::Client;

use super::PgJournal;
use super::error::sanitize;
use crate::backend::AppendOutcome;
use crate::error::AppendError;

/// What [`PgJournal::append_with`] committed.
#[derive(Debug)]
#[must_use = "the application's answer is in `Committed`"]
pub enum PgAppendedWith<T> {
    /// The record was new: it and the application's writes committed together.
    Committed {
        /// The record's sequence number.
        seq: u64,
        /// What the application's `write` answered.
        written: T,
    },
    /// The record was journaled already, identically (an earlier transaction
    /// committed it, and with it that transaction's writes): this transaction, the
    /// application's writes included, was rolled back.
    Duplicate {
        /// The original sequence number.
        seq: u64,
    },
}

/// Why [`PgJournal::append_with`] committed nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgAppendWithError<E> {
    /// The append was refused or failed: the transaction was rolled back.
    /// [`AppendError::CommitFailed`] when `COMMIT` failed or its answer was lost: the
    /// transaction may have committed; append again with the same record to find out.
    #[error(transparent)]
    Append(AppendError),
    /// The application's `write` failed: the transaction, the append included, was
    /// rolled back.
    #[error("the application's write failed; the transaction was rolled back")]
    Write(#[source] E),
}

impl PgJournal {
    /// Appends `record` to `session` and runs the application's `write` in **one
    /// transaction that this call runs on `client`** (the application's own connection
    /// to the journal's database): both commit, or neither. The effectively-once
    /// consumer's transaction in two round trips instead of four: `BEGIN`, the append
    /// and `write`'s first statement go out together (see the module's notes on
    /// order), then `COMMIT` once the append's answer is known.
    ///
    /// * The record is new and `write` succeeded: committed,
    ///   [`PgAppendedWith::Committed`] with what `write` answered.
    /// * The record was journaled already (a retry after a `COMMIT` whose answer was
    ///   lost): `write` may have run, but its statements are **rolled back**
    ///   ([`PgAppendedWith::Duplicate`]): the rows that committed with the original
    ///   are not written twice.
    /// * Anything else (the append refused: a collision, a fenced or ended session;
    ///   `write` failed; a statement failed): rolled back, and the error.
    ///
    /// `write` runs its statements on the `&Client` it is handed, inside the
    /// transaction: it must not commit, roll back or begin one itself. Its answer is
    /// kept only when the transaction commits. `client` must not be inside a
    /// transaction already (a `&mut Client` borrowed by a tokio-postgres
    /// `Transaction` cannot be passed; a `BEGIN` sent by hand would be committed by
    /// this call).
    ///
    /// The append locks the session's row until the transaction ends: keep `write`
    /// short.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped while the transaction is open, a `ROLLBACK` is queued
    /// on `client` (it runs before anything sent on `client` after), so nothing of
    /// the transaction commits unless its `COMMIT` had already been sent: then the
    /// outcome is unknown, as for [`AppendError::CommitFailed`]. Append again with
    /// the same record to find out. A panic in `write` unwinds through this call the
    /// same way: the `ROLLBACK` is queued as the future is dropped.
    ///
    /// # Errors
    ///
    /// [`PgAppendWithError::Append`] with what
    /// [`append_statement`](Self::append_statement) and
    /// [`PgAppendStatement::answer`](super::PgAppendStatement::answer) refuse,
    /// [`AppendError::Storage`] when `BEGIN` or the append's statement fails, or
    /// [`AppendError::CommitFailed`]; [`PgAppendWithError::Write`] when `write` fails.
    pub async fn append_with<T, E, W>(
        &self,
        client: &mut Client,
        session: SessionId,
        record: &JournalRecord,
        write: W,
    ) -> Result<PgAppendedWith<T>, PgAppendWithError<E>>
    where
        W: AsyncFnOnce(&Client) -> Result<T, E>,
    {
        let statement = self
            .append_statement(session, record)
            .map_err(PgAppendWithError::Append)?;
        let client: &Client = client;
        let params = statement.typed_params();
        let mut open = OpenTransaction { client, open: true };
        // Each of these is sent on its first poll, in this order (the module's notes).
        let mut begin = Box::pin(client.batch_execute("BEGIN"));
        let begun_early = first_poll(&mut begin);
        let mut append = Box::pin(client.query_typed_one(&statement.sql, &params));
        let appended_early = first_poll(&mut append);
        let (begun, appended, written) = tokio::join!(
            finish(begun_early, begin),
            finish(appended_early, append),
            write(client),
        );
        // A failed BEGIN on a live connection leaves it in a failed transaction
        // block (the statements after it fail too) or has closed it: the append
        // cannot have committed on its own.
        if let Err(e) = begun {
            open.rollback().await;
            return Err(PgAppendWithError::Append(AppendError::Storage(sanitize(
                "begin the application's transaction",
                &e,
            ))));
        }
        let outcome: Result<AppendOutcome, AppendError> = appended
            .map_err(|e| {
                AppendError::Storage(sanitize("append in the application's transaction", &e))
            })
            .and_then(|row| statement.answer_row(&row));
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(e) => {
                open.rollback().await;
                return Err(PgAppendWithError::Append(e));
            }
        };
        if !outcome.appended {
            open.rollback().await;
            return Ok(PgAppendedWith::Duplicate { seq: outcome.seq });
        }
        let written = match written {
            Ok(written) => written,
            Err(e) => {
                open.rollback().await;
                return Err(PgAppendWithError::Write(e));
            }
        };
        open.open = false;
        client.batch_execute("COMMIT").await.map_err(|e| {
            PgAppendWithError::Append(AppendError::CommitFailed(sanitize(
                "commit the application's transaction",
                &e,
            )))
        })?;
        Ok(PgAppendedWith::Committed {
            seq: outcome.seq,
            written,
        })
    }
}

/// Polls `fut` once (tokio-postgres sends a request on its first poll): its output
/// if it finished at once.
fn first_poll<F: Future + Unpin>(fut: &mut F) -> Option<F::Output> {
    match Pin::new(fut).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => Some(output),
        Poll::Pending => None,
    }
}

/// The output of a future already polled once by [`first_poll`].
async fn finish<F: Future + Unpin>(early: Option<F::Output>, fut: F) -> F::Output {
    match early {
        Some(output) => output,
        None => fut.await,
    }
}

/// The transaction this call opened on `client`, rolled back on every way out but
/// the commit, a dropped future included.
struct OpenTransaction<'c> {
    client: &'c Client,
    open: bool,
}

impl OpenTransaction<'_> {
    /// Rolls back now. A failure is left to the connection: a transaction it cannot
    /// roll back ends with the connection, uncommitted.
    async fn rollback(&mut self) {
        self.open = false;
        let _ = self.client.batch_execute("ROLLBACK").await;
    }
}

impl Drop for OpenTransaction<'_> {
    fn drop(&mut self) {
        if self.open {
            // Queued on its first poll, ahead of anything sent on the client after;
            // its answer is not awaited (tokio-postgres's own `Transaction` does the
            // same when dropped).
            let _ = first_poll(&mut Box::pin(self.client.batch_execute("ROLLBACK")));
        }
    }
}
