//! The console's pages, one file each: its query of the journal and its rendering.
//! Shared here: the error page, identifiers from paths and queries, and how states,
//! leases and times read.

pub(crate) mod command;
pub(crate) mod hosts;
pub(crate) mod integrity;
pub(crate) mod overview;
pub(crate) mod session;
pub(crate) mod sessions;

use std::time::Duration;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use notify_journal::{JournalError, LeaseInfo, SessionState};
use notify_types::{Timestamp, Uuid};

use super::html::{CSS, Html, Nav, frame};

/// The most frames one request reads to count pending notifications (restore reads a
/// session's log whole): the sessions page and a session's page stop there, and say
/// so, whatever the journal holds.
pub(crate) const FRAME_BUDGET: u64 = 10_000;

/// A page that could not be made: its status and what went wrong, in words.
#[derive(Debug)]
pub(crate) struct PageError {
    status: StatusCode,
    title: &'static str,
    detail: String,
}

impl PageError {
    /// A 400: `what` in the URL is not valid.
    pub(crate) fn bad(what: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            title: "Not a valid address",
            detail: what.into(),
        }
    }

    /// A 403: the request came from somewhere the console does not act for
    /// (`guard.rs`): `why`, in words.
    pub(crate) fn forbidden(why: impl Into<String>) -> Self {
        Self {
            status: StatusCode::FORBIDDEN,
            title: "Refused",
            detail: why.into(),
        }
    }

    /// A 503: the server is starting (its host is not ready).
    pub(crate) fn starting() -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            title: "Starting",
            detail:
                "the server's host has not finished its first adoption pass: reload in a moment"
                    .into(),
        }
    }

    /// A 500: the journal could not answer (its words, e.g. damage and where).
    pub(crate) fn journal(what: &str, e: &JournalError) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            title: "The journal could not answer",
            detail: format!("{what}: {}", crate::serve::error::error_chain(e)),
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let mut h = Html::default();
        h.raw("<p class=\"bad\">").text(&self.detail).raw("</p>");
        (self.status, frame(self.title, Nav::None, false, h)).into_response()
    }
}

/// `GET /console`: the overview lives at `/console/`.
pub(crate) async fn to_overview() -> Redirect {
    Redirect::permanent("/console/")
}

/// `GET /console/assets/console.css`.
pub(crate) async fn stylesheet() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        CSS,
    )
        .into_response()
}

/// A UUID from a path or query; `field` names it in the error.
pub(crate) fn uuid(field: &str, s: &str) -> Result<Uuid, PageError> {
    s.parse::<Uuid>()
        .ok()
        .filter(|u| !u.is_nil())
        .ok_or_else(|| PageError::bad(format!("{field} is not a UUID: {s:?}")))
}

/// A session's state in one word, with the time it changed.
pub(crate) fn state_words(state: &SessionState) -> (&'static str, String) {
    match state {
        SessionState::Live => ("live", String::new()),
        SessionState::Ended { ended_at, .. } => ("ended", format!("at {}", time(*ended_at))),
        SessionState::Purged(t) => (
            "purged",
            format!(
                "(ended {}, purged {}: only the tombstone is left)",
                time(t.ended_at),
                time(t.purged_at)
            ),
        ),
        _ => ("unknown", String::new()),
    }
}

/// A time to the second, UTC.
pub(crate) fn time(t: Timestamp) -> String {
    format!("{:.0}", t).replace('T', " ")
}

/// A duration to the tenth of a second.
pub(crate) fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// A lease as the sessions table shows it: holder, epoch, time left.
pub(crate) fn lease_cells(info: &LeaseInfo) -> (String, String, String) {
    let holder = info
        .holder
        .map_or_else(|| "none".to_owned(), |h| h.to_string());
    let left = match info.expires_in {
        Some(d) if info.live => secs(d),
        _ if info.holder.is_some() => "expired".to_owned(),
        _ => "released".to_owned(),
    };
    (holder, info.epoch.to_string(), left)
}
