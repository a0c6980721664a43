//! `notify pending`: what restore would redeliver, and the processes it would declare
//! lost.

use notify_session::notify_types::SessionId;
use serde_json::json;

use super::session_summary::{json_time, summarize};
use crate::error::CliError;
use crate::journal::{Journal, selected};
use crate::output::{Out, Progress, Table};

/// `notify pending`.
pub(crate) async fn pending(
    journal: &Journal,
    what: &str,
    session: Option<SessionId>,
    out: &mut Out,
) -> Result<(), CliError> {
    let mut sessions = selected(journal, what, session).await?;
    let mut table = Table::new(&[
        "SESSION", "LOOP", "SEQ", "COMMAND", "STATE", "REASON", "HANDLE",
    ]);
    let mut orphans: Vec<Vec<String>> = Vec::new();
    let (mut pending_total, mut orphan_total, mut with_pending) = (0usize, 0usize, 0usize);
    let mut progress = Progress::new();
    let mut done = 0u64;
    while let Some(page) = sessions.next(journal, what).await? {
        for session in page {
            let s = summarize(journal, what, session).await?;
            done += 1;
            progress.update(|| format!("sessions: {done} read"));
            let mut rows = Vec::new();
            if s.report.pending_count() > 0 {
                with_pending += 1;
            }
            for (loop_id, commands) in &s.report.pending {
                for c in commands {
                    let seq = journal
                        .reader()
                        .lookup(session, *c.command_id().as_uuid())
                        .await
                        .map_err(|e| CliError::journal(what, &e))?
                        .unwrap_or(0);
                    let n = c.notification();
                    pending_total += 1;
                    if out.json {
                        out.json(&json!({
                            "type": "pending", "session": session.to_string(),
                            "loop": loop_id.to_string(), "seq": seq,
                            "command": c.command_id().to_string(),
                            "state": n.state.name(), "reason": n.reason.name(),
                            "handle": n.process_handle,
                        }))?;
                    } else {
                        rows.push(vec![
                            session.to_string(),
                            loop_id.to_string(),
                            seq.to_string(),
                            c.command_id().to_string(),
                            n.state.to_string(),
                            n.reason.to_string(),
                            n.process_handle.clone(),
                        ]);
                    }
                }
            }
            progress.clear();
            table.print(out, &rows)?;
            for m in &s.report.orphans {
                orphan_total += 1;
                if out.json {
                    out.json(&json!({
                        "type": "orphan", "session": session.to_string(),
                        "loop": m.loop_id.to_string(), "handle": m.process_handle,
                        "last_event": m.kind.event_type(), "event": m.event_id.to_string(),
                        "state": m.state.name(),
                        "origin_execution": m.origin_execution_id.to_string(),
                        "created_at": m.process_created_at.to_string(),
                        "started_at": json_time(m.process_started_at),
                    }))?;
                } else {
                    orphans.push(vec![
                        session.to_string(),
                        m.loop_id.to_string(),
                        m.kind.event_type().to_owned(),
                        m.state.to_string(),
                        format!("{:.3}", m.process_created_at),
                        m.process_handle.clone(),
                    ]);
                }
            }
        }
    }
    progress.clear();
    if out.json {
        return out.json(&json!({
            "type": "summary", "pending": pending_total, "sessions_with_pending": with_pending,
            "orphans": orphan_total,
        }));
    }
    if !table.printed() {
        out.line("nothing pending: restore would redeliver no notification")?;
    }
    out.line("")?;
    if orphans.is_empty() {
        out.line("no orphans: restore would declare no process lost")?;
    } else {
        out.line("processes restore would declare lost (last event not terminal, no completion):")?;
        Table::new(&[
            "SESSION",
            "LOOP",
            "LAST EVENT",
            "STATE",
            "CREATED",
            "HANDLE",
        ])
        .print(out, &orphans)?;
    }
    out.line("")?;
    out.line(&format!(
        "{pending_total} pending in {with_pending} session(s); {orphan_total} orphan(s)"
    ))
}
