//! [`RedbJournal`](super::RedbJournal)'s methods, by what they do: opening it
//! (`open.rs`), its reads and deep check (`reads.rs`), its writes and its
//! [`JournalBackend`](crate::JournalBackend) impl (`writes.rs`), transactional appends
//! (`append_with.rs`) and its leases (`lease.rs`: the file lock is the lease).

mod append_with;
mod lease;
mod open;
mod reads;
mod writes;

pub(super) use lease::RedbLeases;
