//! Upgrading a format-1 journal to format 2 in place, in bounded, crash-safe steps.
//!
//! The first step marks the file format 2 with an upgrade under way (so no format-1
//! build opens it half moved). Each step is one write transaction that moves up to
//! [`STEP`] frames, in `(session, seq)` order, from the old tables into the log, checking
//! each as it goes (it decodes, re-encodes to the same bytes, belongs to its session,
//! continues its session's log, and its index entry names it). A crash between steps
//! loses nothing: the moved frames are committed in their new place and gone from the
//! old tables, and the next open continues. The last step checks the old heads against
//! the moved logs, drops the old tables and clears the mark. A step is bounded in frames
//! ([`STEP`]) and in bytes ([`STEP_BYTES`]).

use std::path::Path;

use notify_types::{JournalRecord, Uuid};
use redb::{Database, ReadableTable, ReadableTableMetadata};

use super::format::{FORMAT_KEY, FORMAT_VERSION, KEYS, LOG, META, POSITIONS, UPGRADING_KEY, v1};
use super::{body, frame};
use crate::error::{OpenError, StorageError};

/// Frames moved per transaction, at most.
pub(crate) const STEP: usize = 4096;
/// Bytes of old frames moved per transaction, at most (a step always moves at least
/// one frame).
pub(crate) const STEP_BYTES: usize = 32 << 20;

/// Moves every format-1 frame into the format-2 tables.
pub(crate) fn from_v1(db: &Database, path: &Path) -> Result<(), OpenError> {
    while step(db, path)? {}
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
        txn.open_table(super::format::SESSIONS)
            .map_err(t("create sessions"))?;

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
