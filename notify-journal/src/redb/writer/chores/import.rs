//! Importing session states: the writer thread's chore that gives a session imported
//! from an export its end time back, or writes a purged session's tombstone, so a
//! moved journal answers as the original did (see `notify export`).
//!
//! One write transaction for the whole list; any refusal writes none of it. An ended
//! state rewrites the row its end marker's import wrote (same last seq, the original
//! end time) and moves its retention entry; a tombstone is written only for a session
//! the file does not know, with its retention entry as a finished purge.

use notify_types::SessionId;
use redb::{ReadableTable, WriteTransaction};

use crate::redb::format::keys::log_head;
use crate::redb::format::session_row::{SessionRow, Stage};
use crate::redb::format::{POSITIONS, RETENTION, SESSIONS};
use crate::redb::writer::failure::{ChoreFailure, damaged, inconsistent, storage};
use crate::retention::{ImportStateError, SessionState};

/// Imports `states` in `txn`: `Ok(Ok(true))` when something was written (commit),
/// `Ok(Ok(false))` when every state was already there, `Ok(Err(_))` for a refusal
/// (nothing to commit).
pub(crate) fn import_states(
    txn: &WriteTransaction,
    states: &[(SessionId, SessionState)],
) -> Result<Result<bool, ImportStateError>, ChoreFailure> {
    let mut sessions = txn.open_table(SESSIONS).map_err(storage("open sessions"))?;
    let mut retention = txn
        .open_table(RETENTION)
        .map_err(storage("open retention"))?;
    let positions = txn
        .open_table(POSITIONS)
        .map_err(storage("open positions"))?;
    let mut wrote = false;
    for &(id, wanted) in states {
        let session = id.as_uuid().as_u128();
        let row = match sessions.get(session).map_err(storage("read session row"))? {
            Some(g) => {
                Some(SessionRow::parse(session, g.value()).map_err(|c| damaged(session, 0, c))?)
            }
            None => None,
        };
        let head = log_head(&positions, session, storage)?;
        let conflict = |held| Ok(Err(ImportStateError::Conflict { session: id, held }));
        let new = match (wanted, row) {
            (SessionState::Ended { ended_at, last_seq }, Some(r))
                if r.stage == Stage::Ended && r.last_seq == last_seq =>
            {
                if head != last_seq {
                    return Err(inconsistent(
                        session,
                        last_seq,
                        format!("the session ended at seq {last_seq} but its log ends at {head}"),
                    ));
                }
                if r.ended_at == ended_at {
                    continue;
                }
                retention
                    .remove(r.retention_key())
                    .map_err(storage("write retention"))?;
                SessionRow::ended(session, ended_at, last_seq)
            }
            (SessionState::Purged(_), Some(r))
                if r.stage == Stage::Purged && r.state() == wanted =>
            {
                continue;
            }
            (SessionState::Purged(t), None) if head == 0 => {
                SessionRow::ended(session, t.ended_at, t.last_seq)
                    .purging(t.purged_at)
                    .purged()
            }
            (_, Some(r)) => return conflict(r.state()),
            (_, None) => return conflict(SessionState::Live),
        };
        sessions
            .insert(session, new.encode().as_slice())
            .map_err(storage("write session row"))?;
        retention
            .insert(new.retention_key(), ())
            .map_err(storage("write retention"))?;
        wrote = true;
    }
    Ok(Ok(wrote))
}
