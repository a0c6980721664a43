//! The checks every backend runs, so refusals and damage are named the same way
//! whatever the storage: on a record before it is written ([`check_append`]), and on
//! what is read back (a frame's checksum, its decoding, the contiguity of a log).

use notify_types::{JournalRecord, SessionId};

use crate::backend::SeqRecord;
use crate::error::{AppendError, Corruption, JournalError};

/// The default cap on one encoded record, every engine's (`RedbOptions` and
/// `PgOptions` start from it): 1 MiB.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 1 << 20;

/// The checks every backend runs before it writes anything, in this order: the record
/// names `session` ([`AppendError::SessionMismatch`]), encodes to at most
/// `max_record_bytes` ([`AppendError::TooLarge`]; checked before validation so an
/// oversized input costs no more than its encoding) and validates
/// ([`AppendError::Invalid`]: a journal never makes durable a frame restore could not
/// read). Returns the encoded bytes it checked, the bytes to store.
///
/// # Errors
///
/// The first check that fails; nothing has been written.
pub fn check_append(
    session: SessionId,
    record: &JournalRecord,
    max_record_bytes: usize,
) -> Result<Vec<u8>, AppendError> {
    let named = record.session_id();
    if named != session {
        return Err(AppendError::SessionMismatch {
            session,
            record: named,
        });
    }
    let bytes = record.encode();
    if bytes.len() > max_record_bytes {
        return Err(AppendError::TooLarge {
            len: bytes.len(),
            max: max_record_bytes,
        });
    }
    record.validate().map_err(AppendError::Invalid)?;
    Ok(bytes)
}

/// [`check_append`] for every record of an atomic group
/// ([`JournalBackend::append_all`](crate::JournalBackend::append_all)), in order.
///
/// # Errors
///
/// The first record that fails its checks, as [`AppendError::GroupRefused`] naming its
/// index; nothing has been written.
pub fn check_group(
    session: SessionId,
    records: &[JournalRecord],
    max_record_bytes: usize,
) -> Result<Vec<Vec<u8>>, AppendError> {
    records
        .iter()
        .enumerate()
        .map(|(index, record)| {
            check_append(session, record, max_record_bytes).map_err(|e| AppendError::GroupRefused {
                index,
                source: Box::new(e),
            })
        })
        .collect()
}

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
pub(crate) fn decode_frame(
    session: SessionId,
    seq: u64,
    bytes: &[u8],
) -> Result<SeqRecord, JournalError> {
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
/// as any decoding of a stored frame ([`Corruption::Undecodable`],
/// [`Corruption::Misplaced`]).
pub fn decode_checked_frame(
    session: SessionId,
    seq: u64,
    bytes: &[u8],
    stored_checksum: u32,
) -> Result<SeqRecord, JournalError> {
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
    page: &[SeqRecord],
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
