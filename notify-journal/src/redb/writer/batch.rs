//! One batch: the appends taken from the queue (and those that arrive while it
//! lingers), resolved in one write transaction and committed once.

use std::time::Instant;

use super::Writer;
use super::resolve::Tables;
use crate::error::StorageError;
use crate::redb::writer::failure::BatchFailure;

impl Writer {
    /// Writes one batch in one write transaction and commits it. Takes what is queued,
    /// then, while lingering, whatever arrives: each request is resolved as soon as it
    /// is taken, so the transaction is built while the rest of the batch gathers.
    /// Requests are resolved in queue order against the transaction's own view, so two
    /// appends of the same new key in one batch resolve exactly as if sequential.
    ///
    /// On success `replies` answers `batch` and the staged heads are committed; on
    /// failure every request in `batch` gets the error.
    pub(super) fn write_batch(&mut self) -> Result<(), BatchFailure> {
        let max = self.tuning.max_batch;
        self.scratch.begin();
        self.queue.take(&mut self.batch, max);
        // A leading appender commits what is queued at once (`lead.rs`).
        let target = if self.leading {
            0
        } else {
            self.tuning.linger_target()
        };
        let deadline = Instant::now() + self.tuning.linger_budget();
        let gap = self.tuning.gap();

        let txn = self.begin_write()?;
        self.load_tail(&txn)?;
        let folded = self.fold_or_refuse(&txn)?;
        let staged_pos;
        {
            let (mut tables, mut next_pos) = Tables::open(
                &txn,
                self.next_pos,
                &self.tail,
                self.census.as_deref(),
                &mut self.scratch,
            )?;
            let mut resolved = 0;
            // Whether to linger for more once what is taken is resolved.
            let mut more = true;
            loop {
                for queued in &self.batch[resolved..] {
                    tables.resolve_queued(
                        queued,
                        &mut next_pos,
                        &mut self.staged,
                        &mut self.heads,
                        &mut self.replies,
                    )?;
                }
                resolved = self.batch.len();
                if !more || resolved >= target || resolved >= max {
                    break;
                }
                // Whatever `linger` takes is resolved on the next turn, even when it
                // says to stop.
                more = self
                    .queue
                    .linger(&mut self.batch, target, max, deadline, gap);
            }
            staged_pos = next_pos;
        }
        // Poisoned meanwhile (damage the scrub found): this batch is not committed.
        if self.queue.is_poisoned() {
            return Err(BatchFailure::Refused);
        }
        let started = Instant::now();
        self.committing = true;
        txn.commit()
            .map_err(|e| BatchFailure::Commit(StorageError::new("commit", e)))?;
        self.tuning.observe_commit(started.elapsed());
        crate::metrics::committed(crate::metrics::REDB, self.replies.len(), started.elapsed());
        self.committed_appends(staged_pos, folded);
        Ok(())
    }
}
