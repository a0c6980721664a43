//! Deciding a miss against the session's own log ([`confirm_miss`]), and confirming a
//! head before the writer appends after it ([`confirm_head`]): the frames read, each
//! checked (checksum, session and seq, positions contiguous) before it is believed.

use notify_types::{JournalRecord, SessionEvent, SessionId, Uuid, ended_event_id};
use redb::ReadableTable;

use super::{Census, Known, Miss, fingerprint};
use crate::error::Corruption;
use crate::redb::format::positions::SessionLog;
use crate::redb::format::{body, frame};

/// What a read of a session's frames found.
struct Scan {
    /// The fingerprints of the frames read, in seq order.
    found: Vec<u64>,
    /// The first of them carrying the key.
    hidden: Option<u64>,
}

/// Reads the session's frames `from..=head` (positions contiguous, every frame
/// checked), counting them in `read`.
fn scan<P, L>(
    frames: &SessionLog<'_, P>,
    log: &L,
    from: u64,
    head: u64,
    key: u128,
    read: &mut u64,
) -> Result<Result<Scan, Miss>, redb::StorageError>
where
    P: ReadableTable<(u128, u64), u64>,
    L: ReadableTable<u64, &'static [u8]>,
{
    let session = frames.session();
    let mut found = Vec::new();
    let mut expected = from;
    let mut hidden = None;
    let mut damaged = None;
    frames.each(
        from,
        head,
        |e| e,
        |seq, pos| {
            if seq != expected {
                damaged = Some(Miss::Damaged(expected, Corruption::Missing));
                return Ok(false);
            }
            *read += 1;
            let Some(guard) = log.get(pos)? else {
                damaged = Some(Miss::Damaged(seq, Corruption::Missing));
                return Ok(false);
            };
            let f = match frame::parse(guard.value()) {
                Ok(f) => f,
                Err(c) => {
                    damaged = Some(Miss::Damaged(seq, c));
                    return Ok(false);
                }
            };
            if f.session != session || f.seq != seq {
                damaged = Some(Miss::Damaged(
                    seq,
                    Corruption::Misplaced {
                        found: f.describe(),
                    },
                ));
                return Ok(false);
            }
            if f.key == key && hidden.is_none() {
                hidden = Some(seq);
            }
            found.push(fingerprint(f.key));
            expected = seq.saturating_add(1);
            Ok(true)
        },
    )?;
    if let Some(miss) = damaged {
        return Ok(Err(miss));
    }
    if expected <= head {
        return Ok(Err(Miss::Damaged(expected, Corruption::Missing)));
    }
    Ok(Ok(Scan { found, hidden }))
}

/// Decides whether the miss of `key` in the session's index is believed, against the
/// session's log `1..=head` as `frames` and `log` show it (a write transaction's
/// tables or a read snapshot's, begun after [`Census::generation`] answered
/// `generation`). Frames the census does not cover yet are read and counted; a
/// fingerprint the census may hold is decided by reading the counted frames whose tag
/// is the key's. Every frame read counts in `notify_journal_census_frames_read_total`.
///
/// # Errors
///
/// The storage engine's errors reading the tables.
pub(crate) fn confirm_miss<P, L>(
    census: &Census,
    generation: u64,
    frames: &SessionLog<'_, P>,
    log: &L,
    key: u128,
    head: u64,
) -> Result<Miss, redb::StorageError>
where
    P: ReadableTable<(u128, u64), u64>,
    L: ReadableTable<u64, &'static [u8]>,
{
    let known = census.known(frames.session(), key, head);
    let mut read = 0;
    let decided = decide(
        census, generation, frames, log, key, &known, head, &mut read,
    );
    crate::metrics::census_frames_read(read);
    if let Some(miss) = decided? {
        return Ok(miss);
    }
    Ok(Miss::Confirmed)
}

/// [`confirm_miss`]'s reads, counted in `read`: `Some` when they found damage.
#[allow(clippy::too_many_arguments)]
fn decide<P, L>(
    census: &Census,
    generation: u64,
    frames: &SessionLog<'_, P>,
    log: &L,
    key: u128,
    known: &Known,
    head: u64,
    read: &mut u64,
) -> Result<Option<Miss>, redb::StorageError>
where
    P: ReadableTable<(u128, u64), u64>,
    L: ReadableTable<u64, &'static [u8]>,
{
    // Counted frames whose tag is the key's: the frame decides (damage or a clash).
    for seq in &known.candidates {
        *read += 1;
        if let Some(miss) = check_frame(frames, log, key, *seq)? {
            return Ok(Some(miss));
        }
    }
    if known.upto >= head {
        return Ok(None);
    }
    // Read what the census does not cover yet.
    let from = known.upto + 1;
    let scanned = match scan(frames, log, from, head, key, read)? {
        Ok(s) => s,
        Err(miss) => return Ok(Some(miss)),
    };
    census.extend(generation, frames.session(), from, head, &scanned.found);
    Ok(scanned
        .hidden
        .map(|seq| Miss::Damaged(seq, unindexed(key, seq))))
}

/// The frame at `seq`, whose tag is the key's: `Some` when it is damaged or carries
/// the key (the index hides it).
fn check_frame<P, L>(
    frames: &SessionLog<'_, P>,
    log: &L,
    key: u128,
    seq: u64,
) -> Result<Option<Miss>, redb::StorageError>
where
    P: ReadableTable<(u128, u64), u64>,
    L: ReadableTable<u64, &'static [u8]>,
{
    let session = frames.session();
    let Some(pos) = frames.position(seq)? else {
        return Ok(Some(Miss::Damaged(seq, Corruption::Missing)));
    };
    let Some(guard) = log.get(pos)? else {
        return Ok(Some(Miss::Damaged(seq, Corruption::Missing)));
    };
    Ok(match frame::parse(guard.value()) {
        Err(c) => Some(Miss::Damaged(seq, c)),
        Ok(f) if f.session != session || f.seq != seq => Some(Miss::Damaged(
            seq,
            Corruption::Misplaced {
                found: f.describe(),
            },
        )),
        Ok(f) if f.key == key => Some(Miss::Damaged(seq, unindexed(key, seq))),
        // Another key with the same tag: not this one.
        Ok(_) => None,
    })
}

/// Confirms a live session's head `head`, as its positions gave it, before the
/// writer appends at `head + 1`: its position names a frame of that session and seq
/// (a damaged positions page cannot make the writer start a log again or write a
/// second frame at a seq), and that frame is not the session's end marker (a damaged
/// sessions page cannot hide an end). One point read of each table, once per session
/// whose head the writer loads. `None` when the head is believed.
///
/// A head understated by a damaged page (later positions hidden) is caught when the
/// new position is written: redb's insert answers the entry it replaced.
///
/// # Errors
///
/// The storage engine's errors reading the tables.
pub(crate) fn confirm_head<P, L>(
    frames: &SessionLog<'_, P>,
    log: &L,
    head: u64,
) -> Result<Option<(u64, Corruption)>, redb::StorageError>
where
    P: ReadableTable<(u128, u64), u64>,
    L: ReadableTable<u64, &'static [u8]>,
{
    if head == 0 {
        return Ok(None);
    }
    let session = frames.session();
    let Some(pos) = frames.position(head)? else {
        return Ok(Some((head, Corruption::Missing)));
    };
    let Some(guard) = log.get(pos)? else {
        return Ok(Some((head, Corruption::Missing)));
    };
    Ok(match frame::parse(guard.value()) {
        Err(c) => Some((head, c)),
        Ok(f) if f.session != session || f.seq != head => Some((
            head,
            Corruption::Misplaced {
                found: f.describe(),
            },
        )),
        // The end marker's ID alone is not enough (a caller's key may equal it): the
        // frame's body must be the session's end record.
        Ok(f) if f.key == ended_event_id(SessionId::from_uuid(Uuid::from_u128(session))).as_uuid().as_u128()
            && matches!(
                body::decode(f.body),
                Ok(JournalRecord::Event(SessionEvent::SessionEnded(ref e))) if e.session_id().as_uuid().as_u128() == session
            ) =>
        {
            Some((
                head,
                Corruption::Inconsistent(
                    "the session's log ends in its end marker but the session is not ended (a damaged sessions page)"
                        .to_owned(),
                ),
            ))
        }
        Ok(_) => None,
    })
}

fn unindexed(key: u128, seq: u64) -> Corruption {
    Corruption::Inconsistent(format!(
        "key {} is journaled at seq {seq} but the index does not name it (a damaged index page)",
        Uuid::from_u128(key)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callers_key_equal_to_the_end_id_at_the_head_is_not_an_end_marker() {
        use crate::redb::format::{LOG, POSITIONS};
        let db = redb::Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .unwrap();
        let s = SessionId::new();
        let u = s.as_uuid().as_u128();
        let end_key = ended_event_id(s).as_uuid().as_u128();
        let mut body_bytes = Vec::new();
        body::encode(
            &notify_testkit::sample::command(s, notify_types::LoopId::new()),
            &mut body_bytes,
        );
        let mut frame_bytes = Vec::new();
        frame::write(&mut frame_bytes, u, 1, end_key, &body_bytes);
        let txn = db.begin_write().unwrap();
        {
            let mut log = txn.open_table(LOG).unwrap();
            let mut positions = txn.open_table(POSITIONS).unwrap();
            log.insert(0, frame_bytes.as_slice()).unwrap();
            positions.insert((u, 1), 0).unwrap();
            // Not the session's end record: a live session's head, not damage.
            let frames = SessionLog::new(&positions, u, &[]);
            assert_eq!(confirm_head(&frames, &log, 1).unwrap(), None);
        }
    }
}
