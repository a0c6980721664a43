//! The strict, deterministic JSON wire codec.
//!
//! Encoding (`encode.rs`) is hand-written so that the bytes are fixed by that file
//! alone: the same value always yields the same bytes, which the journal's duplicate
//! check relies on. Decoding streams (`parse.rs`): it reads the document once, keeping
//! only the fields the wire format names and refusing an unknown or repeated key where
//! it is met, so that its cost is bounded by a small multiple of the input whatever the
//! input holds; it then judges what was read field by field (`decode.rs`). Timestamps
//! are RFC 3339, up to [`MAX_TIMESTAMP`] (`time.rs`).

mod decode;
mod encode;
mod error;
mod parse;
mod record;
mod time;

pub use error::DecodeError;
pub use record::JournalRecord;
pub use time::MAX_TIMESTAMP;

/// The only wire version this crate reads and writes.
pub const WIRE_VERSION: u64 = 1;

/// The largest document the decoder accepts: 16 MiB.
pub const MAX_DECODE_BYTES: usize = 16 * 1024 * 1024;

/// The longest quotation of a refused value in a [`DecodeError`] (`found`): 128 bytes
/// of its compact JSON, then `…` when it is longer.
pub const MAX_FOUND_BYTES: usize = 128;
