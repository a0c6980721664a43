//! Chores: a purge step, a tombstone drop or an import of session states, each run
//! alone in its own write transaction between two batches, and answered. Their work is
//! `purge.rs` (purge steps and tombstone drops) and `import.rs` (imported states).

mod import;
mod purge;

use std::time::Instant;

use self::import::import_states;
use super::{Chore, Writer};
use crate::error::{JournalError, StorageError};
use crate::redb::writer::failure::{BatchFailure, ChoreFailure};

impl Writer {
    /// Runs one chore in its own write transaction and answers it. A storage failure
    /// poisons the handle like a failed batch; damage found is answered and writes
    /// nothing. Returns whether it committed without a sync.
    pub(super) fn run_chore(&mut self, chore: Chore) -> bool {
        match chore {
            Chore::Purge {
                ended_before,
                max_frames,
                reply,
            } => {
                let started = Instant::now();
                let result = self.chore_txn(|txn| {
                    let step = purge::step(txn, ended_before, max_frames)?;
                    Ok((step.session.is_some(), step))
                });
                if let Ok((true, step)) = &result {
                    crate::metrics::purge_step(
                        crate::metrics::REDB,
                        u64::from(step.finished),
                        step.frames_removed,
                        started.elapsed(),
                    );
                }
                if let Ok((_, step)) = &result
                    && let Some(s) = step.session
                {
                    // Its appends are refused from now on; forget its head and keys.
                    self.heads.remove(&s.as_uuid().as_u128());
                    if let Some(census) = &self.census {
                        census.forget(s.as_uuid().as_u128());
                    }
                }
                let committed = matches!(result, Ok((true, _)));
                let _ = reply.send(result.map(|(_, step)| step));
                self.unsynced(committed)
            }
            Chore::DropTombstones {
                purged_before,
                limit,
                dropped,
                reply,
            } => {
                let step = limit.min(self.options.drop_step);
                let started = Instant::now();
                let result = self.chore_txn(|txn| {
                    let n = purge::drop_tombstones(txn, purged_before, step)?;
                    Ok((n > 0, n))
                });
                if let Ok((true, n)) = &result {
                    crate::metrics::drop_step(crate::metrics::REDB, *n, started.elapsed());
                }
                if matches!(result, Ok((true, _))) {
                    // A dropped session is unknown again: its next append starts a new
                    // log, so no remembered head or key may outlive its tombstone.
                    self.heads.clear();
                    if let Some(census) = &self.census {
                        census.tombstones_dropped();
                    }
                }
                let committed = matches!(result, Ok((true, _)));
                match result {
                    // A full step, and the caller wants more: the rest is a chore of
                    // its own, behind whatever else is queued, so the appends waiting
                    // now commit before it. A journal closing meanwhile stops the drop
                    // there: the answer is what was dropped.
                    Ok((_, n)) if n == step as u64 && limit > step => {
                        let rest = Chore::DropTombstones {
                            purged_before,
                            limit: limit - step,
                            dropped: dropped + n,
                            reply,
                        };
                        match self.queue.requeue_chore(rest) {
                            Ok(()) => {}
                            Err(Chore::DropTombstones { dropped, reply, .. }) => {
                                let _ = reply.send(Ok(dropped));
                            }
                            Err(other) => other.refuse(JournalError::Closed),
                        }
                    }
                    Ok((_, n)) => {
                        let _ = reply.send(Ok(dropped + n));
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
                self.unsynced(committed)
            }
            Chore::AppTxn(first) => self.run_app_txns(first),
            Chore::ImportStates { states, reply } => {
                let result = self.chore_txn(|txn| {
                    Ok(match import_states(txn, &states)? {
                        Ok(wrote) => (wrote, Ok(())),
                        Err(refused) => (false, Err(refused)),
                    })
                });
                let committed = matches!(result, Ok((true, _)));
                let _ = reply.send(match result {
                    Ok((_, answer)) => answer,
                    Err(e) => Err(e.into()),
                });
                self.unsynced(committed)
            }
        }
    }

    /// Runs `f` in a write transaction with the journal's durability, after folding the
    /// log's tail in it; commits (the fold with it) when `f` says so (`Ok((true, _))`),
    /// else drops the transaction, fold included. A panic of the storage engine is
    /// contained.
    fn chore_txn<T>(
        &mut self,
        f: impl FnOnce(&redb::WriteTransaction) -> Result<(bool, T), ChoreFailure>,
    ) -> Result<(bool, T), JournalError> {
        let result = self.contained("purging", |w| {
            let txn = w.begin_write()?;
            // A chore reads and removes sessions' frames through the positions table
            // alone: the tail is folded into it first, in the same transaction.
            let folded = w.fold_tail(&txn, true)?;
            let (commit, out) = match f(&txn) {
                Ok(v) => v,
                Err(ChoreFailure::Damaged(e)) => return Ok(Err(e)),
                Err(ChoreFailure::Storage(e)) => return Err(BatchFailure::BeforeCommit(e)),
            };
            // A chore that commits nothing (a refused import, an idle purge) drops the
            // fold with the rest: what it may have written must not commit with it.
            if commit {
                w.committing = true;
                txn.commit()
                    .map_err(|e| BatchFailure::Commit(StorageError::new("commit", e)))?;
                if folded {
                    w.tail_folded();
                }
            }
            Ok(Ok((commit, out)))
        });
        match result {
            // Not counted in `CommitStats` (batches only): the purge metrics count steps.
            Ok(answer) => answer,
            // Damage the fold found (a positions entry a damaged page hid): appends are
            // refused as for damage the writer or the scrub finds, nothing written.
            Err(BatchFailure::Damaged { detail, .. }) => {
                self.found_damage(&detail);
                Err(JournalError::Storage(StorageError::msg(detail)))
            }
            Err(failure) => {
                self.queue.poison();
                if let Some(e) = failure.storage_error() {
                    tracing::error!(error = %e, "journal purge commit failed; journal poisoned");
                }
                Err(JournalError::Storage(match failure {
                    BatchFailure::BeforeCommit(e) => e,
                    BatchFailure::Damaged { detail, .. } => StorageError::msg(detail),
                    BatchFailure::Refused => return Err(self.queue.chore_refusal()),
                    BatchFailure::Commit(e) => StorageError::msg(format!(
                        "commit failed, outcome unknown (the step may or may not be durable; it is safe to purge again after reopening): {e}"
                    )),
                }))
            }
        }
    }
}
