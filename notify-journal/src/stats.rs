//! Group-commit counters every backend of this crate keeps ([`CommitStats`]).

/// Group-commit counters of a journal handle since it was opened or connected
/// ([`RedbJournal::commit_stats`](crate::RedbJournal::commit_stats), and
/// `PgJournal::commit_stats` with the `postgres` feature).
///
/// `appends / commits` is the mean batch size. The same figures, for every handle of
/// the process at once and as histograms, are the `notify_journal_commit_*` metrics
/// (the workspace's `docs/metrics.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CommitStats {
    /// Successful write transactions (batches).
    pub commits: u64,
    /// Appends (new, duplicate or collision) answered by those transactions.
    pub appends: u64,
    /// Times an appender had to wake the sleeping writer thread (each costs a thread
    /// wake-up; the rest were caught while the writer spun or worked). Always 0 for
    /// `PgJournal`, whose writers are tokio tasks.
    pub writer_wakeups: u64,
}
