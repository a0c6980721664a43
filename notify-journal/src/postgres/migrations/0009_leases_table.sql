-- Migration 9 (version 8 -> 9): leases in a table of their own, so a lease never
-- competes with the appends of the session it protects.
--
-- Before, a session's lease lived in its `sessions` row, which every append locks
-- `FOR UPDATE` until it commits (an application's transactional ack until the
-- application commits): a renewal either waited for the appends or, with
-- `SKIP LOCKED`, left a hot session's lease unjudged round after round until it ran
-- out. Now the lease is a row of `leases`, locked by each party in the mode it needs
-- (PostgreSQL's row-level lock conflicts; "Explicit Locking" in its manual):
--
-- * an append locks its session's lease row `FOR KEY SHARE` and judges holder, epoch
--   and expiry in its own transaction (after its `sessions` row lock, as before);
-- * a renewal `UPDATE`s only `expires_at` (no key column: `FOR NO KEY UPDATE`), which
--   `FOR KEY SHARE` does not conflict with: a renewal never waits for an append, nor
--   for an application's transaction holding one open;
-- * acquire and release lock the row `FOR UPDATE`, which conflicts with
--   `FOR KEY SHARE`: a takeover waits for the appends in flight under the old epoch,
--   which commit under it before the takeover returns, or are fenced after it.
--
-- Lock order: `sessions` row, then `leases` row (appends, purge steps, tombstone
-- drops); acquire, release and renewal lock lease rows only (a renewal in session
-- order), so none can deadlock with another.
--
-- What this migration does:
--
-- * `leases(session PK, epoch, holder, expires_at, holder_url, ended)`, filled from
--   every session row's lease columns (epochs kept, so they only grow), which are
--   then dropped with their `sessions_orphans` index. `holder_url` is reserved for
--   the address a holder may advertise (NULL: this version advertises none).
--   `ended`: the session was known ended when a lease statement or a purge step last
--   wrote the row (lease statements never wait for the `sessions` row to learn it);
--   such rows leave `leases_orphans`, the orphan listing's index
--   (`coalesce(expires_at, '-infinity'), session`, rows not `ended`).
-- * `acquire_lease` and `release_lease`: PL/pgSQL functions that lock the lease row
--   `FOR UPDATE` and judge expiry by `clock_timestamp()` once it is held;
--   `renew_leases`, which locks the caller's lease rows `FOR NO KEY UPDATE` in
--   session order, then extends those still unexpired by the clock (announcing the
--   others on `p_channel` unless it is NULL).
-- * `purge_step` replaced in place: the lease judged from `leases` (locked
--   `FOR KEY SHARE` once the session row is), and a purged session's lease row
--   marked `ended` unless its lease is live.
-- * `append_batch` replaced in place (same signature and statuses): after the
--   sessions' rows it locks their lease rows `FOR KEY SHARE` (registering a missing
--   one, as it registers a missing session) and judges the lease from them. This is
--   the live `append_batch` until a later migration replaces it; its status codes
--   are listed, with what the journal makes of them, in `postgres/status.rs`.
--
-- Never edit this file: add a migration (see README.md in this folder).

CREATE TABLE {s}.leases (
    session    uuid PRIMARY KEY,
    epoch      bigint NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    holder     uuid,
    expires_at timestamptz,
    holder_url text,
    ended      boolean NOT NULL DEFAULT false,
    CHECK ((holder IS NULL) = (expires_at IS NULL))
);
INSERT INTO {s}.leases (session, epoch, holder, expires_at, ended)
SELECT session, lease_epoch, lease_holder, lease_expires_at,
       ended_at IS NOT NULL OR purged_at IS NOT NULL
FROM {s}.sessions;
DROP INDEX {s}.sessions_orphans;
ALTER TABLE {s}.sessions
    DROP COLUMN lease_epoch,
    DROP COLUMN lease_holder,
    DROP COLUMN lease_expires_at;
CREATE INDEX leases_orphans ON {s}.leases
    ((coalesce(expires_at, '-infinity'::timestamptz)), session)
    WHERE NOT ended;
CREATE FUNCTION {s}.acquire_lease(
    p_session uuid,
    p_holder  uuid,
    p_ms      float8
) RETURNS TABLE (o_taken boolean, o_epoch int8, o_holder uuid, o_left_ms float8)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_epoch   int8;
    v_holder  uuid;
    v_expires timestamptz;
    v_live    boolean;
BEGIN
    -- FOR UPDATE: waits for the appends in flight (FOR KEY SHARE).
    LOOP
        SELECT l.epoch, l.holder, l.expires_at INTO v_epoch, v_holder, v_expires
        FROM {s}.leases l WHERE l.session = p_session FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO {s}.leases (session) VALUES (p_session)
        ON CONFLICT (session) DO NOTHING;
    END LOOP;
    -- Judged by the clock once the lock is held.
    v_live := coalesce(v_expires > clock_timestamp(), false);
    IF v_live AND v_holder <> p_holder THEN
        RETURN QUERY SELECT false, v_epoch, v_holder,
            extract(epoch FROM v_expires - clock_timestamp())::float8 * 1000;
        RETURN;
    END IF;
    RETURN QUERY
    UPDATE {s}.leases l SET
        epoch = CASE WHEN v_live THEN l.epoch ELSE l.epoch + 1 END,
        holder = p_holder,
        expires_at = clock_timestamp() + p_ms * interval '1 millisecond',
        holder_url = NULL,
        ended = EXISTS (SELECT 1 FROM {s}.sessions x
                        WHERE x.session = p_session AND x.ended_at IS NOT NULL)
    WHERE l.session = p_session
    RETURNING true, l.epoch, l.holder, p_ms;
END
$fn$;
CREATE FUNCTION {s}.renew_leases(
    p_sessions uuid[],
    p_epochs   int8[],
    p_holder   uuid,
    p_ms       float8,
    p_channel  text
) RETURNS TABLE (o_session uuid, o_renewed boolean)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_renewed uuid[];
BEGIN
    -- FOR NO KEY UPDATE, in session order: granted beside the appends'
    -- FOR KEY SHARE; only an acquire or release of the row makes it wait.
    PERFORM 1 FROM {s}.leases l
    JOIN unnest(p_sessions, p_epochs) AS h(session, epoch) ON h.session = l.session
    WHERE l.holder = p_holder AND l.epoch = h.epoch
    ORDER BY l.session
    FOR NO KEY UPDATE OF l;
    -- A statement of its own: expiry judged by the clock once the locks are held.
    WITH renewed AS (
        UPDATE {s}.leases x SET
            expires_at = clock_timestamp() + p_ms * interval '1 millisecond'
        FROM unnest(p_sessions, p_epochs) AS h(session, epoch)
        WHERE x.session = h.session AND x.holder = p_holder AND x.epoch = h.epoch
          AND x.expires_at > clock_timestamp()
        RETURNING x.session
    )
    SELECT coalesce(array_agg(r.session), '{}') INTO v_renewed FROM renewed r;
    RETURN QUERY
    SELECT h.session, r.session IS NOT NULL
    FROM unnest(p_sessions) AS h(session)
    LEFT JOIN unnest(v_renewed) AS r(session) ON r.session = h.session;
    IF p_channel IS NOT NULL THEN
        PERFORM pg_notify(p_channel, h.session::text)
        FROM unnest(p_sessions) AS h(session)
        LEFT JOIN unnest(v_renewed) AS r(session) ON r.session = h.session
        WHERE r.session IS NULL;
    END IF;
END
$fn$;
CREATE FUNCTION {s}.release_lease(
    p_session uuid,
    p_holder  uuid,
    p_epoch   int8,
    p_channel text
) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_expires timestamptz;
BEGIN
    -- FOR UPDATE: waits for this holder's appends in flight.
    SELECT l.expires_at INTO v_expires FROM {s}.leases l
    WHERE l.session = p_session AND l.holder = p_holder AND l.epoch = p_epoch
    FOR UPDATE;
    IF NOT coalesce(v_expires > clock_timestamp(), false) THEN
        RETURN false;
    END IF;
    UPDATE {s}.leases l SET holder = NULL, expires_at = NULL, holder_url = NULL,
        ended = EXISTS (SELECT 1 FROM {s}.sessions x
                        WHERE x.session = p_session AND x.ended_at IS NOT NULL)
    WHERE l.session = p_session;
    PERFORM pg_notify(p_channel, p_session::text);
    RETURN true;
END
$fn$;
CREATE OR REPLACE FUNCTION {s}.purge_step(
    p_holder uuid,
    p_before timestamptz,
    p_max    int8
) RETURNS TABLE (o_session uuid, o_removed int8, o_finished boolean)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    v_session uuid;
    v_removed int8;
    v_done    boolean;
    v_other   boolean;
    v_expires timestamptz;
    v_skip    uuid[] := '{}';
BEGIN
    -- A purge left unfinished first, whatever the horizon and whoever holds
    -- the lease: its session is a tombstone already.
    SELECT x.session INTO v_session FROM {s}.sessions x
    WHERE x.purged_at IS NOT NULL AND NOT x.purge_done
    ORDER BY x.session LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF v_session IS NULL THEN
        -- Else the session that ended first, unless another holder has a live
        -- lease on it: judged again once its lease row is locked (an acquire
        -- then waits for this step), and skipped if one was taken meanwhile.
        LOOP
            SELECT x.session INTO v_session FROM {s}.sessions x
            LEFT JOIN {s}.leases l ON l.session = x.session
            WHERE x.ended_at IS NOT NULL AND x.purged_at IS NULL
              AND x.ended_at < p_before AND x.session <> ALL (v_skip)
              AND NOT coalesce(l.holder <> p_holder
                               AND l.expires_at > clock_timestamp(), false)
            ORDER BY x.ended_at, x.session LIMIT 1
            FOR UPDATE OF x SKIP LOCKED;
            IF v_session IS NULL THEN
                RETURN;
            END IF;
            SELECT l.holder <> p_holder, l.expires_at INTO v_other, v_expires
            FROM {s}.leases l WHERE l.session = v_session FOR KEY SHARE;
            EXIT WHEN NOT coalesce(v_other AND v_expires > clock_timestamp(), false);
            v_skip := v_skip || v_session;
        END LOOP;
        UPDATE {s}.sessions SET purged_at = clock_timestamp()
        WHERE session = v_session;
        UPDATE {s}.leases SET ended = true
        WHERE session = v_session AND NOT ended
          AND NOT coalesce(expires_at > clock_timestamp(), false);
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
$fn$;
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
    v_last     int8;
    v_epoch    int8;
    v_holder   uuid;
    v_expires  timestamptz;
    v_ended    boolean;
    v_purged   boolean;
    v_fenced   boolean;
    v_seq      int8;
    v_kind     text;
    v_bytes    bytea;
    v_sum      int4;
BEGIN
    IF cardinality(p_session) = 1 THEN
        -- One append. Lock and read the session's row (registering it first
        -- if missing).
        LOOP
            SELECT x.last_seq, x.ended_at IS NOT NULL, x.purged_at IS NOT NULL
            INTO v_last, v_ended, v_purged
            FROM {s}.sessions x WHERE x.session = p_session[1] FOR UPDATE;
            EXIT WHEN FOUND;
            INSERT INTO {s}.sessions (session) VALUES (p_session[1])
            ON CONFLICT (session) DO NOTHING;
        END LOOP;
        IF v_purged THEN
            o_status := 6; o_seq := 0; RETURN NEXT; RETURN;
        END IF;
        -- Then its lease row, FOR KEY SHARE: renewals go on, a takeover waits.
        LOOP
            SELECT l.epoch, l.holder, l.expires_at INTO v_epoch, v_holder, v_expires
            FROM {s}.leases l WHERE l.session = p_session[1] FOR KEY SHARE;
            EXIT WHEN FOUND;
            INSERT INTO {s}.leases (session) VALUES (p_session[1])
            ON CONFLICT (session) DO NOTHING;
        END LOOP;
        -- The lease, judged by the clock now that the locks are held.
        v_fenced := CASE WHEN p_epoch[1] IS NOT NULL THEN
                NOT (coalesce(v_expires > clock_timestamp(), false)
                     AND v_holder IS NOT DISTINCT FROM p_holder
                     AND v_epoch = p_epoch[1])
            ELSE coalesce(v_expires > clock_timestamp(), false)
                 AND v_holder IS NOT NULL AND v_holder <> p_holder
            END;
        IF v_fenced AND NOT v_ended THEN
            o_status := 3; o_seq := 0; RETURN NEXT; RETURN;
        END IF;
        SELECT fr.seq, fr.kind, fr.bytes, fr.checksum
        INTO v_seq, v_kind, v_bytes, v_sum
        FROM {s}.frames fr WHERE fr.session = p_session[1] AND fr.key = p_key[1];
        IF FOUND THEN
            o_status := CASE
                WHEN v_sum IS NOT NULL AND v_bytes = p_bytes[1]
                     AND v_sum <> p_checksum[1] THEN 4
                WHEN v_kind = p_kind[1] AND v_bytes = p_bytes[1] THEN 1
                ELSE 2 END;
            o_seq := v_seq; RETURN NEXT; RETURN;
        END IF;
        IF v_ended THEN
            o_status := 5; o_seq := 0; RETURN NEXT; RETURN;
        END IF;
        v_seq := v_last + 1;
        INSERT INTO {s}.frames (session, seq, key, kind, bytes, checksum)
        VALUES (p_session[1], v_seq, p_key[1], p_kind[1], p_bytes[1], p_checksum[1]);
        UPDATE {s}.sessions SET last_seq = v_seq,
            ended_at = CASE WHEN p_kind[1] = 'SessionEnded'
                            THEN clock_timestamp() ELSE ended_at END
        WHERE session = p_session[1];
        o_status := 0; o_seq := v_seq; RETURN NEXT; RETURN;
    END IF;
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
    -- Their lease rows, FOR KEY SHARE (registering the missing ones).
    LOOP
        PERFORM 1 FROM {s}.leases
        WHERE session = ANY (p_session) ORDER BY session FOR KEY SHARE;
        GET DIAGNOSTICS v_locked = ROW_COUNT;
        EXIT WHEN v_locked >= v_sessions;
        INSERT INTO {s}.leases (session)
        SELECT DISTINCT u FROM unnest(p_session) AS t(u) ORDER BY u
        ON CONFLICT (session) DO NOTHING;
    END LOOP;
    RETURN QUERY
    WITH input AS (
        SELECT t.i, t.s, t.k, t.kd, t.b, t.e, t.c
        FROM unnest(p_session, p_key, p_kind, p_bytes, p_epoch, p_checksum)
             WITH ORDINALITY AS t(s, k, kd, b, e, c, i)
    ),
    st AS (
        SELECT x.session, x.last_seq, l.epoch AS lease_epoch,
               l.holder AS lease_holder,
               coalesce(l.expires_at > clock_timestamp(), false) AS live,
               x.ended_at IS NOT NULL AS ended, x.purged_at IS NOT NULL AS purged
        FROM {s}.sessions x JOIN {s}.leases l ON l.session = x.session
        WHERE x.session = ANY (p_session)
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
$fn$;
