-- Migration 8 (version 7 -> 8): no foreign key from frames to sessions. Every frame
-- is inserted by `append_batch` under its session row's `FOR UPDATE` lock, after
-- registering the row, and a session row is deleted only as a finished tombstone (no
-- frame left, appends refused): the key's check (a trigger per inserted frame, a
-- `FOR KEY SHARE` lookup of the row already locked) proved nothing the function does
-- not, and cost about a quarter of a batch's server time. Nothing else changes.
--
-- Never edit this file: add a migration (see README.md in this folder).

ALTER TABLE {s}.frames DROP CONSTRAINT IF EXISTS frames_session_fkey;
