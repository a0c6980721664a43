//! The journal's tables and applying their versioned migrations (`migrations/`)
//! at connect: [`MigrationMode`], the advisory lock, the migration's bounds.
//!
//! Layout (all in one PostgreSQL schema, `notify_journal` by default):
//!
//! * `schema_version(version, applied_at)`: one row per applied migration.
//! * `sessions(session, last_seq, ended_at, purged_at, purge_done)`: one row per
//!   session that was written. `last_seq` is the session's highest frame; appends
//!   lock this row (`FOR UPDATE`), which totally orders every writer of the session,
//!   in any process, and makes the lease check, the end check and the frame insert
//!   one atomic step. `ended_at` is set by the commit of the session's end marker;
//!   `purged_at` by the first purge step, from which the row is the session's
//!   tombstone; `purge_done` once no frame is left.
//! * `leases(session, epoch, holder, expires_at, holder_url, ended)` (version 9,
//!   `migrations/0009_leases_table.sql`): one row per session written or leased. Appends lock it
//!   `FOR KEY SHARE` after the session's row and judge the lease from it; a renewal
//!   updates `expires_at` alone (`FOR NO KEY UPDATE`, which does not conflict with
//!   the appends'); acquire and release lock it `FOR UPDATE`, so a takeover waits
//!   for the appends in flight. Lock order: a session's row, then its lease row.
//! * `frames(session, seq, key, kind, bytes, checksum, committed_at)`: primary key
//!   `(session, seq)`, unique `(session, key)` (the idempotency index). A frame, its
//!   index entry and the session's `last_seq` commit in one transaction.
//!
//! The statements that use these tables are in `sql.rs`; the version check of every
//! reconnect is in `version.rs`; the schema's name, the only text spliced into SQL,
//! is checked and quoted by `schema_name.rs`.

use std::time::Duration;

use tokio_postgres::{Client, IsolationLevel};

use super::error::{PgOpenError, sanitize};
use super::migrations::MIGRATIONS;
use super::schema_name::quoted;
use super::version::{PG_SCHEMA_VERSION, read_version};
use crate::error::StorageError;

/// What [`PgJournal::connect`](super::PgJournal::connect) does with the schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MigrationMode {
    /// Create the schema if missing and apply every pending migration (default).
    /// Concurrent openers serialize on an advisory lock held while migrating.
    #[default]
    Apply,
    /// Only check that the schema is at this code's version; change nothing. For
    /// deployments where migrations are run by a privileged job.
    ValidateOnly,
}

/// A stable advisory-lock key per schema, so concurrent openers migrate one at a time
/// (only held while migrating).
fn migration_lock_key(schema: &str) -> i64 {
    // FNV-1a, 64 bit.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in b"notify-journal-migrate:".iter().chain(schema.as_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    i64::from_ne_bytes(h.to_ne_bytes())
}

// The list and the version this build writes must agree (a migration added without
// raising the version, or the other way round, fails the build).
const _: () = assert!(MIGRATIONS.len() == PG_SCHEMA_VERSION as usize);

/// How long the migration may run: `None` for no limit.
async fn bounded<T>(
    limit: Option<Duration>,
    fut: impl Future<Output = Result<T, PgOpenError>>,
) -> Result<T, PgOpenError> {
    match limit {
        None => fut.await,
        Some(after) => tokio::time::timeout(after, fut).await.map_err(|_| {
            PgOpenError::Storage(StorageError::msg(format!(
                "postgres: schema migration timed out after {after:?} (rolled back; \
                 raise PgOptions::migration_timeout)"
            )))
        })?,
    }
}

/// Milliseconds for a PostgreSQL timeout setting (0: none).
fn setting_ms(limit: Option<Duration>) -> u128 {
    limit.map_or(0, |t| t.as_millis().clamp(1, i32::MAX as u128))
}

/// Checks the schema version and, unless validating only, applies what is missing.
///
/// The check is one short read, bounded by `op_timeout`: a schema at this build's
/// version (the usual case) or a newer one (refused) costs nothing more. Only when
/// migrations are pending does the migration run, in one `READ COMMITTED`
/// transaction bounded by `migration_timeout` (`None`: no limit) instead of the
/// operation timeout, on both sides: the client stops waiting and the server's
/// `statement_timeout` stops the work. Concurrent openers serialize on an
/// advisory lock (see [`apply`]) and wait for it as long as a migration may
/// take; lock waits on the journal's tables stay bounded by the connection's
/// `lock_timeout` (the operation timeout), so a migration never queues for long
/// behind appends it would then block.
pub(crate) async fn migrate(
    client: &mut Client,
    schema: &str,
    mode: MigrationMode,
    op_timeout: Duration,
    migration_timeout: Option<Duration>,
) -> Result<(), PgOpenError> {
    let found = tokio::time::timeout(op_timeout, read_version(&*client, schema))
        .await
        .map_err(|_| {
            PgOpenError::Storage(StorageError::msg(format!(
                "postgres: schema check timed out after {op_timeout:?}"
            )))
        })?
        .map_err(PgOpenError::Storage)?;
    if found > PG_SCHEMA_VERSION {
        return Err(PgOpenError::SchemaTooNew {
            found,
            supported: PG_SCHEMA_VERSION,
        });
    }
    if found == PG_SCHEMA_VERSION {
        return Ok(());
    }
    if mode == MigrationMode::ValidateOnly {
        return Err(PgOpenError::SchemaOutdated {
            found,
            required: PG_SCHEMA_VERSION,
        });
    }
    bounded(
        migration_timeout,
        apply(client, schema, op_timeout, migration_timeout),
    )
    .await
}

/// Applies the pending migrations under the migration lock (see [`migrate`]).
///
/// The lock is session-level, taken in a transaction of its own before the
/// migration's transaction begins: a transaction that begins after another
/// opener's migration committed sees its tables (the backend's catalog caches are
/// brought up to date when a transaction begins, not when an advisory lock is
/// granted). It is released after the commit, or with the connection, which is
/// dropped on any failure (including the migration timeout).
async fn apply(
    client: &mut Client,
    schema: &str,
    op_timeout: Duration,
    migration_timeout: Option<Duration>,
) -> Result<(), PgOpenError> {
    let storage = |op| move |e: tokio_postgres::Error| PgOpenError::Storage(sanitize(op, &e));
    let key = migration_lock_key(schema);
    let limit_ms = setting_ms(migration_timeout);
    // Another opener may be migrating: wait for it as long as a migration may take.
    client
        .batch_execute(&format!(
            "BEGIN; SET LOCAL lock_timeout = {limit_ms}; SELECT pg_advisory_lock({key}); COMMIT"
        ))
        .await
        .map_err(storage("migration lock"))?;
    migrate_locked(client, schema, op_timeout, limit_ms).await?;
    client
        .execute("SELECT pg_advisory_unlock($1)", &[&key])
        .await
        .map_err(storage("migration lock"))?;
    Ok(())
}

/// The migration's transaction, under the migration lock.
async fn migrate_locked(
    client: &mut Client,
    schema: &str,
    op_timeout: Duration,
    limit_ms: u128,
) -> Result<(), PgOpenError> {
    let storage = |op| move |e: tokio_postgres::Error| PgOpenError::Storage(sanitize(op, &e));
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::ReadCommitted)
        .start()
        .await
        .map_err(storage("migrate"))?;
    let q = quoted(schema);
    // The server stops the work at the migration timeout too; lock waits on the
    // journal's tables stay bounded by the operation timeout.
    let lock_ms = setting_ms(Some(op_timeout));
    tx.batch_execute(&format!(
        "SET LOCAL statement_timeout = {limit_ms}; SET LOCAL lock_timeout = {lock_ms}"
    ))
    .await
    .map_err(storage("migration settings"))?;
    // Read again under the lock: another opener may have migrated meanwhile.
    let found = read_version(&tx, schema)
        .await
        .map_err(PgOpenError::Storage)?;
    if found > PG_SCHEMA_VERSION {
        return Err(PgOpenError::SchemaTooNew {
            found,
            supported: PG_SCHEMA_VERSION,
        });
    }
    let table = format!("{q}.schema_version");
    if found == 0 {
        tx.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {q};
             CREATE TABLE IF NOT EXISTS {table} (
                 version    integer PRIMARY KEY,
                 applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
             );"
        ))
        .await
        .map_err(storage("create schema"))?;
    }
    let pending = MIGRATIONS.iter().zip(1_i32..).skip(found as usize);
    for (ddl, version) in pending {
        tx.batch_execute(&ddl.replace("{s}", &q))
            .await
            .map_err(storage("apply migration"))?;
        tx.execute(
            &format!("INSERT INTO {table} (version) VALUES ($1)"),
            &[&version],
        )
        .await
        .map_err(storage("record migration"))?;
    }
    tx.commit().await.map_err(storage("migrate"))
}
