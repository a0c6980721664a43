//! The journal's tables, applying their versioned migrations (`migrations.rs`), and
//! every SQL statement.
//!
//! Layout (all in one PostgreSQL schema, `notify_journal` by default):
//!
//! * `schema_version(version, applied_at)`: one row per applied migration.
//! * `sessions(session, last_seq, lease_epoch, lease_holder, lease_expires_at,
//!   ended_at, purged_at, purge_done)`: one row per session that was written or
//!   leased. `last_seq` is the session's highest frame; appends lock this row
//!   (`FOR UPDATE`), which totally orders every writer of the session, in any
//!   process, and makes the lease check, the end check and the frame insert one
//!   atomic step. `ended_at` is set by the commit of the session's end marker;
//!   `purged_at` by the first purge step, from which the row is the session's
//!   tombstone; `purge_done` once no frame is left.
//! * `frames(session, seq, key, kind, bytes, checksum, committed_at)`: primary key
//!   `(session, seq)`, unique `(session, key)` (the idempotency index). A frame, its
//!   index entry and the session's `last_seq` commit in one transaction.
//!
//! The schema identifier is the only text spliced into SQL; it is checked against
//! `[a-z_][a-z0-9_]{0,62}` (and refused if it starts with `pg_`) before use, and is
//! always double-quoted, so reserved words such as `select` or `user` work. Every
//! value is a bind parameter.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio_postgres::{Client, IsolationLevel};

use super::error::{PgOpenError, sanitize};
use super::migrations::MIGRATIONS;
use super::options::MigrationMode;
use crate::error::StorageError;

/// The journal schema version this code writes and understands.
pub const PG_SCHEMA_VERSION: u32 = 5;

/// Whether `name` is a schema identifier we may splice into SQL (quoted: see
/// [`quoted`]); the pattern leaves nothing to escape.
pub(crate) fn valid_schema_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    let first_ok = matches!(bytes.next(), Some(b'a'..=b'z' | b'_'));
    first_ok && name.len() <= 63 && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
}

/// The schema name as a quoted identifier. Safe for names that pass
/// [`valid_schema_name`] (no quote can occur in them).
pub(crate) fn quoted(schema: &str) -> String {
    format!("\"{schema}\"")
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

/// Reads the schema's recorded version (0 when the journal's tables are missing).
async fn read_version<C: tokio_postgres::GenericClient>(
    client: &C,
    schema: &str,
) -> Result<u32, StorageError> {
    let table = format!("{}.schema_version", quoted(schema));
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .and_then(|row| row.try_get(0))
        .map_err(|e| sanitize("read schema version", &e))?;
    if !exists {
        return Ok(0);
    }
    let v: i32 = client
        .query_one(
            &format!("SELECT coalesce(max(version), 0) FROM {table}"),
            &[],
        )
        .await
        .and_then(|row| row.try_get(0))
        .map_err(|e| sanitize("read schema version", &e))?;
    u32::try_from(v).map_err(|_| StorageError::msg("postgres: negative journal schema version"))
}

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

/// What a reconnect's schema check found wrong.
#[derive(Debug, Clone)]
pub(crate) enum VersionCheck {
    /// A newer build migrated the schema to this version.
    TooNew(u32),
    /// The check failed, or the version went back.
    Failed(StorageError),
}

/// The schema version as this handle knows it: checked on every reconnect, and
/// remembered once a newer one was seen (a schema's version never goes back), so
/// the handle then refuses everything without asking again.
#[derive(Debug)]
pub(crate) struct SchemaGuard {
    schema: String,
    /// The newer version seen; 0 while none was.
    newer: AtomicU32,
}

impl SchemaGuard {
    pub(crate) fn new(schema: &str) -> Self {
        Self {
            schema: schema.to_owned(),
            newer: AtomicU32::new(0),
        }
    }

    /// The newer schema version this handle has seen, if any.
    pub(crate) fn newer(&self) -> Option<u32> {
        match self.newer.load(Ordering::SeqCst) {
            0 => None,
            v => Some(v),
        }
    }

    /// Records a version read from the database; `Some(v)` if it is newer than this
    /// build's.
    fn note(&self, found: u32) -> Option<u32> {
        (found > PG_SCHEMA_VERSION).then(|| {
            self.newer.fetch_max(found, Ordering::SeqCst);
            found
        })
    }

    /// Reads the schema's version on `client` (a fresh connection, or the writer's
    /// after an answer this build does not know) and remembers a newer one.
    pub(crate) async fn check(&self, client: &Client) -> Result<(), VersionCheck> {
        if let Some(found) = self.newer() {
            return Err(VersionCheck::TooNew(found));
        }
        let found = read_version(client, &self.schema)
            .await
            .map_err(VersionCheck::Failed)?;
        if let Some(found) = self.note(found) {
            return Err(VersionCheck::TooNew(found));
        }
        if found < PG_SCHEMA_VERSION {
            return Err(VersionCheck::Failed(StorageError::msg(format!(
                "postgres: journal schema version {found} is older than this build's \
                 {PG_SCHEMA_VERSION}, which it was migrated to at connect"
            ))));
        }
        Ok(())
    }
}

/// Every statement the journal runs, with the schema spliced in once, and what this
/// handle knows of the schema's version.
#[derive(Debug)]
pub(crate) struct Sql {
    /// Checks the version on every reconnect; remembers a newer one once seen.
    pub(crate) guard: SchemaGuard,
    pub(crate) append_batch: String,
    pub(crate) lookup: String,
    pub(crate) stored: String,
    pub(crate) session_state: String,
    pub(crate) import_lock: String,
    pub(crate) import_end: String,
    pub(crate) import_tombstone: String,
    pub(crate) purge_step: String,
    pub(crate) drop_tombstones: String,
    pub(crate) replay: String,
    pub(crate) verify_frames: String,
    pub(crate) sessions_after: String,
    pub(crate) sessions_first: String,
    pub(crate) verify_heads: String,
    pub(crate) last_seq: String,
    pub(crate) acquire: String,
    pub(crate) renew: String,
    pub(crate) release: String,
    pub(crate) lease_info: String,
    pub(crate) stats: String,
    pub(crate) vacuum: String,
}

impl Sql {
    pub(crate) fn new(schema: &str) -> Self {
        let s = quoted(schema);
        Self {
            guard: SchemaGuard::new(schema),
            // The whole batch: see migration 2.
            append_batch: format!(
                "SELECT o_status, o_seq FROM {s}.append_batch($1, $2, $3, $4, $5, $6, $7)"
            ),
            // The frame of a key and whether its session is purged, in one snapshot:
            // a row with NULL frame columns when the key is unknown, none when the
            // session is.
            lookup: format!(
                "SELECT f.seq, f.bytes, f.checksum, h.purged_at IS NOT NULL
                 FROM {s}.sessions h
                 LEFT JOIN {s}.frames f ON f.session = h.session AND f.key = $2
                 WHERE h.session = $1"
            ),
            // The stored frame of a key alone (the writer checks a collision's).
            stored: format!(
                "SELECT seq, bytes, checksum FROM {s}.frames WHERE session = $1 AND key = $2"
            ),
            session_state: format!(
                "SELECT last_seq, ended_at, purged_at FROM {s}.sessions WHERE session = $1"
            ),
            // `import_states`, in one transaction of its own connection: lock the
            // rows of the sessions to import, rewrite an end time, write a tombstone
            // (over a row that holds nothing: no frame, no end).
            import_lock: format!(
                "SELECT session, last_seq, ended_at, purged_at, purge_done
                 FROM {s}.sessions WHERE session = ANY ($1) ORDER BY session FOR UPDATE"
            ),
            import_end: format!(
                "UPDATE {s}.sessions SET ended_at = $2
                 WHERE session = $1 AND last_seq = $3 AND ended_at IS NOT NULL
                   AND purged_at IS NULL"
            ),
            import_tombstone: format!(
                "INSERT INTO {s}.sessions AS x (session, last_seq, ended_at, purged_at, purge_done)
                 VALUES ($1, $2, $3, $4, true)
                 ON CONFLICT (session) DO UPDATE SET
                     last_seq = excluded.last_seq, ended_at = excluded.ended_at,
                     purged_at = excluded.purged_at, purge_done = true
                 WHERE x.last_seq = 0 AND x.ended_at IS NULL"
            ),
            // One bounded step in one statement's transaction: see migration 4.
            purge_step: format!(
                "SELECT o_session, o_removed, o_finished FROM {s}.purge_step($1, $2, $3)"
            ),
            // Finished tombstones purged before $1, oldest first, at most $2; never a
            // row with a live lease, nor one another transaction holds.
            drop_tombstones: format!(
                "DELETE FROM {s}.sessions x USING (
                     SELECT session FROM {s}.sessions
                     WHERE purge_done AND purged_at < $1
                       AND NOT coalesce(lease_expires_at > clock_timestamp(), false)
                     ORDER BY purged_at LIMIT $2
                     FOR UPDATE SKIP LOCKED
                 ) d
                 WHERE x.session = d.session"
            ),
            // The page, the session's head and whether it is purged, in one
            // snapshot: a row with NULL frame columns when the page is empty, none
            // when the session is unknown.
            replay: format!(
                "SELECT f.seq, f.bytes, f.checksum, h.last_seq, h.purged_at IS NOT NULL
                 FROM {s}.sessions h
                 LEFT JOIN LATERAL (
                     SELECT seq, bytes, checksum FROM {s}.frames
                     WHERE session = $1 AND seq >= $2 ORDER BY seq LIMIT $3
                 ) f ON true
                 WHERE h.session = $1
                 ORDER BY f.seq"
            ),
            // Purged sessions' frames are being removed: not checked. (`h.session >= $1`
            // starts the sessions' side of the join at the page too.)
            verify_frames: format!(
                "SELECT f.session, f.seq, f.key, f.bytes, f.checksum
                 FROM {s}.frames f JOIN {s}.sessions h ON h.session = f.session
                 WHERE (f.session, f.seq) > ($1, $2) AND h.session >= $1
                   AND h.purged_at IS NULL
                 ORDER BY f.session, f.seq LIMIT $3"
            ),
            sessions_after: format!(
                "SELECT session FROM {s}.sessions
                 WHERE last_seq > 0 AND session > $1 ORDER BY session LIMIT $2"
            ),
            sessions_first: format!(
                "SELECT session FROM {s}.sessions
                 WHERE last_seq > 0 ORDER BY session LIMIT $1"
            ),
            verify_heads: format!(
                "SELECT session, last_seq FROM {s}.sessions
                 WHERE session > $1 AND purged_at IS NULL ORDER BY session LIMIT $2"
            ),
            last_seq: format!("SELECT last_seq FROM {s}.sessions WHERE session = $1"),
            // A free or expired lease starts a new epoch; our own live lease is
            // extended under its current epoch. Another writer's live lease: no row.
            // ON CONFLICT DO UPDATE locks the existing row first and only then
            // evaluates its WHERE and SET, so expiry is judged (and the new expiry
            // computed) after any wait for the row lock.
            acquire: format!(
                "INSERT INTO {s}.sessions AS x (session, lease_epoch, lease_holder, lease_expires_at)
                 VALUES ($1, 1, $2, clock_timestamp() + $3::float8 * interval '1 millisecond')
                 ON CONFLICT (session) DO UPDATE SET
                     lease_epoch = CASE
                         WHEN x.lease_holder = excluded.lease_holder
                              AND x.lease_expires_at > clock_timestamp()
                         THEN x.lease_epoch ELSE x.lease_epoch + 1 END,
                     lease_holder = excluded.lease_holder,
                     lease_expires_at =
                         clock_timestamp() + $3::float8 * interval '1 millisecond'
                 WHERE x.lease_holder IS NULL
                    OR x.lease_expires_at <= clock_timestamp()
                    OR x.lease_holder = excluded.lease_holder
                 RETURNING lease_epoch"
            ),
            // An upsert rather than an UPDATE for the same reason as `acquire`: the
            // WHERE (with the expiry check) runs after the row lock is held. The
            // row exists for any session ever leased; were it missing, a blank row
            // (no lease) is inserted and its NULL holder reads as "lost".
            renew: format!(
                "INSERT INTO {s}.sessions AS x (session) VALUES ($1)
                 ON CONFLICT (session) DO UPDATE SET
                     lease_expires_at =
                         clock_timestamp() + $4::float8 * interval '1 millisecond'
                 WHERE x.lease_holder = $2 AND x.lease_epoch = $3
                   AND x.lease_expires_at > clock_timestamp()
                 RETURNING lease_holder"
            ),
            // Only a live lease is released: an expired one was lost (the caller
            // stays fenced). Expiry is judged after any wait for the row lock (the
            // qualification is evaluated again on the locked row).
            release: format!(
                "UPDATE {s}.sessions SET lease_holder = NULL, lease_expires_at = NULL
                 WHERE session = $1 AND lease_holder = $2 AND lease_epoch = $3
                   AND lease_expires_at > clock_timestamp()"
            ),
            lease_info: format!(
                "SELECT lease_epoch, lease_holder,
                        coalesce(lease_expires_at > clock_timestamp(), false)
                 FROM {s}.sessions WHERE session = $1"
            ),
            // `{s}` is a quoted identifier free of single quotes (see `quoted`).
            stats: format!(
                "SELECT (SELECT count(*) FROM {s}.sessions WHERE last_seq > 0),
                        (SELECT count(*) FROM {s}.frames),
                        (SELECT coalesce(sum(octet_length(bytes)), 0)::int8 FROM {s}.frames),
                        (pg_total_relation_size('{s}.frames')
                         + pg_total_relation_size('{s}.sessions'))::int8,
                        (SELECT max(version) FROM {s}.schema_version)"
            ),
            // Plain VACUUM: online (no exclusive lock), makes purged rows' space reusable.
            vacuum: format!("VACUUM (ANALYZE) {s}.frames, {s}.sessions"),
        }
    }
}
