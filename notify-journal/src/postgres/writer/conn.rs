//! The write connection: its session settings and prepared statements.

use std::time::Duration;

use tokio_postgres::{Client, Statement};

use crate::error::StorageError;
use crate::postgres::error::sanitize;
use crate::postgres::sql::Sql;

/// The write connection with its prepared statement.
pub(super) struct WriterConn {
    pub(super) client: Client,
    pub(super) append_batch: Statement,
    /// A stored frame by session and key: a collision's stored row is checked against
    /// its checksum before it is believed.
    pub(super) stored: Statement,
}

impl WriterConn {
    async fn prepare(
        client: Client,
        sql: &Sql,
        idle_timeout_ms: u64,
    ) -> Result<Self, StorageError> {
        // If this process stalls inside a batch (a paused or partitioned host), the
        // server aborts the transaction and frees the session rows, so a takeover
        // does not wait on the stalled writer; the stalled batch then fails.
        // Generic plans: `append_batch`'s statements are planned once per connection
        // instead of for every batch (custom plans cost more than they save here).
        client
            .batch_execute(&format!(
                "SET idle_in_transaction_session_timeout = {idle_timeout_ms};
                 SET plan_cache_mode = force_generic_plan"
            ))
            .await
            .map_err(|e| sanitize("configure session", &e))?;
        let append_batch = client
            .prepare(&sql.append_batch)
            .await
            .map_err(|e| sanitize("prepare", &e))?;
        let stored = client
            .prepare(&sql.stored)
            .await
            .map_err(|e| sanitize("prepare", &e))?;
        Ok(Self {
            client,
            append_batch,
            stored,
        })
    }
}

/// Prepares a write connection within `op_timeout`.
pub(super) async fn prepare_within(
    op_timeout: Duration,
    client: Client,
    sql: &Sql,
    idle_timeout_ms: u64,
) -> Result<WriterConn, StorageError> {
    tokio::time::timeout(
        op_timeout,
        WriterConn::prepare(client, sql, idle_timeout_ms),
    )
    .await
    .map_err(|_| {
        StorageError::msg(format!(
            "postgres: preparing the write connection timed out after {op_timeout:?}"
        ))
    })?
}
