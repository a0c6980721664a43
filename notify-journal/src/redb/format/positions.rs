//! Where a session's frames are in the log (format 3): its entries in the positions
//! table, then those still in the log's tail. [`SessionLog`] is one session's view of
//! both, for the writer (its transaction, and its copy of the tail in memory) and for a
//! read snapshot (the tail read from the snapshot); [`read_tail`] reads a tail table
//! into the form both keep; [`fold`] moves the tail into the positions table.

use redb::ReadableTable;

use super::keys::FastMap;
use super::{POSITIONS, TAIL};

/// The tail's entries by session: `(seq, position)`, in seq order.
pub(crate) type TailMap = FastMap<u128, Vec<(u64, u64)>>;

/// Reads a whole tail table: its entries by session, and how many there are.
///
/// # Errors
///
/// The storage engine's errors reading the table.
pub(crate) fn read_tail<T>(tail: &T) -> Result<(TailMap, usize), redb::StorageError>
where
    T: ReadableTable<u64, (u128, u64)>,
{
    let mut map = TailMap::default();
    let mut n = 0;
    for entry in tail.iter()? {
        let (k, v) = entry?;
        let (session, seq) = v.value();
        map.entry(session).or_default().push((seq, k.value()));
        n += 1;
    }
    for entries in map.values_mut() {
        entries.sort_unstable();
    }
    Ok((map, n))
}

/// Why [`fold`] stopped.
#[derive(Debug)]
pub(crate) enum FoldError {
    /// The storage engine failed.
    Storage(redb::Error),
    /// A positions entry was already there for a tail entry's seq (a damaged page hid
    /// it from the writer): nothing of the transaction may be committed.
    Replaced {
        /// The session.
        session: u128,
        /// The seq both name.
        seq: u64,
    },
}

impl From<redb::StorageError> for FoldError {
    fn from(e: redb::StorageError) -> Self {
        Self::Storage(e.into())
    }
}

impl From<redb::TableError> for FoldError {
    fn from(e: redb::TableError) -> Self {
        Self::Storage(e.into())
    }
}

/// Moves every tail entry into the positions table inside `txn`, sorted by
/// `(session, seq)` (each positions leaf is written once, however many of its entries
/// the tail holds), and empties the tail. Returns how many entries moved.
///
/// # Errors
///
/// [`FoldError`]: the storage engine's errors, or a positions entry already there.
pub(crate) fn fold(txn: &redb::WriteTransaction) -> Result<usize, FoldError> {
    let mut tail = txn.open_table(TAIL)?;
    let mut entries = Vec::new();
    for entry in tail.iter()? {
        let (k, v) = entry?;
        let (session, seq) = v.value();
        entries.push((session, seq, k.value()));
    }
    if entries.is_empty() {
        return Ok(0);
    }
    entries.sort_unstable();
    let mut positions = txn.open_table(POSITIONS)?;
    for &(session, seq, pos) in &entries {
        if positions.insert((session, seq), pos)?.is_some() {
            return Err(FoldError::Replaced { session, seq });
        }
    }
    tail.retain(|_, _| false)?;
    Ok(entries.len())
}

/// Every place of every session's frames, `(session, seq, position)` in
/// `(session, seq)` order: the positions table's entries and the tail's merged (a seq
/// both hold comes twice, the table's first).
///
/// # Errors
///
/// The storage engine's errors reading the table, as the iterator meets them.
pub(crate) fn every_place<'a, P>(
    positions: &'a P,
    tail: &TailMap,
) -> Result<
    impl Iterator<Item = Result<(u128, u64, u64), redb::StorageError>> + 'a,
    redb::StorageError,
>
where
    P: ReadableTable<(u128, u64), u64>,
{
    let mut tail: Vec<(u128, u64, u64)> = tail
        .iter()
        .flat_map(|(s, entries)| entries.iter().map(|(seq, pos)| (*s, *seq, *pos)))
        .collect();
    tail.sort_unstable();
    let mut tail = tail.into_iter().peekable();
    let mut table = positions
        .iter()?
        .map(|entry| {
            entry.map(|(k, v)| {
                let (s, seq) = k.value();
                (s, seq, v.value())
            })
        })
        .peekable();
    Ok(std::iter::from_fn(move || {
        let from_table = match (table.peek(), tail.peek()) {
            (None, None) => return None,
            (Some(Ok((s, seq, _))), Some((ts, tseq, _))) => (*s, *seq) <= (*ts, *tseq),
            (Some(_), _) => true,
            (None, Some(_)) => false,
        };
        if from_table {
            table.next()
        } else {
            tail.next().map(Ok)
        }
    }))
}

/// Whether `session`'s log puts its frame `seq` at log position `pos`: the tail entry at
/// `pos` names that frame, or its positions entry names `pos`. Two point reads at most,
/// whatever the tail holds (no tail: a format-2 file read in place).
///
/// # Errors
///
/// The storage engine's errors reading the tables.
pub(crate) fn names<P, T>(
    positions: &P,
    tail: Option<&T>,
    session: u128,
    seq: u64,
    pos: u64,
) -> Result<bool, redb::StorageError>
where
    P: ReadableTable<(u128, u64), u64>,
    T: ReadableTable<u64, (u128, u64)>,
{
    if let Some(tail) = tail
        && tail.get(pos)?.is_some_and(|g| g.value() == (session, seq))
    {
        return Ok(true);
    }
    Ok(positions
        .get((session, seq))?
        .is_some_and(|g| g.value() == pos))
}

/// One session's frames, as the positions table and the tail show them: the table's
/// entries below the tail's first seq, then the tail's.
pub(crate) struct SessionLog<'a, P> {
    positions: &'a P,
    session: u128,
    /// The session's tail entries, `(seq, position)` in seq order.
    tail: &'a [(u64, u64)],
}

impl<'a, P: ReadableTable<(u128, u64), u64>> SessionLog<'a, P> {
    /// The view of `session`'s frames in `positions` and in its tail entries `tail`
    /// (`(seq, position)`, in seq order).
    pub(crate) fn new(positions: &'a P, session: u128, tail: &'a [(u64, u64)]) -> Self {
        Self {
            positions,
            session,
            tail,
        }
    }

    /// The session.
    pub(crate) fn session(&self) -> u128 {
        self.session
    }

    /// The session's last seq (0: none): its last tail entry's, else its last entry's
    /// in the positions table.
    ///
    /// # Errors
    ///
    /// The storage engine's errors reading the table.
    pub(crate) fn head(&self) -> Result<u64, redb::StorageError> {
        Ok(self.last()?.map_or(0, |(seq, _)| seq))
    }

    /// The session's first frame's `(seq, position)`: its first positions entry, else
    /// its first tail entry.
    ///
    /// # Errors
    ///
    /// The storage engine's errors reading the table.
    pub(crate) fn first(&self) -> Result<Option<(u64, u64)>, redb::StorageError> {
        match self.table_range()?.next().transpose()? {
            Some((k, v)) => Ok(Some((k.value().1, v.value()))),
            None => Ok(self.tail.first().copied()),
        }
    }

    /// The session's last frame's `(seq, position)`: its last tail entry, else its last
    /// positions entry.
    ///
    /// # Errors
    ///
    /// The storage engine's errors reading the table.
    pub(crate) fn last(&self) -> Result<Option<(u64, u64)>, redb::StorageError> {
        if let Some(last) = self.tail.last() {
            return Ok(Some(*last));
        }
        Ok(self
            .table_range()?
            .next_back()
            .transpose()?
            .map(|(k, v)| (k.value().1, v.value())))
    }

    /// The session's entries in the positions table.
    fn table_range(&self) -> Result<redb::Range<'_, (u128, u64), u64>, redb::StorageError> {
        self.positions
            .range((self.session, 0)..=(self.session, u64::MAX))
    }

    /// The log position of frame `seq`, if the session's log names one.
    ///
    /// # Errors
    ///
    /// The storage engine's errors reading the table.
    pub(crate) fn position(&self, seq: u64) -> Result<Option<u64>, redb::StorageError> {
        if let Ok(i) = self.tail.binary_search_by_key(&seq, |(q, _)| *q) {
            return Ok(self.tail.get(i).map(|(_, pos)| *pos));
        }
        if self.tail.first().is_some_and(|(first, _)| seq >= *first) {
            return Ok(None);
        }
        Ok(self.positions.get((self.session, seq))?.map(|g| g.value()))
    }

    /// Calls `f` with `(seq, position)` of each frame whose seq is in `from..=to`, in
    /// seq order, until it answers `false`.
    ///
    /// # Errors
    ///
    /// `f`'s, or the storage engine's errors reading the table (mapped by `storage`).
    pub(crate) fn each<E>(
        &self,
        from: u64,
        to: u64,
        storage: impl Fn(redb::StorageError) -> E,
        mut f: impl FnMut(u64, u64) -> Result<bool, E>,
    ) -> Result<(), E> {
        let tail_from = self.tail.first().map_or(u64::MAX, |(seq, _)| *seq);
        let table_to = to.min(tail_from.saturating_sub(1));
        if from <= table_to {
            let range = self
                .positions
                .range((self.session, from)..=(self.session, table_to))
                .map_err(&storage)?;
            for entry in range {
                let (k, v) = entry.map_err(&storage)?;
                if !f(k.value().1, v.value())? {
                    return Ok(());
                }
            }
        }
        for &(seq, pos) in self.tail {
            if seq < from || seq > to {
                continue;
            }
            if !f(seq, pos)? {
                return Ok(());
            }
        }
        Ok(())
    }
}
