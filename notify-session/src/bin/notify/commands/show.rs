//! `notify show`: a session's frames, one row each.

use notify_session::notify_types::{
    CommandId, JournalRecord, LoopId, ProcessLifecycleMetadata, SessionEvent, SessionId, Uuid,
};
use serde_json::{Value, json};

use super::session_summary::json_time;
use crate::error::CliError;
use crate::journal::{Journal, selected};
use crate::output::{Out, Progress, Table};

/// The columns of one frame, for `show`.
struct FrameView {
    kind: &'static str,
    id: Uuid,
    loop_id: String,
    handle: String,
    state: String,
    reason: String,
    detail: String,
    json: Value,
}

fn lifecycle_detail(m: &ProcessLifecycleMetadata) -> String {
    let mut parts = Vec::new();
    if let Some(code) = m.exit_code {
        parts.push(format!("exit {code}"));
    }
    parts.push(format!("created {:.3}", m.process_created_at));
    if let Some(t) = m.process_started_at {
        parts.push(format!("started {t:.3}"));
    }
    if let Some(t) = m.process_finished_at {
        parts.push(format!("finished {t:.3}"));
    }
    if let Some(d) = &m.diagnostic {
        parts.push(format!("diagnostic {d:?}"));
    }
    parts.join(", ")
}

fn view(seq: u64, record: &JournalRecord) -> FrameView {
    let kind = record.type_name();
    let id = record.key();
    match record {
        JournalRecord::Command(c) => {
            let n = c.notification();
            FrameView {
                kind,
                id,
                loop_id: n.loop_id.to_string(),
                handle: n.process_handle.clone(),
                state: n.state.to_string(),
                reason: n.reason.to_string(),
                detail: String::new(),
                json: json!({
                    "seq": seq, "kind": kind, "id": id.to_string(),
                    "loop": n.loop_id.to_string(), "handle": n.process_handle,
                    "state": n.state.name(), "reason": n.reason.name(),
                }),
            }
        }
        JournalRecord::Event(SessionEvent::Lifecycle(m)) => FrameView {
            kind,
            id,
            loop_id: m.loop_id.to_string(),
            handle: m.process_handle.clone(),
            state: m.state.to_string(),
            reason: m.reason.map_or_else(|| "-".to_owned(), |r| r.to_string()),
            detail: lifecycle_detail(m),
            json: json!({
                "seq": seq, "kind": kind, "id": id.to_string(),
                "loop": m.loop_id.to_string(), "handle": m.process_handle,
                "state": m.state.name(), "reason": m.reason.map(|r| r.name()),
                "exit_code": m.exit_code,
                "origin_execution": m.origin_execution_id.to_string(),
                "created_at": m.process_created_at.to_string(),
                "started_at": json_time(m.process_started_at),
                "finished_at": json_time(m.process_finished_at),
                "diagnostic": m.diagnostic,
            }),
        },
        JournalRecord::Event(SessionEvent::NotificationConsumed(c)) => {
            cause_view(seq, kind, id, c.loop_id(), "consumes", c.cause())
        }
        JournalRecord::Event(SessionEvent::NotificationAbandoned(a)) => {
            cause_view(seq, kind, id, a.loop_id(), "abandons", a.cause())
        }
        JournalRecord::Event(SessionEvent::SessionEnded(_)) => FrameView {
            kind,
            id,
            loop_id: "-".to_owned(),
            handle: "-".to_owned(),
            state: "-".to_owned(),
            reason: "-".to_owned(),
            detail: "the session's end marker".to_owned(),
            json: json!({"seq": seq, "kind": kind, "id": id.to_string()}),
        },
    }
}

/// A consumption or an abandonment: an event about the notification `cause`.
fn cause_view(
    seq: u64,
    kind: &'static str,
    id: Uuid,
    loop_id: LoopId,
    verb: &str,
    cause: CommandId,
) -> FrameView {
    FrameView {
        kind,
        id,
        loop_id: loop_id.to_string(),
        handle: "-".to_owned(),
        state: "-".to_owned(),
        reason: "-".to_owned(),
        detail: format!("{verb} {cause}"),
        json: json!({
            "seq": seq, "kind": kind, "id": id.to_string(),
            "loop": loop_id.to_string(), "cause": cause.to_string(),
        }),
    }
}

/// `notify show`.
pub(crate) async fn show(
    journal: &Journal,
    what: &str,
    session: SessionId,
    from: u64,
    limit: Option<u64>,
    out: &mut Out,
) -> Result<(), CliError> {
    const PAGE: u64 = 1024;
    selected(journal, what, Some(session)).await?;
    let mut table = Table::new(&[
        "SEQ", "KIND", "ID", "LOOP", "HANDLE", "STATE", "REASON", "DETAIL",
    ]);
    let mut next = from.max(1);
    let mut left = limit.unwrap_or(u64::MAX);
    let mut progress = Progress::new();
    while left > 0 {
        let want = left.min(PAGE);
        let page = journal
            .reader()
            .replay(session, next, usize::try_from(want).unwrap_or(usize::MAX))
            .await
            .map_err(|e| CliError::journal(what, &e))?;
        let n = page.len() as u64;
        let mut rows = Vec::with_capacity(page.len());
        for (seq, record) in &page {
            let v = view(*seq, record);
            if out.json {
                out.json(&v.json)?;
            } else {
                rows.push(vec![
                    seq.to_string(),
                    v.kind.to_owned(),
                    v.id.to_string(),
                    v.loop_id,
                    v.handle,
                    v.state,
                    v.reason,
                    v.detail,
                ]);
            }
            next = seq.saturating_add(1);
        }
        table.print(out, &rows)?;
        left -= n.min(left);
        progress.update(|| format!("frames: up to seq {}", next.saturating_sub(1)));
        if n < want {
            break;
        }
    }
    progress.clear();
    if !out.json && !table.printed() {
        out.line(&format!("session {session} has no frames from seq {from}"))?;
    }
    Ok(())
}
