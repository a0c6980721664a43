//! The journal's metrics, recorded through the `metrics` facade. No exporter here: the
//! application installs a recorder (without one every call is a no-op). The table of
//! every metric is the workspace's `docs/metrics.md`.

use std::future::Future;
use std::time::Duration;

use crate::backend::AppendOutcome;
use crate::error::AppendError;

/// Counter, labels `backend`, `outcome` (`appended`, `duplicate`, `collision`,
/// `error`): appends answered, as their callers got them.
pub(crate) const APPENDS: &str = "notify_journal_appends_total";
/// Histogram, label `backend`: appends answered per successful commit (a group
/// commit's batch).
pub(crate) const COMMIT_BATCH_SIZE: &str = "notify_journal_commit_batch_size";
/// Histogram, label `backend`, seconds: how long a successful commit took (redb: the
/// durable commit of the write transaction; PostgreSQL: the batch statement's round
/// trip, which commits, retries included).
pub(crate) const COMMIT_SECONDS: &str = "notify_journal_commit_seconds";
/// Counter, label `backend`: batches that failed (nothing written, or outcome
/// unknown); every append in them got the error.
pub(crate) const COMMIT_FAILURES: &str = "notify_journal_commit_failures_total";
/// Counter, label `backend`: ended sessions purged (only their tombstone remains).
pub(crate) const PURGED_SESSIONS: &str = "notify_journal_purged_sessions_total";
/// Counter, label `backend`: frames removed by purge.
pub(crate) const PURGED_FRAMES: &str = "notify_journal_purged_frames_total";
/// Histogram, label `backend`, seconds: how long one bounded purge step took.
pub(crate) const PURGE_STEP_SECONDS: &str = "notify_journal_purge_step_seconds";
/// Counter, label `backend`: tombstones dropped.
pub(crate) const DROPPED_TOMBSTONES: &str = "notify_journal_dropped_tombstones_total";
/// Histogram, label `backend`, seconds: how long one bounded step of a tombstone drop
/// took (redb: one chore's write transaction; PostgreSQL: one statement).
pub(crate) const DROP_STEP_SECONDS: &str = "notify_journal_tombstone_drop_step_seconds";
/// Counter, label `backend` (`redb`): frames the key census read from a session's log
/// to cover or decide an index miss (a session's first miss after open, a session read
/// again after the census let it go, a fingerprint it may hold).
pub(crate) const CENSUS_FRAMES_READ: &str = "notify_journal_census_frames_read_total";

/// The `backend` label of [`RedbJournal`](crate::RedbJournal).
pub(crate) const REDB: &str = "redb";
/// The `backend` label of `PgJournal`.
#[cfg(feature = "postgres")]
pub(crate) const POSTGRES: &str = "postgres";

/// Counts one append's answer in `notify_journal_appends_total`, under
/// `backend` (`"redb"`, `"postgres"`, `"memory"`, or a backend's own name) and the
/// outcome: `appended` (a new frame), `duplicate` (the identical record was already
/// journaled), `collision` ([`AppendError::Collision`]) or `error` (any other error).
///
/// The backends of this crate count their appends themselves; a backend implemented
/// elsewhere (the testkit's in-memory journal) calls this once per answered append, so
/// that its appends show up under the same metric. Without a `metrics` recorder
/// installed this does nothing. The workspace's `docs/metrics.md` lists every metric.
pub fn record_append(backend: &'static str, result: &Result<AppendOutcome, AppendError>) {
    let outcome = match result {
        Ok(AppendOutcome { appended: true, .. }) => "appended",
        Ok(AppendOutcome {
            appended: false, ..
        }) => "duplicate",
        Err(AppendError::Collision { .. }) => "collision",
        Err(_) => "error",
    };
    metrics::counter!(APPENDS, "backend" => backend, "outcome" => outcome).increment(1);
}

/// Awaits `append` and counts its answer ([`record_append`]).
pub(crate) async fn counted<F>(
    backend: &'static str,
    append: F,
) -> Result<AppendOutcome, AppendError>
where
    F: Future<Output = Result<AppendOutcome, AppendError>>,
{
    let result = append.await;
    record_append(backend, &result);
    result
}

/// Counts an atomic group's answer: each record's outcome when it committed, else
/// one refusal (a group refused by a collision counts as a collision).
pub(crate) fn record_group(
    backend: &'static str,
    result: &Result<Vec<AppendOutcome>, AppendError>,
) {
    match result {
        Ok(outcomes) => {
            for outcome in outcomes {
                record_append(backend, &Ok(*outcome));
            }
        }
        Err(e) => record_append(backend, &Err(e.refusal().clone())),
    }
}

/// A successful commit of `batch` appends that took `took`.
pub(crate) fn committed(backend: &'static str, batch: usize, took: Duration) {
    metrics::histogram!(COMMIT_BATCH_SIZE, "backend" => backend).record(batch as f64);
    metrics::histogram!(COMMIT_SECONDS, "backend" => backend).record(took.as_secs_f64());
}

/// A batch that failed as a whole.
pub(crate) fn commit_failed(backend: &'static str) {
    metrics::counter!(COMMIT_FAILURES, "backend" => backend).increment(1);
}

/// One purge step that took `took` and removed `sessions` sessions' `frames` frames.
pub(crate) fn purge_step(backend: &'static str, sessions: u64, frames: u64, took: Duration) {
    metrics::counter!(PURGED_SESSIONS, "backend" => backend).increment(sessions);
    metrics::counter!(PURGED_FRAMES, "backend" => backend).increment(frames);
    metrics::histogram!(PURGE_STEP_SECONDS, "backend" => backend).record(took.as_secs_f64());
}

/// One step of a tombstone drop that took `took` and dropped `dropped` tombstones.
pub(crate) fn drop_step(backend: &'static str, dropped: u64, took: Duration) {
    metrics::counter!(DROPPED_TOMBSTONES, "backend" => backend).increment(dropped);
    metrics::histogram!(DROP_STEP_SECONDS, "backend" => backend).record(took.as_secs_f64());
}

/// The key census read `frames` frames to cover or decide one index miss.
pub(crate) fn census_frames_read(frames: u64) {
    if frames > 0 {
        metrics::counter!(CENSUS_FRAMES_READ, "backend" => REDB).increment(frames);
    }
}
