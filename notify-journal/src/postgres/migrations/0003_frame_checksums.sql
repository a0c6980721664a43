-- Migration 3 (version 2 -> 3): every frame carries the CRC-32C of its bytes
-- (`checksum`; NULL on frames written before this version), stored by `append_batch`
-- from the caller's `p_checksum` and checked by every read. The duplicate check also
-- judges the stored frame: the same bytes as this record's under another checksum
-- means the stored checksum changed: `o_status` 4 (damaged, `o_seq` the frame's),
-- never a duplicate. (Other bytes are a collision here; the writer then checks the
-- stored row's bytes against its checksum itself, PostgreSQL before 18 having no
-- CRC-32C.)
--
-- Never edit this file: add a migration (see README.md in this folder).

ALTER TABLE {s}.frames ADD COLUMN checksum int4;
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
$fn$;
