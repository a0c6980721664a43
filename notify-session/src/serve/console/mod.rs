//! The operator console: read-only HTML pages served by `notify serve` under
//! `/console/` (the manual is `docs/console.md`). Server-rendered, no script, the
//! stylesheet embedded in the binary; every page has a stable URL whose query holds
//! its filters and cursors, so links and the back button work.
//!
//! By concern: `login.rs` (the login form, the cookie check in front of every page),
//! `cookie.rs` (the signed session token), `html.rs` (the one home of escaping and
//! the page frame), `pages/` (one file per page: its queries and its rendering),
//! `inspect.rs` ([`JournalInspect`]: the engine's figures, scrub and verify),
//! `kept.rs` (what the console keeps: [`Console`], and [`Flight`](kept::Flight), the
//! one-at-a-time background runs of verify and census), `census.rs` (the overview's
//! counts, taken in the background), `observed.rs` (what this server answered and the
//! rates, kept in memory), `chart.rs` (the SVG chart), `ticker.rs` (the background
//! tasks), `guard.rs` (where a request comes from: same-origin POSTs, loopback hosts
//! for an open console).

mod census;
mod chart;
mod cookie;
mod guard;
mod html;
mod inspect;
pub(super) mod kept;
mod login;
mod observed;
mod pages;
mod ticker;

use axum::Router;
use axum::routing::{get, post};
use notify_types::{SessionId, Timestamp, Uuid};

pub use inspect::{JournalCounts, JournalInspect, PgInspect};
pub(crate) use kept::{Console, VerifyRun};
pub(crate) use observed::AnswerKind;
pub(crate) use ticker::spawn;

use super::state::AppState;
use observed::Answer;

/// Notes an answer the API gave, for the session's timeline. No journal read: on the
/// hot path a duplicate or a collision costs a lock and a scan of the answers kept
/// (`observed.rs`); where it goes in the timeline is read when a page is rendered.
pub(crate) fn note(
    state: &AppState,
    session: SessionId,
    key: Uuid,
    kind: AnswerKind,
    seq: Option<u64>,
) {
    state.inner.console.observed.answer(Answer {
        at: Timestamp::now(),
        session,
        key,
        kind,
        seq,
        wrote_before: None,
    });
}

/// The console's routes, behind its login (`login.rs`), except the login itself and
/// the stylesheet.
pub(crate) fn router(state: &AppState) -> Router<AppState> {
    let pages = Router::new()
        .route("/console", get(pages::to_overview))
        .route("/console/", get(pages::overview::page))
        .route("/console/census", post(pages::overview::recount))
        .route("/console/sessions", get(pages::sessions::page))
        .route("/console/sessions/{session_id}", get(pages::session::page))
        .route(
            "/console/sessions/{session_id}/commands/{command_id}",
            get(pages::command::page),
        )
        .route("/console/hosts", get(pages::hosts::page))
        .route("/console/integrity", get(pages::integrity::page))
        .route("/console/integrity/verify", post(pages::integrity::run))
        .route("/console/logout", post(login::logout))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            login::require,
        ));
    Router::new()
        .route("/console/login", get(login::form).post(login::submit))
        .route("/console/assets/console.css", get(pages::stylesheet))
        .merge(pages)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::check,
        ))
}
