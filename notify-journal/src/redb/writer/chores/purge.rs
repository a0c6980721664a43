//! Purge steps and tombstone drops: the writer thread's chores, each one write
//! transaction queued between append batches (so a live append waits for at most one).
//! A drop of more tombstones than the journal's drop step runs as several chores, one
//! step each.
//!
//! A purge step picks the session to work on from the retention index
//! (`format::RETENTION`): an unfinished purge first, else the oldest end before the
//! horizon. Its first step rewrites the session's row as a tombstone (state purging)
//! and moves its retention entry, in the same transaction as the first frames it
//! removes; from that commit every read of the log answers `Purged`, so no read ever
//! sees a partly removed log. Each step removes up to `max_frames` frames from the front
//! of the session's log, each with its position and index entry (the key is read from
//! the frame's checked header); the step that removes the last one marks the row purged.

use notify_types::Timestamp;
use redb::{ReadableTable, WriteTransaction};

use crate::error::Corruption;
use crate::redb::format::frame;
use crate::redb::format::keys::{log_head, sid};
use crate::redb::format::session_row::{SessionRow, Stage, nanos};
use crate::redb::format::{
    CLASS_ENDED, CLASS_PURGED, CLASS_PURGING, KEYS, LOG, POSITIONS, RETENTION, SESSIONS,
};
use crate::redb::writer::failure::{ChoreFailure, damaged, inconsistent, storage};
use crate::retention::PurgeStep;

/// The row of `session`, which the retention entry `entry` names; damage if it is
/// missing, damaged or disagrees with the entry.
fn row_for(
    sessions: &redb::Table<'_, u128, &'static [u8]>,
    entry: (u8, i128, u128),
) -> Result<SessionRow, ChoreFailure> {
    let session = entry.2;
    let row = sessions
        .get(session)
        .map_err(storage("read session row"))?
        .ok_or_else(|| {
            inconsistent(
                session,
                0,
                "the retention index names a session without a row".to_owned(),
            )
        })
        .and_then(|g| SessionRow::parse(session, g.value()).map_err(|c| damaged(session, 0, c)))?;
    if row.retention_key() != entry {
        return Err(inconsistent(
            session,
            0,
            format!(
                "the retention index entry {:?} disagrees with the session's row ({:?})",
                (entry.0, entry.1),
                row.stage
            ),
        ));
    }
    Ok(row)
}

/// The first entry of a retention range.
fn first(
    mut range: redb::Range<'_, (u8, i128, u128), ()>,
) -> Result<Option<(u8, i128, u128)>, ChoreFailure> {
    range
        .next()
        .transpose()
        .map(|e| e.map(|(k, _)| k.value()))
        .map_err(storage("read retention"))
}

/// One purge step in `txn`; [`PurgeStep::IDLE`] (nothing written) when no session is
/// due.
pub(crate) fn step(
    txn: &WriteTransaction,
    ended_before: Timestamp,
    max_frames: usize,
) -> Result<PurgeStep, ChoreFailure> {
    let mut retention = txn
        .open_table(RETENTION)
        .map_err(storage("open retention"))?;
    let mut sessions = txn.open_table(SESSIONS).map_err(storage("open sessions"))?;
    let unfinished = first(
        retention
            .range((CLASS_PURGING, i128::MIN, 0)..=(CLASS_PURGING, i128::MAX, u128::MAX))
            .map_err(storage("read retention"))?,
    )?;
    let entry = match unfinished {
        Some(e) => e,
        None => {
            let due = first(
                retention
                    .range((CLASS_ENDED, i128::MIN, 0)..(CLASS_ENDED, nanos(ended_before), 0))
                    .map_err(storage("read retention"))?,
            )?;
            match due {
                Some(e) => e,
                None => return Ok(PurgeStep::IDLE),
            }
        }
    };
    let session = entry.2;
    let mut row = row_for(&sessions, entry)?;
    let mut positions = txn
        .open_table(POSITIONS)
        .map_err(storage("open positions"))?;
    if row.stage == Stage::Ended {
        let head = log_head(&positions, session, storage)?;
        if head != row.last_seq {
            return Err(inconsistent(
                session,
                row.last_seq,
                format!(
                    "the session ended at seq {} but its log ends at {head}",
                    row.last_seq
                ),
            ));
        }
        retention
            .remove(entry)
            .map_err(storage("write retention"))?;
        row = row.purging(Timestamp::now());
    }

    let doomed: Vec<(u64, u64)> = positions
        .range((session, 0)..=(session, u64::MAX))
        .map_err(storage("read positions"))?
        .take(max_frames.max(1))
        .map(|e| e.map(|(k, v)| (k.value().1, v.value())))
        .collect::<Result<_, _>>()
        .map_err(storage("read position"))?;
    let mut log = txn.open_table(LOG).map_err(storage("open log"))?;
    let mut keys = txn.open_table(KEYS).map_err(storage("open keys"))?;
    let mut expected = doomed.first().map_or(1, |(seq, _)| *seq);
    for &(seq, pos) in &doomed {
        if seq != expected || seq > row.last_seq {
            return Err(inconsistent(
                session,
                expected,
                format!(
                    "the purge met seq {seq} where seq {expected} (at most {}) belongs",
                    row.last_seq
                ),
            ));
        }
        expected = seq.saturating_add(1);
        // Removed first and checked from what the removal hands back (one B-tree
        // walk per table, not two); a failed check abandons the whole step, so
        // nothing of it is committed.
        let key = {
            let guard = log
                .remove(pos)
                .map_err(storage("remove frame"))?
                .ok_or_else(|| damaged(session, seq, Corruption::Missing))?;
            let f = frame::parse(guard.value()).map_err(|c| damaged(session, seq, c))?;
            if (f.session, f.seq) != (session, seq) {
                return Err(damaged(
                    session,
                    seq,
                    Corruption::Misplaced {
                        found: f.describe(),
                    },
                ));
            }
            f.key
        };
        let indexed = keys
            .remove((key, session))
            .map_err(storage("remove index entry"))?
            .map(|g| g.value());
        if indexed != Some(pos) {
            return Err(inconsistent(
                session,
                seq,
                format!("the frame's index entry names log position {indexed:?}, not {pos}"),
            ));
        }
        positions
            .remove((session, seq))
            .map_err(storage("remove position"))?;
    }
    let finished = positions
        .range((session, 0)..=(session, u64::MAX))
        .map_err(storage("read positions"))?
        .next()
        .is_none();
    if finished {
        retention
            .remove(row.retention_key())
            .map_err(storage("write retention"))?;
        row = row.purged();
    }
    sessions
        .insert(session, row.encode().as_slice())
        .map_err(storage("write session row"))?;
    retention
        .insert(row.retention_key(), ())
        .map_err(storage("write retention"))?;
    Ok(PurgeStep {
        session: Some(sid(session)),
        frames_removed: doomed.len() as u64,
        finished,
    })
}

/// Drops up to `limit` tombstones of finished purges that began before `purged_before`,
/// oldest first, in `txn`. Returns how many.
pub(crate) fn drop_tombstones(
    txn: &WriteTransaction,
    purged_before: Timestamp,
    limit: usize,
) -> Result<u64, ChoreFailure> {
    let mut retention = txn
        .open_table(RETENTION)
        .map_err(storage("open retention"))?;
    let mut sessions = txn.open_table(SESSIONS).map_err(storage("open sessions"))?;
    let positions = txn
        .open_table(POSITIONS)
        .map_err(storage("open positions"))?;
    let due: Vec<(u8, i128, u128)> = retention
        .range((CLASS_PURGED, i128::MIN, 0)..(CLASS_PURGED, nanos(purged_before), 0))
        .map_err(storage("read retention"))?
        .take(limit)
        .map(|e| e.map(|(k, _)| k.value()))
        .collect::<Result<_, _>>()
        .map_err(storage("read retention"))?;
    for &entry in &due {
        let session = entry.2;
        let row = row_for(&sessions, entry)?;
        let left = positions
            .range((session, 0)..=(session, u64::MAX))
            .map_err(storage("read positions"))?
            .next()
            .is_some();
        if row.stage != Stage::Purged || left {
            return Err(inconsistent(
                session,
                0,
                "a purged session still has a log".to_owned(),
            ));
        }
        sessions
            .remove(session)
            .map_err(storage("remove session row"))?;
        retention
            .remove(entry)
            .map_err(storage("write retention"))?;
    }
    Ok(due.len() as u64)
}
