//! The read commands: `sessions`, `show` and `pending`. Every figure comes from the
//! library: the listing, `last_seq`, `replay`, and restore's own reduction (`restore`),
//! which is what a restart would redeliver and declare lost. They take the journal's
//! reads only ([`JournalRead`](notify_session::notify_journal::JournalRead)).

mod pending;
mod sessions;
mod show;
mod summary;

pub(crate) use pending::pending;
pub(crate) use sessions::sessions;
pub(crate) use show::show;
