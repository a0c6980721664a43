//! Test support for `notify`: everything a test of a journal, a loop, a session or a
//! supervisor needs, shared by this workspace's integration tests and by users'.
//!
//! * [`MemoryJournal`]: an in-memory [`JournalBackend`](notify_journal::JournalBackend)
//!   with exactly the redb journal's semantics; cheap to clone, so a test can keep a
//!   handle across a simulated crash.
//! * [`conformance`]: the backend contract as a suite of checks, written once and run
//!   against every backend (the contract, refusals, concurrency, atomic groups,
//!   retention, integrity).
//! * [`FaultyJournal`]: wraps any backend and injects faults (fail the Nth append,
//!   "persisted but reported failed", latency, poisoned), controlled at runtime
//!   through a [`FaultControl`], and counts calls; built on `notify_journal::layer`.
//! * [`strategy`]: proptest strategies for every DTO: valid values, values with
//!   exactly one field broken, and lifecycle sequences of a real process.
//! * [`sample`]: deterministic valid records, for tests that need "some record".
//! * [`fixture`]: a session with N loops in one call (journaled or headless), a fake
//!   foreign loop, restart-after-crash, and consumer helpers (receive N, ack N,
//!   drain).
//! * [`tamper`]: damaging a redb journal's file on purpose, for the integrity checks.
//! * [`crash`]: crash images of a redb journal through a fault-injecting storage
//!   backend, and sweeps that crash at every sync of a workload.
//! * [`kill`]: real process kills: the test re-runs itself as a child and SIGKILLs it
//!   mid-work, then checks what it left behind.
//! * `postgres` and `pg_cluster` (feature `postgres`): where the shared test database
//!   is, and a throwaway PostgreSQL cluster of a test's own (TLS, passwords).
//!
//! `tests/model/` is the model-based test of the whole system: a generated list of
//! operations (notify, retry, reuse an ID, receive and ack, fill an inbox, crash and
//! restore, shut a loop down, lifecycle events, declare orphans lost, end the session,
//! purge ended sessions) run against a session over a real redb journal and against a
//! plain reference model.
//!
//! ```
//! use notify_journal::JournalBackend;
//! use notify_testkit::{MemoryJournal, sample};
//! use notify_types::{LoopId, SessionId};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let journal = MemoryJournal::new();
//! let keep = journal.clone(); // survives a "crash" of everything holding `journal`
//! let session = SessionId::new();
//! let record = sample::command(session, LoopId::new());
//! assert_eq!(journal.append(session, record.clone()).await?.seq, 1);
//! drop(journal);
//! let again = keep.append(session, record).await?;
//! assert!(!again.appended && again.seq == 1);
//! # Ok(()) }
//! ```
//!
//! **Architecture Invariant:** the testkit depends on the crates it tests, never the
//! other way round; they use it from integration tests under `tests/` only.
#![deny(unsafe_code)]

pub mod bench;
pub mod conformance;
pub mod crash;
mod faulty;
pub mod fixture;
pub mod kill;
mod memory;
#[cfg(feature = "postgres")]
pub mod pg_cluster;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod sample;
pub mod strategy;
pub mod tamper;

pub use faulty::{AppendFault, FaultControl, FaultStats, FaultyJournal};
pub use memory::MemoryJournal;
