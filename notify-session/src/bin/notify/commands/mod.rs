//! One file per command, named for it: `sessions`, `show`, `pending`, `verify`,
//! `stats`, `export`, `import`, `purge`, `compact`. Every figure comes from the library
//! (the listing, `last_seq`, `replay`, restore's own reduction, the deep verify); the
//! read commands take the journal's reads only
//! ([`JournalRead`](notify_session::notify_journal::JournalRead)). Shared by some of
//! them: `session_summary.rs` (one pass over a session's log: what a restart would
//! redeliver and declare lost, its head, when it was active) and `export_format.rs`
//! (the lines `export` writes and `import` reads).

mod compact;
mod export;
mod export_format;
mod import;
mod pending;
mod purge;
mod session_summary;
mod sessions;
mod show;
mod stats;
mod verify;

pub(crate) use compact::compact;
pub(crate) use export::export;
pub(crate) use import::import;
pub(crate) use pending::pending;
pub(crate) use purge::{bad_horizon, parse_horizon, purge};
pub(crate) use sessions::sessions;
pub(crate) use show::show;
pub(crate) use stats::stats;
pub(crate) use verify::{VerifyArgs, verify};
