//! The read commands: `sessions`, `show` and `pending`. Every figure comes from the
//! library: the listing, `last_seq`, `replay`, and restore's own reduction (`restore`),
//! which is what a restart would redeliver and declare lost.

use std::sync::{Mutex, PoisonError};

use notify_session::notify_journal::{
    AppendError, AppendOutcome, BoxFuture, Frame, JournalBackend, JournalError, PurgeStep,
    SessionState,
};
use notify_session::notify_types::{
    CommandId, JournalRecord, LoopId, ProcessLifecycleMetadata, SessionEvent, SessionId, Timestamp,
    Uuid,
};
use notify_session::{RestoreReport, restore};
use serde_json::{Value, json};

use crate::error::CliError;
use crate::journal::{Journal, SessionPages, selected};
use crate::output::{Out, Progress, Table};

/// What the frames of a session say about when it was active. Records carry no commit
/// time; these are the process times of its lifecycle events.
#[derive(Debug, Default, Clone, Copy)]
struct Activity {
    frames: u64,
    first: Option<Timestamp>,
    last: Option<Timestamp>,
}

impl Activity {
    fn observe(&mut self, record: &JournalRecord) {
        self.frames += 1;
        if let JournalRecord::Event(SessionEvent::Lifecycle(m)) = record {
            for t in [
                Some(m.process_created_at),
                m.process_started_at,
                m.process_finished_at,
            ]
            .into_iter()
            .flatten()
            {
                self.first = Some(self.first.map_or(t, |f| f.min(t)));
                self.last = Some(self.last.map_or(t, |l| l.max(t)));
            }
        }
    }
}

/// A backend that notes every frame restore replays through it, so one pass over a
/// session gives both restore's report and the session's activity.
struct Tap<'a> {
    inner: &'a dyn JournalBackend,
    seen: Mutex<Activity>,
}

impl<'a> Tap<'a> {
    fn new(inner: &'a dyn JournalBackend) -> Self {
        Self {
            inner,
            seen: Mutex::new(Activity::default()),
        }
    }

    fn activity(&self) -> Activity {
        *self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl JournalBackend for Tap<'_> {
    fn append(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> BoxFuture<'_, Result<AppendOutcome, AppendError>> {
        self.inner.append(session, record)
    }

    fn append_all(
        &self,
        session: SessionId,
        records: Vec<JournalRecord>,
        if_head: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<AppendOutcome>, AppendError>> {
        self.inner.append_all(session, records, if_head)
    }

    fn lookup(
        &self,
        session: SessionId,
        key: Uuid,
    ) -> BoxFuture<'_, Result<Option<u64>, JournalError>> {
        self.inner.lookup(session, key)
    }

    fn replay(
        &self,
        session: SessionId,
        from_seq: u64,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<Frame>, JournalError>> {
        Box::pin(async move {
            let page = self.inner.replay(session, from_seq, limit).await?;
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            for (_, record) in &page {
                seen.observe(record);
            }
            Ok(page)
        })
    }

    fn last_seq(&self, session: SessionId) -> BoxFuture<'_, Result<u64, JournalError>> {
        self.inner.last_seq(session)
    }

    fn sessions(&self) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>> {
        self.inner.sessions()
    }

    fn sessions_after(
        &self,
        after: Option<SessionId>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>> {
        self.inner.sessions_after(after, limit)
    }

    fn session_state(
        &self,
        session: SessionId,
    ) -> BoxFuture<'_, Result<SessionState, JournalError>> {
        self.inner.session_state(session)
    }

    fn purge_step(
        &self,
        ended_before: Timestamp,
        max_frames: usize,
    ) -> BoxFuture<'_, Result<PurgeStep, JournalError>> {
        self.inner.purge_step(ended_before, max_frames)
    }

    fn drop_tombstones(
        &self,
        purged_before: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<u64, JournalError>> {
        self.inner.drop_tombstones(purged_before, limit)
    }
}

/// A session's summary: its head, and restore's reduction of its log.
struct Summary {
    head: u64,
    report: RestoreReport,
    activity: Activity,
}

async fn summarize(journal: &Journal, what: &str, session: SessionId) -> Result<Summary, CliError> {
    let backend = journal.backend();
    let tap = Tap::new(backend);
    let report = restore(session, &tap)
        .await
        .map_err(|e| CliError::restore(&format!("session {session} of {what}"), &e))?;
    let head = backend
        .last_seq(session)
        .await
        .map_err(|e| CliError::journal(what, &e))?;
    Ok(Summary {
        head,
        report,
        activity: tap.activity(),
    })
}

/// A time for the tables, to the millisecond (JSON keeps every digit).
fn time(t: Option<Timestamp>) -> String {
    t.map_or_else(|| "-".to_owned(), |t| format!("{t:.3}"))
}

fn json_time(t: Option<Timestamp>) -> Value {
    t.map_or(Value::Null, |t| Value::String(t.to_string()))
}

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
            .backend()
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
                        .backend()
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
