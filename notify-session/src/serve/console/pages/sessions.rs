//! `GET /console/sessions?state=&owner=&pending=&after=`: the sessions in ID order,
//! [`PAGE`] a page, with a keyset cursor (`after`: the last ID shown; never an
//! offset, so a page costs the same at the start and the end of a million sessions).
//! Filters (state, owner host, with pending) are applied while reading forward, and
//! one request examines at most [`SCAN`] sessions: a sparse filter answers a shorter
//! page and a cursor to continue from.

use axum::Extension;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use notify_journal::{JournalRead, SessionState};
use notify_types::{SessionId, Uuid};

use super::super::html::{Html, Nav, frame};
use super::super::login::LoggedIn;
use super::{PageError, lease_cells, state_words, uuid};
use crate::serve::host::Host;
use crate::serve::state::AppState;

/// Rows a page shows.
pub(crate) const PAGE: usize = 50;
/// The most sessions one request examines.
pub(crate) const SCAN: usize = 2000;
/// Sessions with a longer log show no pending count here (restore reads the whole
/// log): their own page has it.
const PENDING_MAX_HEAD: u64 = 10_000;

/// The page's query: filters and the cursor.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct Filter {
    #[serde(default)]
    state: String,
    #[serde(default)]
    owner: String,
    #[serde(default)]
    pending: String,
    #[serde(default)]
    after: String,
}

/// One row.
struct Row {
    session: SessionId,
    state: &'static str,
    state_detail: String,
    head: u64,
    pending: Option<usize>,
    lease: (String, String, String),
}

/// What one request found: the rows, and where to continue (if anywhere).
struct Found {
    rows: Vec<Row>,
    next: Option<SessionId>,
    examined: usize,
}

async fn row(
    host: &dyn Host,
    reader: &dyn JournalRead,
    session: SessionId,
) -> Result<Row, PageError> {
    let state = reader
        .session_state(session)
        .await
        .map_err(|e| PageError::journal(&format!("session {session}"), &e))?;
    let head = reader
        .last_seq(session)
        .await
        .map_err(|e| PageError::journal(&format!("session {session}"), &e))?;
    let pending = if matches!(state, SessionState::Live) && head <= PENDING_MAX_HEAD {
        crate::restore(session, reader)
            .await
            .ok()
            .map(|r| r.pending_count())
    } else if state.is_ended() {
        Some(0)
    } else {
        None
    };
    let lease = match host.lease_info(session).await {
        Ok(info) => lease_cells(&info),
        Err(e) => (format!("unknown: {e}"), "-".into(), "-".into()),
    };
    let (word, detail) = state_words(&state);
    Ok(Row {
        session,
        state: word,
        state_detail: detail,
        head,
        pending,
        lease,
    })
}

async fn find(state: &AppState, filter: &Filter) -> Result<Found, PageError> {
    let host = state.host().map_err(|_| PageError::starting())?;
    let reader = host.reader();
    let mut after = match filter.after.as_str() {
        "" => None,
        s => Some(SessionId::from_uuid(uuid("after", s)?)),
    };
    let owner: Option<Uuid> = match filter.owner.as_str() {
        "" => None,
        s => Some(uuid("owner", s)?),
    };
    let want_state = match filter.state.as_str() {
        "" | "any" => None,
        s @ ("live" | "ended" | "purged") => Some(s),
        s => {
            return Err(PageError::bad(format!(
                "state must be live, ended or purged, not {s:?}"
            )));
        }
    };
    let with_pending = !filter.pending.is_empty();
    let filtered = want_state.is_some() || owner.is_some() || with_pending;
    let mut found = Found {
        rows: Vec::new(),
        next: None,
        examined: 0,
    };
    let batch = if filtered { 200 } else { PAGE };
    loop {
        let ids = reader
            .sessions_after(after, batch)
            .await
            .map_err(|e| PageError::journal("the list of sessions", &e))?;
        let full = ids.len() == batch;
        for session in ids {
            found.examined += 1;
            after = Some(session);
            let r = row(host.as_ref(), reader.as_ref(), session).await?;
            let keep = want_state.is_none_or(|s| s == r.state)
                && owner.is_none_or(|o| r.lease.0 == o.to_string())
                && (!with_pending || r.pending.is_some_and(|p| p > 0));
            if keep {
                found.rows.push(r);
            }
            if found.rows.len() == PAGE || found.examined == SCAN {
                // A cursor only if there is more to read.
                let more = reader
                    .sessions_after(Some(session), 1)
                    .await
                    .map_err(|e| PageError::journal("the list of sessions", &e))?;
                found.next = more.first().map(|_| session);
                return Ok(found);
            }
        }
        if !full {
            return Ok(found);
        }
    }
}

/// A link to this page with `filter` and the cursor `after`.
fn href(filter: &Filter, after: SessionId) -> String {
    let mut q = format!("/console/sessions?after={after}");
    for (name, value) in [
        ("state", &filter.state),
        ("owner", &filter.owner),
        ("pending", &filter.pending),
    ] {
        if !value.is_empty() {
            q.push_str(&format!(
                "&{name}={}",
                value.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "")
            ));
        }
    }
    q
}

/// The sessions page.
pub(crate) async fn page_of(state: &AppState, filter: &Filter, logged_in: bool) -> Response {
    let found = match find(state, filter).await {
        Ok(f) => f,
        Err(e) => return e.into_response(),
    };
    let mut h = Html::default();
    h.raw("<form class=\"filters\" method=\"get\" action=\"/console/sessions\"><label>state<select name=\"state\">");
    for (value, label) in [
        ("", "any"),
        ("live", "live"),
        ("ended", "ended"),
        ("purged", "purged"),
    ] {
        h.raw(if filter.state == value {
            "<option selected value=\""
        } else {
            "<option value=\""
        })
        .raw(value)
        .raw("\">")
        .raw(label)
        .raw("</option>");
    }
    h.raw("</select></label><label>owner host (lease holder)<input name=\"owner\" size=\"38\" value=\"")
        .text(&filter.owner)
        .raw("\"></label><label>with pending<input type=\"checkbox\" name=\"pending\" value=\"1\"")
        .raw(if filter.pending.is_empty() { ">" } else { " checked>" })
        .raw("</label><button class=\"primary\">Filter</button></form>");
    h.raw("<table>")
        .thead(&[
            "session",
            "state",
            "head",
            "pending",
            "owner (lease holder)",
            "epoch",
            "lease left",
        ])
        .raw("<tbody>");
    for r in &found.rows {
        h.raw("<tr><td class=\"id\">")
            .link(format!("/console/sessions/{}", r.session), r.session)
            .raw("</td><td title=\"")
            .text(&r.state_detail)
            .raw("\">")
            .text(r.state)
            .raw("</td>")
            .td(r.head)
            .td(r
                .pending
                .map_or_else(|| "see its page".to_owned(), |p| p.to_string()))
            .raw("<td class=\"id\">")
            .text(&r.lease.0)
            .raw("</td>")
            .td(&r.lease.1)
            .td(&r.lease.2)
            .raw("</tr>");
    }
    if found.rows.is_empty() {
        h.raw("<tr><td colspan=\"7\" class=\"note\">No sessions here.</td></tr>");
    }
    h.raw("</tbody></table><div class=\"pager\">");
    if !filter.after.is_empty() {
        h.raw("<a href=\"/console/sessions\">« first page</a>");
    }
    if let Some(next) = found.next {
        h.link(href(filter, next), "next page »");
    }
    let redb = state
        .inner
        .console
        .inspect
        .as_ref()
        .is_some_and(|i| i.engine() == "redb");
    h.raw("</div><p class=\"note\">")
        .text(format!(
            "{} sessions examined for this page, in ID order from the cursor (at most {SCAN} a request); \
             a session is listed once it has a frame. Pending: appended and neither consumed nor abandoned.{}",
            found.examined,
            if redb {
                " On a redb file this server holds every session's lease (the file lock)."
            } else {
                ""
            }
        ))
        .raw("</p>");
    frame("Sessions", Nav::Sessions, logged_in, h)
}

/// `GET /console/sessions`.
pub(crate) async fn page(
    State(state): State<AppState>,
    Extension(LoggedIn(logged_in)): Extension<LoggedIn>,
    Query(filter): Query<Filter>,
) -> Response {
    page_of(&state, &filter, logged_in).await
}
