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

use tokio_postgres::{Client, IsolationLevel};

use super::error::{PgOpenError, sanitize};
use super::migrations::MIGRATIONS;
use super::options::MigrationMode;

/// The journal schema version this code writes and understands.
pub const PG_SCHEMA_VERSION: u32 = 4;

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
/// (transaction-scoped: it is only held while migrating).
fn migration_lock_key(schema: &str) -> i64 {
    // FNV-1a, 64 bit.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in b"notify-journal-migrate:".iter().chain(schema.as_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    i64::from_ne_bytes(h.to_ne_bytes())
}

/// Checks the schema version and, unless validating only, applies what is missing,
/// in one `READ COMMITTED` transaction whose lock waits (the migration lock
/// included) give up after the connection's `lock_timeout` (the operation timeout).
pub(crate) async fn migrate(
    client: &mut Client,
    schema: &str,
    mode: MigrationMode,
) -> Result<(), PgOpenError> {
    let storage = |op| move |e: tokio_postgres::Error| PgOpenError::Storage(sanitize(op, &e));
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::ReadCommitted)
        .start()
        .await
        .map_err(storage("migrate"))?;
    let q = quoted(schema);
    if mode == MigrationMode::Apply {
        tx.execute(
            "SELECT pg_advisory_xact_lock($1)",
            &[&migration_lock_key(schema)],
        )
        .await
        .map_err(storage("migration lock"))?;
    }
    let table = format!("{q}.schema_version");
    let exists: bool = tx
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .and_then(|row| row.try_get(0))
        .map_err(storage("read schema version"))?;
    let found: u32 = if exists {
        let v: i32 = tx
            .query_one(
                &format!("SELECT coalesce(max(version), 0) FROM {table}"),
                &[],
            )
            .await
            .and_then(|row| row.try_get(0))
            .map_err(storage("read schema version"))?;
        u32::try_from(v).map_err(|_| {
            PgOpenError::Storage(crate::error::StorageError::msg(
                "postgres: negative journal schema version",
            ))
        })?
    } else {
        0
    };
    if found > PG_SCHEMA_VERSION {
        return Err(PgOpenError::SchemaTooNew {
            found,
            supported: PG_SCHEMA_VERSION,
        });
    }
    if found == PG_SCHEMA_VERSION {
        return tx.commit().await.map_err(storage("migrate"));
    }
    if mode == MigrationMode::ValidateOnly {
        return Err(PgOpenError::SchemaOutdated {
            found,
            required: PG_SCHEMA_VERSION,
        });
    }
    if !exists {
        tx.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {q};
             CREATE TABLE {table} (
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

/// Every statement the journal runs, with the schema spliced in once.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) append_batch: String,
    pub(crate) lookup: String,
    pub(crate) stored: String,
    pub(crate) session_state: String,
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
            release: format!(
                "UPDATE {s}.sessions SET lease_holder = NULL, lease_expires_at = NULL
                 WHERE session = $1 AND lease_holder = $2 AND lease_epoch = $3"
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
