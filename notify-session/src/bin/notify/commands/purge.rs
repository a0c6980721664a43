//! `notify purge`: ended sessions' frames removed, through the library's `purge` (their
//! tombstones remain), from a horizon given as an instant or an age.

use std::time::Duration;

use notify_session::notify_journal::{DEFAULT_PURGE_STEP_FRAMES, PgJournal, purge_with};
use notify_session::notify_types::Timestamp;
use serde_json::json;

use crate::error::{CliError, Exit};
use crate::journal::{Journal, Location, pg_options};
use crate::output::{Out, Progress};

/// A purge horizon: an RFC 3339 instant (`2026-01-31T00:00:00Z`) or an age before now
/// (`30d`, `12h`, `90m`, `3600s`).
pub(crate) fn parse_horizon(text: &str) -> Result<Timestamp, String> {
    if let Ok(t) = text.parse::<Timestamp>() {
        return Ok(t);
    }
    let bad = || {
        format!(
            "{text:?} is neither an RFC 3339 time (2026-01-31T00:00:00Z) nor an age (30d, 12h, 90m, 3600s)"
        )
    };
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let unit_secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    let age = n
        .checked_mul(unit_secs)
        .map(Duration::from_secs)
        .ok_or_else(bad)?;
    Timestamp::now().checked_sub(age).map_err(|_| bad())
}

/// `notify purge`.
pub(crate) async fn purge(
    at: &Location,
    ended_before: Timestamp,
    max_frames_per_step: Option<usize>,
    out: &mut Out,
) -> Result<(), CliError> {
    let what = at.describe();
    // Purging never creates the journal it was pointed at: a mistyped path or schema
    // is "not found", not an empty journal with nothing to purge.
    let journal = match at {
        Location::File(path) if !path.exists() => {
            return Err(CliError::new(
                Exit::NotFound,
                format!("{}: no such file", path.display()),
            ));
        }
        Location::File(_) => Journal::open_write(at).await?,
        Location::Postgres { conninfo, schema } => {
            PgJournal::connect(conninfo, pg_options(schema, false))
                .await
                .map(|p| Journal::Postgres(Box::new(p)))
                .map_err(|e| CliError::postgres(schema, &e))?
        }
    };
    let Some(backend) = journal.writer() else {
        // Opened for writing above: never a reader.
        return Err(CliError::new(
            Exit::Failed,
            format!("{what} is opened read-only"),
        ));
    };
    let mut progress = Progress::new();
    let result = purge_with(
        backend,
        ended_before,
        max_frames_per_step.unwrap_or(DEFAULT_PURGE_STEP_FRAMES),
        |_, report| {
            progress.update(|| {
                format!(
                    "purging: {} sessions, {} frames, {} steps",
                    report.sessions, report.frames, report.steps
                )
            });
        },
    )
    .await;
    progress.clear();
    journal.close().await;
    let report = result.map_err(|e| CliError::journal(&what, &e))?;
    if out.json {
        return out.json(&json!({
            "journal": what, "ended_before": ended_before.to_string(),
            "sessions": report.sessions, "frames": report.frames, "steps": report.steps,
        }));
    }
    if report.steps == 0 {
        return out.line(&format!(
            "{what}: no session ended before {ended_before}; nothing purged"
        ));
    }
    out.line(&format!(
        "{what}: purged {} session(s) that ended before {ended_before}: {} frames in {} steps; \
         their tombstones remain",
        report.sessions, report.frames, report.steps
    ))
}

/// A horizon argument that does not parse: a usage error.
pub(crate) fn bad_horizon(why: String) -> CliError {
    CliError::new(Exit::Usage, format!("--ended-before: {why}"))
}
