//! [`RedbJournal`] and the application's tables: [`append_with`](RedbJournal::append_with),
//! an append and the application's own writes committed in one write transaction (see
//! `writer/app_txn.rs` and `docs/design.md`), and
//! [`read_app_tables`](RedbJournal::read_app_tables), reading them back.

use std::future::Future;

use notify_types::{JournalRecord, SessionId};
use tokio::sync::oneshot;
use tracing::Instrument;

use super::RedbJournal;
use super::writes::request;
use crate::backend::AppendOutcome;
use crate::error::AppendError;
use crate::integrity::{check_append, check_group};
use crate::redb::app_tables::{
    AppGroupWrite, AppTableError, AppTables, AppTablesRead, AppTxnError, AppWriteResult,
    read_tables,
};
use crate::redb::writer::{AppReply, AppTxn, Chore};

impl RedbJournal {
    /// Appends `record` to `session`'s log and runs `write` on the application's tables
    /// ([`AppTables`]) **in the same write transaction**: both commit, durably, or
    /// neither does. This is how a consumer acknowledges a notification together with
    /// its own write (effectively-once processing).
    ///
    /// `write` runs on the journal's writer thread, only when the record is new: a
    /// duplicate (`appended: false`) is answered without running it, since its
    /// writes committed with the original. It may open application tables
    /// ([`APP_TABLE_PREFIX`](crate::APP_TABLE_PREFIX)) and nothing else, within a
    /// budget ([`APP_WRITE_MAX_BYTES`](crate::APP_WRITE_MAX_BYTES),
    /// [`APP_WRITE_MAX_TIME`](crate::APP_WRITE_MAX_TIME)); it must not block on
    /// anything but those tables. It may run more than once (when another
    /// transactional append of its turn failed and the turn was redone): only the run
    /// that commits counts, so it must have no effect outside the tables.
    ///
    /// The request is queued when this is called, not when the future is first polled.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel the write: the record and the writes may or
    /// may not be committed (together). Retrying with the identical record is safe: it
    /// answers a duplicate without running `write` again once the first committed.
    ///
    /// # Errors
    ///
    /// [`AppTxnError::Append`] as [`append`](Self::append) answers (nothing written);
    /// [`AppTxnError::Write`] / [`AppTxnError::Panicked`] when `write` failed, used up
    /// its budget or panicked: nothing written, the record neither.
    pub fn append_with<F>(
        &self,
        session: SessionId,
        record: JournalRecord,
        write: F,
    ) -> impl Future<Output = Result<AppendOutcome, AppTxnError>> + Send + 'static
    where
        F: FnMut(&AppTables<'_>) -> AppWriteResult + Send + 'static,
    {
        let key = record.key();
        let span = tracing::debug_span!("journal.append_with", %session, %key);
        let mut write = write;
        let write: Box<AppGroupWrite> = Box::new(move |tables, _new| write(tables));
        let submitted = span.in_scope(|| {
            check_append(session, &record, self.inner.max_record_bytes)?;
            self.submit_app_txn(session, std::slice::from_ref(&record), write)
        });
        async move {
            let outcomes = answer(submitted).await?;
            outcomes
                .into_iter()
                .next()
                .ok_or(AppTxnError::Append(AppendError::Closed))
        }
        .instrument(span)
    }

    /// Appends `records` to `session`'s log as one atomic group (as
    /// [`append_all`](Self::append_all) does, without a head condition) and runs
    /// `write` on the application's tables **in the same write transaction**: the group
    /// and the writes commit together, durably, or nothing does. This is how a consumer
    /// acknowledges a batch of notifications together with its own writes.
    ///
    /// `write` is told the indices (in `records`) of the records that are new, and runs
    /// only when at least one is: a duplicate's writes committed with its original, so
    /// a retry of a group whose commit went unanswered writes only for what is really
    /// new. Otherwise as for [`append_with`](Self::append_with): application tables
    /// only, within the same budget, possibly run more than once. An empty group is
    /// answered `Ok(vec![])` without running `write`.
    ///
    /// The request is queued when this is called, not when the future is first polled.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel the write: the group and the writes may or
    /// may not be committed (together, whole). Retrying the identical group is safe.
    ///
    /// # Errors
    ///
    /// [`AppTxnError::Append`] as [`append_all`](Self::append_all) answers (a refused
    /// record refuses the group: [`AppendError::GroupRefused`]); [`AppTxnError::Write`]
    /// / [`AppTxnError::Panicked`] when `write` failed, used up its budget or
    /// panicked. Nothing is written on any error.
    pub fn append_all_with<F>(
        &self,
        session: SessionId,
        records: Vec<JournalRecord>,
        write: F,
    ) -> impl Future<Output = Result<Vec<AppendOutcome>, AppTxnError>> + Send + 'static
    where
        F: FnMut(&AppTables<'_>, &[usize]) -> AppWriteResult + Send + 'static,
    {
        let span =
            tracing::debug_span!("journal.append_all_with", %session, records = records.len());
        let submitted = span.in_scope(|| {
            check_group(session, &records, self.inner.max_record_bytes)?;
            if records.is_empty() {
                return Ok(None);
            }
            self.submit_app_txn(session, &records, Box::new(write))
                .map(Some)
        });
        async move {
            match submitted {
                Ok(None) => Ok(Vec::new()),
                Ok(Some(rx)) => answer(Ok(rx)).await,
                Err(e) => Err(AppTxnError::Append(e)),
            }
        }
        .instrument(span)
    }

    /// Queues `records` (checked) with `write` as one transactional append.
    fn submit_app_txn(
        &self,
        session: SessionId,
        records: &[JournalRecord],
        write: Box<AppGroupWrite>,
    ) -> Result<oneshot::Receiver<AppReply>, AppendError> {
        let queue = &self.inner.queue;
        if queue.is_poisoned() {
            return Err(queue.refusal());
        }
        let requests = records.iter().map(|r| request(session, r).0).collect();
        let (reply, rx) = oneshot::channel();
        queue.submit_chore(Chore::AppTxn(AppTxn {
            requests,
            write,
            reply,
        }));
        Ok(rx)
    }
}

/// The writer's answer to a queued transactional append.
async fn answer(
    submitted: Result<oneshot::Receiver<AppReply>, AppendError>,
) -> Result<Vec<AppendOutcome>, AppTxnError> {
    let rx = submitted.map_err(AppTxnError::Append)?;
    match rx.await {
        Ok(reply) => reply,
        // The writer is gone without answering: it has stopped.
        Err(_) => Err(AppTxnError::Append(AppendError::Closed)),
    }
}

impl RedbJournal {
    /// Reads the application's tables (those written by
    /// [`append_with`](Self::append_with)'s closures) in one read transaction: what
    /// was committed, after a restart too. Blocking: call it from a blocking context
    /// (`spawn_blocking`) in async code.
    ///
    /// # Errors
    ///
    /// [`AppTableError::Closed`] once the journal is closed; whatever `f` returns.
    pub fn read_app_tables<T, E>(
        &self,
        f: impl FnOnce(&AppTablesRead) -> Result<T, E>,
    ) -> Result<T, E>
    where
        E: From<AppTableError>,
    {
        let db = self.inner.db().map_err(|_| AppTableError::Closed)?;
        read_tables(db.as_ref(), f)
    }
}
