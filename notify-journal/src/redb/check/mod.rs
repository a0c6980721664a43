//! Checking what the file holds: the deep check (`verify.rs`, with its check of the
//! session rows in `rows.rs`, both paced by `pace.rs`), on the in-memory overlay
//! a check of a file opens it on (`overlay.rs`: a check never writes), and run again
//! and again in the background while the journal is open (`scrub.rs`). The key census,
//! which checks every miss of the idempotency index as it happens, is `../census/`.

pub(crate) mod overlay;
mod pace;
mod rows;
pub(crate) mod scrub;
pub(crate) mod verify;
