//! `GET /console/sessions?state=&owner=&pending=&after=`: the sessions in ID order,
//! [`PAGE`] a page, with a keyset cursor (`after`: the last ID shown; never an
//! offset, so a page costs the same at the start and the end of a million sessions).
//! Filters (state, owner host, with pending) are applied while reading forward, the
//! cheap reads first (a session's state, then its lease), its head and pending only
//! for a session that can still be shown. One request examines at most [`SCAN`]
//! sessions and reads at most [`FRAME_BUDGET`] frames to count pending notifications:
//! a sparse filter answers a shorter page and a cursor to continue from, and a page
//! that stopped at its budget says so.

use axum::Extension;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use notify_journal::{JournalRead, SessionState};
use notify_types::{SessionId, Uuid};

use super::super::html::{Html, Nav, frame};
use super::super::login::LoggedIn;
use super::{FRAME_BUDGET, PageError, lease_cells, state_words, uuid};
use crate::serve::host::Host;
use crate::serve::state::AppState;

/// Rows a page shows.
pub(crate) const PAGE: usize = 50;
/// The most sessions one request examines.
pub(crate) const SCAN: usize = 2000;

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

/// A row's pending notifications, as far as this request counted them.
enum Pending {
    Counted(usize),
    /// The log is longer than a request's whole budget.
    TooLong,
    /// This request's budget was spent before this row.
    BudgetSpent,
    /// Not counted (restore failed, or the state is unknown): the session's page says.
    Unknown,
}

impl Pending {
    fn words(&self) -> String {
        match self {
            Self::Counted(n) => n.to_string(),
            Self::TooLong => format!("not counted: more than {FRAME_BUDGET} frames (see its page)"),
            Self::BudgetSpent => {
                "not counted: this page's budget was spent (see its page)".to_owned()
            }
            Self::Unknown => "see its page".to_owned(),
        }
    }
}

/// One row.
struct Row {
    session: SessionId,
    state: &'static str,
    state_detail: String,
    head: u64,
    pending: Pending,
    lease: (String, String, String),
}

/// What one request found: the rows, and where to continue (if anywhere).
struct Found {
    rows: Vec<Row>,
    next: Option<SessionId>,
    examined: usize,
    /// Frames read to count pending notifications.
    spent: u64,
    /// The page stopped before a session whose pending could not be counted within
    /// the budget (the "with pending" filter needs it).
    stopped_early: bool,
    /// Rows shown with their pending not counted, the budget being spent.
    uncounted: usize,
}

async fn lease_of(host: &dyn Host, session: SessionId) -> (String, String, String) {
    match host.lease_info(session).await {
        Ok(info) => lease_cells(&info),
        Err(e) => (format!("unknown: {e}"), "-".into(), "-".into()),
    }
}

/// The query's filters.
struct Want {
    state: Option<&'static str>,
    owner: Option<Uuid>,
    pending: bool,
}

/// What one session is, read cheapest first; `None` once a filter rules it out, or
/// (`Err(Stop)`) when its pending cannot be counted within the request's budget and
/// the filter needs it.
async fn row(
    host: &dyn Host,
    reader: &dyn JournalRead,
    session: SessionId,
    want: &Want,
    found: &mut Found,
) -> Result<Option<Row>, Stop> {
    let journal = |e: notify_journal::JournalError| {
        Stop::Error(PageError::journal(&format!("session {session}"), &e))
    };
    let state = reader.session_state(session).await.map_err(journal)?;
    let (word, detail) = state_words(&state);
    let live = matches!(state, SessionState::Live);
    if want.state.is_some_and(|s| s != word) || (want.pending && !live) {
        return Ok(None);
    }
    let lease = lease_of(host, session).await;
    if want.owner.is_some_and(|o| lease.0 != o.to_string()) {
        return Ok(None);
    }
    let head = reader.last_seq(session).await.map_err(journal)?;
    let pending = if live {
        if head > FRAME_BUDGET {
            Pending::TooLong
        } else if found.spent + head > FRAME_BUDGET {
            if want.pending {
                return Err(Stop::Budget);
            }
            found.uncounted += 1;
            Pending::BudgetSpent
        } else {
            found.spent += head;
            match crate::restore(session, reader).await {
                Ok(r) => Pending::Counted(r.pending_count()),
                Err(_) => Pending::Unknown,
            }
        }
    } else if state.is_ended() {
        Pending::Counted(0)
    } else {
        Pending::Unknown
    };
    if want.pending && matches!(pending, Pending::Counted(0)) {
        return Ok(None);
    }
    Ok(Some(Row {
        session,
        state: word,
        state_detail: detail,
        head,
        pending,
        lease,
    }))
}

/// Why a request stops before its page is full.
enum Stop {
    /// Its frame budget is spent.
    Budget,
    Error(PageError),
}

async fn find(state: &AppState, filter: &Filter) -> Result<Found, PageError> {
    let host = state.host().map_err(|_| PageError::starting())?;
    let reader = host.reader();
    let mut after = match filter.after.as_str() {
        "" => None,
        s => Some(SessionId::from_uuid(uuid("after", s)?)),
    };
    let want = Want {
        owner: match filter.owner.as_str() {
            "" => None,
            s => Some(uuid("owner", s)?),
        },
        state: match filter.state.as_str() {
            "" | "any" => None,
            "live" => Some("live"),
            "ended" => Some("ended"),
            "purged" => Some("purged"),
            s => {
                return Err(PageError::bad(format!(
                    "state must be live, ended or purged, not {s:?}"
                )));
            }
        },
        pending: !filter.pending.is_empty(),
    };
    let filtered = want.state.is_some() || want.owner.is_some() || want.pending;
    let mut found = Found {
        rows: Vec::new(),
        next: None,
        examined: 0,
        spent: 0,
        stopped_early: false,
        uncounted: 0,
    };
    let batch = if filtered { 200 } else { PAGE };
    loop {
        let ids = reader
            .sessions_after(after, batch)
            .await
            .map_err(|e| PageError::journal("the list of sessions", &e))?;
        let full = ids.len() == batch;
        for session in ids {
            match row(host.as_ref(), reader.as_ref(), session, &want, &mut found).await {
                Ok(Some(r)) => found.rows.push(r),
                Ok(None) => {}
                Err(Stop::Error(e)) => return Err(e),
                Err(Stop::Budget) => {
                    // Continue from the last session examined (this one is not).
                    found.stopped_early = true;
                    found.next = after;
                    return Ok(found);
                }
            }
            found.examined += 1;
            after = Some(session);
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
            .td(r.pending.words())
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
    if found.stopped_early {
        h.raw("<p class=\"note\">")
            .text(format!(
                "This page stopped early: its budget of {FRAME_BUDGET} frames read to count pending notifications was spent ({} read), and the next session's count would pass it. The next page continues from there.",
                found.spent
            ))
            .raw("</p>");
    } else if found.uncounted > 0 {
        h.raw("<p class=\"note\">")
            .text(format!(
                "{} sessions show no pending count: this page's budget of {FRAME_BUDGET} frames read to count them was spent ({} read).",
                found.uncounted, found.spent
            ))
            .raw("</p>");
    }
    h.raw("</div><p class=\"note\">")
        .text(format!(
            "{} sessions examined for this page, in ID order from the cursor (at most {SCAN} a request, and at most {FRAME_BUDGET} frames read to count pending); \
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
