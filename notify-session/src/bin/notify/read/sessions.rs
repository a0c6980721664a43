//! `notify sessions`: one row per session, from its summary.

use notify_session::notify_journal::SessionState;
use notify_session::notify_types::Timestamp;
use serde_json::json;

use super::summary::{json_time, summarize, time};
use crate::error::CliError;
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

/// `notify sessions`.
pub(crate) async fn sessions(journal: &Journal, what: &str, out: &mut Out) -> Result<(), CliError> {
    let mut table = Table::new(&[
        "SESSION",
        "FRAMES",
        "HEAD",
        "PENDING",
        "ORPHANS",
        "STATE",
        "FIRST ACTIVITY",
        "LAST ACTIVITY",
    ]);
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
            if out.json {
                out.json(&json!({
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
                }))?;
            } else {
                rows.push(vec![
                    session.to_string(),
                    s.activity.frames.to_string(),
                    s.head.to_string(),
                    s.report.pending_count().to_string(),
                    s.report.orphans.len().to_string(),
                    state,
                    time(s.activity.first),
                    time(s.activity.last),
                ]);
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
