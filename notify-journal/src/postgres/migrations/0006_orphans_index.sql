-- Migration 6 (version 5 -> 6): finding orphaned sessions
-- (`JournalLeases::orphaned_sessions`): sessions neither ended nor purged, by lease
-- expiry (never leased and released ones, without an expiry, first), so listing the
-- first orphans is a range scan that stops at the first live lease. Nothing else
-- changes. (Migration 9 replaces this index with `leases_orphans`.)
--
-- Never edit this file: add a migration (see README.md in this folder).

CREATE INDEX sessions_orphans ON {s}.sessions
    ((coalesce(lease_expires_at, '-infinity'::timestamptz)), session)
    WHERE ended_at IS NULL AND purged_at IS NULL;
