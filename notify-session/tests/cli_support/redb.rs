//! A redb journal file made by the library, and the library's answers about it.

use std::path::{Path, PathBuf};

use notify_journal::{RedbJournal, RedbOptions};

use super::{Fixture, populate, truth};

/// A journal file written through the library, closed.
pub(crate) fn journal_file(dir: &Path) -> (PathBuf, Fixture) {
    let path = dir.join("journal.redb");
    let journal = RedbJournal::open(&path, RedbOptions::default()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let fixture = rt.block_on(populate(&journal));
    journal.close();
    (path, fixture)
}

pub(crate) fn library_truth(
    path: &Path,
) -> std::collections::BTreeMap<notify_types::SessionId, super::Truth> {
    let journal = RedbJournal::open(path, RedbOptions::default()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let truth = rt.block_on(truth(&journal));
    journal.close();
    truth
}
