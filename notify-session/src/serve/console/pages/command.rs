//! `GET /console/sessions/{s}/commands/{c}`: the life of one command ID in its
//! session (command IDs are keyed per session): appended (its seq; the time only if
//! this server answered it), dispatched, consumed or abandoned (the derived event
//! IDs, one index lookup each), the session ended or purged (its tombstone), and the
//! answer a retry would get now, by the contract's rules.

use axum::Extension;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use notify_journal::{JournalError, SessionState};
use notify_types::{
    CommandId, JournalRecord, LoopId, SessionId, abandoned_event_id, consumed_event_id,
};

use super::super::html::{Html, Nav, frame};
use super::super::login::LoggedIn;
use super::{PageError, state_words, time, uuid};
use crate::Session;
use crate::serve::locate::payload_digest;
use crate::serve::state::AppState;

async fn render(
    state: &AppState,
    s: &str,
    c: &str,
    logged_in: bool,
) -> Result<Response, PageError> {
    let session = SessionId::from_uuid(uuid("session", s)?);
    let command = CommandId::from_uuid(uuid("command", c)?);
    let host = state.host().map_err(|_| PageError::starting())?;
    let reader = host.reader();
    let what = format!("command {command} of session {session}");
    let journal = |e: JournalError| PageError::journal(&what, &e);
    let st = reader.session_state(session).await.map_err(journal)?;
    let (word, detail) = state_words(&st);
    let mut h = Html::default();
    h.raw("<dl>")
        .dt("command", command)
        .raw("<dt>session</dt><dd class=\"id\">")
        .link(format!("/console/sessions/{session}"), session)
        .raw("</dd>")
        .dt("session state", format!("{word} {detail}"));
    let answers: Vec<_> = state
        .inner
        .console
        .observed
        .answers_for(session)
        .into_iter()
        .filter(|a| a.key == *command.as_uuid())
        .collect();
    let retry: String;
    if let SessionState::Purged(t) = &st {
        h.dt(
            "journal",
            format!(
                "the session was purged {}: its frames and index are gone, only the tombstone (last seq {}) is left",
                time(t.purged_at),
                t.last_seq
            ),
        );
        retry = "410 ended (purged): any retry is refused, whatever its body".to_owned();
    } else {
        let seq = reader
            .lookup(session, *command.as_uuid())
            .await
            .map_err(journal)?;
        let record = match seq {
            Some(seq) => reader
                .replay(session, seq, 1)
                .await
                .map_err(journal)?
                .into_iter()
                .next()
                .map(|(_, r)| r),
            None => None,
        };
        match (seq, &record) {
            (Some(seq), Some(JournalRecord::Command(n))) => {
                let accepted = answers
                    .iter()
                    .find(|a| matches!(a.kind, crate::serve::console::AnswerKind::Accepted))
                    .map_or_else(
                        || "time not known: the journal keeps no commit time, and this server did not append it".to_owned(),
                        |a| time(a.at),
                    );
                h.dt("appended", format!("seq {seq}, {accepted}"))
                    .dt("loop", n.loop_id())
                    .dt(
                        "completion",
                        format!(
                            "process {} {} ({})",
                            n.notification().process_handle,
                            n.notification().state.name(),
                            n.notification().reason.name()
                        ),
                    )
                    .dt(
                        "dispatched",
                        "to its loop once appended (append before dispatch); after a restart or a move, restore hands it out again until it is consumed",
                    );
                let consumed = reader
                    .lookup(session, *consumed_event_id(command).as_uuid())
                    .await
                    .map_err(journal)?;
                let abandoned = reader
                    .lookup(session, *abandoned_event_id(command).as_uuid())
                    .await
                    .map_err(journal)?;
                h.dt(
                    "consumed",
                    consumed.map_or_else(
                        || "no".to_owned(),
                        |s| format!("yes: acknowledged, seq {s}"),
                    ),
                )
                .dt(
                    "abandoned",
                    abandoned.map_or_else(
                        || "no".to_owned(),
                        |s| format!("yes: pending when the session ended, seq {s}"),
                    ),
                );
                let digest = payload_digest(
                    record
                        .as_ref()
                        .unwrap_or(&JournalRecord::Command(n.clone())),
                );
                let journal_answer = format!(
                    "the same body: 200 duplicate of seq {seq} (nothing written){}; another body under this ID: 409 collision, stored_sha256 {digest}",
                    if st.is_ended() {
                        ", even though the session ended"
                    } else {
                        ""
                    }
                );
                retry = if st.is_ended() {
                    // An ended session answers from its journal alone.
                    journal_answer
                } else {
                    live_retry(
                        host.session(session).as_ref(),
                        Some(n.loop_id()),
                        &journal_answer,
                    )
                };
            }
            (Some(seq), _) => {
                h.dt(
                    "journal",
                    format!("seq {seq} holds this ID, but not as a completion"),
                );
                retry = "409 collision: the ID names another record".to_owned();
            }
            (None, _) => {
                h.dt(
                    "journal",
                    "this session's log does not hold this command ID",
                );
                let held = host.session(session);
                // Another host's live lease: the API routes the delivery there first
                // (a session with no frame may be open on another host).
                let elsewhere = match &held {
                    None => host
                        .lease_info(session)
                        .await
                        .is_ok_and(|l| l.live && l.holder != Some(host.holder_id())),
                    Some(_) => false,
                };
                retry = if st.is_ended() {
                    "410 ended: the session takes no new command".to_owned()
                } else if elsewhere {
                    "not served here: a delivery here is answered not_owner (307 to the host whose lease it is, or 421), and answered there".to_owned()
                } else if held.is_none() && reader.last_seq(session).await.map_err(journal)? == 0 {
                    "404 session_not_found: the session has no frame and is not open here (open it with PUT first)".to_owned()
                } else {
                    live_retry(
                        held.as_ref(),
                        None,
                        "201 accepted: a delivery now would be new",
                    )
                };
            }
        }
    }
    h.dt("a retry now", retry).raw("</dl>");
    h.raw("<h2>Answers this server gave</h2>");
    if answers.is_empty() {
        h.raw("<p class=\"note\">None since this server started.</p>");
    } else {
        h.raw("<table>")
            .thead(&["at", "answer", "seq"])
            .raw("<tbody>");
        for a in &answers {
            h.raw("<tr>")
                .td(time(a.at))
                .td(a.kind.word())
                .td(a.seq.map_or_else(String::new, |s| s.to_string()))
                .raw("</tr>");
        }
        h.raw("</tbody></table>");
    }
    Ok(frame(
        format!("Command {command}"),
        Nav::Sessions,
        logged_in,
        h,
    ))
}

/// `GET /console/sessions/{s}/commands/{c}`.
pub(crate) async fn page(
    State(state): State<AppState>,
    Extension(LoggedIn(logged_in)): Extension<LoggedIn>,
    Path((s, c)): Path<(String, String)>,
) -> Response {
    render(&state, &s, &c, logged_in)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// What a retry of a live session's command would be answered: `journal_answer` once it
/// reaches the journal, which only a host serving the session with the command's loop
/// (`loop_id`, when known) registered lets it do (the contract checks the loop before
/// the journal).
fn live_retry(held: Option<&Session>, loop_id: Option<LoopId>, journal_answer: &str) -> String {
    match (held, loop_id) {
        (None, _) => format!(
            "not served here now: a delivery here is answered not_owner (307 or 421), or opens the session here if no host serves it; then {journal_answer}, once its loop is registered (404 loop_not_found before)"
        ),
        (Some(s), Some(l)) if s.loops().contains(&l) => journal_answer.to_owned(),
        (Some(_), Some(l)) => format!(
            "404 loop_not_found: loop {l} is not registered here (nothing written); once it is, {journal_answer}"
        ),
        (Some(_), None) => format!(
            "{journal_answer} if its loop is registered here, else 404 loop_not_found (nothing written)"
        ),
    }
}
