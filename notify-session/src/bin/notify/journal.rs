//! Where the journal is (a redb file or a PostgreSQL schema) and opening it: read-only
//! for the read commands, for writing for import and retention.

use std::path::PathBuf;

use notify_session::notify_journal::{
    JournalBackend, JournalRead, MigrationMode, PgJournal, PgOptions, RedbJournal, RedbOptions,
    RedbReader, RedbVerifyOnOpen,
};
use notify_session::notify_types::SessionId;

use crate::error::{CliError, Exit};

/// The schema `--schema` defaults to (the journal's own default).
pub(crate) const DEFAULT_SCHEMA: &str = "notify_journal";

/// A journal's location.
#[derive(Debug, Clone)]
pub(crate) enum Location {
    /// A redb journal file.
    File(PathBuf),
    /// A PostgreSQL journal: the connection string (never printed) and the schema.
    Postgres { conninfo: String, schema: String },
}

impl Location {
    /// How messages name it.
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::File(p) => p.display().to_string(),
            Self::Postgres { schema, .. } => format!("PostgreSQL schema {schema}"),
        }
    }
}

/// An open journal.
pub(crate) enum Journal {
    /// A redb file opened read-only.
    Reader(RedbReader),
    /// A redb file opened for writing.
    Writer(RedbJournal),
    /// A PostgreSQL journal.
    Postgres(Box<PgJournal>),
}

/// PostgreSQL options: the schema, one writer, the password from the environment
/// (`credentials.rs`), and (for reads) nothing created or migrated.
pub(crate) fn pg_options(schema: &str, write: bool) -> PgOptions {
    let options = crate::credentials::with_password(PgOptions::default().schema(schema).writers(1));
    if write {
        options
    } else {
        options.migration(MigrationMode::ValidateOnly)
    }
}

impl Journal {
    /// Opens the journal without changing it: a redb file read-only (its bytes and
    /// modification time stay as they are), a PostgreSQL schema without migrating it.
    pub(crate) async fn open_read(at: &Location) -> Result<Self, CliError> {
        match at {
            Location::File(path) => RedbReader::open(path)
                .map(Self::Reader)
                .map_err(|e| CliError::open(path, &e)),
            Location::Postgres { conninfo, schema } => {
                PgJournal::connect(conninfo, pg_options(schema, false))
                    .await
                    .map(|p| Self::Postgres(Box::new(p)))
                    .map_err(|e| CliError::postgres(schema, &e))
            }
        }
    }

    /// Opens the journal for writing: a redb file is created when missing, a
    /// PostgreSQL schema created or migrated.
    pub(crate) async fn open_write(at: &Location) -> Result<Self, CliError> {
        match at {
            // A short-lived command would rarely finish a background scrub pass, so it
            // checks every page at open instead, as `compact` does.
            Location::File(path) => RedbJournal::open(
                path,
                RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Pages),
            )
            .map(Self::Writer)
            .map_err(|e| CliError::open(path, &e)),
            Location::Postgres { conninfo, schema } => {
                PgJournal::connect(conninfo, pg_options(schema, true))
                    .await
                    .map(|p| Self::Postgres(Box::new(p)))
                    .map_err(|e| CliError::postgres(schema, &e))
            }
        }
    }

    /// The journal's reads, whichever way it was opened.
    pub(crate) fn reader(&self) -> &dyn JournalRead {
        match self {
            Self::Reader(r) => r,
            Self::Writer(w) => w,
            Self::Postgres(p) => &**p,
        }
    }

    /// The PostgreSQL journal, when that is what was opened (its leases are shown).
    pub(crate) fn postgres(&self) -> Option<&PgJournal> {
        match self {
            Self::Postgres(p) => Some(&**p),
            _ => None,
        }
    }

    /// The journal as a backend that writes; `None` when it was opened read-only.
    pub(crate) fn writer(&self) -> Option<&dyn JournalBackend> {
        match self {
            Self::Reader(_) => None,
            Self::Writer(w) => Some(w),
            Self::Postgres(p) => Some(&**p),
        }
    }

    /// Closes it: waits for queued appends and releases the file or connections.
    pub(crate) async fn close(self) {
        match self {
            Self::Reader(r) => drop(r),
            Self::Writer(w) => w.close(),
            Self::Postgres(p) => p.close().await,
        }
    }
}

/// Pages through every session with frames, in ID order, a bounded page at a time.
#[derive(Default)]
pub(crate) struct SessionPages {
    after: Option<SessionId>,
    done: bool,
}

impl SessionPages {
    /// The next page, or `None` after the last.
    pub(crate) async fn next(
        &mut self,
        journal: &Journal,
        what: &str,
    ) -> Result<Option<Vec<SessionId>>, CliError> {
        const PAGE: usize = 512;
        if self.done {
            return Ok(None);
        }
        let page = journal
            .reader()
            .sessions_after(self.after, PAGE)
            .await
            .map_err(|e| CliError::journal(what, &e))?;
        self.done = page.len() < PAGE;
        self.after = page.last().copied();
        Ok(if page.is_empty() { None } else { Some(page) })
    }
}

/// The pages of the sessions a command covers: the one named (which must have
/// frames), or every session.
pub(crate) async fn selected(
    journal: &Journal,
    what: &str,
    session: Option<SessionId>,
) -> Result<Selection, CliError> {
    let Some(session) = session else {
        return Ok(Selection::All(SessionPages::default()));
    };
    let head = journal
        .reader()
        .last_seq(session)
        .await
        .map_err(|e| CliError::journal(what, &e))?;
    if head == 0 {
        return Err(CliError::new(
            Exit::NotFound,
            format!("{what} has no session {session}"),
        ));
    }
    Ok(Selection::One(Some(session)))
}

/// The sessions a command covers.
pub(crate) enum Selection {
    /// One session (taken once).
    One(Option<SessionId>),
    /// Every session.
    All(SessionPages),
}

impl Selection {
    /// The next page of sessions, or `None` after the last.
    pub(crate) async fn next(
        &mut self,
        journal: &Journal,
        what: &str,
    ) -> Result<Option<Vec<SessionId>>, CliError> {
        match self {
            Self::One(s) => Ok(s.take().map(|s| vec![s])),
            Self::All(pages) => pages.next(journal, what).await,
        }
    }
}
