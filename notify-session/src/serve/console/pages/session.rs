//! `GET /console/sessions/{id}?from=`: one session. Its state, head and lease (as
//! the engine knows it now: a redb file keeps no lease history, PostgreSQL the
//! current epoch and holder), what restore would redeliver per loop (restore reads
//! the log whole: only for a log within a request's [`FRAME_BUDGET`], else the page
//! says it is not computed), and its timeline frame by frame from seq `from`
//! ([`FRAMES`] a page, with a cursor to the next): completions,
//! lifecycle events, consumptions, abandonments, the end. Answers that wrote no
//! frame (duplicates, collisions) are known only to the server that gave them, since
//! it started: each is placed after the later of its original frame and the last
//! frame this server wrote in the session before giving it.

use std::collections::HashMap;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use notify_journal::{JournalError, JournalRead, SeqRecord};
use notify_types::{JournalRecord, SessionEvent, SessionId, Uuid};

use super::super::html::{Html, Nav, frame};
use super::super::login::LoggedIn;
use super::super::observed::{Answer, AnswerKind};
use super::{FRAME_BUDGET, PageError, lease_cells, state_words, time, uuid};
use crate::serve::error::error_chain;
use crate::serve::state::AppState;

/// Frames a page of the timeline shows.
pub(crate) const FRAMES: usize = 200;

/// The page's query.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct At {
    #[serde(default)]
    from: Option<u64>,
}

/// A frame's kind (a CSS class too) and what it says, in words.
fn describe(record: &JournalRecord) -> (&'static str, &'static str, String) {
    match record {
        JournalRecord::Command(c) => {
            let n = c.notification();
            (
                "completion",
                "",
                format!(
                    "process {} {} ({})",
                    n.process_handle,
                    n.state.name(),
                    n.reason.name()
                ),
            )
        }
        JournalRecord::Event(SessionEvent::Lifecycle(m)) => (
            "lifecycle",
            "",
            format!("{}: process {}", record.type_name(), m.process_handle),
        ),
        JournalRecord::Event(SessionEvent::NotificationConsumed(c)) => (
            "consumed",
            "consumed",
            format!("completion {} acknowledged by its loop", c.cause()),
        ),
        JournalRecord::Event(SessionEvent::NotificationAbandoned(a)) => (
            "abandoned",
            "abandoned",
            format!("completion {} abandoned when the session ended", a.cause()),
        ),
        JournalRecord::Event(SessionEvent::SessionEnded(_)) => (
            "ended",
            "ended",
            "the session ended: its last frame".to_owned(),
        ),
    }
}

/// The command a frame concerns, for the link to its page.
fn command_of(record: &JournalRecord) -> Option<notify_types::CommandId> {
    match record {
        JournalRecord::Command(c) => Some(c.command_id()),
        JournalRecord::Event(SessionEvent::NotificationConsumed(c)) => Some(c.cause()),
        JournalRecord::Event(SessionEvent::NotificationAbandoned(a)) => Some(a.cause()),
        _ => None,
    }
}

fn answer_row(h: &mut Html, session: SessionId, a: &Answer) {
    h.raw("<tr class=\"answer\"><td>–</td><td><span class=\"kind dup\">")
        .text(a.kind.word())
        .raw("</span></td><td class=\"id\">")
        .link(
            format!("/console/sessions/{session}/commands/{}", a.key),
            a.key,
        )
        .raw("</td><td>")
        .text(match (a.kind, a.seq) {
            (AnswerKind::Duplicate, Some(seq)) => {
                format!("a retry answered duplicate of seq {seq}: nothing written")
            }
            (AnswerKind::Collision, Some(seq)) => format!(
                "the ID came again with other bytes: collision with seq {seq}, nothing written"
            ),
            (kind, _) => format!("answered {}: nothing written", kind.word()),
        })
        .raw("</td>")
        .td(time(a.at))
        .raw("</tr>");
}

/// Up to [`FRAMES`] frames from `from`; where one cannot be read (damage), the
/// frames before it and the damage in words.
async fn frames_from(
    reader: &dyn JournalRead,
    session: SessionId,
    from: u64,
) -> (Vec<SeqRecord>, Option<String>) {
    match reader.replay(session, from, FRAMES).await {
        Ok(frames) => (frames, None),
        Err(e) => {
            // Frame by frame up to the damaged one.
            let mut frames = Vec::new();
            let mut seq = from;
            while frames.len() < FRAMES {
                match reader.replay(session, seq, 1).await {
                    Ok(one) if !one.is_empty() => {
                        frames.extend(one);
                        seq += 1;
                    }
                    _ => break,
                }
            }
            (frames, Some(error_chain(&e)))
        }
    }
}

async fn render(
    state: &AppState,
    id: &str,
    at: &At,
    logged_in: bool,
) -> Result<Response, PageError> {
    let session = SessionId::from_uuid(uuid("session", id)?);
    let host = state.host().map_err(|_| PageError::starting())?;
    let reader = host.reader();
    let what = format!("session {session}");
    let journal = |e: JournalError| PageError::journal(&what, &e);
    let st = reader.session_state(session).await.map_err(journal)?;
    let head = reader.last_seq(session).await.map_err(journal)?;
    let (word, detail) = state_words(&st);
    let mut h = Html::default();
    h.raw("<dl>")
        .dt("session", session)
        .dt("state", format!("{word} {detail}"))
        .dt("head", head);
    match host.lease_info(session).await {
        Ok(info) => {
            let (holder, epoch, left) = lease_cells(&info);
            h.dt("lease holder", holder)
                .dt("lease epoch", epoch)
                .dt("lease left", left);
        }
        Err(e) => {
            h.dt("lease", format!("could not be read: {e}"));
        }
    }
    h.dt(
        "lease history",
        "the engines keep the current epoch only: each acquisition raises it, so an epoch above 1 says the session was taken over or reopened",
    );
    h.raw("</dl>");
    if st.is_purged() {
        h.raw("<p class=\"note\">Purged: only the tombstone is left; its frames are gone.</p>");
        return Ok(frame(
            format!("Session {session}"),
            Nav::Sessions,
            logged_in,
            h,
        ));
    }
    h.raw("<h2>Pending per loop</h2>");
    let restored = if head > FRAME_BUDGET {
        h.raw("<p class=\"note\">")
            .text(format!(
                "Not computed: restore reads the whole log, and this one has {head} frames, more than a page's budget of {FRAME_BUDGET} frames; `notify pending` computes it."
            ))
            .raw("</p>");
        None
    } else {
        Some(crate::restore(session, reader.as_ref()).await)
    };
    match restored {
        None => {}
        Some(Err(e)) => {
            h.raw("<p class=\"bad\">")
                .text(format!(
                    "Restore of this session fails: {}",
                    error_chain(&e)
                ))
                .raw("</p>");
        }
        Some(Ok(report)) if report.pending.is_empty() => {
            h.raw("<p class=\"note\">Nothing pending: every completion was consumed or abandoned.</p>");
        }
        Some(Ok(report)) => {
            h.raw("<table>")
                .thead(&["loop", "pending", "oldest"])
                .raw("<tbody>");
            for (loop_id, pending) in &report.pending {
                h.raw("<tr><td class=\"id\">")
                    .text(loop_id)
                    .raw("</td>")
                    .td(pending.len());
                h.raw("<td class=\"id\">");
                if let Some(first) = pending.first() {
                    h.link(
                        format!(
                            "/console/sessions/{session}/commands/{}",
                            first.command_id()
                        ),
                        first.command_id(),
                    );
                }
                h.raw("</td></tr>");
            }
            h.raw("</tbody></table>");
        }
    }
    let from = at.from.unwrap_or(1).max(1);
    let (frames, damage) = frames_from(reader.as_ref(), session, from).await;
    let answers = state.inner.console.observed.answers_for(session);
    // Where each answer that wrote no frame goes: after the later of its original
    // frame and the last frame this server wrote in the session before answering
    // (read now, one index lookup per distinct frame, at most the answers kept).
    let mut seq_of: HashMap<Uuid, u64> = HashMap::new();
    let mut placed: Vec<Option<u64>> = Vec::with_capacity(answers.len());
    for a in &answers {
        if !matches!(a.kind, AnswerKind::Duplicate | AnswerKind::Collision) {
            placed.push(None);
            continue;
        }
        let written = match a.wrote_before {
            Some(key) => match seq_of.get(&key) {
                Some(seq) => *seq,
                None => {
                    let seq = reader
                        .lookup(session, key)
                        .await
                        .ok()
                        .flatten()
                        .unwrap_or(0);
                    seq_of.insert(key, seq);
                    seq
                }
            },
            None => 0,
        };
        placed.push(Some(a.seq.unwrap_or(0).max(written)));
    }
    let after = |seq: u64| {
        answers
            .iter()
            .zip(&placed)
            .filter(move |(_, at)| **at == Some(seq))
            .map(|(a, _)| a)
    };
    h.raw("<h2>Timeline</h2><table class=\"timeline\">")
        .thead(&[
            "seq",
            "kind",
            "command or event",
            "what",
            "answered at (this server)",
        ])
        .raw("<tbody>");
    let mut placed = 0usize;
    if from == 1 {
        for a in after(0) {
            answer_row(&mut h, session, a);
            placed += 1;
        }
    }
    let last_shown = frames.last().map_or(from, |(s, _)| *s);
    for (seq, record) in &frames {
        let (kind, class, text) = describe(record);
        let accepted_at = answers
            .iter()
            .find(|a| a.key == record.key() && matches!(a.kind, AnswerKind::Accepted))
            .map(|a| time(a.at));
        h.raw("<tr><td>")
            .text(seq)
            .raw("</td><td><span class=\"kind ")
            .raw(class)
            .raw("\">")
            .raw(kind)
            .raw("</span></td><td class=\"id\">");
        match command_of(record) {
            Some(c) => {
                h.link(
                    format!("/console/sessions/{session}/commands/{c}"),
                    record.key(),
                );
            }
            None => {
                h.text(record.key());
            }
        }
        h.raw("</td>")
            .td(text)
            .td(accepted_at.unwrap_or_default())
            .raw("</tr>");
        for a in after(*seq) {
            answer_row(&mut h, session, a);
            placed += 1;
        }
    }
    if let Some(damage) = &damage {
        h.raw("<tr><td colspan=\"5\" class=\"bad\">")
            .text(format!("The next frame cannot be read: {damage}"))
            .raw("</td></tr>");
    }
    h.raw("</tbody></table><div class=\"pager\">");
    if from > 1 {
        h.link(format!("/console/sessions/{session}"), "« first frames");
    }
    let damaged_seq = frames.last().map_or(from, |(s, _)| *s + 1);
    if damage.is_some() && damaged_seq < head {
        h.link(
            format!("/console/sessions/{session}?from={}", damaged_seq + 1),
            "frames after the damaged one »",
        );
    } else if frames.len() == FRAMES && last_shown < head {
        h.link(
            format!("/console/sessions/{session}?from={}", last_shown + 1),
            "later frames »",
        );
    }
    h.raw("</div><p class=\"note\">")
        .text(format!(
            "The journal keeps no commit time per frame: times are when this server answered (since {}); {placed} answers that wrote no frame are shown.",
            time(state.inner.console.started)
        ))
        .raw("</p>");
    Ok(frame(
        format!("Session {session}"),
        Nav::Sessions,
        logged_in,
        h,
    ))
}

/// `GET /console/sessions/{id}`.
pub(crate) async fn page(
    State(state): State<AppState>,
    Extension(LoggedIn(logged_in)): Extension<LoggedIn>,
    Path(id): Path<String>,
    Query(at): Query<At>,
) -> Response {
    render(&state, &id, &at, logged_in)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}
