//! [`JournalInspect`]: what the console learns of a journal beyond its reads (the
//! engine, the format or schema version, counts from the engine's own figures, the
//! background scrub, the deep verify). The server's host is generic over its journal;
//! the application hands the console this view of the same journal
//! ([`ServerBuilder::inspect`](crate::serve::ServerBuilder::inspect)). Without one the
//! pages say what they cannot know.

use std::sync::Arc;

use notify_journal::{
    BoxFuture, CommitStats, JournalError, PgJournal, RedbJournal, ScrubStatus, VerifyReport,
};

/// The engine's figures of a journal, without a scan of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalCounts {
    /// What the version below is: `"format version"` (redb) or `"schema version"`.
    pub version_name: &'static str,
    /// The file's format version or the schema's migration version.
    pub version: u64,
    /// Frames stored.
    pub frames: u64,
    /// Whether [`frames`](Self::frames) is the engine's estimate (PostgreSQL's
    /// statistics) rather than a count.
    pub frames_estimated: bool,
    /// Sessions, where the engine counts them without a walk.
    pub sessions: Option<u64>,
}

/// A journal as the console sees it.
pub trait JournalInspect: Send + Sync + 'static {
    /// The engine's name (`"redb"`, `"PostgreSQL"`).
    fn engine(&self) -> &'static str;

    /// Where the journal is: the file, or the database schema.
    fn location(&self) -> String;

    /// The engine's figures.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    fn counts(&self) -> BoxFuture<'_, Result<JournalCounts, JournalError>>;

    /// The background scrub's status, where the engine has one (redb).
    fn scrub(&self) -> Option<ScrubStatus>;

    /// Group-commit counters since the handle was opened.
    fn commit_stats(&self) -> CommitStats;

    /// The deep integrity check, keeping the first `max_problems` problems.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the check only reads (dropping the future abandons the report).
    fn verify(&self, max_problems: usize) -> BoxFuture<'_, Result<VerifyReport, JournalError>>;
}

impl JournalInspect for RedbJournal {
    fn engine(&self) -> &'static str {
        "redb"
    }

    fn location(&self) -> String {
        self.path().display().to_string()
    }

    fn counts(&self) -> BoxFuture<'_, Result<JournalCounts, JournalError>> {
        let journal = self.clone();
        Box::pin(async move {
            let stats = tokio::task::spawn_blocking(move || journal.stats_blocking())
                .await
                .map_err(|_| JournalError::Closed)??;
            Ok(JournalCounts {
                version_name: "format version",
                version: stats.format_version,
                frames: stats.frames,
                frames_estimated: false,
                sessions: None,
            })
        })
    }

    fn scrub(&self) -> Option<ScrubStatus> {
        Some(self.scrub_status())
    }

    fn commit_stats(&self) -> CommitStats {
        RedbJournal::commit_stats(self)
    }

    fn verify(&self, max_problems: usize) -> BoxFuture<'_, Result<VerifyReport, JournalError>> {
        Box::pin(RedbJournal::verify(self, max_problems))
    }
}

/// A PostgreSQL journal and the name of its schema (the handle does not say it).
#[derive(Debug, Clone)]
pub struct PgInspect {
    journal: Arc<PgJournal>,
    schema: String,
}

impl PgInspect {
    /// The console's view of `journal`, whose schema is `schema`.
    #[must_use]
    pub fn new(journal: Arc<PgJournal>, schema: impl Into<String>) -> Self {
        Self {
            journal,
            schema: schema.into(),
        }
    }
}

impl JournalInspect for PgInspect {
    fn engine(&self) -> &'static str {
        "PostgreSQL"
    }

    fn location(&self) -> String {
        format!("schema {}", self.schema)
    }

    fn counts(&self) -> BoxFuture<'_, Result<JournalCounts, JournalError>> {
        Box::pin(async move {
            // Not `stats()`: it reads every frame on the connection the journal's
            // reads share, stalling them for as long on a large journal.
            let estimate = self.journal.estimate().await?;
            Ok(JournalCounts {
                version_name: "schema version",
                version: u64::from(estimate.schema_version),
                frames: estimate.frames,
                frames_estimated: true,
                sessions: None,
            })
        })
    }

    fn scrub(&self) -> Option<ScrubStatus> {
        None
    }

    fn commit_stats(&self) -> CommitStats {
        self.journal.commit_stats()
    }

    fn verify(&self, max_problems: usize) -> BoxFuture<'_, Result<VerifyReport, JournalError>> {
        Box::pin(self.journal.verify(max_problems))
    }
}
