//! Reading the application's tables back
//! ([`RedbJournal::read_app_tables`](crate::RedbJournal::read_app_tables),
//! [`RedbReader::read_app_tables`](crate::RedbReader::read_app_tables)): one read
//! transaction, application tables only, read-only.

use std::borrow::Borrow;

use redb::{
    Key, ReadableDatabase, ReadableTable as _, ReadableTableMetadata as _, TableDefinition, Value,
};

use super::{AppTableError, check_name};
use crate::error::StorageError;
use crate::redb::contain::contain;

/// A read-only view of the application's tables, as of one committed state of the
/// file (one read transaction).
pub struct AppTablesRead {
    txn: redb::ReadTransaction,
}

impl std::fmt::Debug for AppTablesRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppTablesRead").finish_non_exhaustive()
    }
}

impl AppTablesRead {
    /// The application table `name`, keyed by `K` and holding `V`, as the types it
    /// was written with; `None` if no commit ever created it.
    ///
    /// # Errors
    ///
    /// [`AppTableError::Name`] unless `name` starts with
    /// [`APP_TABLE_PREFIX`](crate::APP_TABLE_PREFIX); [`AppTableError::Storage`] if
    /// the engine fails (the table was created with other types included).
    pub fn open_table<K: Key + 'static, V: Value + 'static>(
        &self,
        name: &str,
    ) -> Result<Option<AppReadTable<K, V>>, AppTableError> {
        check_name(name)?;
        match self.txn.open_table(TableDefinition::<K, V>::new(name)) {
            Ok(table) => Ok(Some(AppReadTable { table })),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
            Err(e) => Err(StorageError::new("open application table", e).into()),
        }
    }
}

/// One application table, read-only.
pub struct AppReadTable<K: Key + 'static, V: Value + 'static> {
    table: redb::ReadOnlyTable<K, V>,
}

impl<K: Key + 'static, V: Value + 'static> std::fmt::Debug for AppReadTable<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppReadTable").finish_non_exhaustive()
    }
}

impl<K: Key + 'static, V: Value + 'static> AppReadTable<K, V> {
    /// The value under `key` (read it with `.value()`).
    ///
    /// # Errors
    ///
    /// [`AppTableError::Storage`] if the engine fails.
    pub fn get<'k>(
        &self,
        key: impl Borrow<K::SelfType<'k>>,
    ) -> Result<Option<redb::AccessGuard<'static, V>>, AppTableError> {
        self.table
            .get(key)
            .map_err(|e| StorageError::new("read application table", e).into())
    }

    /// How many entries the table holds.
    ///
    /// # Errors
    ///
    /// [`AppTableError::Storage`] if the engine fails.
    pub fn len(&self) -> Result<u64, AppTableError> {
        self.table
            .len()
            .map_err(|e| StorageError::new("count application table", e).into())
    }

    /// Whether the table is empty.
    ///
    /// # Errors
    ///
    /// [`AppTableError::Storage`] if the engine fails.
    pub fn is_empty(&self) -> Result<bool, AppTableError> {
        Ok(self.len()? == 0)
    }

    /// Every entry in key order (each item a `Result` of a key and a value guard).
    ///
    /// # Errors
    ///
    /// [`AppTableError::Storage`] if the engine fails.
    pub fn iter(&self) -> Result<redb::Range<'_, K, V>, AppTableError> {
        self.table
            .iter()
            .map_err(|e| StorageError::new("read application table", e).into())
    }
}

/// Runs `f` on a read transaction of `db`, with a panic of the engine contained.
pub(crate) fn read_tables<D, T, E>(
    db: &D,
    f: impl FnOnce(&AppTablesRead) -> Result<T, E>,
) -> Result<T, E>
where
    D: ReadableDatabase,
    E: From<AppTableError>,
{
    contain(|| {
        let txn = db
            .begin_read()
            .map_err(|e| AppTableError::from(StorageError::new("begin read transaction", e)))?;
        f(&AppTablesRead { txn })
    })
    .unwrap_or_else(|panic| {
        Err(AppTableError::from(panic.storage("reading application tables")).into())
    })
}
