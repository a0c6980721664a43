//! Every SQL statement the journal runs (the schema's name spliced in once), and
//! the handle's knowledge of the schema's version that travels with them.

use super::schema_name::quoted;
use super::version::SchemaGuard;

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
    /// One append through `append_batch` with scalar parameters, for a transaction
    /// the application runs (`ack_in_tx.rs`).
    pub(crate) append_one: String,
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
            // `append_batch` for one append, every parameter a scalar (any driver binds
            // those): holder, session, key, kind, bytes, epoch, checksum.
            append_one: format!(
                "SELECT o_status, o_seq FROM {s}.append_batch($1::uuid, ARRAY[$2::uuid], \
                 ARRAY[$3::uuid], ARRAY[$4::text], ARRAY[$5::bytea], ARRAY[$6::int8], \
                 ARRAY[$7::int4])"
            ),
        }
    }
}
