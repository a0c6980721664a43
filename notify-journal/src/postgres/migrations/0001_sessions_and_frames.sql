-- Migration 1 (schema version 0 -> 1): sessions with their lease, frames with the
-- idempotency index.
--
-- `sessions`: one row per session written; `last_seq` is its highest frame. Until
-- migration 9 the row also held the session's lease (`lease_epoch`, `lease_holder`,
-- `lease_expires_at`). `frames`: primary key `(session, seq)`, unique
-- `(session, key)` (the idempotency index). The foreign key to `sessions` is dropped
-- by migration 8.
--
-- Never edit this file: add a migration (see README.md in this folder).

CREATE TABLE {s}.sessions (
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
);
