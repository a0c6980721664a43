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

/// A PostgreSQL journal's figures from the catalog, read without touching the frames
/// table: see [`PgJournal::estimate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PgEstimate {
    /// Frames stored, as PostgreSQL's statistics count them (`n_live_tup`): close,
    /// and behind by the appends and purges of the last moments.
    pub frames: u64,
    /// The schema's migration version.
    pub schema_version: u32,
}

impl PgJournal {
    /// Counts sessions and frames and measures the tables. Counting reads every row
    /// of the frames table (one statement, bounded by the operation timeout), on the
    /// connection the journal's reads share: for a figure to show often, see
    /// [`estimate`](Self::estimate).
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

    /// The frames stored, as PostgreSQL's statistics estimate them, and the schema's
    /// version: read from the catalog in one statement that neither reads nor locks
    /// the frames table, so it is cheap however large the journal (where
    /// [`stats`](Self::stats) reads every frame, holding the connection it shares with
    /// the journal's other reads meanwhile).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the answer; the statement only reads.
    ///
    /// # Errors
    ///
    /// [`JournalError::Storage`] or [`JournalError::Closed`].
    pub async fn estimate(&self) -> Result<PgEstimate, JournalError> {
        let sql = std::sync::Arc::clone(&self.sql);
        let row: Row = self
            .read("estimate", |c| async move {
                c.client.query_one(&sql.estimate, &[]).await
            })
            .await?;
        let get = |e: tokio_postgres::Error| JournalError::Storage(sanitize("estimate", &e));
        let frames: i64 = row.try_get(0).map_err(get)?;
        let version: Option<i32> = row.try_get(1).map_err(get)?;
        Ok(PgEstimate {
            // The collector's count is never negative; a negative one reads as none.
            frames: u64::try_from(frames).unwrap_or(0),
            schema_version: version.and_then(|v| u32::try_from(v).ok()).ok_or_else(|| {
                JournalError::Storage(StorageError::msg("postgres: no schema version"))
            })?,
        })
    }

    /// Compacts the journal's tables online: a plain `VACUUM (ANALYZE)` of the frames
    /// and sessions, so the space of purged rows is reused (PostgreSQL's own
    /// autovacuum does the same on its schedule). Appends and reads go on meanwhile; no
    /// exclusive lock is taken, so the files rarely shrink (that would take `VACUUM
    /// FULL`, which blocks the journal, and is left to the operator).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the answer; the vacuum may still complete.
    ///
    /// # Errors
    ///
    /// [`JournalError::Storage`] (for example, a role that does not own the tables, or
    /// a vacuum longer than the operation timeout) or [`JournalError::Closed`].
    pub async fn compact(&self) -> Result<(), JournalError> {
        let sql = std::sync::Arc::clone(&self.sql);
        self.read("vacuum", |c| async move {
            c.client.batch_execute(&sql.vacuum).await
        })
        .await?;
        Ok(())
    }
}
