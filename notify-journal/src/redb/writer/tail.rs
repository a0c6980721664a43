//! The writer's copy of the log's tail (`format/positions.rs`): read once after open,
//! grown by every commit of appends, emptied by every commit that folds the tail; and
//! when the tail folds (a transaction of appends that finds it full, every chore that
//! commits, a clean close).

use redb::WriteTransaction;

use super::Writer;
use super::resolve::HEADS_CACHE_MAX;
use crate::redb::format::TAIL;
use crate::redb::format::positions::{fold, read_tail};
use crate::redb::writer::failure::{BatchFailure, before};

impl Writer {
    /// Reads the tail into memory, the first time a transaction of appends needs it.
    pub(super) fn load_tail(&mut self, txn: &WriteTransaction) -> Result<(), BatchFailure> {
        if self.tail_loaded {
            return Ok(());
        }
        let table = txn.open_table(TAIL).map_err(before("open tail"))?;
        let (map, n) = read_tail(&table).map_err(before("read tail"))?;
        self.tail = map;
        self.tail_len = n;
        self.tail_loaded = true;
        Ok(())
    }

    /// Folds the tail into the positions table inside `txn` when it holds
    /// `RedbOptions::tail_max` entries or more (or, with `always`, whenever it holds
    /// any): whether it folded. The writer's copy is emptied once `txn` commits
    /// ([`tail_folded`](Self::tail_folded)).
    pub(super) fn fold_tail(
        &mut self,
        txn: &WriteTransaction,
        always: bool,
    ) -> Result<bool, BatchFailure> {
        // Not read yet: only the table knows whether it holds anything.
        let due = if self.tail_loaded {
            self.tail_len > 0 && (always || self.tail_len >= self.options.tail_max)
        } else {
            always
        };
        Ok(due && fold(txn)? > 0)
    }

    /// [`fold_tail`](Self::fold_tail) when due, for a transaction of appends: damage the
    /// fold finds marks the journal damaged and refuses the whole transaction (every
    /// appender gets the refusal: the damage is not any one of theirs).
    pub(super) fn fold_or_refuse(&mut self, txn: &WriteTransaction) -> Result<bool, BatchFailure> {
        match self.fold_tail(txn, false) {
            Err(BatchFailure::Damaged { detail, .. }) => {
                self.found_damage(&detail);
                Err(BatchFailure::Refused)
            }
            other => other,
        }
    }

    /// After a commit that folded the tail: it is empty.
    pub(super) fn tail_folded(&mut self) {
        self.tail.clear();
        self.tail_len = 0;
        self.tail_loaded = true;
    }

    /// After a commit of appends: the log's next position is `next_pos`, the staged
    /// heads are committed, the census counts the new frames, and the tail holds them
    /// (emptied first if the transaction `folded` it).
    pub(super) fn committed_appends(&mut self, next_pos: u64, folded: bool) {
        self.next_pos = Some(next_pos);
        if self.heads.len() + self.staged.len() > HEADS_CACHE_MAX {
            self.heads.clear();
        }
        self.heads.extend(self.staged.iter().map(|(s, q)| (*s, *q)));
        if let Some(census) = &self.census {
            census.record(&self.scratch.fresh);
        }
        if folded {
            self.tail_folded();
        }
        for &(session, seq, pos) in &self.scratch.appended {
            self.tail.entry(session).or_default().push((seq, pos));
        }
        self.tail_len += self.scratch.appended.len();
    }
}
