//! The durable journal: per-session, append-only, gap-free logs with an idempotency
//! index, behind the [`JournalBackend`] trait.
#![deny(unsafe_code)]

mod backend;
mod error;

pub use backend::{AppendOutcome, BoxFuture, Frame, JournalBackend, replay_all};
pub use error::{AppendError, JournalError, StorageError};
