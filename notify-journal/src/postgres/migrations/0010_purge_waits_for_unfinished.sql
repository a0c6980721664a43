-- Migration 10 (version 9 -> 10): a purge step waits for a part-purged session
-- that another transaction holds, instead of answering that nothing is due.
--
-- Until now a step looked for an unfinished purge `FOR UPDATE SKIP LOCKED`, and
-- when that found none free and no ended session was due, it answered "nothing":
-- `purge` then returned with the tombstone's last frames still stored, though no
-- one was going to remove them before the next purge. A part-purged session's row
-- is held for a moment by parties that never finish it:
--
-- * an append to it (refused, status 6: the row is locked `FOR UPDATE` before the
--   refusal is known), or an application's transaction holding such an append;
-- * another purge step passing over it. Under READ COMMITTED a row that another
--   transaction changed after a statement's snapshot is locked first and
--   re-checked after (PostgreSQL's EvalPlanQual); a row that fails the re-check is
--   not returned but stays locked to the end of that step. A step looking for an
--   ended session locks, that way, one that another step has just tombstoned, and
--   may then answer "nothing" itself. Two concurrent purges could both return so.
--
-- Now a step that finds no unfinished purge free but sees one that another
-- transaction holds waits for it: `FOR UPDATE` without `SKIP LOCKED`, on the first
-- such session in session order, re-checked once held (if the holder finished it,
-- the next one in order). An unfinished purge that no one holds is still taken at
-- once, so a session held for long does not stop the others' purges.
--
-- The wait is bounded: `lock_timeout` is at most 250 ms for that statement only
-- (the connection's own when shorter; restored after it). A purge step runs on the
-- journal's read connection, whose other reads queue behind it, and an
-- application's transaction may hold a purged session's row for as long as it
-- likes. A step that times out goes on as if it had found no unfinished purge, and
-- that session is left to a later purge, as before; while it stays held, every
-- step that finds no other unfinished purge free waits for it first. A purger
-- passing over a row holds it for the rest of a step that either answers at once
-- or goes on purging (and then finds the row itself on a later step), so 250 ms is
-- far more than that case needs.
--
-- No deadlock lasts: every wait ends within 250 ms, before PostgreSQL's deadlock
-- check looks (`deadlock_timeout`, 1 s by default), and what the wait took is let
-- go when it times out. While it waits, the step holds at most the rows of finished
-- purges that its `SKIP LOCKED` search passed over.
--
-- What changes: `purge_step`, replaced in place (same signature and answers); the
-- rest of its body is migration 9's.
--
-- Never edit this file: add a migration (see README.md in this folder).

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
    v_timeout text := current_setting('lock_timeout');
BEGIN
    -- A purge left unfinished first, whatever the horizon and whoever holds
    -- the lease: its session is a tombstone already. One that no one holds,
    -- else the first (in session order) that another transaction holds, waited
    -- for (at most 250 ms) and re-checked once held.
    SELECT x.session INTO v_session FROM {s}.sessions x
    WHERE x.purged_at IS NOT NULL AND NOT x.purge_done
    ORDER BY x.session LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF v_session IS NULL AND EXISTS (
        SELECT 1 FROM {s}.sessions x
        WHERE x.purged_at IS NOT NULL AND NOT x.purge_done
    ) THEN
        BEGIN
            IF v_timeout::interval = interval '0'
               OR v_timeout::interval > interval '250 milliseconds' THEN
                PERFORM set_config('lock_timeout', '250ms', true);
            END IF;
            SELECT x.session INTO v_session FROM {s}.sessions x
            WHERE x.purged_at IS NOT NULL AND NOT x.purge_done
            ORDER BY x.session LIMIT 1
            FOR UPDATE;
            PERFORM set_config('lock_timeout', v_timeout, true);
        EXCEPTION WHEN lock_not_available THEN
            -- Held longer (an application's transaction): left to a later
            -- purge. The block's rollback restored the timeout and let go of
            -- the locks it took.
            v_session := NULL;
        END;
    END IF;
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
