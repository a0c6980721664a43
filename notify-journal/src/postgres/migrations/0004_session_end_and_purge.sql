-- Migration 4 (version 3 -> 4): session end, purge and tombstones.
--   * `sessions` gains `ended_at` (the commit of the session's `SessionEnded`
--     frame, by the database's clock), `purged_at` (the first purge step's
--     commit: from then on the row is the session's tombstone, with `last_seq`
--     as its last seq and frame count) and `purge_done` (no frame left).
--     Sessions whose end marker an earlier version journaled are ended as of
--     that frame's commit.
--   * Partial indexes find what is due: ended sessions not yet purged (by
--     `ended_at`), purges left unfinished, finished tombstones (by `purged_at`).
--   * `append_batch` refuses appends to ended sessions (`o_status` 5; the end
--     marker itself stays a duplicate or a collision) and to purged ones (6),
--     and stamps `ended_at` when it inserts a `SessionEnded` frame. Within one
--     batch, the appends after a session's end marker are refused like appends
--     after its commit. Its first step also registers again a session whose
--     row vanished between that step and the lock (a dropped tombstone).
--   * `purge_step` removes one bounded step of one ended session's log.
--
-- Never edit this file: add a migration (see README.md in this folder).

ALTER TABLE {s}.sessions
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
$fn$;
