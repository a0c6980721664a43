//! Transactional appends: a record, or an atomic group of one session's records, and
//! the application's own writes ([`RedbJournal::append_with`](crate::RedbJournal::append_with),
//! [`RedbJournal::append_all_with`](crate::RedbJournal::append_all_with)) in one write
//! transaction of their own.
//!
//! A group is judged as every engine judges one (`group.rs`); its closure runs once,
//! told which of its records are new, and only if one is. A group refused after part
//! of it was written in the turn's transaction is treated as a failed closure (the
//! transaction dropped, the turn redone without it), so nothing of it stays.
//!
//! The writer takes them as chores: when one is at the front of the chore queue it
//! takes it and those queued right behind it (up to the batch size, and for at most
//! [`GROUP_TIME`] of closures), resolves each record as a batch would, runs the closure
//! of each record that is new (a duplicate's writes committed with its original), and
//! commits them all at once. If a closure fails (an error, its budget, a panic) the
//! transaction is dropped, nothing of it written: that append is answered with its
//! failure, and the appends before it (whose closures had succeeded) run again at once
//! in a fresh transaction that takes no more appends, so an honest closure runs again
//! once per failure it shared a turn with, never once per failure queued behind it.
//! Any appends after the failed one go back to the front of the chore queue. So one
//! failing closure never fails another appender.

use std::time::{Duration, Instant};

use super::Writer;
use super::requests::{AppReply, AppTxn};
use super::resolve::Tables;
use crate::error::AppendError;
use crate::error::{JournalError, StorageError};
use crate::group::{GroupVerdict, try_judge_group};
use crate::redb::app_tables::{AppGroupWrite, AppTables, AppTxnError, Budget};
use crate::redb::contain::contain;
use crate::redb::format::keys::sid;
use crate::redb::writer::failure::BatchFailure;

/// How long one turn's closures may run together before the writer stops taking more
/// transactional appends into the turn (the rest wait for the next turn).
pub(super) const GROUP_TIME: Duration = Duration::from_millis(10);

/// How one turn ended.
enum Turn {
    /// Committed: one answer per append, in order.
    Committed(Vec<AppReply>),
    /// The closure of the append at this index failed: nothing written.
    Failed(usize, AppTxnError),
}

impl Writer {
    /// Runs `first` and the transactional appends queued behind it in one transaction
    /// (see the module's docs). Returns whether it committed without a sync.
    pub(super) fn run_app_txns(&mut self, first: AppTxn) -> bool {
        let mut txns = vec![first];
        // After a failure, the succeeded prefix reruns in a turn that takes no more.
        let mut grow = true;
        loop {
            let result = self.contained("writing application tables", |w| {
                w.app_turn(&mut txns, grow)
            });
            self.staged.clear();
            self.scratch.base.clear();
            match result {
                Ok(Turn::Failed(at, error)) => {
                    let rest = txns.split_off(at + 1);
                    if let Some(failed) = txns.pop() {
                        let _ = failed.reply.send(Err(error));
                    }
                    self.requeue(rest);
                    if txns.is_empty() {
                        return false;
                    }
                    grow = false;
                }
                other => return self.finish_app_turn(txns, other),
            }
        }
    }

    /// Puts `txns` back at the front of the chore queue (refused if it is closing).
    fn requeue(&mut self, txns: Vec<AppTxn>) {
        if txns.is_empty() {
            return;
        }
        if let Err(back) = self.queue.requeue_app_txns(txns) {
            let refusal = self.queue.chore_refusal();
            for txn in back {
                txn.refuse(clone_refusal(&refusal));
            }
        }
    }

    /// Answers the appends of a turn that committed or hit a storage failure.
    fn finish_app_turn(&mut self, txns: Vec<AppTxn>, result: Result<Turn, BatchFailure>) -> bool {
        match result {
            Ok(Turn::Committed(answers)) => {
                self.queue.count_commit(answers.len());
                for (txn, answer) in txns.into_iter().zip(answers) {
                    let _ = txn.reply.send(answer);
                }
                self.unsynced(true)
            }
            // Handled by the caller; answered here too for completeness.
            Ok(Turn::Failed(at, error)) => {
                let mut txns = txns;
                let rest = txns.split_off(at + 1);
                if let Some(failed) = txns.pop() {
                    let _ = failed.reply.send(Err(error));
                }
                txns.extend(rest);
                self.requeue(txns);
                false
            }
            Err(failure) => {
                let error = match failure {
                    BatchFailure::Damaged { detail, .. } => {
                        self.found_damage(&detail);
                        self.queue.refusal()
                    }
                    BatchFailure::Refused => self.queue.refusal(),
                    other => match other.into_append_error() {
                        Some(error) => {
                            self.queue.poison();
                            crate::metrics::commit_failed(crate::metrics::REDB);
                            tracing::error!(error = %error, "journal commit failed; journal poisoned");
                            error
                        }
                        None => self.queue.refusal(),
                    },
                };
                for txn in txns {
                    let _ = txn.reply.send(Err(AppTxnError::Append(error.clone())));
                }
                false
            }
        }
    }

    /// One turn: resolve and run each of `txns` (taking more from the queue while the
    /// turn's budget lasts, if `grow`), then commit.
    fn app_turn(&mut self, txns: &mut Vec<AppTxn>, grow: bool) -> Result<Turn, BatchFailure> {
        self.scratch.begin();
        let started = Instant::now();
        let max = self.tuning.max_batch.max(1);
        let txn = self.begin_write()?;
        self.load_tail(&txn)?;
        let folded = self.fold_or_refuse(&txn)?;
        let mut answers = Vec::with_capacity(txns.len());
        let mut records = 0;
        let staged_pos;
        {
            let (mut tables, mut next_pos) = Tables::open(
                &txn,
                self.next_pos,
                &self.tail,
                self.census.as_deref(),
                &mut self.scratch,
            )?;
            let mut i = 0;
            loop {
                if i == txns.len() {
                    if !grow || txns.len() >= max || started.elapsed() >= GROUP_TIME {
                        break;
                    }
                    match self.queue.take_app_txn() {
                        Some(more) => txns.push(more),
                        None => break,
                    }
                }
                let app = &mut txns[i];
                let session = app.requests.first().map_or(0, |r| r.session);
                let verdict = try_judge_group(
                    sid(session),
                    None,
                    app.requests.iter().map(|req| {
                        tables.resolve(req, &mut next_pos, &mut self.staged, &mut self.heads)
                    }),
                )?;
                match verdict {
                    GroupVerdict::Commit(outcomes) => {
                        let new: Vec<usize> = (0..outcomes.len())
                            .filter(|&k| outcomes[k].appended)
                            .collect();
                        // A duplicate's writes committed with its original.
                        if !new.is_empty()
                            && let Err(e) = run_write(&txn, app.write.as_mut(), &new)
                        {
                            return Ok(Turn::Failed(i, e));
                        }
                        records += outcomes.len();
                        answers.push(Ok(outcomes));
                    }
                    // Frames of the group are written in this transaction: it is
                    // dropped, as for a failed closure, so that none of them stays.
                    GroupVerdict::Refuse { resolved, refusal }
                        if resolved.iter().any(|o| o.appended) =>
                    {
                        return Ok(Turn::Failed(i, AppTxnError::Append(refusal)));
                    }
                    // Nothing of it was written: refused alone (one record: its own
                    // refusal, as a single append answers it).
                    GroupVerdict::Refuse { refusal, .. } => {
                        let refusal = match refusal {
                            AppendError::GroupRefused { source, .. } if app.requests.len() == 1 => {
                                *source
                            }
                            other => other,
                        };
                        answers.push(Err(AppTxnError::Append(refusal)));
                    }
                }
                i += 1;
            }
            staged_pos = next_pos;
        }
        if self.queue.is_poisoned() {
            return Err(BatchFailure::Refused);
        }
        let commit_started = Instant::now();
        self.committing = true;
        txn.commit()
            .map_err(|e| BatchFailure::Commit(StorageError::new("commit", e)))?;
        crate::metrics::committed(crate::metrics::REDB, records, commit_started.elapsed());
        self.committed_appends(staged_pos, folded);
        Ok(Turn::Committed(answers))
    }
}

/// Runs one application closure on `txn` under its budget, a panic of it contained.
fn run_write(
    txn: &redb::WriteTransaction,
    write: &mut AppGroupWrite,
    new: &[usize],
) -> Result<(), AppTxnError> {
    let budget = Budget::new();
    let tables = AppTables::new(txn, &budget);
    match contain(|| write(&tables, new)) {
        Ok(Ok(())) => match budget.exceeded() {
            None => Ok(()),
            Some(e) => Err(AppTxnError::Write(Box::new(e))),
        },
        Ok(Err(e)) => Err(AppTxnError::Write(e)),
        Err(panic) => Err(AppTxnError::Panicked(panic.to_string())),
    }
}

/// A copy of a chore refusal (`JournalError` is not `Clone`).
fn clone_refusal(e: &JournalError) -> JournalError {
    match e {
        JournalError::Closed => JournalError::Closed,
        other => JournalError::Storage(StorageError::msg(other.to_string())),
    }
}
