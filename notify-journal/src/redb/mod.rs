//! [`RedbJournal`]: the redb engine of [`JournalBackend`](crate::JournalBackend). One
//! file holds many sessions' logs; `docs/design.md` is its format.
//!
//! By concern: `journal/` (`RedbJournal` and its methods: open, reads, writes, the
//! application's tables, leases), `read_only.rs` (`RedbReader`), `snapshot/` (the reads
//! both handles share, every frame checked), `writer/` (the single writer: group
//! commit, atomic groups, chores), `census/` (the key census, which confirms every
//! index miss), `check/` (the deep check, the scrub), `file/` (opening, upgrading and
//! compacting the file), `format/` (the tables and what their values hold),
//! `app_tables/` (the application's own tables), `options.rs` and `contain.rs` (the
//! boundary with the storage engine: panics contained, errors named).

pub(crate) mod app_tables;
pub(crate) mod census;
pub(crate) mod check;
mod contain;
mod file;
pub(crate) mod format;
mod journal;
pub(crate) mod options;
pub(crate) mod read_only;
pub(crate) mod snapshot;
pub(crate) mod writer;

pub use self::file::CompactReport;
pub use self::journal::RedbJournal;
