//! The compact binary frame body: a journal record as the new storage format keeps it.
//!
//! The canonical wire encoding stays the codec's JSON (`JournalRecord::encode`); this
//! body is the storage form only. It is deterministic and injective — two records are
//! equal exactly when their bodies are byte-equal — so the duplicate check can compare
//! bodies. Decoding accepts only the canonical body of a valid record: whenever
//! [`decode_body`] returns a record, [`encode_body`] of it gives back the same bytes.
//!
//! # Layout
//!
//! Every integer is big-endian. A UUID is its 16 bytes (`u128` big-endian); an enum is
//! its one-byte wire code; a string is a length (LEB128 varint, minimal) then UTF-8
//! bytes; a timestamp is `i64` seconds then `u32` nanoseconds in `0..1e9` (the
//! Euclidean split, exact for every `jiff::Timestamp`). The first byte is the record's
//! tag, which also versions the body: a changed layout takes a new tag.
//!
//! ```text
//! tag 1, command:      command_id session_id loop_id state reason handle
//! tag 2, lifecycle:    flags event_id session_id loop_id origin_execution_id kind
//!                      state created [started] [finished] [exit_code:i32] [reason]
//!                      handle [diagnostic]
//! tag 3, consumption:  session_id loop_id cause          (event_id is derived)
//! tag 4, abandonment:  session_id loop_id cause          (event_id is derived)
//! tag 5, session end:  session_id                        (event_id is derived)
//! ```
//!
//! The lifecycle flags byte says which optional fields follow (bit 0 started, 1
//! finished, 2 exit code, 3 reason, 4 diagnostic); other bits are zero.

mod decode;
mod encode;
mod error;
mod layout;
#[cfg(test)]
mod tests;

use notify_types::JournalRecord;

use self::decode::decode_body;
use self::encode::encode_body;
use crate::error::Corruption;

/// Encodes `record` as a frame body into `out` (appended).
pub(crate) fn encode(record: &JournalRecord, out: &mut Vec<u8>) {
    encode_body(record, out);
}

/// Decodes a frame body; what is wrong with a bad one is a [`Corruption::Body`].
pub(crate) fn decode(bytes: &[u8]) -> Result<JournalRecord, Corruption> {
    decode_body(bytes).map_err(|e| Corruption::Body(e.to_string()))
}
