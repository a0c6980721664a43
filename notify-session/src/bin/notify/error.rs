//! What can go wrong, as one line for a person and an exit status for a script.

use std::fmt;
use std::path::Path;

use notify_session::RestoreError;
use notify_session::notify_journal::{AppendError, JournalError, OpenError, PgOpenError};

/// The exit statuses, as `--help` documents them (`EXIT_STATUS_HELP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Success; for `verify`, a clean journal.
    Ok = 0,
    /// `verify` found problems (each one is printed).
    Problems = 1,
    /// Bad arguments (clap's own status for usage errors).
    Usage = 2,
    /// The path, the PostgreSQL schema or the session does not exist.
    NotFound = 3,
    /// The file is not a notify journal (or one of a newer build).
    NotAJournal = 4,
    /// The journal is damaged: its open or a read met damaged data, or the reader
    /// process died of a crash signal while reading a redb file (`reader.rs`).
    Damaged = 5,
    /// Another process (or handle) has the journal open.
    InUse = 6,
    /// The journal must be opened for writing once before it can be read.
    NeedsWritableOpen = 7,
    /// Refused: import into a journal that is not empty, or input that is not an
    /// export.
    Refused = 8,
    /// An I/O, storage or database failure; also a reader process killed by SIGKILL
    /// (`reader.rs`: the out-of-memory killer or a `kill -9`, not called damage).
    Failed = 9,
}

/// The exit statuses, for `--help`.
pub(crate) const EXIT_STATUS_HELP: &str = "\
Exit status:
  0  success (for verify: the journal is clean)
  1  verify found problems; each is printed with its session and seq
  2  usage error (bad arguments)
  3  not found: no file at PATH, no journal in the PostgreSQL schema, or no such session
  4  not a notify journal (or a journal of a newer build)
  5  the journal is damaged (refused at open, or a frame read is damaged; a damaged
     format-1 file is refused before its upgrade writes anything); on Unix also when
     the process a read command reads a redb file in dies of a crash signal (SIGABRT,
     SIGSEGV, SIGBUS, ...), as damage redb cannot refuse without aborting makes it
     (the message names the signal; a read stopped on request or by a limit, by
     SIGINT, SIGTERM, SIGXCPU or SIGXFSZ, ends by that same signal instead; one
     killed by SIGKILL, out of memory or by hand, exits 9)
  6  the journal is in use by another process (a running writer holds the file)
  7  the journal must be opened for writing once first (not closed cleanly, or of an
     older format): the application or `notify purge` does that; `notify verify --pages`
     checks such a file as it is, without writing to it
  8  refused: import into a journal that is not empty, or input that is not an export
  9  I/O, storage or database failure (also a read whose process was killed by
     SIGKILL: the message says so)";

/// A failure: its message (one line, printed after `notify: `) and exit status.
#[derive(Debug)]
pub(crate) struct CliError {
    pub(crate) exit: Exit,
    pub(crate) message: String,
}

impl CliError {
    pub(crate) fn new(exit: Exit, message: impl Into<String>) -> Self {
        Self {
            exit,
            message: message.into(),
        }
    }

    /// An error of a read (replay, restore, listing) of the journal `what`.
    pub(crate) fn journal(what: &str, e: &JournalError) -> Self {
        match e {
            JournalError::Purged { session } => Self::new(
                Exit::NotFound,
                format!("session {session} of {what} was purged: only its tombstone remains"),
            ),
            JournalError::Corrupt { .. } => Self::new(
                Exit::Damaged,
                format!("{what} is damaged: {} (run `notify verify`)", chain(e)),
            ),
            _ => Self::new(Exit::Failed, format!("reading {what} failed: {}", chain(e))),
        }
    }

    /// A refused open of the redb file at `path`.
    pub(crate) fn open(path: &Path, e: &OpenError) -> Self {
        let p = path.display();
        match e {
            OpenError::Missing { .. } => Self::new(Exit::NotFound, format!("{p}: no such file")),
            OpenError::AlreadyOpen { .. } => Self::new(
                Exit::InUse,
                format!(
                    "{p} is in use by another process (a running writer has the journal open); \
                     stop it, or read a copy of the file"
                ),
            ),
            OpenError::NotAJournal { reason, .. } => Self::new(
                Exit::NotAJournal,
                format!("{p} is not a notify journal ({reason})"),
            ),
            OpenError::UnsupportedFormatVersion {
                found, supported, ..
            } => Self::new(
                Exit::NotAJournal,
                format!(
                    "{p} is a notify journal of format version {found}; this notify reads \
                     version {supported}: use a newer notify"
                ),
            ),
            OpenError::UnsupportedContent { reason, .. } => Self::new(
                Exit::NotAJournal,
                format!("{p} needs a newer notify: {reason}"),
            ),
            OpenError::Damaged { reason, .. } => {
                Self::new(Exit::Damaged, format!("{p} is a damaged journal: {reason}"))
            }
            OpenError::UpgradeRefused {
                problems,
                problem_count,
                ..
            } => Self::new(
                Exit::Damaged,
                format!(
                    "{p} is a damaged journal of format 1, not upgraded (nothing was written): \
                     {}{} (`notify verify --pages` lists every problem without writing)",
                    problems
                        .first()
                        .map_or_else(|| "damaged".to_owned(), ToString::to_string),
                    match problem_count.saturating_sub(1) {
                        0 => String::new(),
                        more => format!(", and {more} more"),
                    }
                ),
            ),
            OpenError::NeedsWritableOpen { reason, .. } => Self::new(
                Exit::NeedsWritableOpen,
                format!(
                    "{p} cannot be read without writing to it: {reason} (`notify verify \
                     --pages` checks it as it is, without writing)"
                ),
            ),
            other => Self::new(Exit::Failed, format!("{p}: {}", chain(other))),
        }
    }

    /// A refused connection to the PostgreSQL journal in `schema`.
    pub(crate) fn postgres(schema: &str, e: &PgOpenError) -> Self {
        match e {
            PgOpenError::SchemaOutdated { found: 0, .. } => Self::new(
                Exit::NotFound,
                format!("PostgreSQL schema {schema} holds no notify journal"),
            ),
            PgOpenError::SchemaOutdated { found, required } => Self::new(
                Exit::NeedsWritableOpen,
                format!(
                    "the journal in PostgreSQL schema {schema} is at schema version {found}; \
                     reading it needs version {required}: a writable connect migrates it"
                ),
            ),
            PgOpenError::SchemaTooNew { found, supported } => Self::new(
                Exit::NotAJournal,
                format!(
                    "the journal in PostgreSQL schema {schema} is at schema version {found}; \
                     this notify reads up to {supported}: use a newer notify"
                ),
            ),
            other => Self::new(
                Exit::Failed,
                format!("PostgreSQL (schema {schema}): {}", chain(other)),
            ),
        }
    }

    /// A failed restore reduction of the journal `what`.
    pub(crate) fn restore(what: &str, e: &RestoreError) -> Self {
        match e {
            RestoreError::Replay(j) => Self::journal(what, j),
            other => Self::new(Exit::Failed, format!("{what}: {}", chain(other))),
        }
    }

    /// A failed append while importing.
    pub(crate) fn append(line: u64, e: &AppendError) -> Self {
        // A refused group is judged by the record that refused it.
        let exit = match e.refusal() {
            AppendError::Corrupt { .. } | AppendError::Damaged { .. } => Exit::Damaged,
            AppendError::Collision { .. }
            | AppendError::Invalid(_)
            | AppendError::TooLarge { .. }
            | AppendError::SessionMismatch { .. }
            | AppendError::SessionEnded { .. } => Exit::Refused,
            _ => Exit::Failed,
        };
        Self::new(
            exit,
            format!("line {line}: the append failed: {}", chain(e)),
        )
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// An error and its sources, on one line.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_append_refused_for_damage_exits_damaged_even_inside_a_group() {
        let damaged = AppendError::Damaged {
            detail: "the scrub found: a bad frame".to_owned(),
        };
        assert_eq!(CliError::append(1, &damaged).exit, Exit::Damaged);
        let group = AppendError::GroupRefused {
            index: 0,
            source: Box::new(damaged),
        };
        assert_eq!(CliError::append(2, &group).exit, Exit::Damaged);
        assert_eq!(
            CliError::append(3, &AppendError::Poisoned).exit,
            Exit::Failed
        );
    }
}
