//! The journal schema's migrations, oldest first: migration `i` takes a schema from
//! version `i` to `i + 1` (see `schema.rs` for how they are applied, and
//! `docs/postgres.md` for the layout they build).

use super::migration_7::MIGRATION_7;
use super::migration_9::MIGRATION_9;

/// Migration `i` takes the schema from version `i` to `i + 1`. `{s}` is the schema.
pub(super) const MIGRATIONS: &[&str] = &[
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
    // 4: session end, purge and tombstones.
    //   * `sessions` gains `ended_at` (the commit of the session's `SessionEnded`
    //     frame, by the database's clock), `purged_at` (the first purge step's
    //     commit: from then on the row is the session's tombstone, with `last_seq`
    //     as its last seq and frame count) and `purge_done` (no frame left).
    //     Sessions whose end marker an earlier version journaled are ended as of
    //     that frame's commit.
    //   * Partial indexes find what is due: ended sessions not yet purged (by
    //     `ended_at`), purges left unfinished, finished tombstones (by `purged_at`).
    //   * `append_batch` refuses appends to ended sessions (`o_status` 5; the end
    //     marker itself stays a duplicate or a collision) and to purged ones (6),
    //     and stamps `ended_at` when it inserts a `SessionEnded` frame. Within one
    //     batch, the appends after a session's end marker are refused like appends
    //     after its commit. Its first step also registers again a session whose
    //     row vanished between that step and the lock (a dropped tombstone).
    //   * `purge_step` removes one bounded step of one ended session's log.
    "ALTER TABLE {s}.sessions
         ADD COLUMN ended_at   timestamptz,
         ADD COLUMN purged_at  timestamptz,
         ADD COLUMN purge_done boolean NOT NULL DEFAULT false,
         ADD CONSTRAINT sessions_end_order CHECK (
             (purged_at IS NULL OR ended_at IS NOT NULL)
             AND (NOT purge_done OR purged_at IS NOT NULL));
     UPDATE {s}.sessions x SET ended_at = f.committed_at
     FROM {s}.frames f
     WHERE f.session = x.session AND f.kind = 'SessionEnded';
     CREATE INDEX sessions_due ON {s}.sessions (ended_at)
         WHERE ended_at IS NOT NULL AND purged_at IS NULL;
     CREATE INDEX sessions_purging ON {s}.sessions (session)
         WHERE purged_at IS NOT NULL AND NOT purge_done;
     CREATE INDEX sessions_tombstones ON {s}.sessions (purged_at)
         WHERE purge_done;
     CREATE OR REPLACE FUNCTION {s}.append_batch(
         p_holder   uuid,
         p_session  uuid[],
         p_key      uuid[],
         p_kind     text[],
         p_bytes    bytea[],
         p_epoch    int8[],
         p_checksum int4[]
     ) RETURNS TABLE (o_status int2, o_seq int8)
     LANGUAGE plpgsql VOLATILE AS $fn$
     DECLARE
         v_sessions int8;
         v_locked   int8;
     BEGIN
         SELECT count(DISTINCT u) INTO v_sessions FROM unnest(p_session) AS t(u);
         LOOP
             INSERT INTO {s}.sessions (session)
             SELECT DISTINCT u FROM unnest(p_session) AS t(u) ORDER BY u
             ON CONFLICT (session) DO NOTHING;
             PERFORM 1 FROM {s}.sessions
             WHERE session = ANY (p_session) ORDER BY session FOR UPDATE;
             GET DIAGNOSTICS v_locked = ROW_COUNT;
             EXIT WHEN v_locked >= v_sessions;
         END LOOP;
         RETURN QUERY
         WITH input AS (
             SELECT t.i, t.s, t.k, t.kd, t.b, t.e, t.c
             FROM unnest(p_session, p_key, p_kind, p_bytes, p_epoch, p_checksum)
                  WITH ORDINALITY AS t(s, k, kd, b, e, c, i)
         ),
         st AS (
             SELECT x.session, x.last_seq, x.lease_epoch, x.lease_holder,
                    coalesce(x.lease_expires_at > clock_timestamp(), false) AS live,
                    x.ended_at IS NOT NULL AS ended, x.purged_at IS NOT NULL AS purged
             FROM {s}.sessions x WHERE x.session = ANY (p_session)
         ),
         judged AS (
             SELECT n.i, n.s, n.k, n.kd, n.b, n.c, st.ended, st.purged,
                    CASE WHEN n.e IS NOT NULL THEN
                         NOT (st.live AND st.lease_holder IS NOT DISTINCT FROM p_holder
                              AND st.lease_epoch = n.e)
                    ELSE st.live AND st.lease_holder IS NOT NULL
                         AND st.lease_holder <> p_holder
                    END AS fenced
             FROM input n JOIN st ON st.session = n.s
         ),
         ender AS (
             SELECT j.s, min(j.i) AS at FROM judged j
             WHERE j.kd = 'SessionEnded' AND NOT (j.fenced OR j.ended OR j.purged)
             GROUP BY j.s
         ),
         refused AS (
             SELECT j.i, j.s, j.k, j.kd, j.b, j.c,
                    CASE WHEN j.purged THEN 6
                         WHEN j.kd <> 'SessionEnded' AND (j.ended OR j.i > e.at) THEN 5
                         WHEN j.fenced THEN 3
                    END AS refusal
             FROM judged j LEFT JOIN ender e ON e.s = j.s
         ),
         firsts AS (
             SELECT DISTINCT ON (j.s, j.k) j.s, j.k, j.i, j.kd, j.b, j.c
             FROM refused j WHERE j.refusal IS NULL ORDER BY j.s, j.k, j.i
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
             UPDATE {s}.sessions x SET
                 last_seq = m.top,
                 ended_at = CASE WHEN m.ends THEN clock_timestamp() ELSE x.ended_at END
             FROM (SELECT w.s, max(w.seq) AS top, bool_or(w.kd = 'SessionEnded') AS ends
                   FROM fresh w GROUP BY w.s) m
             WHERE x.session = m.s
         )
         SELECT (CASE
                     WHEN j.refusal IS NOT NULL THEN j.refusal
                     WHEN r.old_seq IS NULL AND r.i = j.i THEN 0
                     WHEN r.old_sum IS NOT NULL AND r.old_bytes = j.b
                          AND r.old_sum <> j.c THEN 4
                     WHEN coalesce(r.old_kind, r.kd) = j.kd
                          AND coalesce(r.old_bytes, r.b) = j.b THEN 1
                     ELSE 2
                 END)::int2,
                CASE WHEN j.refusal IS NOT NULL THEN 0::int8
                     ELSE coalesce(r.old_seq, w.seq) END
         FROM refused j
         LEFT JOIN resolved r ON j.refusal IS NULL AND r.s = j.s AND r.k = j.k
         LEFT JOIN fresh w ON w.s = r.s AND w.k = r.k
         ORDER BY j.i;
     END
     $fn$;
     CREATE FUNCTION {s}.purge_step(
         p_holder uuid,
         p_before timestamptz,
         p_max    int8
     ) RETURNS TABLE (o_session uuid, o_removed int8, o_finished boolean)
     LANGUAGE plpgsql VOLATILE AS $fn$
     DECLARE
         v_session uuid;
         v_removed int8;
         v_done    boolean;
     BEGIN
         -- A purge left unfinished first, whatever the horizon and whoever holds
         -- the lease: its session is a tombstone already.
         SELECT x.session INTO v_session FROM {s}.sessions x
         WHERE x.purged_at IS NOT NULL AND NOT x.purge_done
         ORDER BY x.session LIMIT 1
         FOR UPDATE SKIP LOCKED;
         IF v_session IS NULL THEN
             -- Else the session that ended first, unless another holder has a live
             -- lease on it (judged after the row lock is granted).
             SELECT x.session INTO v_session FROM {s}.sessions x
             WHERE x.ended_at IS NOT NULL AND x.purged_at IS NULL
               AND x.ended_at < p_before
               AND NOT coalesce(x.lease_holder <> p_holder
                                AND x.lease_expires_at > clock_timestamp(), false)
             ORDER BY x.ended_at, x.session LIMIT 1
             FOR UPDATE SKIP LOCKED;
             IF v_session IS NULL THEN
                 RETURN;
             END IF;
             UPDATE {s}.sessions SET purged_at = clock_timestamp()
             WHERE session = v_session;
         END IF;
         DELETE FROM {s}.frames
         WHERE session = v_session AND seq IN (
             SELECT f.seq FROM {s}.frames f
             WHERE f.session = v_session ORDER BY f.seq LIMIT p_max);
         GET DIAGNOSTICS v_removed = ROW_COUNT;
         v_done := NOT EXISTS (SELECT 1 FROM {s}.frames WHERE session = v_session);
         IF v_done THEN
             UPDATE {s}.sessions SET purge_done = true WHERE session = v_session;
         END IF;
         RETURN QUERY SELECT v_session, v_removed, v_done;
     END
     $fn$;",
    // 5: a retry after the end gets the truthful answer. `append_batch` asks the
    // idempotency index before the end: in an ended (not purged) session, a key the
    // log holds (committed, or appended earlier in the batch before the session's end
    // marker) is a duplicate (1), a collision (2) or damage (4) as in a live session,
    // whatever the caller's lease (nothing can be written); only a key the log does
    // not hold is refused as ended (5). A purged session still refuses every key (6);
    // in a live session a fenced append is refused (3) before its key is resolved.
    // Nothing else changes: the same signature, statuses and steps.
    "CREATE OR REPLACE FUNCTION {s}.append_batch(
         p_holder   uuid,
         p_session  uuid[],
         p_key      uuid[],
         p_kind     text[],
         p_bytes    bytea[],
         p_epoch    int8[],
         p_checksum int4[]
     ) RETURNS TABLE (o_status int2, o_seq int8)
     LANGUAGE plpgsql VOLATILE AS $fn$
     DECLARE
         v_sessions int8;
         v_locked   int8;
     BEGIN
         SELECT count(DISTINCT u) INTO v_sessions FROM unnest(p_session) AS t(u);
         LOOP
             INSERT INTO {s}.sessions (session)
             SELECT DISTINCT u FROM unnest(p_session) AS t(u) ORDER BY u
             ON CONFLICT (session) DO NOTHING;
             PERFORM 1 FROM {s}.sessions
             WHERE session = ANY (p_session) ORDER BY session FOR UPDATE;
             GET DIAGNOSTICS v_locked = ROW_COUNT;
             EXIT WHEN v_locked >= v_sessions;
         END LOOP;
         RETURN QUERY
         WITH input AS (
             SELECT t.i, t.s, t.k, t.kd, t.b, t.e, t.c
             FROM unnest(p_session, p_key, p_kind, p_bytes, p_epoch, p_checksum)
                  WITH ORDINALITY AS t(s, k, kd, b, e, c, i)
         ),
         st AS (
             SELECT x.session, x.last_seq, x.lease_epoch, x.lease_holder,
                    coalesce(x.lease_expires_at > clock_timestamp(), false) AS live,
                    x.ended_at IS NOT NULL AS ended, x.purged_at IS NOT NULL AS purged
             FROM {s}.sessions x WHERE x.session = ANY (p_session)
         ),
         judged AS (
             SELECT n.i, n.s, n.k, n.kd, n.b, n.c, st.ended, st.purged,
                    CASE WHEN n.e IS NOT NULL THEN
                         NOT (st.live AND st.lease_holder IS NOT DISTINCT FROM p_holder
                              AND st.lease_epoch = n.e)
                    ELSE st.live AND st.lease_holder IS NOT NULL
                         AND st.lease_holder <> p_holder
                    END AS fenced
             FROM input n JOIN st ON st.session = n.s
         ),
         ender AS (
             SELECT j.s, min(j.i) AS at FROM judged j
             WHERE j.kd = 'SessionEnded' AND NOT (j.fenced OR j.ended OR j.purged)
             GROUP BY j.s
         ),
         -- `late`: after the session's end (committed, or its marker earlier in the
         -- batch). A late append writes nothing: its key is only looked up.
         placed AS (
             SELECT j.i, j.s, j.k, j.kd, j.b, j.c, j.purged, j.fenced,
                    (j.ended OR j.i > coalesce(e.at, j.i)) AS late
             FROM judged j LEFT JOIN ender e ON e.s = j.s
         ),
         refused AS (
             SELECT p.i, p.s, p.k, p.kd, p.b, p.c, p.late,
                    CASE WHEN p.purged THEN 6
                         WHEN p.fenced AND NOT p.late THEN 3
                    END AS refusal
             FROM placed p
         ),
         firsts AS (
             SELECT DISTINCT ON (j.s, j.k) j.s, j.k, j.i, j.kd, j.b, j.c, j.late
             FROM refused j WHERE j.refusal IS NULL ORDER BY j.s, j.k, j.i
         ),
         resolved AS (
             SELECT f.s, f.k, f.i, f.kd, f.b, f.c, f.late,
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
             WHERE r.old_seq IS NULL AND NOT r.late
         ),
         ins AS (
             INSERT INTO {s}.frames (session, seq, key, kind, bytes, checksum)
             SELECT w.s, w.seq, w.k, w.kd, w.b, w.c FROM fresh w
         ),
         upd AS (
             UPDATE {s}.sessions x SET
                 last_seq = m.top,
                 ended_at = CASE WHEN m.ends THEN clock_timestamp() ELSE x.ended_at END
             FROM (SELECT w.s, max(w.seq) AS top, bool_or(w.kd = 'SessionEnded') AS ends
                   FROM fresh w GROUP BY w.s) m
             WHERE x.session = m.s
         )
         SELECT (CASE
                     WHEN j.refusal IS NOT NULL THEN j.refusal
                     WHEN r.old_seq IS NULL AND r.late THEN 5
                     WHEN r.old_seq IS NULL AND r.i = j.i THEN 0
                     WHEN r.old_sum IS NOT NULL AND r.old_bytes = j.b
                          AND r.old_sum <> j.c THEN 4
                     WHEN coalesce(r.old_kind, r.kd) = j.kd
                          AND coalesce(r.old_bytes, r.b) = j.b THEN 1
                     ELSE 2
                 END)::int2,
                CASE WHEN j.refusal IS NOT NULL OR (r.old_seq IS NULL AND r.late)
                     THEN 0::int8
                     ELSE coalesce(r.old_seq, w.seq) END
         FROM refused j
         LEFT JOIN resolved r ON j.refusal IS NULL AND r.s = j.s AND r.k = j.k
         LEFT JOIN fresh w ON w.s = r.s AND w.k = r.k
         ORDER BY j.i;
     END
     $fn$;",
    // 6: finding orphaned sessions (`JournalLeases::orphaned_sessions`): sessions
    // neither ended nor purged, by lease expiry (never leased and released ones,
    // without an expiry, first), so listing the first orphans is a range scan that
    // stops at the first live lease. Nothing else changes.
    "CREATE INDEX sessions_orphans ON {s}.sessions
         ((coalesce(lease_expires_at, '-infinity'::timestamptz)), session)
         WHERE ended_at IS NULL AND purged_at IS NULL;",
    // 7: a lone append in simple statements (`migration_7.rs`).
    MIGRATION_7,
    // 8: no foreign key from frames to sessions. Every frame is inserted by
    // `append_batch` under its session row's `FOR UPDATE` lock, after registering
    // the row, and a session row is deleted only as a finished tombstone (no frame
    // left, appends refused): the key's check (a trigger per inserted frame, a
    // `FOR KEY SHARE` lookup of the row already locked) proved nothing the function
    // does not, and cost about a quarter of a batch's server time. Nothing else
    // changes.
    "ALTER TABLE {s}.frames DROP CONSTRAINT IF EXISTS frames_session_fkey;",
    // 9: leases in a table of their own, locked by appends in a mode a renewal does
    // not conflict with (`migration_9.rs`).
    MIGRATION_9,
];
