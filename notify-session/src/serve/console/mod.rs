//! The operator console: read-only HTML pages served by `notify serve` under
//! `/console/` (the manual is `docs/console.md`). Server-rendered, no script, the
//! stylesheet embedded in the binary; every page has a stable URL whose query holds
//! its filters and cursors, so links and the back button work.
//!
//! By concern: `login.rs` (the login form, the cookie check in front of every page),
//! `cookie.rs` (the signed session token), `html.rs` (the one home of escaping and
//! the page frame), `pages/` (one file per page: its queries and its rendering),
//! `inspect.rs` ([`JournalInspect`]: the engine's figures, scrub and verify),
//! `census.rs` (the overview's counts, taken in the background), `observed.rs` (what
//! this server answered and the rates, kept in memory), `chart.rs` (the SVG chart),
//! `ticker.rs` (the background tasks).

mod census;
mod chart;
mod cookie;
mod html;
mod inspect;
mod login;
mod observed;
mod pages;
mod ticker;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::routing::{get, post};
use notify_journal::VerifyReport;
use notify_types::{SessionId, Timestamp, Uuid};

pub use inspect::{JournalCounts, JournalInspect, PgInspect};
pub(crate) use observed::AnswerKind;
pub(crate) use ticker::spawn;

use super::keys::KeySet;
use super::state::AppState;
use census::Census;
use cookie::CookieKey;
use observed::{Answer, Observed};

/// A verify the console ran, and when.
#[derive(Debug, Clone)]
pub(crate) struct VerifyRun {
    pub(crate) at: Timestamp,
    pub(crate) took: std::time::Duration,
    pub(crate) report: Result<VerifyReport, String>,
}

/// What the console keeps.
#[derive(Debug)]
pub(crate) struct Console {
    pub(crate) inspect: Option<Arc<dyn JournalInspect>>,
    keys: Arc<KeySet>,
    /// No login (the server runs unsigned on loopback).
    open: bool,
    /// The cookie gets `Secure` (the listener speaks TLS).
    secure: bool,
    cookie: CookieKey,
    pub(crate) observed: Observed,
    pub(crate) census: Mutex<Census>,
    pub(crate) verify: Mutex<Option<VerifyRun>>,
    pub(crate) started: Timestamp,
}

impl std::fmt::Debug for dyn JournalInspect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JournalInspect({})", self.engine())
    }
}

impl Console {
    /// The console of a server with `keys`; open without a login when `unsigned`.
    pub(crate) fn new(
        inspect: Option<Arc<dyn JournalInspect>>,
        keys: Arc<KeySet>,
        unsigned: bool,
        tls: bool,
    ) -> Self {
        Self {
            inspect,
            keys,
            open: unsigned,
            secure: tls,
            cookie: CookieKey::random(),
            observed: Observed::default(),
            census: Mutex::new(Census::default()),
            verify: Mutex::new(None),
            started: Timestamp::now(),
        }
    }
}

/// Notes an answer the API gave, for the session's timeline; a duplicate or a
/// collision also notes the session's head (the answer writes no frame, so the
/// timeline places it after the frame that was last when it was given).
pub(crate) async fn note(
    state: &AppState,
    session: SessionId,
    key: Uuid,
    kind: AnswerKind,
    seq: Option<u64>,
) {
    let head = match (kind, state.host()) {
        (AnswerKind::Duplicate | AnswerKind::Collision, Ok(host)) => {
            host.reader().last_seq(session).await.ok()
        }
        _ => None,
    };
    state.inner.console.observed.answer(Answer {
        at: Timestamp::now(),
        session,
        key,
        kind,
        seq,
        head,
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
}
