-- Migration 2 (version 1 -> 2): `append_batch`, a whole group-commit batch in one
-- statement (one round trip, committed as the statement's implicit transaction). In
-- order, each step its own statement (READ COMMITTED: each sees what committed
-- before it):
--   1. register the batch's sessions (sorted, so concurrent batches insert in one
--      order);
--   2. lock their rows, sorted (`FOR UPDATE`): every writer of a session, in any
--      process, is serialized here;
--   3. one statement that reads the locked rows (lease expiry judged by
--      `clock_timestamp()`, i.e. after the lock was granted), fences appends
--      whose lease is gone, resolves keys against committed frames and earlier
--      appends of the batch, numbers the new frames from `last_seq`, inserts
--      them, advances `last_seq`, and answers one row per input, in input order:
--      `o_status` 0 appended, 1 duplicate, 2 collision (`o_seq`: the original),
--      3 fenced. (Every code, and what the journal makes of it:
--      `postgres/status.rs`.)
-- `p_epoch[i]` is the epoch of the caller's lease on `p_session[i]`, NULL when it
-- holds none (then only another holder's live lease fences it).
--
-- Never edit this file: add a migration (see README.md in this folder).

CREATE FUNCTION {s}.append_batch(
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
$fn$;
