//! A frame's body: the record in the journal's storage encoding.

use notify_types::JournalRecord;

use crate::error::Corruption;

/// Encodes `record` as a frame body into `out` (appended).
pub(crate) fn encode(record: &JournalRecord, out: &mut Vec<u8>) {
    out.extend_from_slice(&record.encode());
}

/// Decodes a frame body.
pub(crate) fn decode(bytes: &[u8]) -> Result<JournalRecord, Corruption> {
    JournalRecord::decode(bytes).map_err(Corruption::Undecodable)
}
