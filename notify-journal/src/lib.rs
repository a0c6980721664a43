//! The durable journal: per-session, append-only, gap-free logs with an idempotency
//! index, behind the [`JournalBackend`] trait (and its read half, [`JournalRead`]).
//!
//! [`RedbJournal`] keeps the journals of many sessions in one redb file. A single
//! writer thread group-commits concurrent appends (across sessions) into one write
//! transaction and one durable commit; the idempotency index is a redb table written
//! in the same transaction as each frame, so a key counts as seen exactly when its
//! frame is committed. Every frame carries a checksum, and every read checks what it
//! gets back before it answers ([`Corruption`], [`RedbJournal::verify`]).
//! By default opening reads only the file's metadata, and a paced background scrub
//! checks the whole journal while it is open ([`RedbJournal::scrub_status`]).
//! [`RedbReader`] opens a file read-only and implements [`JournalRead`] alone.
//! `docs/design.md` describes the table layout, what commits together, what is
//! checked, the durability assumptions and the format versions.
//!
//! The engines sit side by side: `redb/` here, `postgres/` (`PgJournal`, feature
//! `postgres`) beside it, sharing the trait, the errors and the integrity checks.
//!
//! What is built on the traits comes with them (`ops.rs`): whole replays and purges
//! ([`replay_all`], [`replay_page`], [`purge`], [`purge_with`]), and [`layer`] for
//! wrappers that change a method or two. Beside the engines: the errors, the
//! integrity checks every backend runs ([`check_append`], [`check_group`]), retention
//! ([`SessionState`], [`Tombstone`]), the deep check's [`VerifyReport`] and
//! [`CommitStats`].
//!
//! **Architecture Invariant:** no redb type appears in [`JournalBackend`]; only
//! [`RedbJournal::open_with_backend`] (a test seam) names one.
#![deny(unsafe_code)]

mod backend;
mod corruption;
mod error;
mod group;
mod integrity;
pub mod layer;
mod lease;
mod metrics;
mod ops;
mod redb;
mod retention;
mod stats;
mod verify_report;

pub use backend::{AppendOutcome, BoxFuture, JournalBackend, JournalRead, SeqRecord};
pub use error::{AppendError, Corruption, JournalError, OpenError, StorageError};
pub use integrity::{DEFAULT_MAX_RECORD_BYTES, check_append, check_group};
pub use lease::{JournalLeases, Lease, LeaseError, LeaseInfo, Renewal};
pub use ops::{purge, purge_with, replay_all, replay_page};
pub use redb::app_tables::{
    APP_TABLE_PREFIX, APP_WRITE_MAX_BYTES, APP_WRITE_MAX_TIME, AppReadTable, AppTable,
    AppTableError, AppTables, AppTablesRead, AppTxnError, AppWriteResult,
};
pub use redb::check::scrub::{ScrubState, ScrubStatus};
pub use redb::options::{
    DEFAULT_CACHE_SIZE, DEFAULT_CENSUS_MAX_KEYS, DEFAULT_DROP_STEP, DEFAULT_SCRUB_INTERVAL,
    DEFAULT_SCRUB_PACE, DEFAULT_TAIL_MAX, RedbDurability, RedbOptions, RedbVerifyOnOpen,
};
pub use redb::read_only::RedbReader;
pub use redb::snapshot::database::RedbStats;
pub use redb::{CompactReport, RedbJournal};
pub use retention::{
    DEFAULT_PURGE_STEP_FRAMES, ImportStateError, PurgeReport, PurgeStep, SessionState, Tombstone,
};
pub use stats::CommitStats;
pub use verify_report::{DEFAULT_MAX_PROBLEMS, EngineCheck, Problem, VerifyReport};

/// The on-disk format version this build writes (kept in the file's metadata table;
/// see `docs/design.md`). Files of every earlier version open, upgraded in place.
pub const FORMAT_VERSION: u64 = redb::format::FORMAT_VERSION;

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
pub use postgres::{
    LeasePolicy, MigrationMode, PG_SCHEMA_VERSION, PgAppendStatement, PgAppendWithError,
    PgAppendedWith, PgConnector, PgEstimate, PgJournal, PgOpenError, PgOptions, PgSslMode, PgStats,
    PgTls, PgTlsRefusal,
};

/// Plumbing for the workspace's own crates (the testkit's in-memory journal, the
/// command line): the integrity checks and the append counter a backend built outside
/// this crate uses. Not part of the API: it may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::group::{GroupVerdict, judge_group, try_judge_group};
    pub use crate::integrity::{check_replay_page, decode_checked_frame, frame_checksum};
    pub use crate::metrics::record_append;
}
