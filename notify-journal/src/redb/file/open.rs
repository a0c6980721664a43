//! Opening a journal file: creating it atomically, refusing what is not a journal,
//! telling a damaged journal from a foreign file, checking or laying out the tables,
//! upgrading older formats, and containing any panic of the storage engine.

use std::io::Read;
use std::path::{Path, PathBuf};

use redb::{Database, DatabaseError, ReadableDatabase, TableHandle};

use crate::error::{OpenError, StorageError};
use crate::redb::file::upgrade;
use crate::redb::format::{
    FORMAT_KEY, FORMAT_VERSION, KEYS, LOG, META, POSITIONS, RETENTION, SESSIONS, TAIL,
    UPGRADING_KEY, v1,
};
use crate::redb::options::{RedbOptions, RedbVerifyOnOpen};

/// The first bytes of every redb file.
const REDB_MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];

/// Opens (creating if missing) the redb database at `path`, ready for the writer: the
/// layout checked or laid out, older formats upgraded.
pub(crate) fn open_file(path: &Path, options: &RedbOptions) -> Result<Database, OpenError> {
    remove_stale_creations(path);
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create_atomically(path, options)?,
        Err(e) => return Err(io_error(path, "read the file's metadata", e)),
        Ok(m) if m.is_dir() => {
            return Err(OpenError::NotAJournal {
                path: path.to_path_buf(),
                reason: "a directory".to_owned(),
            });
        }
        Ok(m) if m.len() == 0 => {
            return Err(OpenError::NotAJournal {
                path: path.to_path_buf(),
                reason: "an empty file (a journal is never empty; it is not initialised in place)"
                    .to_owned(),
            });
        }
        Ok(_) => {}
    }
    contain(path, || {
        let checked = check_before_upgrade(path)?;
        let db = builder(options)
            .open(path)
            .map_err(|e| map_database_error(path, e))?;
        prepare_with(&db, path, true, checked)?;
        Ok(db)
    })
}

/// Runs `f`, turning a panic of the storage engine (a damaged page it trusted) into
/// [`OpenError::Damaged`].
pub(crate) fn contain<T>(
    path: &Path,
    f: impl FnOnce() -> Result<T, OpenError>,
) -> Result<T, OpenError> {
    crate::redb::contain::contain(f).unwrap_or_else(|panic| {
        Err(OpenError::Damaged {
            path: path.to_path_buf(),
            reason: format!("the storage engine failed reading it ({panic})"),
        })
    })
}

pub(crate) fn builder(options: &RedbOptions) -> redb::Builder {
    let mut b = Database::builder();
    b.set_cache_size(options.cache_size);
    b.set_check_integrity_on_open(matches!(
        options.verify_on_open,
        RedbVerifyOnOpen::Pages | RedbVerifyOnOpen::Full
    ));
    b
}

fn io_error(path: &Path, context: &'static str, e: std::io::Error) -> OpenError {
    OpenError::Storage {
        path: path.to_path_buf(),
        source: StorageError::new(context, e),
    }
}

/// The prefix of the staging names of journals being created at `path` (the creator's
/// pid and a timestamp follow).
fn staging_prefix(path: &Path) -> Option<String> {
    path.file_name()
        .map(|n| format!(".{}.creating-", n.to_string_lossy()))
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Removes staging files a crashed creator left beside `path`: those whose process is
/// gone. Whether a process is alive is read from `/proc`; where there is no `/proc`,
/// nothing is removed. Best effort: a failure here never fails the open.
fn remove_stale_creations(path: &Path) {
    let (Some(prefix), true) = (staging_prefix(path), Path::new("/proc/self").exists()) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(parent_dir(path)) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Lays out a new journal beside `path` and links it into place, so a crash during
/// creation never leaves a half-written file at `path`. Linking fails if `path` appeared
/// meanwhile (another creator won); then that file is used.
fn create_atomically(path: &Path, options: &RedbOptions) -> Result<(), OpenError> {
    let io = |context: &'static str| move |e: std::io::Error| io_error(path, context, e);
    let dir = parent_dir(path);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let tmp = dir.join(format!(
        "{}{}-{nanos}",
        staging_prefix(path).unwrap_or_default(),
        std::process::id()
    ));
    let result = (|| {
        {
            let db = builder(options)
                .create(&tmp)
                .map_err(|e| map_database_error(path, e))?;
            prepare(&db, path)?;
        }
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(io("sync the new journal"))?;
        match std::fs::hard_link(&tmp, path) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(io("link the new journal into place")(e));
            }
            _ => {}
        }
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(io("sync the journal's directory"))
    })();
    // The temporary name is only a staging name; losing it is harmless.
    let _ = std::fs::remove_file(&tmp);
    result
}

/// Whether the file at `path` starts like a redb file.
fn has_redb_magic(path: &Path) -> bool {
    let mut head = [0u8; REDB_MAGIC.len()];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| head == REDB_MAGIC)
}

pub(crate) fn map_database_error(path: &Path, e: DatabaseError) -> OpenError {
    let path = path.to_path_buf();
    let damaged_or_foreign = |path: PathBuf, what: String| {
        if has_redb_magic(&path) {
            OpenError::Damaged { path, reason: what }
        } else {
            OpenError::NotAJournal {
                path,
                reason: format!("not a redb file ({what})"),
            }
        }
    };
    match e {
        DatabaseError::DatabaseAlreadyOpen => OpenError::AlreadyOpen { path },
        DatabaseError::UpgradeRequired(v) => OpenError::NotAJournal {
            path,
            reason: format!("a redb file of old file format {v}"),
        },
        DatabaseError::Storage(redb::StorageError::Corrupted(reason)) => {
            damaged_or_foreign(path, reason)
        }
        DatabaseError::RepairAborted => OpenError::Damaged {
            path,
            reason: "redb's repair was aborted".to_owned(),
        },
        // redb reports a wrong magic number as invalid data, and a file cut short as an
        // unexpected end.
        DatabaseError::Storage(redb::StorageError::Io(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof
            ) =>
        {
            damaged_or_foreign(path, e.to_string())
        }
        other => OpenError::Storage {
            path,
            source: StorageError::new("open the redb file", other),
        },
    }
}

/// What [`layout`] found in a redb database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// No table at all: a database a journal can be laid out in.
    Fresh,
    /// A journal of format 1, to be upgraded.
    Format1,
    /// A journal whose upgrade from format 1 is under way.
    Upgrading,
    /// A journal of format 2 (no tail): read as it is, upgraded by a writable open.
    Format2,
    /// A journal of this build's format.
    Current,
}

/// Reads the metadata and the table list (nothing else) and says what the database is,
/// or why it is not a journal this build opens.
pub(crate) fn layout(db: &impl ReadableDatabase, path: &Path) -> Result<Layout, OpenError> {
    let fail = |context: &'static str| {
        let path = path.to_path_buf();
        move |e: redb::Error| OpenError::Storage {
            path: path.clone(),
            source: StorageError::new(context, e),
        }
    };
    let not_a_journal = |reason: &str| OpenError::NotAJournal {
        path: path.to_path_buf(),
        reason: reason.to_owned(),
    };
    let damaged = |reason: &str| OpenError::Damaged {
        path: path.to_path_buf(),
        reason: reason.to_owned(),
    };
    let txn = db.begin_read().map_err(|e| fail("begin read")(e.into()))?;
    let tables: Vec<String> = txn
        .list_tables()
        .map_err(|e| fail("list tables")(e.into()))?
        .map(|h| h.name().to_owned())
        .collect();
    let has = |name: &str| tables.iter().any(|t| t == name);
    let multimaps = txn
        .list_multimap_tables()
        .map_err(|e| fail("list tables")(e.into()))?
        .count();
    if !has(META.name()) {
        return if tables.is_empty() && multimaps == 0 {
            Ok(Layout::Fresh)
        } else {
            Err(not_a_journal("a redb database without journal metadata"))
        };
    }
    let meta = txn.open_table(META).map_err(|e| match e {
        redb::TableError::TableTypeMismatch { .. } => {
            not_a_journal("its metadata table has the wrong type")
        }
        other => fail("open metadata")(other.into()),
    })?;
    let version = meta
        .get(FORMAT_KEY)
        .map_err(|e| fail("read format version")(e.into()))?
        .map(|g| g.value());
    let upgrading = meta
        .get(UPGRADING_KEY)
        .map_err(|e| fail("read upgrade state")(e.into()))?
        .is_some();
    let has_v1 = || [v1::FRAMES.name(), v1::INDEX.name(), v1::HEADS.name()].map(has) == [true; 3];
    match version {
        Some(1) if !has_v1() => Err(damaged("a format-1 journal table is missing")),
        Some(1) => Ok(Layout::Format1),
        // A file mid-upgrade from format 1 says 2 if a format-2 build began the upgrade.
        Some(v @ (2 | FORMAT_VERSION)) => {
            if [LOG.name(), POSITIONS.name(), KEYS.name(), SESSIONS.name()]
                .iter()
                .any(|t| !has(t))
            {
                return Err(damaged("a journal table is missing"));
            }
            // The rows of `notify_sessions` (ended and purged sessions) are honoured
            // where they are read (`format/session_row.rs`); a row of a later version is refused
            // there. Builds before session ends refuse a file with any row.
            if upgrading {
                return if has_v1() {
                    Ok(Layout::Upgrading)
                } else {
                    // The old tables go only in the step that clears the mark: a missing
                    // one here is damage, never "nothing left to move".
                    Err(damaged("a format-1 table is missing mid-upgrade"))
                };
            }
            if v == 2 {
                Ok(Layout::Format2)
            } else if has(TAIL.name()) {
                Ok(Layout::Current)
            } else {
                Err(damaged("the log's tail table is missing"))
            }
        }
        Some(found) => Err(OpenError::UnsupportedFormatVersion {
            path: path.to_path_buf(),
            found,
            supported: FORMAT_VERSION,
        }),
        None => Err(not_a_journal("its metadata has no format version")),
    }
}

/// [`layout`] of a database that must already be a journal: a fresh (empty) one is
/// refused as [`OpenError::NotAJournal`], never [`Layout::Fresh`].
pub(crate) fn journal_layout(db: &impl ReadableDatabase, path: &Path) -> Result<Layout, OpenError> {
    match layout(db, path)? {
        Layout::Fresh => Err(OpenError::NotAJournal {
            path: path.to_path_buf(),
            reason: "a redb database without journal metadata".to_owned(),
        }),
        other => Ok(other),
    }
}

/// Before a writable open of the file at `path`: when it is a journal of format 1 (or
/// mid-upgrade), checks what the upgrade will move through a read-only open, which
/// writes nothing, and refuses a damaged file ([`OpenError::UpgradeRefused`]) with it
/// untouched. `true` when the check ran and passed; `false` when it could not run
/// read-only (a file redb must recover first, or in use: the writable open says so) or
/// there is nothing to upgrade.
pub(crate) fn check_before_upgrade(path: &Path) -> Result<bool, OpenError> {
    let Ok(db) = redb::Builder::new().open_read_only(path) else {
        return Ok(false);
    };
    match layout(&db, path) {
        Ok(Layout::Format1 | Layout::Upgrading) => {
            upgrade::refuse_damage(&db, path)?;
            Ok(true)
        }
        // Refusals are the writable open's to give (it runs redb's checks first).
        _ => Ok(false),
    }
}

/// Checks the metadata of an existing journal (upgrading an older format), or lays out
/// a fresh one in an empty database. Reads only the metadata and table list (an upgrade
/// reads the old log: once to check it, once to move it).
pub(crate) fn prepare(db: &Database, path: &Path) -> Result<(), OpenError> {
    prepare_with(db, path, true, false)
}

/// [`prepare`], laying out a fresh journal in an empty database only when `init`;
/// `checked` when [`upgrade::check`] already ran on this file (read-only, just before).
pub(crate) fn prepare_with(
    db: &Database,
    path: &Path,
    init: bool,
    checked: bool,
) -> Result<(), OpenError> {
    let fail = |context: &'static str| {
        let path = path.to_path_buf();
        move |e: redb::Error| OpenError::Storage {
            path: path.clone(),
            source: StorageError::new(context, e),
        }
    };
    let found = if init {
        layout(db, path)?
    } else {
        journal_layout(db, path)?
    };
    match found {
        Layout::Current => return Ok(()),
        Layout::Format1 | Layout::Upgrading => return upgrade::from_v1(db, path, checked),
        Layout::Format2 => return upgrade::from_v2(db, path),
        Layout::Fresh => {}
    }
    let txn = db
        .begin_write()
        .map_err(|e| fail("begin write")(e.into()))?;
    {
        let mut meta = txn
            .open_table(META)
            .map_err(|e| fail("create metadata")(e.into()))?;
        meta.insert(FORMAT_KEY, FORMAT_VERSION)
            .map_err(|e| fail("write format version")(e.into()))?;
        txn.open_table(LOG)
            .map_err(|e| fail("create log")(e.into()))?;
        txn.open_table(POSITIONS)
            .map_err(|e| fail("create positions")(e.into()))?;
        txn.open_table(TAIL)
            .map_err(|e| fail("create tail")(e.into()))?;
        txn.open_table(KEYS)
            .map_err(|e| fail("create keys")(e.into()))?;
        txn.open_table(SESSIONS)
            .map_err(|e| fail("create sessions")(e.into()))?;
        txn.open_table(RETENTION)
            .map_err(|e| fail("create retention")(e.into()))?;
    }
    txn.commit().map_err(|e| fail("commit layout")(e.into()))
}
