//! A journal schema at version 1, frozen here as migration 1 created it (so the
//! upgrade tests do not depend on the latest version): its tables, its frames' keys,
//! and frames written in its layout.

use notify_types::{JournalRecord, SessionId};

/// The version-1 tables in schema `q` (quoted), recorded at version 1. The frames
/// table has no keys yet: add them with [`frame_keys`] (after a bulk load, say).
pub fn tables(q: &str) -> String {
    format!(
        "CREATE SCHEMA {q};
         CREATE TABLE {q}.schema_version (
             version    integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
         );
         INSERT INTO {q}.schema_version (version) VALUES (1);
         CREATE TABLE {q}.sessions (
             session          uuid PRIMARY KEY,
             last_seq         bigint NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
             lease_epoch      bigint NOT NULL DEFAULT 0 CHECK (lease_epoch >= 0),
             lease_holder     uuid,
             lease_expires_at timestamptz,
             CHECK ((lease_holder IS NULL) = (lease_expires_at IS NULL))
         );
         CREATE TABLE {q}.frames (
             session      uuid NOT NULL,
             seq          bigint NOT NULL CHECK (seq >= 1),
             key          uuid NOT NULL,
             kind         text NOT NULL,
             bytes        bytea NOT NULL,
             committed_at timestamptz NOT NULL DEFAULT now()
         );"
    )
}

/// The keys migration 1 gives the frames table, with the names it gives them.
pub fn frame_keys(q: &str) -> String {
    format!(
        "ALTER TABLE {q}.frames
             ADD CONSTRAINT frames_pkey PRIMARY KEY (session, seq),
             ADD CONSTRAINT frames_session_key_key UNIQUE (session, key),
             ADD CONSTRAINT frames_session_fkey FOREIGN KEY (session)
                 REFERENCES {q}.sessions (session);"
    )
}

/// Writes `records` as `session`'s frames 1.. in the version-1 layout (no checksum).
pub async fn write_frames(
    raw: &tokio_postgres::Client,
    q: &str,
    session: SessionId,
    records: &[JournalRecord],
) {
    for (seq, record) in (1_i64..).zip(records) {
        raw.execute(
            &format!(
                "INSERT INTO {q}.frames (session, seq, key, kind, bytes)
                 VALUES ($1, $2, $3, $4, $5)"
            ),
            &[
                session.as_uuid(),
                &seq,
                &record.key(),
                &record.type_name(),
                &record.encode(),
            ],
        )
        .await
        .unwrap();
    }
}
