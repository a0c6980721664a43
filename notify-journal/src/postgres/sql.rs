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
    pub(crate) renew_all: String,
    pub(crate) release: String,
    pub(crate) lease_info: String,
    pub(crate) orphans: String,
    /// The `LISTEN/NOTIFY` channel of lease changes (see [`lease_channel`]).
    pub(crate) lease_channel: String,
    pub(crate) stats: String,
    pub(crate) estimate: String,
    pub(crate) vacuum: String,
    /// One append through `append_batch` with scalar parameters, for a transaction
    /// the application runs (`ack_in_tx.rs`).
    pub(crate) append_one: String,
}

/// The longest channel name PostgreSQL keeps (`NAMEDATALEN - 1`).
const MAX_CHANNEL: usize = 63;

/// The `LISTEN/NOTIFY` channel on which releases and lost leases of `schema` are
/// announced: `<schema>.leases`, or, for a schema name too long for that,
/// `leases.<FNV-1a 64 of the name, hex>`. Only `[a-z0-9_.]`: safe to quote.
pub(crate) fn lease_channel(schema: &str) -> String {
    let plain = format!("{schema}.leases");
    if plain.len() <= MAX_CHANNEL {
        return plain;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in schema.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("leases.{h:016x}")
}

impl Sql {
    pub(crate) fn new(schema: &str) -> Self {
        let s = quoted(schema);
        Self {
            lease_channel: lease_channel(schema),
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
            // row with a live lease, nor one another transaction holds. Their lease
            // rows go with them (session row first, then lease row, as appends lock
            // them); a lease row made live meanwhile stays.
            drop_tombstones: format!(
                "WITH d AS MATERIALIZED (
                     SELECT x.session FROM {s}.sessions x
                     LEFT JOIN {s}.leases l ON l.session = x.session
                     WHERE x.purge_done AND x.purged_at < $1
                       AND NOT coalesce(l.expires_at > clock_timestamp(), false)
                     ORDER BY x.purged_at LIMIT $2
                     FOR UPDATE OF x SKIP LOCKED
                 ),
                 gone AS (
                     DELETE FROM {s}.leases l USING d
                     WHERE l.session = d.session
                       AND NOT coalesce(l.expires_at > clock_timestamp(), false)
                 )
                 DELETE FROM {s}.sessions x USING d WHERE x.session = d.session"
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
            // Purged sessions' frames are being removed: not checked. A frame whose
            // session has no row at all is kept (the last column says so): no log
            // reaches it. (`h.session >= $1` starts the sessions' side of the join at
            // the page too.)
            verify_frames: format!(
                "SELECT f.session, f.seq, f.key, f.bytes, f.checksum, h.session IS NULL
                 FROM {s}.frames f LEFT JOIN {s}.sessions h
                   ON h.session = f.session AND h.session >= $1
                 WHERE (f.session, f.seq) > ($1, $2) AND h.purged_at IS NULL
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
            // The lease statements (migration 9): each locks lease rows only, never
            // a session row, so none waits for an append's session row lock.
            //
            // Acquire: the schema's `acquire_lease` locks the lease row `FOR UPDATE`
            // (waiting for the appends in flight, which hold it `FOR KEY SHARE`),
            // then judges expiry by the clock: a free or expired lease starts a new
            // epoch, our own live lease is extended under its epoch, another
            // holder's live lease is refused, answered with its epoch, holder and
            // milliseconds left in the same row.
            acquire: format!(
                "SELECT o_taken, o_epoch, o_holder, o_left_ms
                 FROM {s}.acquire_lease($1::uuid, $2::uuid, $3::float8)"
            ),
            // The schema's `renew_leases` (migration 9) for one lease, nothing
            // announced: see `renew_all`.
            renew: format!(
                "SELECT o_renewed FROM {s}.renew_leases(
                     ARRAY[$1::uuid], ARRAY[$3::int8], $2::uuid, $4::float8, NULL)"
            ),
            // Every lease this handle believes live ($1 sessions, $2 their epochs), in
            // one statement: the schema's `renew_leases` locks the rows still ours
            // under that epoch `FOR NO KEY UPDATE` in session order (by the primary
            // key: no scan, whatever the number of leases), then, in a statement of
            // its own (the clock read once the locks are held), extends each one
            // unexpired. Nothing an append or an application's transaction holds
            // conflicts with that mode (an UPDATE of a non-key column), so it never
            // waits for them; only an acquire or a release of the same row, each one
            // short statement, can make it wait. Answers one row per input:
            // renewed; a lease not renewed is announced on the lease channel ($5)
            // as lost.
            renew_all: format!(
                "SELECT o_session, o_renewed
                 FROM {s}.renew_leases($1::uuid[], $2::int8[], $3::uuid, $4::float8, $5::text)"
            ),
            // The schema's `release_lease`: only a live lease is released (an expired
            // one was lost: the caller stays fenced), judged once the row is locked
            // `FOR UPDATE` (after this holder's appends in flight); announced on the
            // lease channel ($4) when the statement commits.
            release: format!("SELECT {s}.release_lease($1::uuid, $2::uuid, $3::int8, $4::text)"),
            // Epoch, holder, live, and the live lease's milliseconds left: one row by
            // the primary key, never waiting for a lock.
            lease_info: format!(
                "SELECT epoch, holder,
                        coalesce(expires_at > clock_timestamp(), false),
                        CASE WHEN expires_at > clock_timestamp() THEN
                             extract(epoch FROM expires_at - clock_timestamp())::float8
                                 * 1000 END
                 FROM {s}.leases WHERE session = $1"
            ),
            // Lease not live (never leased or released: no expiry, first; then the
            // longest expired), session neither ended nor purged, at most $1: a
            // range scan of the `leases_orphans` index (migration 9: lease rows not
            // known ended) in its order, each row's session read by its primary key
            // (a lease row whose session ended without a lease statement seeing it
            // is passed over). `now()`, not `clock_timestamp()`: an index condition
            // must be stable.
            orphans: format!(
                "SELECT l.session FROM {s}.leases l
                 LEFT JOIN {s}.sessions x ON x.session = l.session
                 WHERE NOT l.ended
                   AND coalesce(l.expires_at, '-infinity'::timestamptz) <= now()
                   AND x.ended_at IS NULL AND x.purged_at IS NULL
                 ORDER BY coalesce(l.expires_at, '-infinity'::timestamptz), l.session
                 LIMIT $1"
            ),
            // `{s}` is a quoted identifier free of single quotes (see `quoted`).
            stats: format!(
                "SELECT (SELECT count(*) FROM {s}.sessions WHERE last_seq > 0),
                        (SELECT count(*) FROM {s}.frames),
                        (SELECT coalesce(sum(octet_length(bytes)), 0)::int8 FROM {s}.frames),
                        (pg_total_relation_size('{s}.frames')
                         + pg_total_relation_size('{s}.sessions')
                         + pg_total_relation_size('{s}.leases'))::int8,
                        (SELECT max(version) FROM {s}.schema_version)"
            ),
            // From the catalog and the statistics collector only: no lock on, and no
            // read of, the frames table.
            estimate: format!(
                "SELECT coalesce((SELECT n_live_tup FROM pg_stat_user_tables
                                  WHERE relid = '{s}.frames'::regclass), 0)::int8,
                        (SELECT max(version) FROM {s}.schema_version)"
            ),
            // Plain VACUUM: online (no exclusive lock), makes purged rows' space reusable.
            vacuum: format!("VACUUM (ANALYZE) {s}.frames, {s}.sessions, {s}.leases"),
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
