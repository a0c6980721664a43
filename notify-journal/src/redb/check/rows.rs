//! Verify's check of the session rows: each row against its session's log, and the
//! retention index against the rows (see `verify.rs`).

use notify_types::{JournalRecord, SessionEvent};
use redb::{ReadTransaction, ReadableTable};

use super::pace::{Pace, step};
use crate::error::JournalError;
use crate::redb::contain::storage;
use crate::redb::format::RETENTION;
use crate::redb::format::keys::sid;
use crate::redb::format::session_row::{SessionRow, Stage};
use crate::redb::snapshot::Snapshot;
use crate::verify_report::{Problem, VerifyReport};

/// Every session row: it parses, agrees with its session's log (an ended log ends at the
/// row's last seq with the end marker; a log being purged ends there too; a purged
/// session has none), and has exactly its entry in the retention index, which holds
/// nothing else.
pub(super) fn check_rows(
    txn: &ReadTransaction,
    snap: &Snapshot,
    report: &mut VerifyReport,
    pace: Pace<'_>,
) -> Result<(), JournalError> {
    let retention = match txn.open_table(RETENTION) {
        Ok(t) => Some(t),
        // A file no build with session ends wrote to.
        Err(redb::TableError::TableDoesNotExist(_)) => None,
        Err(e) => return Err(storage("open retention")(e)),
    };
    for entry in snap.sessions.iter().map_err(storage("read sessions"))? {
        step(pace)?;
        let (k, v) = entry.map_err(storage("read session row"))?;
        let s = k.value();
        let session = sid(s);
        let row = match SessionRow::parse(s, v.value()) {
            Ok(row) => row,
            Err(cause) => {
                report.push(Problem::SessionRow {
                    session,
                    detail: format!("is damaged: {cause}"),
                });
                continue;
            }
        };
        match row.stage {
            Stage::Ended => report.ended += 1,
            Stage::Purging | Stage::Purged => report.tombstones += 1,
        }
        let mut problem = |detail: String| report.push(Problem::SessionRow { session, detail });
        let frames = snap.frames(s)?;
        let first = frames.first().map_err(storage("read position"))?;
        let last = frames.last().map_err(storage("read position"))?;
        match (row.stage, first, last) {
            (Stage::Ended, Some((1, _)), Some((seq, pos))) if seq == row.last_seq => {
                match snap.frame_at(s, seq, None, pos) {
                    Ok((_, JournalRecord::Event(SessionEvent::SessionEnded(_)))) => {}
                    // A damaged frame is reported by the frame checks.
                    Err(_) => {}
                    Ok(_) => problem(format!(
                        "says the session ended at seq {seq}, which is not its end marker"
                    )),
                }
            }
            (Stage::Ended, first, last) => problem(format!(
                "says the session ended at seq {} but its log runs {:?}..={:?}",
                row.last_seq,
                first.map(|f| f.0),
                last.map(|l| l.0)
            )),
            (Stage::Purging, Some(_), Some((seq, _))) if seq == row.last_seq => {}
            (Stage::Purging, _, last) => problem(format!(
                "is a purge under way to seq {} but the log left ends at {:?}",
                row.last_seq,
                last.map(|l| l.0)
            )),
            (Stage::Purged, None, _) => {}
            (Stage::Purged, Some((seq, _)), _) => {
                problem(format!("is purged but its log still holds seq {seq}"));
            }
        }
        let indexed = match &retention {
            Some(t) => t
                .get(row.retention_key())
                .map_err(storage("read retention"))?
                .is_some(),
            None => false,
        };
        if !indexed {
            problem("has no entry in the retention index".to_owned());
        }
    }
    let Some(retention) = retention else {
        return Ok(());
    };
    // Each entry must be exactly its row's (so a session has one entry, its row's).
    for entry in retention.iter().map_err(storage("read retention"))? {
        step(pace)?;
        let (k, _) = entry.map_err(storage("read retention entry"))?;
        let key = k.value();
        match snap.row(key.2) {
            Ok(Some(row)) if row.retention_key() == key => {}
            // A damaged row is reported with the rows.
            Err(_) => {}
            Ok(_) => report.push(Problem::SessionRow {
                session: sid(key.2),
                detail: format!(
                    "is not what the retention index entry (class {}, time {}) says",
                    key.0, key.1
                ),
            }),
        }
    }
    Ok(())
}
