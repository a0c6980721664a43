//! Opening a [`RedbJournal`]: the file opened (or a custom backend), the optional full
//! verify at open, and the writer and scrub threads started.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use redb::{Database, StorageBackend};

use super::{Inner, RedbJournal};
use crate::error::{OpenError, StorageError};
use crate::redb::census;
use crate::redb::check::scrub;
use crate::redb::check::verify;
use crate::redb::file::open;
use crate::redb::options;
use crate::redb::options::RedbOptions;
use crate::redb::writer::Queue;
use crate::redb::writer::lead::Lead;

/// How many problems a refused verify at open names.
const DEFAULT_OPEN_PROBLEMS: usize = 8;

/// What the label of a journal opened on a custom backend is.
const BACKEND_LABEL: &str = "<custom storage backend>";

impl RedbJournal {
    /// Opens the journal at `path`, creating the file if it is missing. After a crash,
    /// redb's recovery runs first. What else opening reads is
    /// [`RedbOptions::verify_on_open`]'s choice: by default
    /// ([`RedbVerifyOnOpen::Background`](options::RedbVerifyOnOpen::Background)) only the
    /// metadata, never the log, and a background scrub then checks the journal while it
    /// runs (see [`scrub_status`](Self::scrub_status)); with
    /// [`RedbVerifyOnOpen::Pages`](options::RedbVerifyOnOpen::Pages) redb checks every page
    /// against its checksum first. A format-1 file is upgraded in place
    /// first (`docs/design.md`), after a read-only check of everything the upgrade will
    /// move: a damaged format-1 file is refused before anything is written.
    ///
    /// # Errors
    ///
    /// [`OpenError::AlreadyOpen`] if another handle has the file open;
    /// [`OpenError::NotAJournal`] for a file that is not a journal (an empty file
    /// included); [`OpenError::Damaged`] for a journal cut short or failing its checks;
    /// [`OpenError::UpgradeRefused`] for a format-1 journal whose check before the
    /// upgrade found damage (the file is left as it was, naming each damaged frame);
    /// [`OpenError::UnsupportedFormatVersion`] / [`OpenError::UnsupportedContent`] for a
    /// journal of a later build; [`OpenError::Storage`] for I/O and storage failures.
    pub fn open(path: impl AsRef<Path>, options: RedbOptions) -> Result<Self, OpenError> {
        let path = path.as_ref().to_path_buf();
        let db = open::open_file(&path, &options)?;
        Self::start(db, path, options)
    }

    /// Opens (or initialises) a journal on a custom redb storage backend, for fault
    /// injection in tests. Errors name the path `<custom storage backend>`.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open).
    pub fn open_with_backend(
        backend: impl StorageBackend,
        options: RedbOptions,
    ) -> Result<Self, OpenError> {
        let path = PathBuf::from(BACKEND_LABEL);
        let db = open::contain(&path, || {
            let db = open::builder(&options)
                .create_with_backend(backend)
                .map_err(|e| open::map_database_error(&path, e))?;
            open::prepare(&db, &path)?;
            Ok(db)
        })?;
        Self::start(db, path, options)
    }

    fn start(db: Database, path: PathBuf, options: RedbOptions) -> Result<Self, OpenError> {
        if options.verify_on_open == options::RedbVerifyOnOpen::Full {
            let report = open::contain(&path, || {
                verify::logical(&db, DEFAULT_OPEN_PROBLEMS).map_err(|e| OpenError::Damaged {
                    path: path.clone(),
                    reason: format!("the verify at open could not read it: {e}"),
                })
            })?;
            if !report.is_clean() {
                return Err(OpenError::Damaged {
                    path,
                    reason: format!("the verify at open found: {report}"),
                });
            }
        }
        let db = Arc::new(db);
        let queue = Arc::new(Queue::new());
        let census = options
            .confirm_misses
            .then(|| Arc::new(census::Census::new(options.census_max_keys)));
        let lead = Lead::new(
            Arc::clone(&db),
            Arc::clone(&queue),
            options.clone(),
            census.clone(),
        );
        let writer = {
            let lead = Arc::clone(&lead);
            std::thread::Builder::new()
                .name("notify-journal-writer".into())
                .spawn(move || lead.run())
                .map_err(|e| OpenError::Storage {
                    path: path.clone(),
                    source: StorageError::new("spawn the writer thread", e),
                })?
        };
        let scrub = match options.verify_on_open {
            options::RedbVerifyOnOpen::Background => match scrub::Scrub::start(
                Arc::clone(&db),
                Arc::clone(&queue) as Arc<dyn scrub::Poison>,
                options.scrub_interval,
                options.scrub_pace,
            ) {
                Ok(scrub) => Some(scrub),
                Err(e) => {
                    // The writer drains and exits once closed: wait for it, so its hold
                    // on the database ends before the open fails.
                    queue.close();
                    let _ = writer.join();
                    return Err(OpenError::Storage {
                        path: path.clone(),
                        source: StorageError::new("spawn the scrub thread", e),
                    });
                }
            },
            _ => None,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                path,
                db: RwLock::new(Some(db)),
                closing: std::sync::atomic::AtomicBool::new(false),
                queue,
                lead,
                writer: Mutex::new(Some(writer)),
                max_record_bytes: options.max_record_bytes,
                census,
                scrub,
                leases: super::lease::RedbLeases::new(),
            }),
        })
    }
}
