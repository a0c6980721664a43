//! The checks every backend runs on what it reads back, so damage is named the same way
//! whatever the storage: a frame's checksum, its decoding, and the contiguity of a log.

use notify_types::{JournalRecord, SessionId};

use crate::backend::Frame;
use crate::error::{Corruption, JournalError};

/// The frame checksum every backend stores with a record's encoded bytes: CRC-32C
/// (Castagnoli), hardware-accelerated where the CPU has it.
#[must_use]
pub fn frame_checksum(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// Decodes one stored frame of `session` at `seq` without a checksum: a frame that does
/// not decode is [`JournalError::Corrupt`] naming both.
///
/// # Errors
///
/// [`JournalError::Corrupt`] with [`Corruption::Undecodable`].
pub fn decode_frame(session: SessionId, seq: u64, bytes: &[u8]) -> Result<Frame, JournalError> {
    let record = JournalRecord::decode(bytes)
        .map_err(|e| corrupt(session, seq, Corruption::Undecodable(e)))?;
    check_identity(session, seq, &record)?;
    Ok((seq, record))
}

/// Decodes one stored frame of `session` at `seq` after checking its bytes against the
/// checksum stored with them ([`frame_checksum`]).
///
/// # Errors
///
/// [`JournalError::Corrupt`] with [`Corruption::Checksum`] when the bytes changed, else
/// as [`decode_frame`].
pub fn decode_checked_frame(
    session: SessionId,
    seq: u64,
    bytes: &[u8],
    stored_checksum: u32,
) -> Result<Frame, JournalError> {
    let computed = frame_checksum(bytes);
    if computed != stored_checksum {
        return Err(corrupt(
            session,
            seq,
            Corruption::Checksum {
                stored: stored_checksum,
                computed,
            },
        ));
    }
    decode_frame(session, seq, bytes)
}

/// A decoded record must belong to the session whose log holds it.
pub(crate) fn check_identity(
    session: SessionId,
    seq: u64,
    record: &JournalRecord,
) -> Result<(), JournalError> {
    let named = record.session_id();
    if named == session {
        Ok(())
    } else {
        Err(corrupt(
            session,
            seq,
            Corruption::Misplaced {
                found: format!("a record of session {named}"),
            },
        ))
    }
}

/// Checks one replay page of `session` asked for from `from_seq` with `limit`: its
/// frames are contiguous from `from_seq`, and when `head` (the session's last seq read
/// in the same snapshot) is known, a page shorter than `limit` ends exactly at it.
///
/// # Errors
///
/// [`JournalError::Corrupt`] with [`Corruption::Missing`] naming the first missing seq.
pub fn check_replay_page(
    session: SessionId,
    from_seq: u64,
    limit: usize,
    head: Option<u64>,
    page: &[Frame],
) -> Result<(), JournalError> {
    let mut expected = from_seq.max(1);
    for (seq, _) in page {
        if *seq != expected {
            return Err(corrupt(session, expected, Corruption::Missing));
        }
        expected = expected.saturating_add(1);
    }
    if let Some(head) = head
        && page.len() < limit
        && expected <= head
    {
        return Err(corrupt(session, expected, Corruption::Missing));
    }
    Ok(())
}

pub(crate) fn corrupt(session: SessionId, seq: u64, source: Corruption) -> JournalError {
    JournalError::Corrupt {
        session,
        seq,
        source,
    }
}
