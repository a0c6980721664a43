//! Upgrading older journals in place: format 2 to format 3 in one transaction (the
//! log's tail table, empty, and the version: a format-2 file is a format-3 file whose
//! tail is empty), and format 1 in bounded, crash-safe steps, described here.
//!
//! Nothing is written before [`check`] has read every frame left in the old tables and
//! found each as the steps will want it (it decodes, re-encodes to the same bytes,
//! belongs to its session, continues its session's log, and its index entry names it;
//! every old head and index entry agrees): a damaged file is refused with the damage
//! named, still format 1, byte for byte. Then the first step marks the file format 2
//! with an upgrade under way (so no format-1 build opens it half moved). Each step is
//! one write transaction that moves up to [`STEP`] frames, in `(session, seq)` order,
//! from the old tables into the log, checking each again as it goes. A crash between
//! steps loses nothing: the moved frames are committed in their new place and gone from
//! the old tables, and the next open checks what is left and continues. The last step
//! checks the old heads against the moved logs, drops the old tables and clears the
//! mark. A step is bounded in frames ([`STEP`]) and in bytes ([`STEP_BYTES`]).

use std::path::Path;

use notify_types::{JournalRecord, Uuid};
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata};

use crate::error::{Corruption, JournalError, OpenError, StorageError};
use crate::redb::contain::storage;
use crate::redb::format::body;
use crate::redb::format::frame;
use crate::redb::format::keys::{log_head, sid};
use crate::redb::format::{
    FORMAT_KEY, FORMAT_VERSION, KEYS, LOG, META, POSITIONS, TAIL, UPGRADING_KEY, v1,
};
use crate::verify_report::{Problem, VerifyReport};

/// Frames moved per transaction, at most.
pub(crate) const STEP: usize = 4096;
/// Bytes of old frames moved per transaction, at most (a step always moves at least
/// one frame).
pub(crate) const STEP_BYTES: usize = 32 << 20;

/// How many problems a refused upgrade names.
const REFUSAL_PROBLEMS: usize = 8;

/// Upgrades a format-2 journal to format 3 in one transaction: the log's tail table,
/// empty, and the version. Nothing else changes: every frame is in the positions table.
pub(crate) fn from_v2(db: &Database, path: &Path) -> Result<(), OpenError> {
    let txn = db
        .begin_write()
        .map_err(|e| fail(path, "begin the upgrade from format 2")(e.into()))?;
    {
        let mut meta = txn
            .open_table(META)
            .map_err(|e| fail(path, "open metadata")(e.into()))?;
        meta.insert(FORMAT_KEY, FORMAT_VERSION)
            .map_err(|e| fail(path, "write format version")(e.into()))?;
        txn.open_table(TAIL)
            .map_err(|e| fail(path, "create tail")(e.into()))?;
    }
    txn.commit()
        .map_err(|e| fail(path, "commit the upgrade from format 2")(e.into()))
}

/// Moves every format-1 frame into the current tables (the positions table: the tail
/// stays empty). Unless `checked` (the caller
/// ran [`check`] on this very file, read-only, just before), [`check`] runs first, in a
/// read transaction: a file it finds damaged is refused
/// ([`OpenError::UpgradeRefused`]) before anything is written.
pub(crate) fn from_v1(db: &Database, path: &Path, checked: bool) -> Result<(), OpenError> {
    if !checked {
        refuse_damage(db, path)?;
    }
    while step(db, path)? {}
    Ok(())
}

/// Runs [`check`]; [`OpenError::UpgradeRefused`] naming what it found, if anything.
pub(crate) fn refuse_damage(db: &impl ReadableDatabase, path: &Path) -> Result<(), OpenError> {
    let mut report = VerifyReport::new(REFUSAL_PROBLEMS);
    check(db, &mut report).map_err(|e| OpenError::Storage {
        path: path.to_path_buf(),
        source: StorageError::new("check the format-1 journal before upgrading it", e),
    })?;
    if report.problem_count == 0 {
        return Ok(());
    }
    Err(OpenError::UpgradeRefused {
        path: path.to_path_buf(),
        problems: report.problems,
        problem_count: report.problem_count,
    })
}

/// Reads every frame, index entry and head left in the format-1 tables, in one read
/// transaction, and reports (into `report`, counting frames, bytes, keys and sessions)
/// every one the upgrade steps would refuse: a frame that does not decode, re-encodes to
/// other bytes or is another session's (`Frame`), a log that does not continue from
/// where its moved part ends (`Gap`), a frame its index entry does not name
/// (`Unindexed`, `KeyTwice`), an index entry no frame has (`IndexEntry`), a head that is
/// not its log's last seq (`Head`). Memory stays bounded: the frames are read in
/// `(session, seq)` order, one session at a time.
pub(crate) fn check(
    db: &impl ReadableDatabase,
    report: &mut VerifyReport,
) -> Result<(), JournalError> {
    let txn = db.begin_read().map_err(storage("begin read"))?;
    let frames = txn
        .open_table(v1::FRAMES)
        .map_err(storage("open old frames"))?;
    let index = txn
        .open_table(v1::INDEX)
        .map_err(storage("open old index"))?;
    let heads = txn
        .open_table(v1::HEADS)
        .map_err(storage("open old heads"))?;
    // Mid-upgrade, a session's log may have moved in part: what is left continues it.
    let positions = match txn.open_table(POSITIONS) {
        Ok(t) => Some(t),
        Err(redb::TableError::TableDoesNotExist(_)) => None,
        Err(e) => return Err(storage("open positions")(e)),
    };
    let moved_head = |session: u128| -> Result<u64, JournalError> {
        let Some(positions) = &positions else {
            return Ok(0);
        };
        log_head(positions, session, storage)
    };
    let mut current: Option<u128> = None;
    let mut expected = 1u64;
    let mut indexed_frames = 0u64;
    for entry in frames.iter().map_err(storage("read old frames"))? {
        let (k, v) = entry.map_err(storage("read old frame"))?;
        let ((s, seq), bytes) = (k.value(), v.value());
        report.frames += 1;
        report.bytes += bytes.len() as u64;
        if current != Some(s) {
            current = Some(s);
            let moved = moved_head(s)?;
            if moved == 0 {
                // A session moved in part was counted with the moved logs.
                report.sessions += 1;
            }
            expected = moved.saturating_add(1);
        }
        let session = sid(s);
        report.check_next(session, seq, &mut expected);
        let record = match JournalRecord::decode(bytes) {
            Ok(record) => record,
            Err(cause) => {
                report.push(Problem::Frame {
                    session,
                    seq,
                    cause: Corruption::Undecodable(cause),
                });
                continue;
            }
        };
        if record.encode() != bytes || record.session_id() != session {
            report.push(Problem::Frame {
                session,
                seq,
                cause: Corruption::Inconsistent(format!(
                    "it is not its session's record in canonical form (it decodes to {} of \
                     session {})",
                    record.key(),
                    record.session_id()
                )),
            });
            continue;
        }
        let key = record.key();
        let indexed = index
            .get((s, key.as_u128()))
            .map_err(storage("read old index"))?
            .map(|g| g.value());
        match indexed {
            Some(i) if i == seq => indexed_frames += 1,
            Some(other) if other < seq => {
                // The entry names an earlier frame: with the same key, it is a twin.
                let twin = frames
                    .get((s, other))
                    .map_err(storage("read old frame"))?
                    .and_then(|g| JournalRecord::decode(g.value()).ok())
                    .is_some_and(|r| r.key() == key);
                report.push(if twin {
                    Problem::KeyTwice {
                        session,
                        key,
                        seqs: (other, seq),
                    }
                } else {
                    Problem::Unindexed { session, seq, key }
                });
            }
            _ => report.push(Problem::Unindexed { session, seq, key }),
        }
    }
    let entries = index.len().map_err(storage("count old index"))?;
    report.keys += entries;
    if entries != indexed_frames {
        // Some entries name no frame carrying their key: find them.
        for entry in index.iter().map_err(storage("read old index"))? {
            let (k, v) = entry.map_err(storage("read old index entry"))?;
            let ((s, key), seq) = (k.value(), v.value());
            // An entry naming a frame that does not decode was reported with the frame.
            let holds = frames
                .get((s, seq))
                .map_err(storage("read old frame"))?
                .is_some_and(|g| {
                    JournalRecord::decode(g.value()).map_or(true, |r| r.key().as_u128() == key)
                });
            if !holds {
                report.push(Problem::IndexEntry {
                    session: sid(s),
                    key: Uuid::from_u128(key),
                    detail: format!("names seq {seq}, which is not a frame of this key"),
                });
            }
        }
    }
    for entry in heads.iter().map_err(storage("read old heads"))? {
        let (k, v) = entry.map_err(storage("read old head"))?;
        let (s, head) = (k.value(), v.value());
        // Seqs start at 1: a head of 0 is an empty old log.
        let last = match log_head(&frames, s, |what| {
            storage(if what == "read positions" {
                "read old frames"
            } else {
                "read old frame"
            })
        })? {
            0 => moved_head(s)?,
            last => last,
        };
        if last != head {
            report.push(Problem::Head {
                session: sid(s),
                head,
                last,
            });
        }
    }
    Ok(())
}

fn fail(path: &Path, context: &'static str) -> impl Fn(redb::Error) -> OpenError {
    let path = path.to_path_buf();
    move |e| OpenError::Storage {
        path: path.clone(),
        source: StorageError::new(context, e),
    }
}

fn damaged(path: &Path, reason: String) -> OpenError {
    OpenError::Damaged {
        path: path.to_path_buf(),
        reason: format!("upgrading from format 1: {reason}"),
    }
}

/// One bounded step; `false` once the upgrade is complete.
fn step(db: &Database, path: &Path) -> Result<bool, OpenError> {
    let txn = db
        .begin_write()
        .map_err(|e| fail(path, "begin upgrade step")(e.into()))?;
    let more = {
        let e = |context| move |err: redb::StorageError| fail(path, context)(err.into());
        let t = |context| move |err: redb::TableError| fail(path, context)(err.into());
        let mut meta = txn.open_table(META).map_err(t("open metadata"))?;
        meta.insert(FORMAT_KEY, FORMAT_VERSION)
            .map_err(e("write format version"))?;
        meta.insert(UPGRADING_KEY, 1)
            .map_err(e("mark the upgrade"))?;
        let mut frames = txn.open_table(v1::FRAMES).map_err(t("open old frames"))?;
        let mut index = txn.open_table(v1::INDEX).map_err(t("open old index"))?;
        let heads = txn.open_table(v1::HEADS).map_err(t("open old heads"))?;
        let mut log = txn.open_table(LOG).map_err(t("open log"))?;
        let mut positions = txn.open_table(POSITIONS).map_err(t("open positions"))?;
        let mut keys = txn.open_table(KEYS).map_err(t("open keys"))?;
        txn.open_table(crate::redb::format::SESSIONS)
            .map_err(t("create sessions"))?;
        txn.open_table(TAIL).map_err(t("create tail"))?;

        let mut batch = Vec::with_capacity(STEP);
        let mut bytes_taken = 0;
        for entry in frames.iter().map_err(e("read old frames"))?.take(STEP) {
            let (k, v) = entry.map_err(e("read old frame"))?;
            if !batch.is_empty() && bytes_taken + v.value().len() > STEP_BYTES {
                break;
            }
            bytes_taken += v.value().len();
            batch.push((k.value(), v.value().to_vec()));
        }
        let first_pos = log
            .last()
            .map_err(e("read the log's end"))?
            .map_or(0, |(k, _)| k.value())
            + 1;
        let head_of = |positions: &redb::Table<'_, (u128, u64), u64>, s: u128| {
            positions
                .range((s, 0)..=(s, u64::MAX))
                .and_then(|mut r| r.next_back().transpose())
                .map(|last| last.map_or(0, |(k, _)| k.value().1))
        };
        for (next_pos, ((session, seq), bytes)) in (first_pos..).zip(&batch) {
            let (session, seq) = (*session, *seq);
            let at = || format!("frame {seq} of session {}", Uuid::from_u128(session));
            let record = JournalRecord::decode(bytes)
                .map_err(|err| damaged(path, format!("{} does not decode: {err}", at())))?;
            if record.encode() != *bytes || record.session_id().as_uuid().as_u128() != session {
                return Err(damaged(
                    path,
                    format!("{} is not its session's record", at()),
                ));
            }
            let head = head_of(&positions, session).map_err(e("read positions"))?;
            if head.checked_add(1) != Some(seq) {
                return Err(damaged(path, format!("{} follows seq {head}", at())));
            }
            let key = record.key().as_u128();
            let indexed = index
                .remove((session, key))
                .map_err(e("read old index"))?
                .map(|g| g.value());
            if indexed != Some(seq) {
                return Err(damaged(
                    path,
                    format!("{}: its index entry names {indexed:?}", at()),
                ));
            }
            let mut body_bytes = Vec::new();
            body::encode(&record, &mut body_bytes);
            let mut framed = Vec::new();
            frame::write(&mut framed, session, seq, key, &body_bytes);
            log.insert(next_pos, framed.as_slice())
                .map_err(e("write log"))?;
            positions
                .insert((session, seq), next_pos)
                .map_err(e("write positions"))?;
            keys.insert((key, session), next_pos)
                .map_err(e("write keys"))?;
            frames
                .remove((session, seq))
                .map_err(e("remove old frame"))?;
        }
        if batch.is_empty() {
            for entry in heads.iter().map_err(e("read old heads"))? {
                let (k, v) = entry.map_err(e("read old head"))?;
                let (session, head) = (k.value(), v.value());
                let last = head_of(&positions, session).map_err(e("read positions"))?;
                if last != head {
                    return Err(damaged(
                        path,
                        format!(
                            "session {} has head {head} but its log ends at {last}",
                            Uuid::from_u128(session)
                        ),
                    ));
                }
            }
            if index.len().map_err(e("count old index"))? > 0 {
                return Err(damaged(
                    path,
                    "the old index has entries no frame has".to_owned(),
                ));
            }
            meta.remove(UPGRADING_KEY)
                .map_err(e("clear the upgrade mark"))?;
        }
        !batch.is_empty()
    };
    if !more {
        let drop_err = |err: redb::TableError| fail(path, "drop an old table")(err.into());
        txn.delete_table(v1::FRAMES).map_err(drop_err)?;
        txn.delete_table(v1::INDEX).map_err(drop_err)?;
        txn.delete_table(v1::HEADS).map_err(drop_err)?;
    }
    txn.commit()
        .map_err(|err| fail(path, "commit upgrade step")(err.into()))?;
    Ok(more)
}
