//! `GET /console/integrity`: the background scrub (now, and each change this server
//! saw), and the last deep verify the console ran (`POST /console/integrity/verify`
//! runs one, then returns here). Damage is named in words: which session, which
//! frame, what is wrong.

use std::time::Instant;

use axum::Extension;
use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use notify_journal::{EngineCheck, VerifyReport};
use notify_types::Timestamp;

use super::super::VerifyRun;
use super::super::html::{Html, Nav, frame};
use super::super::login::LoggedIn;
use super::{secs, time};
use crate::serve::state::AppState;

/// The most problems a verify from the console names.
const PROBLEMS: usize = 50;

fn report(h: &mut Html, r: &VerifyReport) {
    if r.is_clean() {
        h.raw("<p class=\"good\">Clean: every frame's checksum and decoding, every log contiguous, index and frames one to one.</p>");
    } else {
        h.raw("<p class=\"bad\">Damaged: ")
            .text(format!("{} problem(s) found", r.problem_count))
            .raw("</p><ul class=\"problems\">");
        for p in &r.problems {
            h.raw("<li>").text(p).raw("</li>");
        }
        h.raw("</ul>");
    }
    h.raw("<dl>")
        .dt("sessions", r.sessions)
        .dt("frames", r.frames);
    h.dt(
        "storage engine's page check",
        match &r.engine {
            EngineCheck::Clean => "clean".to_owned(),
            EngineCheck::Damaged(d) => format!("damaged: {d}"),
            EngineCheck::NotRun => {
                "not run: it needs the file to itself (`notify verify` on a stopped server)"
                    .to_owned()
            }
            other => format!("{other:?}"),
        },
    )
    .raw("</dl>");
}

/// The integrity page.
pub(crate) async fn page(
    State(state): State<AppState>,
    Extension(LoggedIn(logged_in)): Extension<LoggedIn>,
) -> Response {
    let console = &state.inner.console;
    let mut h = Html::default();
    h.raw("<h2>Background scrub</h2>");
    let history = console.observed.scrub_history();
    match (&console.inspect, history.is_empty()) {
        (Some(i), true) if i.scrub().is_none() => {
            h.raw(
                "<p class=\"note\">This engine has no background scrub: run the verify below.</p>",
            );
        }
        (None, _) => {
            h.raw("<p class=\"note\">Not known: the application gave the console no view of its journal.</p>");
        }
        _ => {
            if let Some(now) = history.first() {
                h.raw(if now.damaged {
                    "<p class=\"bad\">"
                } else {
                    "<p>"
                })
                .text(&now.state)
                .raw("</p>");
            }
            h.raw("<table>")
                .thead(&["seen at", "state", "clean passes"])
                .raw("<tbody>");
            for s in &history {
                h.raw("<tr>")
                    .td(time(s.at))
                    .td(&s.state)
                    .td(s.clean_passes)
                    .raw("</tr>");
            }
            h.raw("</tbody></table><p class=\"note\">Each change of the scrub this server saw since it started; the scrub reads the whole journal again and again at a bounded pace, and damage it finds stops appends.</p>");
        }
    }
    h.raw("<h2>Verify</h2>");
    let last = console
        .verify
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    match last {
        None => {
            h.raw(
                "<p class=\"note\">No verify run from this console since the server started.</p>",
            );
        }
        Some(run) => {
            h.raw("<p>")
                .text(format!("Run {} (took {}).", time(run.at), secs(run.took)))
                .raw("</p>");
            match &run.report {
                Ok(r) => report(&mut h, r),
                Err(e) => {
                    h.raw("<p class=\"bad\">The verify could not read: ")
                        .text(e)
                        .raw("</p>");
                }
            }
        }
    }
    if console.inspect.is_some() {
        h.raw("<form method=\"post\" action=\"/console/integrity/verify\"><button class=\"primary\" type=\"submit\">Run verify now</button> <span class=\"note\">Reads the whole journal in one snapshot while appends go on.</span></form>");
    }
    frame("Integrity", Nav::Integrity, logged_in, h)
}

/// `POST /console/integrity/verify`: runs the deep verify, keeps its report, and
/// sends the browser back to the page (so a reload does not run it again).
pub(crate) async fn run(State(state): State<AppState>) -> Response {
    let console = &state.inner.console;
    let Some(inspect) = &console.inspect else {
        return Redirect::to("/console/integrity").into_response();
    };
    let started = Instant::now();
    let report = inspect.verify(PROBLEMS).await.map_err(|e| e.to_string());
    *console
        .verify
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(VerifyRun {
        at: Timestamp::now(),
        took: started.elapsed(),
        report,
    });
    Redirect::to("/console/integrity").into_response()
}
