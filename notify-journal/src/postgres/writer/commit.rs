//! Committing a batch or an atomic group: bounded retries of transient failures,
//! the operation timeout, dropping and reopening the write connection, and the
//! schema version check of every reconnect.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::Writer;
use super::batch::transact;
use super::conn::prepare_within;
use super::failure::Failure;
use super::group::{GroupAnswer, transact_group};
use super::queue::{AppendReq, GroupReq, Queue};
use crate::backend::AppendOutcome;
use crate::error::{AppendError, StorageError};
use crate::metrics::POSTGRES;
use crate::postgres::version::{PG_SCHEMA_VERSION, VersionCheck};

/// How often a batch that failed with a serialization failure or a deadlock
/// (SQLSTATE 40001, 40P01: rolled back, nothing written) is retried before its
/// appends get the error.
const TRANSIENT_RETRIES: u32 = 4;

impl Writer {
    /// Commits one atomic group in a transaction of its own, retrying it (bounded)
    /// after a serialization failure or deadlock. Answers what every record of the
    /// group is told: its outcome, or the group's refusal or failure.
    pub(super) async fn commit_group(&mut self, group: &GroupReq, queue: &Queue) -> GroupAnswer {
        let started = Instant::now();
        let mut retries = 0;
        loop {
            let failure = match self.attempt_group(group).await {
                Ok(Ok(outcomes)) => {
                    queue.commits.fetch_add(1, Ordering::Relaxed);
                    queue
                        .committed_appends
                        .fetch_add(outcomes.len() as u64, Ordering::Relaxed);
                    crate::metrics::committed(POSTGRES, outcomes.len(), started.elapsed());
                    return GroupAnswer::Committed(outcomes);
                }
                // Rolled back: nothing of the group was written.
                Ok(Err(refusal)) => return GroupAnswer::Refused(refusal),
                Err(failure) => failure,
            };
            // Whatever failed, the connection was inside a transaction: never reuse it
            // (the server rolls back what did not commit when it goes).
            self.conn = None;
            match failure {
                Failure::Before { error, transient } => {
                    if transient && retries < TRANSIENT_RETRIES {
                        retries += 1;
                        tracing::debug!(error = %error, retries, "journal group retried");
                        continue;
                    }
                    tracing::warn!(error = %error, "journal group rolled back");
                    crate::metrics::commit_failed(POSTGRES);
                    return GroupAnswer::Refused(AppendError::Storage(error));
                }
                Failure::Commit(error) => {
                    tracing::warn!(error = %error, "journal group commit failed; outcome unknown");
                    crate::metrics::commit_failed(POSTGRES);
                    return GroupAnswer::Refused(AppendError::CommitFailed(error));
                }
                Failure::SchemaTooNew(found) => {
                    tracing::warn!(
                        found,
                        supported = PG_SCHEMA_VERSION,
                        "journal schema is newer than this build; appends refused"
                    );
                    // Refused before anything was sent: nothing of the group written.
                    return GroupAnswer::Refused(AppendError::SchemaTooNew {
                        found,
                        supported: PG_SCHEMA_VERSION,
                        outcome_unknown: false,
                    });
                }
            }
        }
    }

    /// One try at an atomic group within the operation timeout: the group's own
    /// answer (committed, or refused and rolled back), or how it failed.
    async fn attempt_group(
        &mut self,
        group: &GroupReq,
    ) -> Result<Result<Vec<AppendOutcome>, AppendError>, Failure> {
        self.connected().await?;
        let Some(conn) = self.conn.as_mut() else {
            return Err(Failure::msg("postgres: no write connection"));
        };
        let mut commit_sent = false;
        let run = transact_group(conn, &self.sql.guard, self.holder, group, &mut commit_sent);
        match tokio::time::timeout(self.op_timeout, run).await {
            Ok(result) => result,
            Err(_) => {
                let error = StorageError::msg(format!(
                    "postgres: journal group timed out after {:?}",
                    self.op_timeout
                ));
                // Before its COMMIT was sent the transaction cannot have committed.
                Err(if commit_sent {
                    Failure::Commit(error)
                } else {
                    Failure::Before {
                        error,
                        transient: false,
                    }
                })
            }
        }
    }

    /// Commits one batch, retrying it (bounded) after a serialization failure or
    /// deadlock; answers every append of the batch.
    pub(super) async fn commit(
        &mut self,
        batch: &[AppendReq],
        queue: &Queue,
    ) -> Vec<Result<AppendOutcome, AppendError>> {
        let started = Instant::now();
        let mut retries = 0;
        loop {
            match self.attempt(batch).await {
                Ok(results) => {
                    queue.commits.fetch_add(1, Ordering::Relaxed);
                    queue
                        .committed_appends
                        .fetch_add(batch.len() as u64, Ordering::Relaxed);
                    crate::metrics::committed(POSTGRES, batch.len(), started.elapsed());
                    return results;
                }
                Err(Failure::Before { error, transient }) => {
                    if transient && retries < TRANSIENT_RETRIES {
                        retries += 1;
                        tracing::debug!(error = %error, retries, "journal batch retried");
                        continue;
                    }
                    tracing::warn!(error = %error, "journal batch rolled back");
                    crate::metrics::commit_failed(POSTGRES);
                    if !transient {
                        // The connection may be broken (terminated backend, aborted
                        // idle transaction, timeout): never reuse it.
                        self.conn = None;
                    }
                    return batch
                        .iter()
                        .map(|_| Err(AppendError::Storage(error.clone())))
                        .collect();
                }
                Err(Failure::Commit(error)) => {
                    tracing::warn!(error = %error, "journal commit failed; outcome unknown");
                    crate::metrics::commit_failed(POSTGRES);
                    self.conn = None;
                    return batch
                        .iter()
                        .map(|_| Err(AppendError::CommitFailed(error.clone())))
                        .collect();
                }
                Err(Failure::SchemaTooNew(found)) => {
                    tracing::warn!(
                        found,
                        supported = PG_SCHEMA_VERSION,
                        "journal schema is newer than this build; appends refused"
                    );
                    return batch
                        .iter()
                        .map(|_| {
                            Err(AppendError::SchemaTooNew {
                                found,
                                supported: PG_SCHEMA_VERSION,
                                outcome_unknown: false,
                            })
                        })
                        .collect();
                }
            }
        }
    }

    /// One try at a batch, on the current connection or a fresh one, within the
    /// operation timeout.
    async fn attempt(
        &mut self,
        batch: &[AppendReq],
    ) -> Result<Vec<Result<AppendOutcome, AppendError>>, Failure> {
        self.connected().await?;
        let Some(conn) = self.conn.as_mut() else {
            return Err(Failure::msg("postgres: no write connection"));
        };
        let guard = &self.sql.guard;
        match tokio::time::timeout(self.op_timeout, transact(conn, guard, self.holder, batch)).await
        {
            Ok(result) => result,
            Err(_) => {
                // The connection is stuck (partition, stalled server): abandon it.
                // The batch was sent as one statement that commits by itself, so
                // whether it committed is unknown.
                self.conn = None;
                Err(Failure::Commit(StorageError::msg(format!(
                    "postgres: journal batch timed out after {:?}",
                    self.op_timeout
                ))))
            }
        }
    }

    /// Makes sure there is a usable write connection (a fresh one, prepared, if the
    /// last one was dropped or closed), refusing once the schema was found newer.
    async fn connected(&mut self) -> Result<(), Failure> {
        // A schema found newer stays newer: nothing more is sent.
        if let Some(found) = self.sql.guard.newer() {
            self.conn = None;
            return Err(Failure::SchemaTooNew(found));
        }
        if self.conn.as_ref().is_none_or(|c| c.client.is_closed()) {
            self.conn = None;
            let client = self
                .connector
                .connect()
                .await
                .map_err(|e| Failure::Before {
                    error: e.into_storage(),
                    transient: false,
                })?;
            // Every reconnect checks the schema version first: a newer build may
            // have migrated it since this journal connected.
            let checked = tokio::time::timeout(self.op_timeout, self.sql.guard.check(&client))
                .await
                .unwrap_or_else(|_| {
                    Err(VersionCheck::Failed(StorageError::msg(format!(
                        "postgres: schema check timed out after {:?}",
                        self.op_timeout
                    ))))
                });
            match checked {
                Ok(()) => {}
                Err(VersionCheck::TooNew(found)) => return Err(Failure::SchemaTooNew(found)),
                Err(VersionCheck::Failed(error)) => {
                    return Err(Failure::Before {
                        error,
                        transient: false,
                    });
                }
            }
            let conn = prepare_within(self.op_timeout, client, &self.sql, self.idle_timeout_ms)
                .await
                .map_err(|error| Failure::Before {
                    error,
                    transient: false,
                })?;
            self.conn = Some(conn);
        }
        Ok(())
    }
}
