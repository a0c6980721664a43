//! The journal's tables, their versioned migrations, and every SQL statement.
//!
//! Layout (all in one PostgreSQL schema, `notify_journal` by default):
//!
//! * `schema_version(version, applied_at)`: one row per applied migration.
//! * `sessions(session, last_seq, lease_epoch, lease_holder, lease_expires_at)`: one
//!   row per session that was written or leased. `last_seq` is the session's highest
//!   frame; appends lock this row (`FOR UPDATE`), which totally orders every writer of
//!   the session, in any process, and makes the lease check and the frame insert one
//!   atomic step.
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
use super::options::MigrationMode;

/// The journal schema version this code writes and understands.
pub const PG_SCHEMA_VERSION: u32 = 3;

/// Migration `i` takes the schema from version `i` to `i + 1`. `{s}` is the schema.
const MIGRATIONS: &[&str] = &[
    // 1: sessions with their lease, frames with the idempotency index.
    "CREATE TABLE {s}.sessions (
         session          uuid PRIMARY KEY,
         last_seq         bigint NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
         lease_epoch      bigint NOT NULL DEFAULT 0 CHECK (lease_epoch >= 0),
         lease_holder     uuid,
         lease_expires_at timestamptz,
         CHECK ((lease_holder IS NULL) = (lease_expires_at IS NULL))
     );
     CREATE TABLE {s}.frames (
         session      uuid NOT NULL REFERENCES {s}.sessions (session),
         seq          bigint NOT NULL CHECK (seq >= 1),
         key          uuid NOT NULL,
         kind         text NOT NULL,
         bytes        bytea NOT NULL,
         committed_at timestamptz NOT NULL DEFAULT now(),
         PRIMARY KEY (session, seq),
         UNIQUE (session, key)
     );",
    // 2: `append_batch`, a whole group-commit batch in one statement (one round
    // trip, committed as the statement's implicit transaction). In order, each step
    // its own statement (READ COMMITTED: each sees what committed before it):
    //   1. register the batch's sessions (sorted, so concurrent batches insert in one
    //      order);
    //   2. lock their rows, sorted (`FOR UPDATE`): every writer of a session, in any
    //      process, is serialized here;
    //   3. one statement that reads the locked rows (lease expiry judged by
    //      `clock_timestamp()`, i.e. after the lock was granted), fences appends
    //      whose lease is gone, resolves keys against committed frames and earlier
    //      appends of the batch, numbers the new frames from `last_seq`, inserts
    //      them, advances `last_seq`, and answers one row per input, in input order:
    //      `o_status` 0 appended, 1 duplicate, 2 collision (`o_seq`: the original),
    //      3 fenced.
    // `p_epoch[i]` is the epoch of the caller's lease on `p_session[i]`, NULL when
    // it holds none (then only another holder's live lease fences it).
    "CREATE FUNCTION {s}.append_batch(
         p_holder  uuid,
         p_session uuid[],
         p_key     uuid[],
         p_kind    text[],
         p_bytes   bytea[],
         p_epoch   int8[]
     ) RETURNS TABLE (o_status int2, o_seq int8)
     LANGUAGE plpgsql VOLATILE AS $fn$
     BEGIN
         INSERT INTO {s}.sessions (session)
         SELECT DISTINCT u FROM unnest(p_session) AS t(u) ORDER BY u
         ON CONFLICT (session) DO NOTHING;
         PERFORM 1 FROM {s}.sessions
         WHERE session = ANY (p_session) ORDER BY session FOR UPDATE;
         RETURN QUERY
         WITH input AS (
             SELECT t.i, t.s, t.k, t.kd, t.b, t.e
             FROM unnest(p_session, p_key, p_kind, p_bytes, p_epoch)
                  WITH ORDINALITY AS t(s, k, kd, b, e, i)
         ),
         st AS (
             SELECT x.session, x.last_seq, x.lease_epoch, x.lease_holder,
                    coalesce(x.lease_expires_at > clock_timestamp(), false) AS live
             FROM {s}.sessions x WHERE x.session = ANY (p_session)
         ),
         judged AS (
             SELECT n.i, n.s, n.k, n.kd, n.b,
                    CASE WHEN n.e IS NOT NULL THEN
                         NOT (st.live AND st.lease_holder IS NOT DISTINCT FROM p_holder
                              AND st.lease_epoch = n.e)
                    ELSE st.live AND st.lease_holder IS NOT NULL
                         AND st.lease_holder <> p_holder
                    END AS fenced
             FROM input n JOIN st ON st.session = n.s
         ),
         firsts AS (
             SELECT DISTINCT ON (j.s, j.k) j.s, j.k, j.i, j.kd, j.b
             FROM judged j WHERE NOT j.fenced ORDER BY j.s, j.k, j.i
         ),
         resolved AS (
             SELECT f.s, f.k, f.i, f.kd, f.b,
                    fr.seq AS old_seq, fr.kind AS old_kind, fr.bytes AS old_bytes
             FROM firsts f
             LEFT JOIN {s}.frames fr ON fr.session = f.s AND fr.key = f.k
         ),
         fresh AS (
             SELECT r.s, r.k, st.last_seq
                        + row_number() OVER (PARTITION BY r.s ORDER BY r.i) AS seq,
                    r.kd, r.b
             FROM resolved r JOIN st ON st.session = r.s
             WHERE r.old_seq IS NULL
         ),
         ins AS (
             INSERT INTO {s}.frames (session, seq, key, kind, bytes)
             SELECT w.s, w.seq, w.k, w.kd, w.b FROM fresh w
         ),
         upd AS (
             UPDATE {s}.sessions x SET last_seq = m.top
             FROM (SELECT w.s, max(w.seq) AS top FROM fresh w GROUP BY w.s) m
             WHERE x.session = m.s
         )
         SELECT (CASE
                     WHEN j.fenced THEN 3
                     WHEN r.old_seq IS NULL AND r.i = j.i THEN 0
                     WHEN coalesce(r.old_kind, r.kd) = j.kd
                          AND coalesce(r.old_bytes, r.b) = j.b THEN 1
                     ELSE 2
                 END)::int2,
                CASE WHEN j.fenced THEN 0::int8 ELSE coalesce(r.old_seq, w.seq) END
         FROM judged j
         LEFT JOIN resolved r ON NOT j.fenced AND r.s = j.s AND r.k = j.k
         LEFT JOIN fresh w ON w.s = r.s AND w.k = r.k
         ORDER BY j.i;
     END
     $fn$;",
    // 3: every frame carries the CRC-32C of its bytes (`checksum`; NULL on frames
    // written before this version), stored by `append_batch` from the caller's
    // `p_checksum` and checked by every read. The duplicate check also judges the
    // stored frame: the same bytes as this record's under another checksum means the
    // stored checksum changed: `o_status` 4 (damaged, `o_seq` the frame's), never a
    // duplicate. (Other bytes are a collision here; the writer then checks the stored
    // row's bytes against its checksum itself, PostgreSQL before 18 having no CRC-32C.)
    "ALTER TABLE {s}.frames ADD COLUMN checksum int4;
     DROP FUNCTION {s}.append_batch(uuid, uuid[], uuid[], text[], bytea[], int8[]);
     CREATE FUNCTION {s}.append_batch(
         p_holder   uuid,
         p_session  uuid[],
         p_key      uuid[],
         p_kind     text[],
         p_bytes    bytea[],
         p_epoch    int8[],
         p_checksum int4[]
     ) RETURNS TABLE (o_status int2, o_seq int8)
     LANGUAGE plpgsql VOLATILE AS $fn$
     BEGIN
         INSERT INTO {s}.sessions (session)
         SELECT DISTINCT u FROM unnest(p_session) AS t(u) ORDER BY u
         ON CONFLICT (session) DO NOTHING;
         PERFORM 1 FROM {s}.sessions
         WHERE session = ANY (p_session) ORDER BY session FOR UPDATE;
         RETURN QUERY
         WITH input AS (
             SELECT t.i, t.s, t.k, t.kd, t.b, t.e, t.c
             FROM unnest(p_session, p_key, p_kind, p_bytes, p_epoch, p_checksum)
                  WITH ORDINALITY AS t(s, k, kd, b, e, c, i)
         ),
         st AS (
             SELECT x.session, x.last_seq, x.lease_epoch, x.lease_holder,
                    coalesce(x.lease_expires_at > clock_timestamp(), false) AS live
             FROM {s}.sessions x WHERE x.session = ANY (p_session)
         ),
         judged AS (
             SELECT n.i, n.s, n.k, n.kd, n.b, n.c,
                    CASE WHEN n.e IS NOT NULL THEN
                         NOT (st.live AND st.lease_holder IS NOT DISTINCT FROM p_holder
                              AND st.lease_epoch = n.e)
                    ELSE st.live AND st.lease_holder IS NOT NULL
                         AND st.lease_holder <> p_holder
                    END AS fenced
             FROM input n JOIN st ON st.session = n.s
         ),
         firsts AS (
             SELECT DISTINCT ON (j.s, j.k) j.s, j.k, j.i, j.kd, j.b, j.c
             FROM judged j WHERE NOT j.fenced ORDER BY j.s, j.k, j.i
         ),
         resolved AS (
             SELECT f.s, f.k, f.i, f.kd, f.b, f.c,
                    fr.seq AS old_seq, fr.kind AS old_kind, fr.bytes AS old_bytes,
                    fr.checksum AS old_sum
             FROM firsts f
             LEFT JOIN {s}.frames fr ON fr.session = f.s AND fr.key = f.k
         ),
         fresh AS (
             SELECT r.s, r.k, st.last_seq
                        + row_number() OVER (PARTITION BY r.s ORDER BY r.i) AS seq,
                    r.kd, r.b, r.c
             FROM resolved r JOIN st ON st.session = r.s
             WHERE r.old_seq IS NULL
         ),
         ins AS (
             INSERT INTO {s}.frames (session, seq, key, kind, bytes, checksum)
             SELECT w.s, w.seq, w.k, w.kd, w.b, w.c FROM fresh w
         ),
         upd AS (
             UPDATE {s}.sessions x SET last_seq = m.top
             FROM (SELECT w.s, max(w.seq) AS top FROM fresh w GROUP BY w.s) m
             WHERE x.session = m.s
         )
         SELECT (CASE
                     WHEN j.fenced THEN 3
                     WHEN r.old_seq IS NULL AND r.i = j.i THEN 0
                     WHEN r.old_sum IS NOT NULL AND r.old_bytes = j.b
                          AND r.old_sum <> j.c THEN 4
                     WHEN coalesce(r.old_kind, r.kd) = j.kd
                          AND coalesce(r.old_bytes, r.b) = j.b THEN 1
                     ELSE 2
                 END)::int2,
                CASE WHEN j.fenced THEN 0::int8 ELSE coalesce(r.old_seq, w.seq) END
         FROM judged j
         LEFT JOIN resolved r ON NOT j.fenced AND r.s = j.s AND r.k = j.k
         LEFT JOIN fresh w ON w.s = r.s AND w.k = r.k
         ORDER BY j.i;
     END
     $fn$;",
];

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
    pub(crate) replay: String,
    pub(crate) verify_frames: String,
    pub(crate) sessions_after: String,
    pub(crate) sessions_first: String,
    pub(crate) verify_heads: String,
    pub(crate) last_seq: String,
    pub(crate) sessions: String,
    pub(crate) acquire: String,
    pub(crate) renew: String,
    pub(crate) release: String,
    pub(crate) lease_info: String,
    pub(crate) stats: String,
}

impl Sql {
    pub(crate) fn new(schema: &str) -> Self {
        let s = quoted(schema);
        Self {
            // The whole batch: see migration 2.
            append_batch: format!(
                "SELECT o_status, o_seq FROM {s}.append_batch($1, $2, $3, $4, $5, $6, $7)"
            ),
            lookup: format!(
                "SELECT seq, bytes, checksum FROM {s}.frames WHERE session = $1 AND key = $2"
            ),
            // The page and the session's head in one snapshot: a row with NULL frame
            // columns when the page is empty, none when the session is unknown.
            replay: format!(
                "SELECT f.seq, f.bytes, f.checksum, h.last_seq
                 FROM {s}.sessions h
                 LEFT JOIN LATERAL (
                     SELECT seq, bytes, checksum FROM {s}.frames
                     WHERE session = $1 AND seq >= $2 ORDER BY seq LIMIT $3
                 ) f ON true
                 WHERE h.session = $1
                 ORDER BY f.seq"
            ),
            verify_frames: format!(
                "SELECT session, seq, key, bytes, checksum FROM {s}.frames
                 WHERE (session, seq) > ($1, $2) ORDER BY session, seq LIMIT $3"
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
                 WHERE session > $1 ORDER BY session LIMIT $2"
            ),
            last_seq: format!("SELECT last_seq FROM {s}.sessions WHERE session = $1"),
            sessions: format!(
                "SELECT session FROM {s}.sessions WHERE last_seq > 0 ORDER BY session"
            ),
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
        }
    }
}
