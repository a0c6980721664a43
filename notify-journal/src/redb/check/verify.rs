//! The redb journal's deep integrity check.

use std::collections::BTreeMap;
use std::path::Path;

use notify_types::{JournalRecord, SessionEvent, Uuid};
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata};

use crate::error::{Corruption, JournalError, OpenError, StorageError};
use crate::redb::check::overlay::Overlay;
use crate::redb::check::pace::{Pace, step};
use crate::redb::contain::contain;
use crate::redb::contain::storage;
use crate::redb::file::open::{self, Layout};
use crate::redb::file::upgrade;
use crate::redb::format::body;
use crate::redb::format::frame;
use crate::redb::format::keys::sid;
use crate::redb::format::positions::every_place;
use crate::redb::format::session_row::Stage;
use crate::redb::snapshot::Snapshot;
use crate::verify_report::{EngineCheck, Problem, VerifyReport};

/// Runs a check, containing a panic of the storage engine.
pub(crate) fn contained(
    f: impl FnOnce() -> Result<VerifyReport, JournalError>,
) -> Result<VerifyReport, JournalError> {
    contain(f).unwrap_or_else(|panic| {
        Err(JournalError::Storage(StorageError::msg(format!(
            "the storage engine panicked during the verify ({panic}); the file is damaged"
        ))))
    })
}

/// redb's page check (as its integrity check at open) and then the logical check, on a
/// file no process has open, writing nothing to it: the database is opened as a writer
/// opens it (its locks, its recovery of a file not closed cleanly), on an [`Overlay`]
/// that keeps every write redb makes in memory, so the file's bytes never change. A
/// format-1 file (or one mid-upgrade) is checked as the upgrade would check it
/// (`upgrade::check`), not upgraded.
pub(crate) fn file(path: &Path, max_problems: usize) -> Result<VerifyReport, OpenError> {
    let io = |context: &'static str| {
        move |e: std::io::Error| OpenError::Storage {
            path: path.to_path_buf(),
            source: StorageError::new(context, e),
        }
    };
    let handle = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(OpenError::Missing {
                path: path.to_path_buf(),
            });
        }
        Err(_) if path.is_dir() => {
            return Err(OpenError::NotAJournal {
                path: path.to_path_buf(),
                reason: "a directory".to_owned(),
            });
        }
        Err(e) => return Err(io("open the file")(e)),
    };
    if handle
        .metadata()
        .map_err(io("read the file's metadata"))?
        .len()
        == 0
    {
        // redb would lay out a database in it (in the overlay); it is no journal.
        return Err(OpenError::NotAJournal {
            path: path.to_path_buf(),
            reason: "an empty file".to_owned(),
        });
    }
    open::contain(path, || {
        let backend = Overlay::new(handle).map_err(io("read the file"))?;
        let mut b = Database::builder();
        b.set_check_integrity_on_open(true);
        let db = match b.create_with_backend(backend) {
            Ok(db) => db,
            Err(e) => {
                return match open::map_database_error(path, e) {
                    OpenError::Damaged { reason, .. } => {
                        let mut report = VerifyReport::new(max_problems);
                        report.engine = EngineCheck::Damaged(reason.clone());
                        report.push(Problem::Engine { detail: reason });
                        Ok(report)
                    }
                    other => Err(other),
                };
            }
        };
        let layout = open::journal_layout(&db, path)?;
        let mut report = contained(|| match layout {
            Layout::Format1 => {
                let mut report = VerifyReport::new(max_problems);
                upgrade::check(&db, &mut report)?;
                Ok(report)
            }
            // The moved part is a format-2 log; what is left, format 1.
            Layout::Upgrading => {
                let mut report = logical(&db, max_problems)?;
                upgrade::check(&db, &mut report)?;
                Ok(report)
            }
            Layout::Current | Layout::Format2 | Layout::Fresh => logical(&db, max_problems),
        })
        .unwrap_or_else(|e| {
            let mut report = VerifyReport::new(max_problems);
            report.push(Problem::Engine {
                detail: e.to_string(),
            });
            report
        });
        if report.engine == EngineCheck::NotRun {
            report.engine = EngineCheck::Clean;
        }
        Ok(report)
    })
}

/// The deep check of an open database (either handle's): [`logical_paced`], a panic
/// of the storage engine contained; `go_on` answering `false` stops it
/// ([`JournalError::Closed`]).
pub(crate) fn database(
    db: &impl ReadableDatabase,
    max_problems: usize,
    go_on: Pace<'_>,
) -> Result<VerifyReport, JournalError> {
    contained(|| logical_paced(db, max_problems, go_on))
}

/// The logical check in one read transaction: frames, positions, index entries and
/// session rows checked against each other (see `RedbJournal::verify_blocking`).
pub(crate) fn logical(
    db: &impl ReadableDatabase,
    max_problems: usize,
) -> Result<VerifyReport, JournalError> {
    logical_paced(db, max_problems, &mut || true)
}

/// [`logical`], calling `pace` before each table entry it reads: the background scrub
/// (`scrub.rs`) sleeps there to keep its pace, and stops the check by answering
/// `false` (the check then fails with [`JournalError::Closed`]).
pub(crate) fn logical_paced(
    db: &impl ReadableDatabase,
    max_problems: usize,
    pace: Pace<'_>,
) -> Result<VerifyReport, JournalError> {
    let txn = db.begin_read().map_err(storage("begin read"))?;
    let snap = Snapshot::open(&txn)?;
    let mut report = VerifyReport::new(max_problems);
    let mut unreadable = Unreadable::new(max_problems);
    let linked = check_log(&snap, &mut report, &mut unreadable, pace)?;
    let tail: u64 = snap.tail()?.values().map(|e| e.len() as u64).sum();
    let positions = snap.positions.len().map_err(storage("count positions"))? + tail;
    let keys = snap.keys.len().map_err(storage("count keys"))?;
    // Every frame is named by its own position (in the positions table or the tail)
    // and index entry, and no table holds more entries than there are frames: they
    // are in one-to-one correspondence, so each entry's look-up of its frame would
    // find it and is skipped (the point look-ups are most of a verify's cost).
    let one_to_one = linked == report.frames && positions == report.frames && keys == report.frames;
    check_positions(&snap, &mut report, !one_to_one, &mut unreadable, pace)?;
    // Frames so damaged they do not say whose they are, and that no position names.
    unreadable.report_unnamed(&mut report);
    if one_to_one {
        report.keys = keys;
    } else {
        check_keys(&snap, &mut report, pace)?;
    }
    super::rows::check_rows(&txn, &snap, &mut report, pace)?;
    Ok(report)
}

/// The frames so damaged they do not say whose they are, for [`check_positions`] to
/// name by the session and seq whose position holds them, and the rest to be reported
/// by log position. Memory is bounded by the problems a report keeps, however many
/// frames are damaged: only the first `max_problems` (by log position) are kept, the
/// others counted. That loses nothing a report shows: every unreadable frame named by
/// a position is reported there (its cause read again), and by the time the unnamed
/// ones are reported the report has room only for the first of the kept ones.
struct Unreadable {
    /// The first `cap` unreadable frames by log position, and why (`None` once a
    /// position named the frame).
    kept: BTreeMap<u64, Option<Corruption>>,
    cap: usize,
    /// Unreadable frames beyond the first `cap`.
    beyond: u64,
    /// Of those, how many a position named.
    beyond_named: u64,
}

impl Unreadable {
    fn new(cap: usize) -> Self {
        Self {
            kept: BTreeMap::new(),
            cap,
            beyond: 0,
            beyond_named: 0,
        }
    }

    /// An unreadable frame at `pos` (frames come in log order).
    fn insert(&mut self, pos: u64, cause: Corruption) {
        if self.kept.len() < self.cap {
            self.kept.insert(pos, Some(cause));
        } else {
            self.beyond += 1;
        }
    }

    /// Whether the unreadable frame at `pos` is one of those beyond the kept ones.
    fn is_beyond(&self, pos: u64) -> bool {
        self.beyond > 0
            && self
                .kept
                .last_key_value()
                .is_none_or(|(last, _)| pos > *last)
    }

    /// Reports the unreadable frames no position named.
    fn report_unnamed(self, report: &mut VerifyReport) {
        for (pos, cause) in self.kept {
            let Some(cause) = cause else { continue };
            report.push(Problem::Unreadable {
                location: format!("log position {pos}"),
                cause,
            });
        }
        report.count_unkept(self.beyond.saturating_sub(self.beyond_named));
    }
}

/// Every frame: checksum, decoding, identity, reached by its session's log and by its
/// key's index entry. Returns how many frames both name. Frames whose header cannot be
/// trusted go to `unreadable`.
fn check_log(
    snap: &Snapshot,
    report: &mut VerifyReport,
    unreadable: &mut Unreadable,
    pace: Pace<'_>,
) -> Result<u64, JournalError> {
    let mut linked = 0;
    for entry in snap.log.iter().map_err(storage("read log"))? {
        step(pace)?;
        let (k, v) = entry.map_err(storage("read log entry"))?;
        let (pos, bytes) = (k.value(), v.value());
        report.frames += 1;
        report.bytes += bytes.len() as u64;
        let f = match frame::parse(bytes) {
            Ok(f) => f,
            Err(cause) => {
                unreadable.insert(pos, cause);
                continue;
            }
        };
        let session = sid(f.session);
        let bad = |cause| Problem::Frame {
            session,
            seq: f.seq,
            cause,
        };
        match body::decode(f.body) {
            Err(cause) => report.push(bad(cause)),
            Ok(record) if record.session_id() != session || record.key().as_u128() != f.key => {
                report.push(bad(Corruption::Inconsistent(format!(
                    "the header names key {} but the record is {} of session {}",
                    Uuid::from_u128(f.key),
                    record.key(),
                    record.session_id()
                ))));
            }
            Ok(JournalRecord::Event(SessionEvent::SessionEnded(_))) => {
                // An end marker ends its session in the same commit: a session whose
                // log holds one has a row (a damaged row is reported by `rows.rs`).
                if snap
                    .sessions
                    .get(f.session)
                    .map_err(storage("read sessions"))?
                    .is_none()
                {
                    report.push(Problem::SessionRow {
                        session,
                        detail: format!(
                            "is missing: the log holds the end marker at seq {}",
                            f.seq
                        ),
                    });
                }
            }
            Ok(_) => {}
        }
        let positioned = snap.position_of(f.session, f.seq)?;
        if positioned != Some(pos) {
            report.push(Problem::Orphan {
                location: format!(
                    "log position {pos} (session {session} seq {}; its log names {positioned:?})",
                    f.seq
                ),
            });
        }
        let indexed = snap
            .keys
            .get((f.key, f.session))
            .map_err(storage("read keys"))?
            .map(|g| g.value());
        match indexed {
            Some(p) if p == pos => {
                if positioned == Some(pos) {
                    linked += 1;
                }
            }
            Some(other) => {
                let twin = snap
                    .log
                    .get(other)
                    .map_err(storage("read log"))?
                    .and_then(|g| {
                        frame::parse(g.value())
                            .ok()
                            .map(|t| (t.session, t.key, t.seq))
                    });
                match twin {
                    Some((s, key, seq)) if s == f.session && key == f.key => {
                        report.push(Problem::KeyTwice {
                            session,
                            key: Uuid::from_u128(f.key),
                            seqs: (seq.min(f.seq), seq.max(f.seq)),
                        });
                    }
                    _ => report.push(Problem::Unindexed {
                        session,
                        seq: f.seq,
                        key: Uuid::from_u128(f.key),
                    }),
                }
            }
            None => report.push(Problem::Unindexed {
                session,
                seq: f.seq,
                key: Uuid::from_u128(f.key),
            }),
        }
    }
    Ok(linked)
}

/// Every session's log: contiguous from 1 (from wherever it starts, for a session being
/// purged), and (when `look_up`) each position holding that very frame. A position
/// holding an unreadable frame names it (marked named in `unreadable`).
fn check_positions(
    snap: &Snapshot,
    report: &mut VerifyReport,
    look_up: bool,
    unreadable: &mut Unreadable,
    pace: Pace<'_>,
) -> Result<(), JournalError> {
    let mut current: Option<u128> = None;
    let mut expected = 1u64;
    let mut previous: Option<(u128, u64, u64)> = None;
    let places = every_place(&snap.positions, snap.tail()?).map_err(storage("read positions"))?;
    for place in places {
        let (s, seq, pos) = place.map_err(storage("read position"))?;
        step(pace)?;
        if current != Some(s) {
            current = Some(s);
            report.sessions += 1;
            // A purge removes a log from its front: what is left starts anywhere.
            let purging = matches!(snap.row(s), Ok(Some(row)) if row.stage == Stage::Purging);
            expected = if purging { seq } else { 1 };
        }
        let session = sid(s);
        if let Some((s0, seq0, pos0)) = previous
            && (s0, seq0) == (s, seq)
        {
            // Both the positions table and the tail (or the tail twice) place this seq.
            report.push(Problem::Frame {
                session,
                seq,
                cause: Corruption::Inconsistent(format!(
                    "the session's log places this seq twice: at log positions {pos0} and {pos}"
                )),
            });
            continue;
        }
        previous = Some((s, seq, pos));
        report.check_next(session, seq, &mut expected);
        if !look_up {
            continue;
        }
        if let Some(slot) = unreadable.kept.get_mut(&pos) {
            if let Some(cause) = slot.take() {
                report.push(Problem::Frame {
                    session,
                    seq,
                    cause,
                });
            }
            continue;
        }
        match snap.log.get(pos).map_err(storage("read log"))? {
            None => report.push(Problem::Frame {
                session,
                seq,
                cause: Corruption::Missing,
            }),
            Some(g) => match frame::parse(g.value()) {
                Ok(f) if (f.session, f.seq) != (s, seq) => {
                    report.push(Problem::Frame {
                        session,
                        seq,
                        cause: Corruption::Misplaced {
                            found: f.describe(),
                        },
                    });
                }
                Ok(_) => {}
                // An unreadable frame beyond those kept: named here, with the cause
                // `check_log` found (the same bytes of the same snapshot).
                Err(cause) if unreadable.is_beyond(pos) => {
                    unreadable.beyond_named += 1;
                    report.push(Problem::Frame {
                        session,
                        seq,
                        cause,
                    });
                }
                Err(_) => {}
            },
        }
    }
    Ok(())
}

/// Every index entry names a frame carrying its key.
fn check_keys(
    snap: &Snapshot,
    report: &mut VerifyReport,
    pace: Pace<'_>,
) -> Result<(), JournalError> {
    for entry in snap.keys.iter().map_err(storage("read keys"))? {
        step(pace)?;
        let (k, v) = entry.map_err(storage("read key"))?;
        let ((key, s), pos) = (k.value(), v.value());
        report.keys += 1;
        let problem = |detail: String| Problem::IndexEntry {
            session: sid(s),
            key: Uuid::from_u128(key),
            detail,
        };
        match snap.log.get(pos).map_err(storage("read log"))? {
            None => report.push(problem(format!(
                "names log position {pos}, which holds no frame"
            ))),
            Some(g) => {
                if let Ok(f) = frame::parse(g.value())
                    && (f.session, f.key) != (s, key)
                {
                    report.push(problem(format!("names another frame ({})", f.describe())));
                }
            }
        }
    }
    Ok(())
}
