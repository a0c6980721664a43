//! The journal schema's migrations, oldest first, one numbered `.sql` file each:
//! `NNNN_<what>.sql` takes a schema from version `NNNN - 1` to `NNNN`. Each file
//! opens with the reasons for what it does (lock modes, why a statement is shaped as
//! it is); `schema.rs` applies the pending ones at connect, in one transaction, with
//! `{s}` replaced by the quoted schema name (`schema_name.rs`), the only text ever
//! spliced in. `notify-journal/docs/postgres.md` describes the layout they build.
//!
//! **Never edit a migration: add one.** A database migrated by an earlier build
//! never runs a file again, so an edit would give new databases a schema that old
//! ones do not have. To change the schema or a function (`append_batch`, the lease
//! functions, `purge_step`), add the next file (`CREATE OR REPLACE FUNCTION` for a
//! function), list it in [`MIGRATIONS`] and raise
//! [`PG_SCHEMA_VERSION`](super::PG_SCHEMA_VERSION) (`schema.rs` fails the build when
//! the two disagree). The live body of a function is the newest file that defines
//! it: `append_batch` and the lease functions are in `0009_leases_table.sql` today,
//! `purge_step` in `0010_purge_waits_for_unfinished.sql`.
//! `frozen.sha256` holds every file's SHA-256, and a test (`frozen.rs`) fails when a
//! file no longer matches it. The status codes `append_batch` answers with are
//! listed in `../status.rs`. See `README.md` in this folder.

#[cfg(test)]
mod frozen;

/// Migration `i` (0-based) takes the schema from version `i` to `i + 1`. `{s}` is
/// the schema.
pub(super) const MIGRATIONS: &[&str] = &[
    include_str!("0001_sessions_and_frames.sql"),
    include_str!("0002_append_batch.sql"),
    include_str!("0003_frame_checksums.sql"),
    include_str!("0004_session_end_and_purge.sql"),
    include_str!("0005_answers_after_the_end.sql"),
    include_str!("0006_orphans_index.sql"),
    include_str!("0007_lone_append.sql"),
    include_str!("0008_no_frames_foreign_key.sql"),
    include_str!("0009_leases_table.sql"),
    include_str!("0010_purge_waits_for_unfinished.sql"),
];
