//! The host runtime: a [`SessionHost`] places, keeps, moves and retires sessions on
//! this process, over any journal with leases ([`JournalLeases`]: PostgreSQL shared
//! by many hosts, or redb, whose file lock makes one process the only host).
//!
//! * Opening is one call ([`SessionHost::open`]): lease, restore, and the report to
//!   the application's [`HostApp::started`], which registers and seeds its loops.
//! * The host keeps the leases: one renewal of all of them per interval; a lease
//!   lost, or past its deadline (the keeper wakes at the earliest one), stops its
//!   session here at once — fenced, consumers handed nothing more, new
//!   notifications answered [`NotOwner`](notify_types::NotifyError::NotOwner)
//!   naming the new holder when the engine knows it, nothing appended — and the
//!   rest of the stop (appends in flight, loops, release) runs off the renewal path.
//! * It adopts orphaned sessions up to its capacity, on a fixed poll schedule and at
//!   once when the engine announces a lease released or lost; a session whose start
//!   fails here is retried with a backoff.
//! * Each open of a session is a placement with a fence of its own: a handle kept
//!   from an earlier placement writes nothing.
//! * It hands sessions off gracefully ([`SessionHost::release`],
//!   [`SessionHost::shutdown`]) and runs retention ([`RetentionSchedule`]).
//! * [`SessionHost::status`] reports its health; its metrics are `notify_host_*`.
//!
//! Inside: `handle.rs` ([`SessionHost`]), `builder.rs`, `app.rs` ([`HostApp`]),
//! `open.rs` (lease, restore, start), `keeper.rs` (renewals, deadlines, losses),
//! `stop.rs` (stopping one session), `shutdown.rs` (cooperative, bounded),
//! `adopt.rs`, `holdoff.rs` (sessions left alone for a while), `retention.rs`,
//! `fence.rs` (the journal layer refusing appends of a placement no longer held),
//! `table.rs` (the leases held), `status.rs`, `options.rs`, `error.rs`, `metrics.rs`,
//! `inner.rs` (the state the handle and tasks share).
//!
//! [`JournalLeases`]: notify_journal::JournalLeases

mod adopt;
mod app;
mod builder;
mod error;
mod fence;
mod handle;
mod holdoff;
mod inner;
mod keeper;
mod metrics;
mod open;
mod options;
mod retention;
mod shutdown;
mod status;
mod stop;
mod table;

pub use app::{AppError, HostApp, StopReason};
pub use builder::{DEFAULT_CAPACITY, HostBuilder};
pub use error::HostError;
pub use handle::SessionHost;
pub use options::RetentionSchedule;
pub use status::{HostStatus, SessionStatus};
