//! Checking what the file holds: the deep check (`verify.rs`), on the in-memory overlay
//! a check of a file opens it on (`overlay.rs`: a check never writes), run again and
//! again in the background while the journal is open (`scrub.rs`), and the key census
//! (`census/`), which confirms every miss of the idempotency index against the
//! session's own log.

pub(crate) mod census;
pub(crate) mod overlay;
pub(crate) mod scrub;
pub(crate) mod verify;
