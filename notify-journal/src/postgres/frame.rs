//! A stored frame's checksum as PostgreSQL keeps it (`int4`), and checking and
//! decoding a stored row: shared by the reads, verify and the writer (which checks a
//! collision's stored row).

use notify_types::SessionId;

use crate::backend::SeqRecord;
use crate::error::JournalError;

/// A stored frame checked and decoded: against its checksum when it has one (frames
/// written before schema version 3 have none and are only decoded).
pub(super) fn decode_row(
    session: SessionId,
    seq: u64,
    bytes: &[u8],
    checksum: Option<i32>,
) -> Result<SeqRecord, JournalError> {
    match checksum {
        Some(sum) => crate::integrity::decode_checked_frame(session, seq, bytes, from_pg(sum)),
        None => crate::integrity::decode_frame(session, seq, bytes),
    }
}

/// A frame checksum as PostgreSQL's `int4` (the same 32 bits).
pub(super) fn pg_checksum(bytes: &[u8]) -> i32 {
    i32::from_be_bytes(crate::integrity::frame_checksum(bytes).to_be_bytes())
}

/// A stored `int4` checksum back as the `u32` it is.
pub(super) fn from_pg(sum: i32) -> u32 {
    u32::from_be_bytes(sum.to_be_bytes())
}
