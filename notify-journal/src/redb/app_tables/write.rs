//! The write handle a transactional append's closure is given ([`AppTables`],
//! [`AppTable`]), the budget it runs under, and why a transactional append did not
//! commit ([`AppTxnError`]).

use std::borrow::Borrow;
use std::cell::Cell;
use std::time::{Duration, Instant};

use redb::{Key, ReadableTableMetadata as _, TableDefinition, Value};

use super::{AppTableError, check_name};
use crate::error::{AppendError, StorageError};

/// The most bytes (keys and values inserted) one transactional append's closure may
/// write: past it the closure's writes fail with [`AppTableError::Budget`] and the
/// append is rolled back with them.
pub const APP_WRITE_MAX_BYTES: usize = 1 << 20;

/// The longest one transactional append's closure may run, checked at each table call
/// (one past it fails with [`AppTableError::Budget`]) and when the closure returns (one
/// returning past it is rolled back). Nothing interrupts a closure between table calls:
/// one that blocks (a lock, a channel, a sleep, I/O) stalls the journal's writer, and
/// every other appender, for as long as it blocks, so the closure must do table work
/// only. What is bounded outright is what it writes ([`APP_WRITE_MAX_BYTES`]).
pub const APP_WRITE_MAX_TIME: Duration = Duration::from_millis(100);

/// Why a transactional append ([`RedbJournal::append_with`](crate::RedbJournal::append_with))
/// did not commit. Nothing of it was written: neither the record nor the application's
/// writes (except where [`AppendError::CommitFailed`] says the outcome is unknown).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppTxnError {
    /// The record was refused or the journal could not write it, as
    /// [`JournalBackend::append`](crate::JournalBackend::append) answers.
    #[error(transparent)]
    Append(#[from] AppendError),
    /// The application's closure returned an error (or used up its budget): the
    /// transaction was rolled back, the record with it.
    #[error("the application's write failed; nothing was committed: {0}")]
    Write(Box<dyn std::error::Error + Send + Sync>),
    /// The application's closure panicked: the transaction was rolled back.
    #[error("the application's write panicked; nothing was committed: {0}")]
    Panicked(String),
}

/// What a closure run inside a journal write transaction returns.
pub type AppWriteResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// A closure that writes the application's tables for a group of records, told the
/// indices of those that are new.
pub(crate) type AppGroupWrite = dyn FnMut(&AppTables<'_>, &[usize]) -> AppWriteResult + Send;

/// The closure's budget, shared by every table it opens.
pub(crate) struct Budget {
    deadline: Instant,
    bytes_left: Cell<usize>,
    /// Set once a bound was met: the closure's writes never commit, even if it
    /// swallowed the error.
    met: Cell<Option<&'static str>>,
}

impl Budget {
    pub(crate) fn new() -> Self {
        Self {
            deadline: Instant::now() + APP_WRITE_MAX_TIME,
            bytes_left: Cell::new(APP_WRITE_MAX_BYTES),
            met: Cell::new(None),
        }
    }

    /// Whether the closure has run past its deadline or written past its bytes.
    pub(crate) fn exceeded(&self) -> Option<AppTableError> {
        if self.met.get().is_none() && Instant::now() > self.deadline {
            self.met.set(Some("ran longer than APP_WRITE_MAX_TIME"));
        }
        self.met.get().map(|what| AppTableError::Budget { what })
    }

    fn spend(&self, bytes: usize) -> Result<(), AppTableError> {
        if let Some(e) = self.exceeded() {
            return Err(e);
        }
        let left = self.bytes_left.get();
        if bytes > left {
            let what = "wrote more than APP_WRITE_MAX_BYTES";
            self.met.set(Some(what));
            return Err(AppTableError::Budget { what });
        }
        self.bytes_left.set(left - bytes);
        Ok(())
    }
}

/// The application's view of the journal's write transaction: it opens application
/// tables ([`APP_TABLE_PREFIX`](crate::APP_TABLE_PREFIX)) and nothing else. Given to the closure of
/// [`RedbJournal::append_with`](crate::RedbJournal::append_with); what it writes
/// commits in the same transaction as the record, or not at all.
pub struct AppTables<'t> {
    txn: &'t redb::WriteTransaction,
    budget: &'t Budget,
}

impl std::fmt::Debug for AppTables<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppTables").finish_non_exhaustive()
    }
}

impl<'t> AppTables<'t> {
    pub(crate) fn new(txn: &'t redb::WriteTransaction, budget: &'t Budget) -> Self {
        Self { txn, budget }
    }

    /// Opens (creating it if need be) the application table `name`, keyed by `K` and
    /// holding `V` (any of redb's key and value types: integers, `&str`, `&[u8]`,
    /// tuples of them, ...).
    ///
    /// # Errors
    ///
    /// [`AppTableError::Name`] unless `name` starts with [`APP_TABLE_PREFIX`](crate::APP_TABLE_PREFIX);
    /// [`AppTableError::Budget`] past the closure's time; [`AppTableError::Storage`]
    /// when the engine refuses (the table is already open in this closure, or was
    /// created with other types).
    pub fn open_table<K: Key + 'static, V: Value + 'static>(
        &self,
        name: &str,
    ) -> Result<AppTable<'t, K, V>, AppTableError> {
        check_name(name)?;
        self.budget.spend(0)?;
        let table = self
            .txn
            .open_table(TableDefinition::<K, V>::new(name))
            .map_err(|e| StorageError::new("open application table", e))?;
        Ok(AppTable {
            table,
            budget: self.budget,
        })
    }
}

/// One application table inside the journal's write transaction. Every write counts
/// against the closure's budget.
pub struct AppTable<'t, K: Key + 'static, V: Value + 'static> {
    table: redb::Table<'t, K, V>,
    budget: &'t Budget,
}

impl<K: Key + 'static, V: Value + 'static> std::fmt::Debug for AppTable<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppTable").finish_non_exhaustive()
    }
}

impl<K: Key + 'static, V: Value + 'static> AppTable<'_, K, V> {
    /// Inserts `value` under `key`; whether a value was replaced.
    ///
    /// # Errors
    ///
    /// [`AppTableError::Budget`] past the closure's bytes or time;
    /// [`AppTableError::Storage`] if the engine fails.
    pub fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<bool, AppTableError> {
        let size =
            K::as_bytes(key.borrow()).as_ref().len() + V::as_bytes(value.borrow()).as_ref().len();
        self.budget.spend(size)?;
        let old = self
            .table
            .insert(key, value)
            .map_err(|e| StorageError::new("write application table", e))?;
        Ok(old.is_some())
    }

    /// Removes `key`; whether it was there.
    ///
    /// # Errors
    ///
    /// [`AppTableError::Budget`] past the closure's time; [`AppTableError::Storage`] if
    /// the engine fails.
    pub fn remove<'k>(&mut self, key: impl Borrow<K::SelfType<'k>>) -> Result<bool, AppTableError> {
        self.budget.spend(0)?;
        let old = self
            .table
            .remove(key)
            .map_err(|e| StorageError::new("remove from application table", e))?;
        Ok(old.is_some())
    }

    /// Whether `key` is present, as this transaction sees it.
    ///
    /// # Errors
    ///
    /// [`AppTableError::Budget`] past the closure's time; [`AppTableError::Storage`] if
    /// the engine fails.
    pub fn contains<'k>(&self, key: impl Borrow<K::SelfType<'k>>) -> Result<bool, AppTableError> {
        use redb::ReadableTable as _;
        self.budget.spend(0)?;
        Ok(self
            .table
            .get(key)
            .map_err(|e| StorageError::new("read application table", e))?
            .is_some())
    }

    /// How many entries the table holds, as this transaction sees it.
    ///
    /// # Errors
    ///
    /// [`AppTableError::Storage`] if the engine fails.
    pub fn len(&self) -> Result<u64, AppTableError> {
        self.table
            .len()
            .map_err(|e| AppTableError::Storage(StorageError::new("count application table", e)))
    }

    /// Whether the table is empty, as this transaction sees it.
    ///
    /// # Errors
    ///
    /// [`AppTableError::Storage`] if the engine fails.
    pub fn is_empty(&self) -> Result<bool, AppTableError> {
        Ok(self.len()? == 0)
    }
}
