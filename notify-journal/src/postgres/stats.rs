//! Counts of a PostgreSQL journal, for operators (`notify stats`).

use tokio_postgres::Row;

use super::error::sanitize;
use super::{PgJournal, seq_u64};
use crate::error::{JournalError, StorageError};

/// Counts of a PostgreSQL journal's schema, read in one statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PgStats {
    /// Sessions with at least one frame.
    pub sessions: u64,
    /// Frames stored (one index entry each: the index is PostgreSQL's own).
    pub frames: u64,
    /// Bytes of the frames' encoded records.
    pub record_bytes: u64,
    /// What the journal's tables take on disk, indexes and TOAST included
    /// (`pg_total_relation_size`).
    pub relation_bytes: u64,
    /// The schema's migration version.
    pub schema_version: u32,
}

impl PgJournal {
    /// Counts sessions and frames and measures the tables. Counting reads every row
    /// of the frames table (one statement, bounded by the operation timeout).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the answer; the statement only reads.
    ///
    /// # Errors
    ///
    /// [`JournalError::Storage`] or [`JournalError::Closed`].
    pub async fn stats(&self) -> Result<PgStats, JournalError> {
        let sql = std::sync::Arc::clone(&self.sql);
        let row: Row = self
            .read("stats", |c| async move {
                c.client.query_one(&sql.stats, &[]).await
            })
            .await?;
        let get = |e: tokio_postgres::Error| JournalError::Storage(sanitize("stats", &e));
        let count = |i: usize| -> Result<u64, JournalError> {
            let v: i64 = row.try_get(i).map_err(get)?;
            seq_u64(v).map_err(JournalError::Storage)
        };
        let version: Option<i32> = row.try_get(4).map_err(get)?;
        Ok(PgStats {
            sessions: count(0)?,
            frames: count(1)?,
            record_bytes: count(2)?,
            relation_bytes: count(3)?,
            schema_version: version.and_then(|v| u32::try_from(v).ok()).ok_or_else(|| {
                JournalError::Storage(StorageError::msg("postgres: no schema version"))
            })?,
        })
    }
}
