//! Damaging a redb journal's file on purpose, for the integrity checks: the format-3
//! tables as `notify-journal/docs/design.md` lays them out, and [`RedbTamper`], a redb
//! journal that can be damaged behind its back between operations.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

use notify_journal::layer::{JournalLayer, JournalReadLayer};
use notify_journal::{BoxFuture, OpenError, RedbJournal, RedbOptions};
use notify_types::{JournalRecord, SessionId, Uuid};
use redb::{ReadableTable, TableDefinition};

use crate::conformance::Tamper;

/// `position -> frame` (header: CRC-32C, session, seq, key; then the body).
pub const LOG: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("notify_log");
/// `(session, seq) -> position`.
pub const POSITIONS: TableDefinition<'_, (u128, u64), u64> =
    TableDefinition::new("notify_positions");
/// `position -> (session, seq)`: the log's tail (format 3), the frames not yet folded
/// into [`POSITIONS`].
pub const TAIL: TableDefinition<'_, u64, (u128, u64)> = TableDefinition::new("notify_tail");
/// `(key, session) -> position`.
pub const KEYS: TableDefinition<'_, (u128, u128), u64> = TableDefinition::new("notify_keys");
/// `session -> state row` (ended and purged sessions: CRC-32C, version, state, session,
/// times, last seq, frames).
pub const SESSIONS: TableDefinition<'_, u128, &[u8]> = TableDefinition::new("notify_sessions");
/// `(class, time, session) -> ()`: the session rows ordered for purging (0 purging, 1
/// ended, 2 purged).
pub const RETENTION: TableDefinition<'_, (u8, i128, u128), ()> =
    TableDefinition::new("notify_retention");
/// `name -> value`: the format version.
pub const META: TableDefinition<'_, &str, u64> = TableDefinition::new("notify_journal_meta");

/// Why damaging a file failed (the file is not what the damage expected).
#[derive(Debug, thiserror::Error)]
#[error("tamper: {0}")]
pub struct TamperError(String);

impl TamperError {
    /// A failure described by `message`, for damage written by a test's own closure.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

fn err(context: &str, e: impl std::fmt::Display) -> TamperError {
    TamperError(format!("{context}: {e}"))
}

/// Runs `f` in a write transaction of the raw redb file at `path` (no journal may have
/// it open) and commits.
///
/// # Errors
///
/// Any redb failure, or `f`'s.
pub fn with_txn(
    path: &Path,
    f: impl FnOnce(&redb::WriteTransaction) -> Result<(), TamperError>,
) -> Result<(), TamperError> {
    let db = redb::Database::open(path).map_err(|e| err("open", e))?;
    let txn = db.begin_write().map_err(|e| err("begin write", e))?;
    f(&txn)?;
    txn.commit().map_err(|e| err("commit", e))
}

/// The log position of frame `seq` of `session` (its positions entry, or its entry in
/// the log's tail).
///
/// # Errors
///
/// No such frame, or a redb failure.
pub fn position(txn: &redb::WriteTransaction, session: u128, seq: u64) -> Result<u64, TamperError> {
    if let Some(pos) = txn
        .open_table(POSITIONS)
        .map_err(|e| err("open positions", e))?
        .get((session, seq))
        .map_err(|e| err("read positions", e))?
    {
        return Ok(pos.value());
    }
    let tail = txn.open_table(TAIL).map_err(|e| err("open tail", e))?;
    for entry in tail.iter().map_err(|e| err("read tail", e))? {
        let (k, v) = entry.map_err(|e| err("read tail entry", e))?;
        if v.value() == (session, seq) {
            return Ok(k.value());
        }
    }
    Err(TamperError(format!(
        "no frame {seq} of {}",
        Uuid::from_u128(session)
    )))
}

/// Moves `session`'s positions entries from `from_seq` on back into the log's tail:
/// the state a kill leaves before the writer folds them (a valid file, not damage), so
/// that a test can damage the tail.
///
/// # Errors
///
/// A redb failure.
pub fn unfold(path: &Path, session: u128, from_seq: u64) -> Result<(), TamperError> {
    with_txn(path, |txn| {
        let mut positions = txn
            .open_table(POSITIONS)
            .map_err(|e| err("open positions", e))?;
        let mut tail = txn.open_table(TAIL).map_err(|e| err("open tail", e))?;
        let moved: Vec<(u64, u64)> = positions
            .range((session, from_seq)..=(session, u64::MAX))
            .map_err(|e| err("read positions", e))?
            .map(|entry| entry.map(|(k, v)| (k.value().1, v.value())))
            .collect::<Result<_, _>>()
            .map_err(|e| err("read position", e))?;
        for (seq, pos) in moved {
            positions
                .remove((session, seq))
                .map_err(|e| err("remove position", e))?;
            tail.insert(pos, (session, seq))
                .map_err(|e| err("write tail", e))?;
        }
        Ok(())
    })
}

/// Rewrites the stored bytes of frame `seq` of `session` with `edit`; with `reseal`
/// the frame's checksum is recomputed afterwards (damage the checksum cannot see).
///
/// # Errors
///
/// No such frame, or a redb failure.
pub fn edit_frame(
    path: &Path,
    session: u128,
    seq: u64,
    reseal: bool,
    edit: impl FnOnce(&mut Vec<u8>),
) -> Result<(), TamperError> {
    with_txn(path, |txn| {
        let pos = position(txn, session, seq)?;
        let mut log = txn.open_table(LOG).map_err(|e| err("open log", e))?;
        let mut bytes = log
            .get(pos)
            .map_err(|e| err("read log", e))?
            .map(|g| g.value().to_vec())
            .ok_or_else(|| TamperError(format!("no frame at position {pos}")))?;
        edit(&mut bytes);
        if reseal && bytes.len() >= 4 {
            let crc = crc32c::crc32c(&bytes[4..]);
            bytes[..4].copy_from_slice(&crc.to_be_bytes());
        }
        log.insert(pos, bytes.as_slice())
            .map_err(|e| err("write log", e))?;
        Ok(())
    })
}

/// The format-1 tables (the first release's layout): `(session, seq) -> record` (its
/// canonical JSON, `JournalRecord::encode`), `(session, key) -> seq` and
/// `session -> last seq`; [`META`] holds `format_version -> 1`.
pub mod format1 {
    use redb::TableDefinition;

    /// `(session, seq) -> encoded record`.
    pub const FRAMES: TableDefinition<'_, (u128, u64), &[u8]> =
        TableDefinition::new("notify_journal_frames");
    /// `(session, key) -> seq`: the idempotency index.
    pub const INDEX: TableDefinition<'_, (u128, u128), u64> =
        TableDefinition::new("notify_journal_index");
    /// `session -> last seq`.
    pub const HEADS: TableDefinition<'_, u128, u64> = TableDefinition::new("notify_journal_heads");
}

/// Writes a new format-1 journal at `path` (which must not exist) holding `frames`,
/// each `(session, seq, record)`, as the format-1 build laid them out: frames, index
/// entries and heads, and `format_version` 1, in one transaction; the file is closed
/// cleanly.
///
/// # Errors
///
/// A redb failure.
pub fn write_format_1(
    path: &Path,
    frames: &[(SessionId, u64, JournalRecord)],
) -> Result<(), TamperError> {
    let db = redb::Database::create(path).map_err(|e| err("create", e))?;
    let txn = db.begin_write().map_err(|e| err("begin write", e))?;
    {
        let mut meta = txn.open_table(META).map_err(|e| err("open meta", e))?;
        meta.insert("format_version", 1)
            .map_err(|e| err("write meta", e))?;
        let mut table = txn
            .open_table(format1::FRAMES)
            .map_err(|e| err("open frames", e))?;
        let mut index = txn
            .open_table(format1::INDEX)
            .map_err(|e| err("open index", e))?;
        let mut heads = txn
            .open_table(format1::HEADS)
            .map_err(|e| err("open heads", e))?;
        for (session, seq, record) in frames {
            let s = session.as_uuid().as_u128();
            table
                .insert((s, *seq), record.encode().as_slice())
                .map_err(|e| err("write frame", e))?;
            index
                .insert((s, record.key().as_u128()), *seq)
                .map_err(|e| err("write index", e))?;
            let head = heads
                .get(s)
                .map_err(|e| err("read head", e))?
                .map_or(0, |g| g.value());
            heads
                .insert(s, head.max(*seq))
                .map_err(|e| err("write head", e))?;
        }
    }
    txn.commit().map_err(|e| err("commit", e))
}

/// Replaces the stored bytes of format-1 frame `seq` of `session` with `bytes`.
///
/// # Errors
///
/// No such frame, or a redb failure.
pub fn replace_format_1_frame(
    path: &Path,
    session: SessionId,
    seq: u64,
    bytes: &[u8],
) -> Result<(), TamperError> {
    with_txn(path, |txn| {
        let mut frames = txn
            .open_table(format1::FRAMES)
            .map_err(|e| err("open frames", e))?;
        let key = (session.as_uuid().as_u128(), seq);
        if frames.get(key).map_err(|e| err("read frame", e))?.is_none() {
            return Err(TamperError(format!("no frame {seq} of {session}")));
        }
        frames
            .insert(key, bytes)
            .map_err(|e| err("write frame", e))?;
        Ok(())
    })
}

/// The SHA-256 of the file at `path`, in hex: what a test compares to show a file was
/// left exactly as it was.
///
/// # Errors
///
/// The file cannot be read.
pub fn sha256_file(path: &Path) -> Result<String, TamperError> {
    use sha2::Digest as _;
    let bytes = std::fs::read(path).map_err(|e| err("read", e))?;
    Ok(sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// A [`RedbJournal`] on a file that [`Tamper`] damages between operations: it closes
/// the journal, edits the file and opens it again.
#[derive(Debug)]
pub struct RedbTamper {
    path: PathBuf,
    options: RedbOptions,
    /// The first opening; each damage links the next after the newest.
    first: Opening,
    /// One damage at a time.
    damaging: Mutex<()>,
}

/// One opening of the file. The openings stay linked (closed ones answer `Closed`), so
/// the newest is lent out by reference for as long as the tamper lives.
#[derive(Debug)]
struct Opening {
    journal: RedbJournal,
    /// The reopen after this opening was damaged failed: `journal` is closed.
    failed: bool,
    next: OnceLock<Box<Opening>>,
}

impl Opening {
    fn new(journal: RedbJournal, failed: bool) -> Self {
        Self {
            journal,
            failed,
            next: OnceLock::new(),
        }
    }
}

impl RedbTamper {
    /// Opens (creating) the journal at `path`.
    ///
    /// # Errors
    ///
    /// As [`RedbJournal::open`].
    pub fn open(path: impl Into<PathBuf>, options: RedbOptions) -> Result<Self, OpenError> {
        let path = path.into();
        let journal = RedbJournal::open(&path, options.clone())?;
        Ok(Self {
            path,
            options,
            first: Opening::new(journal, false),
            damaging: Mutex::new(()),
        })
    }

    fn newest(&self) -> &Opening {
        let mut opening = &self.first;
        while let Some(next) = opening.next.get() {
            opening = next;
        }
        opening
    }

    /// The journal as it is now (reopened after each damage).
    ///
    /// # Errors
    ///
    /// The reopen after a damage failed.
    pub fn journal(&self) -> Result<RedbJournal, TamperError> {
        let newest = self.newest();
        if newest.failed {
            return Err(TamperError("the journal did not reopen".to_owned()));
        }
        Ok(newest.journal.clone())
    }

    fn damage(
        &self,
        edit: impl FnOnce(&Path) -> Result<(), TamperError>,
    ) -> Result<(), TamperError> {
        let _one = self.damaging.lock().unwrap_or_else(PoisonError::into_inner);
        let newest = self.newest();
        newest.journal.close();
        let edited = edit(&self.path);
        let (next, reopened) = match RedbJournal::open(&self.path, self.options.clone()) {
            Ok(journal) => (Opening::new(journal, false), Ok(())),
            Err(e) => (
                Opening::new(newest.journal.clone(), true),
                Err(err("reopen", e)),
            ),
        };
        // Damages are serialised, so the newest has no next yet.
        let _ = newest.next.set(Box::new(next));
        reopened?;
        edited
    }
}

impl Tamper for RedbTamper {
    fn damage_frame(&self, session: SessionId, seq: u64) -> BoxFuture<'_, Result<(), String>> {
        let s = session.as_uuid().as_u128();
        let done = self.damage(|path| {
            edit_frame(path, s, seq, false, |bytes| {
                if let Some(b) = bytes.last_mut() {
                    *b ^= 0x01;
                }
            })
        });
        Box::pin(std::future::ready(done.map_err(|e| e.to_string())))
    }

    fn remove_frame(&self, session: SessionId, seq: u64) -> BoxFuture<'_, Result<(), String>> {
        let s = session.as_uuid().as_u128();
        let done = self.damage(|path| {
            with_txn(path, |txn| {
                let pos = position(txn, s, seq)?;
                txn.open_table(LOG)
                    .map_err(|e| err("open log", e))?
                    .remove(pos)
                    .map_err(|e| err("remove frame", e))?;
                Ok(())
            })
        });
        Box::pin(std::future::ready(done.map_err(|e| e.to_string())))
    }
}

impl JournalReadLayer for RedbTamper {
    type Inner = RedbJournal;

    fn inner(&self) -> &RedbJournal {
        &self.newest().journal
    }
}

impl JournalLayer for RedbTamper {}

/// The largest page order redb 4.6 follows (`MAX_MAX_PAGE_ORDER`): a page of 2^20
/// pages, 4 GiB with 4 KiB pages.
pub const MAX_PAGE_ORDER: u8 = 20;

/// Sets the order of every child page number in every branch page of the redb file at
/// `path` to `order`, leaving the checksums as they were: the damaged page order of
/// `notify-journal/docs/design.md` ("What remains"). A read that follows such a
/// pointer asks redb for a page of 2^`order` pages, and redb 4.6 allocates that much
/// before it finds the range beyond the file's end. Returns how many page numbers were
/// changed.
///
/// A branch page is found by its layout (redb 4.6's `BranchAccessor`): at a page
/// boundary, the type byte 2, then (after a padding byte) a key count, one 16-byte checksum per child and then one
/// 8-byte page number per child, each with its reserved bits clear. Freed branch pages
/// that still look like one are changed too (harmless: nothing reads them).
///
/// # Errors
///
/// The file cannot be read or written, is not a redb file, or holds no branch page
/// (write more into it first).
pub fn damage_branch_page_orders(path: &Path, order: u8) -> Result<usize, TamperError> {
    const MAGIC: &[u8] = b"redb\x1A\x0A\xA9\x0D\x0A";
    // The page size's offset in the header (after the magic, the god byte, 2 padding).
    const PAGE_SIZE_AT: usize = 12;
    const BRANCH: u8 = 2;
    const CHECKSUM: usize = 16;
    const PAGE_NUMBER: usize = 8;
    // Page index (20 bits), region (20 bits), 19 reserved bits, order (5 bits).
    const RESERVED: u64 = ((1 << 19) - 1) << 40;
    let mut bytes = std::fs::read(path).map_err(|e| err("read", e))?;
    if !bytes.starts_with(MAGIC) {
        return Err(TamperError("not a redb file".to_owned()));
    }
    let page_size = bytes
        .get(PAGE_SIZE_AT..PAGE_SIZE_AT + 4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes)
        .and_then(|s| usize::try_from(s).ok())
        .filter(|s| s.is_power_of_two() && *s >= 512)
        .ok_or_else(|| TamperError("no page size in the header".to_owned()))?;
    let mut changed = 0;
    for page in bytes.chunks_exact_mut(page_size) {
        if page[0] != BRANCH {
            continue;
        }
        let children = usize::from(u16::from_le_bytes([page[2], page[3]])) + 1;
        let numbers = 8 + CHECKSUM * children;
        let end = numbers + PAGE_NUMBER * children;
        if children < 2 || end > page_size {
            continue;
        }
        let number = |page: &[u8], i: usize| {
            let at = numbers + PAGE_NUMBER * i;
            let mut raw = [0; PAGE_NUMBER];
            raw.copy_from_slice(&page[at..at + PAGE_NUMBER]);
            u64::from_le_bytes(raw)
        };
        if (0..children).any(|i| number(page, i) & RESERVED != 0) {
            continue;
        }
        for i in 0..children {
            let damaged = (number(page, i) & !(0b1_1111 << 59)) | (u64::from(order) << 59);
            let at = numbers + PAGE_NUMBER * i;
            page[at..at + PAGE_NUMBER].copy_from_slice(&damaged.to_le_bytes());
            changed += 1;
        }
    }
    if changed == 0 {
        return Err(TamperError("the file holds no branch page".to_owned()));
    }
    std::fs::write(path, &bytes).map_err(|e| err("write", e))?;
    Ok(changed)
}
