//! `GET /console/`: the journal (engine, where, version), its sessions by state and
//! what they have pending (the last census), appends and acknowledgements per second
//! over the last five minutes, and the scrub's last word.

use axum::Extension;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};

use super::super::chart;
use super::super::html::{Html, Nav, frame_refreshing};
use super::super::login::LoggedIn;
use super::integrity::{RELOAD, WAIT};
use super::{FRAME_BUDGET, secs, time};
use crate::serve::console::census::{self, MAX_PENDING, MAX_PENDING_FRAMES, MAX_WALK};
use crate::serve::console::kept::{Busy, REST_FACTOR};
use crate::serve::state::{AppState, until_true};

/// `POST /console/census`: takes a census in the background unless one is under way
/// (the five-minutely one or another "Count now": then it says so), waits up to
/// [`WAIT`] for it, then back to the overview (so a reload does not post again).
pub(crate) async fn recount(State(state): State<AppState>) -> Response {
    let Ok(host) = state.host() else {
        return Redirect::to("/console/").into_response();
    };
    let console = &state.inner.console;
    let ticket = match console.census.begin() {
        Ok(ticket) => ticket,
        Err(Busy::Running) => {
            return Redirect::to("/console/?census=already-running").into_response();
        }
        Err(Busy::Resting(_)) => return Redirect::to("/console/").into_response(),
    };
    let mut finished = console.census.finished();
    let reader = host.reader();
    let inspect = console.inspect.clone();
    let mut drain = state.drain_signal();
    tokio::spawn(async move {
        // A shutdown abandons the census (the ticket, dropped, frees the flight).
        tokio::select! {
            c = census::take(reader.as_ref(), inspect.as_ref()) => ticket.finish(c),
            () = until_true(&mut drain) => {}
        }
    });
    let _ = tokio::time::timeout(WAIT, finished.changed()).await;
    Redirect::to("/console/").into_response()
}

/// The overview's query: `census=already-running` after a POST that started nothing.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct Said {
    #[serde(default)]
    census: String,
}

/// The overview.
pub(crate) async fn page(
    State(state): State<AppState>,
    Extension(LoggedIn(logged_in)): Extension<LoggedIn>,
    Query(said): Query<Said>,
) -> Response {
    let console = &state.inner.console;
    let census = console.census.last().unwrap_or_default();
    let counting = console.census.running();
    let mut h = Html::default();
    h.raw("<div class=\"cards\"><section><h2>Journal</h2><dl>");
    match &console.inspect {
        Some(i) => {
            h.dt("engine", i.engine()).dt("where", i.location());
            match &census.counts {
                Some(Ok(c)) => {
                    h.dt(c.version_name, c.version);
                    if c.frames_estimated {
                        h.dt("frames (the engine's estimate)", c.frames);
                    } else {
                        h.dt("frames", c.frames);
                    }
                    if let Some(s) = c.sessions {
                        h.dt("sessions (engine's count)", s);
                    }
                }
                Some(Err(e)) => {
                    h.dt("figures", format!("could not be read: {e}"));
                }
                None => {
                    h.dt("figures", "not read yet");
                }
            }
        }
        None => {
            h.dt(
                "engine",
                "not known: the application gave the console no view of its journal",
            );
        }
    }
    if let Ok(host) = state.host() {
        let status = host.status();
        h.dt("this host", host.holder_id()).dt(
            "sessions served",
            format!(
                "{} (capacity {}){}",
                status.sessions.len(),
                status.capacity,
                if status.shut_down { ", shut down" } else { "" }
            ),
        );
    } else {
        h.dt("this host", "starting");
    }
    h.dt("serving since", time(console.started));
    h.raw("</dl></section><section><h2>Sessions</h2><dl>");
    match census.at {
        Some(at) => {
            h.dt("live", census.live)
                .dt("ended", census.ended)
                .dt("purged (tombstones)", census.purged)
                .dt(
                    "pending notifications",
                    if census.pending_sessions < census.live {
                        format!(
                            "{} in {} of the live sessions (the census restores at most {MAX_PENDING}, of at most {FRAME_BUDGET} frames each and {MAX_PENDING_FRAMES} in all)",
                            census.pending, census.pending_sessions
                        )
                    } else {
                        census.pending.to_string()
                    },
                )
                .dt(
                    "counted",
                    format!(
                        "{} ({} sessions walked in {}{})",
                        time(at),
                        census.walked,
                        secs(census.took),
                        if census.truncated {
                            format!("; stopped at {MAX_WALK}")
                        } else {
                            String::new()
                        }
                    ),
                );
            if let Some(e) = &census.error {
                h.dt("census problem", e);
            }
        }
        None => {
            h.dt(
                "counted",
                "not yet: the first census runs once the host is ready (then every five minutes)",
            );
        }
    }
    if let Some(since) = counting {
        h.dt(
            "counting now",
            format!(
                "since {}{} (this page reloads every {RELOAD} seconds until it is done)",
                time(since),
                if said.census == "already-running" {
                    ": a census was already under way, no second one was started"
                } else {
                    ""
                }
            ),
        );
    }
    if let Some(rest) = console.census.resting() {
        h.dt(
            "next count",
            format!(
                "may start in {} s (after a census the console waits {REST_FACTOR} times as long before another)",
                rest.as_secs() + 1
            ),
        );
    }
    h.raw("</dl><form method=\"post\" action=\"/console/census\"><button type=\"submit\">Count now</button></form></section><section><h2>Scrub</h2><dl>");
    match console.observed.scrub_history().first() {
        Some(s) => {
            h.dt("state", &s.state)
                .dt("clean passes", s.clean_passes)
                .dt("since", time(s.at));
        }
        None if console
            .inspect
            .as_ref()
            .is_some_and(|i| i.scrub().is_none()) =>
        {
            h.dt(
                "state",
                "this engine has no background scrub: run verify on the Integrity page",
            );
        }
        None => {
            h.dt("state", "not known");
        }
    }
    h.raw("</dl><p><a href=\"/console/integrity\">Integrity</a></p></section></div>");
    let samples = console.observed.samples();
    let (appends, acks) = samples
        .iter()
        .rev()
        .take(60)
        .fold((0, 0), |(a, k), s| (a + s.appends, k + s.acks));
    h.raw("<h2>Appends and acknowledgements per second</h2><p class=\"legend\"><span class=\"a\">■ appends</span><span class=\"k\">■ acknowledgements</span> ")
        .text(format!(
            "last minute: {appends} appends, {acks} acknowledgements (appends: every frame the journal wrote or answered; acknowledgements: those this server journaled)"
        ))
        .raw("</p>")
        .push(chart::rates(&samples));
    frame_refreshing(
        "Overview",
        Nav::Overview,
        logged_in,
        h,
        counting.map(|_| RELOAD),
    )
}
