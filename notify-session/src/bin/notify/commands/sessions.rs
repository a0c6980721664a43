//! `notify sessions`: one row per session, from its summary; on PostgreSQL also
//! its lease (holder, epoch, time left by the database's clock).

use notify_session::notify_journal::{LeaseInfo, SessionState};
use notify_session::notify_types::{SessionId, Timestamp};
use serde_json::json;

use super::session_summary::{json_time, summarize, time};
use crate::error::{CliError, Exit};
use crate::journal::{Journal, SessionPages};
use crate::output::{Out, Progress, Table};

/// A session's state: the table's text, and its JSON fields (`state`, and the end and
/// purge times where there are).
fn state_of(state: &SessionState) -> (String, &'static str, Option<Timestamp>, Option<Timestamp>) {
    match state {
        SessionState::Ended { ended_at, .. } => (
            format!("ended {ended_at:.3}"),
            "ended",
            Some(*ended_at),
            None,
        ),
        SessionState::Purged(t) => (
            format!("purged {:.3}", t.purged_at),
            "purged",
            Some(t.ended_at),
            Some(t.purged_at),
        ),
        _ => ("live".to_owned(), "live", None, None),
    }
}

/// The session's lease, on PostgreSQL (`None` on a file: its lease is the file
/// lock of whoever has it open).
async fn lease_of(
    journal: &Journal,
    what: &str,
    session: SessionId,
) -> Result<Option<LeaseInfo>, CliError> {
    let Some(pg) = journal.postgres() else {
        return Ok(None);
    };
    pg.lease_info(session).await.map(Some).map_err(|e| {
        CliError::new(
            Exit::Failed,
            format!("reading the lease of session {session} of {what} failed: {e}"),
        )
    })
}

/// A lease's table cells (holder, epoch, time left) and JSON object.
fn lease_cells(info: &LeaseInfo) -> ([String; 3], serde_json::Value) {
    let holder = info
        .holder
        .map_or_else(|| "-".to_owned(), |h| h.to_string());
    let left = match info.expires_in {
        Some(d) if info.live => format!("{:.1}s", d.as_secs_f64()),
        _ if info.holder.is_some() => "expired".to_owned(),
        _ => "-".to_owned(),
    };
    let json = json!({
        "holder": info.holder.map(|h| h.to_string()),
        "epoch": info.epoch,
        "live": info.live,
        "expires_in_ms": info.expires_in.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    });
    ([holder, info.epoch.to_string(), left], json)
}

/// The table's columns: the last three (the lease) on PostgreSQL only.
const PG_COLUMNS: [&str; 11] = [
    "SESSION",
    "FRAMES",
    "HEAD",
    "PENDING",
    "ORPHANS",
    "STATE",
    "FIRST ACTIVITY",
    "LAST ACTIVITY",
    "LEASE HOLDER",
    "EPOCH",
    "LEASE LEFT",
];

/// `notify sessions`.
pub(crate) async fn sessions(journal: &Journal, what: &str, out: &mut Out) -> Result<(), CliError> {
    let mut table = Table::new(if journal.postgres().is_some() {
        &PG_COLUMNS
    } else {
        &PG_COLUMNS[..8]
    });
    let mut pages = SessionPages::default();
    let mut progress = Progress::new();
    let mut done = 0u64;
    while let Some(page) = pages.next(journal, what).await? {
        let mut rows = Vec::with_capacity(page.len());
        for session in page {
            let s = summarize(journal, what, session).await?;
            done += 1;
            progress.update(|| format!("sessions: {done} read"));
            let (state, state_name, ended_at, purged_at) = state_of(&s.report.state);
            let lease = lease_of(journal, what, session)
                .await?
                .map(|i| lease_cells(&i));
            if out.json {
                let mut line = json!({
                    "session": session.to_string(),
                    "frames": s.activity.frames,
                    "head": s.head,
                    "pending": s.report.pending_count(),
                    "orphans": s.report.orphans.len(),
                    "state": state_name,
                    "ended_at": json_time(ended_at),
                    "purged_at": json_time(purged_at),
                    "first_activity": json_time(s.activity.first),
                    "last_activity": json_time(s.activity.last),
                });
                if let (Some((_, lease)), Some(map)) = (&lease, line.as_object_mut()) {
                    map.insert("lease".to_owned(), lease.clone());
                }
                out.json(&line)?;
            } else {
                let mut row = vec![
                    session.to_string(),
                    s.activity.frames.to_string(),
                    s.head.to_string(),
                    s.report.pending_count().to_string(),
                    s.report.orphans.len().to_string(),
                    state,
                    time(s.activity.first),
                    time(s.activity.last),
                ];
                if let Some((cells, _)) = lease {
                    row.extend(cells);
                }
                rows.push(row);
            }
        }
        progress.clear();
        table.print(out, &rows)?;
    }
    if !out.json && !table.printed() {
        out.line(&format!("{what} has no sessions"))?;
    }
    Ok(())
}
