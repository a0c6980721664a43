//! The single writer: it drains concurrent appends (across sessions) into one redb
//! write transaction and one commit. Its state sits behind one lock, driven by a std
//! thread or, for a lone appender, by the appender itself (`lead.rs`).
//!
//! Adaptive batching: after a commit, the appenders it acknowledged usually come right
//! back. Committing at once would catch only those that queued during the commit, and
//! the population would settle into two halves taking turns. So, like PostgreSQL's
//! `commit_delay`/`commit_siblings`, the writer lingers briefly for the recently active
//! appenders to rejoin, but only when at least `commit_siblings` are active; a lone
//! append commits at once. While it lingers it is already building the transaction:
//! each append is resolved as soon as it is taken from the queue.
//!
//! The writer keeps each written session's head (last seq) and the log's next position
//! in memory, so a new frame costs no read beyond the session-row and index lookups
//! (`resolve.rs`; see `docs/design.md`).
//!
//! Purge steps and tombstone drops (`chores/purge.rs`) are chores queued beside the appends:
//! the writer runs at most one, alone in its own write transaction, between two
//! batches, so an append waits for at most one step. A drop of more tombstones than
//! one step (`RedbOptions::drop_step`) is requeued after each step, behind the
//! other chores.
//!
//! Transactional appends (an append with the application's own writes,
//! `RedbJournal::append_with`) are chores too: the writer runs those queued together
//! in one transaction of their own between two batches (`app_txn.rs`), so a failing
//! application write never fails another appender's record.
//!
//! Files: `lead.rs` (who writes: the thread or a leading appender), `requests.rs` (what
//! is queued), `queue.rs` (the queue and the wake policy), `tuning.rs` (spin and
//! linger), `batch.rs` (one batch, one transaction), `resolve.rs` (one append inside
//! it), `chores/` (one chore, one transaction: purge steps, tombstone drops, imported
//! states), `app_txn.rs` (transactional appends), `failure.rs` (what a failed
//! transaction means).

mod app_txn;
mod batch;
mod chores;
pub(crate) mod failure;
pub(crate) mod lead;
mod queue;
mod requests;
mod resolve;
mod tail;
mod tuning;

use crate::redb::format::keys::FastMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redb::Database;

pub(crate) use self::queue::Queue;
pub(crate) use self::requests::{AppReply, AppTxn, Chore, Group, Queued, Reply, Request};
use self::tuning::Tuning;
use crate::error::{AppendError, Corruption, StorageError};
use crate::redb::census::Census;
use crate::redb::contain::contain;
use crate::redb::format::keys::sid;
use crate::redb::options::{RedbDurability, RedbOptions};
use crate::redb::writer::failure::{BatchFailure, before};

/// The writer's state (one per journal; `lead.rs` says who drives it).
pub(crate) struct Writer {
    db: Arc<Database>,
    queue: Arc<Queue>,
    options: RedbOptions,
    tuning: Tuning,
    /// The batch being written, in queue order.
    batch: Vec<Queued>,
    /// One per request of `batch`, in order (a group's requests one by one).
    replies: Vec<Reply>,
    /// Committed last seq of recently written sessions: the single writer is the only
    /// one that moves a head, so after the first read of a session its head is known.
    heads: FastMap<u128, u64>,
    /// Heads moved by the batch being written; merged into `heads` once it commits.
    staged: FastMap<u128, u64>,
    /// The log's next free position once known (read from the log's last entry on the
    /// first batch); moves only when a batch commits.
    next_pos: Option<u64>,
    /// The key census confirming index misses (`None`: `confirm_misses` off).
    census: Option<Arc<Census>>,
    /// What the batch being written writes besides the tables.
    scratch: resolve::Scratch,
    /// The committed tail by session (`tail.rs`), once read (`tail_loaded`).
    tail: crate::redb::format::positions::TailMap,
    tail_loaded: bool,
    /// Entries in [`tail`](Self::tail).
    tail_len: usize,
    /// Set once the batch's commit has started: a panic from then on leaves the
    /// batch's outcome unknown (`CommitFailed`), not "nothing written".
    committing: bool,
    /// Whether a commit without a sync left data that a clean close must sync.
    dirty_non_durable: bool,
    /// Writer time owed to appends since the last chore: while appends wait, a chore
    /// runs only once the batches after the previous one have taken as long as it did,
    /// so a purge under a full append load gets about half the writer, not all of it.
    owed: Duration,
    /// Whether an appender is writing this batch on its own thread (`lead.rs`): it
    /// commits what is queued at once, without lingering for more.
    leading: bool,
    /// When the last batch was answered.
    last_end: Instant,
}

/// The writer's state, shared by the writer thread and a leading appender
/// (`lead.rs`): whoever holds it writes the next batch.
pub(super) fn writer(
    db: Arc<Database>,
    queue: Arc<Queue>,
    options: RedbOptions,
    census: Option<Arc<Census>>,
) -> Writer {
    let tuning = Tuning::new(&options);
    Writer {
        db,
        queue,
        batch: Vec::with_capacity(options.max_batch),
        replies: Vec::with_capacity(options.max_batch),
        options,
        tuning,
        heads: FastMap::default(),
        staged: FastMap::default(),
        next_pos: None,
        census,
        scratch: resolve::Scratch::default(),
        tail: crate::redb::format::positions::TailMap::default(),
        tail_loaded: false,
        tail_len: 0,
        committing: false,
        dirty_non_durable: false,
        owed: Duration::ZERO,
        leading: false,
        last_end: Instant::now(),
    }
}

impl Writer {
    /// One turn of the writer, once work is queued: refuses everything if poisoned,
    /// else runs at most one chore (never in a leader's turn, `leading`), then writes
    /// one batch and answers it.
    pub(super) fn turn(&mut self) {
        let w = self;
        if w.queue.is_poisoned() {
            w.queue.take(&mut w.batch, w.tuning.max_batch);
            let refusal = w.queue.refusal();
            for queued in w.batch.drain(..) {
                queued.refuse(&refusal);
            }
            while let Some(chore) = w.queue.take_chore() {
                chore.refuse(w.queue.chore_refusal());
            }
            return;
        }
        // At most one chore between two batches: an append waits for one step at most.
        // Chores run on the writer thread only, never in a leader's turn on the
        // appender's thread (an `append_with` closure runs on the writer thread, as
        // documented): queuing one woke the thread, which runs it next.
        if !w.leading
            && (w.owed.is_zero() || w.queue.len() == 0)
            && let Some(chore) = w.queue.take_chore()
        {
            let started = Instant::now();
            w.dirty_non_durable |= w.run_chore(chore);
            w.owed = started.elapsed();
            if w.queue.len() == 0 || w.queue.is_poisoned() {
                return;
            }
        }
        if w.queue.len() == 0 {
            // Taken meanwhile by the other of thread and leader: no empty commit.
            return;
        }
        let batch_started = Instant::now();
        let span = tracing::debug_span!("journal.commit", batch = tracing::field::Empty);
        let _entered = span.enter();
        // A panic inside the storage engine (a damaged page it trusts) must not escape:
        // the batch fails, the handle is poisoned like after a failed commit, and every
        // appender gets a typed error.
        let result = w.contained("writing", Writer::write_batch);
        #[cfg(test)]
        if w.leading {
            lead::fault::turn();
        }
        w.owed = w.owed.saturating_sub(batch_started.elapsed());
        span.record("batch", w.batch.len());
        w.tuning.last_batch = w.batch.len();
        w.tuning.arrived_during_commit = w.queue.len();
        w.staged.clear();
        w.scratch.base.clear();
        w.answer(result);
        w.last_end = Instant::now();
    }

    /// Answers the batch written (or not) with `result`.
    fn answer(&mut self, result: Result<(), BatchFailure>) {
        let w = self;
        match result {
            Ok(()) => {
                w.dirty_non_durable |= w.unsynced(true);
                w.queue.count_commit(w.replies.len());
                let requests = w.batch.drain(..).flat_map(Queued::into_requests);
                for (req, reply) in requests.zip(w.replies.drain(..)) {
                    let _ = req.reply.send(reply);
                }
            }
            Err(BatchFailure::Damaged {
                session,
                seq,
                detail,
            }) => {
                // Damage the writer found: poisoned for damage (as the scrub would),
                // not counted as a commit failure. The request that found it (the one
                // after the answered ones) is told what; the rest `Damaged`.
                w.found_damage(&detail);
                let found = w.replies.len();
                w.replies.clear();
                let refusal = w.queue.refusal();
                let requests = w.batch.drain(..).flat_map(Queued::into_requests);
                for (i, req) in requests.enumerate() {
                    let answer = if i == found {
                        AppendError::Corrupt {
                            session: sid(session),
                            seq,
                            source: Corruption::Inconsistent(detail.clone()),
                        }
                    } else {
                        refusal.clone()
                    };
                    let _ = req.reply.send(Err(answer));
                }
            }
            Err(failure) => {
                let error = match failure.into_append_error() {
                    Some(error) => {
                        // The handle may be broken (fsyncgate): never write through it
                        // again.
                        w.queue.poison();
                        crate::metrics::commit_failed(crate::metrics::REDB);
                        tracing::error!(error = %error, "journal commit failed; journal poisoned");
                        error
                    }
                    // Refused: poisoned meanwhile, by damage found.
                    None => w.queue.refusal(),
                };
                w.replies.clear();
                for queued in w.batch.drain(..) {
                    queued.refuse(&error);
                }
            }
        }
    }

    /// On close: a clean close folds the tail (the next open, and every reader of the
    /// file, finds it empty) and makes the non-durable commits durable, in one durable
    /// commit. Nothing is written through a poisoned handle.
    pub(super) fn finish(&mut self) {
        let fold = !self.tail_loaded || self.tail_len > 0;
        if self.queue.is_poisoned() || !(fold || self.dirty_non_durable) {
            return;
        }
        let result = self.contained("closing", |w| {
            let mut txn = w.begin_write()?;
            txn.set_durability(redb::Durability::Immediate)
                .map_err(before("set durability"))?;
            let folded = fold && w.fold_tail(&txn, true)?;
            if !folded && !w.dirty_non_durable {
                return Ok(());
            }
            w.committing = true;
            txn.commit()
                .map_err(|e| BatchFailure::Commit(StorageError::new("final durable commit", e)))?;
            if folded {
                w.tail_folded();
            }
            Ok(())
        });
        if let Err(e) = result {
            let detail = match e {
                BatchFailure::BeforeCommit(e) | BatchFailure::Commit(e) => e.to_string(),
                BatchFailure::Damaged { detail, .. } => detail,
                BatchFailure::Refused => "refused".to_owned(),
            };
            tracing::error!(error = %detail, "final durable commit on close failed");
        }
    }
}

impl Writer {
    /// Damage the writer found (a fold, a resolve, a closure's group): logged, and the
    /// journal marked damaged, so every later append is refused as for damage the
    /// scrub finds.
    fn found_damage(&self, detail: &str) {
        tracing::error!(%detail, "journal writer found damage; appends are refused");
        self.queue
            .mark_damaged(format!("the writer found: {detail}"));
    }

    /// Begins a write transaction with the journal's durability.
    fn begin_write(&self) -> Result<redb::WriteTransaction, BatchFailure> {
        let mut txn = self
            .db
            .begin_write()
            .map_err(before("begin write transaction"))?;
        txn.set_durability(match self.options.durability {
            RedbDurability::Immediate => redb::Durability::Immediate,
            RedbDurability::NonDurableForTestsOnly => redb::Durability::None,
        })
        .map_err(before("set durability"))?;
        txn.set_quick_repair(self.options.quick_repair);
        Ok(txn)
    }

    /// Runs `f`, a write transaction, with a panic of the storage engine (a damaged
    /// page it trusts) contained: it fails like a storage error, before the commit or,
    /// once `f` has started the commit (`committing`), with its outcome unknown.
    fn contained<T>(
        &mut self,
        doing: &str,
        f: impl FnOnce(&mut Self) -> Result<T, BatchFailure>,
    ) -> Result<T, BatchFailure> {
        self.committing = false;
        contain(|| f(self)).unwrap_or_else(|panic| {
            let e = panic.storage(doing);
            Err(if self.committing {
                BatchFailure::Commit(e)
            } else {
                BatchFailure::BeforeCommit(e)
            })
        })
    }

    /// Whether a commit (`committed`) left data that a clean close must sync.
    fn unsynced(&self, committed: bool) -> bool {
        committed && self.options.durability == RedbDurability::NonDurableForTestsOnly
    }
}
