//! Offline compaction of a journal file (redb's `compact`).

use std::path::Path;

use crate::error::{OpenError, StorageError};
use crate::redb::file::open;
use crate::redb::options::{RedbOptions, RedbVerifyOnOpen};

/// What [`RedbJournal::compact_file`](crate::RedbJournal::compact_file) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactReport {
    /// The file's length before, in bytes.
    pub bytes_before: u64,
    /// The file's length after, in bytes.
    pub bytes_after: u64,
}

fn len(path: &Path) -> Result<u64, OpenError> {
    std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => OpenError::Missing {
                path: path.to_path_buf(),
            },
            _ => OpenError::Storage {
                path: path.to_path_buf(),
                source: StorageError::new("read the file's length", e),
            },
        })
}

/// Opens the journal at `path` (checked as by default), compacts it and closes it.
pub(crate) fn file(path: &Path) -> Result<CompactReport, OpenError> {
    let bytes_before = len(path)?;
    if bytes_before == 0 {
        return Err(OpenError::NotAJournal {
            path: path.to_path_buf(),
            reason: "an empty file".to_owned(),
        });
    }
    open::contain(path, || {
        let checked = open::check_before_upgrade(path)?;
        let mut db = open::builder(&RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Pages))
            .open(path)
            .map_err(|e| open::map_database_error(path, e))?;
        open::prepare_with(&db, path, false, checked)?;
        db.compact().map_err(|e| OpenError::Storage {
            path: path.to_path_buf(),
            source: StorageError::new("compact", e),
        })?;
        Ok(())
    })?;
    Ok(CompactReport {
        bytes_before,
        bytes_after: len(path)?,
    })
}
