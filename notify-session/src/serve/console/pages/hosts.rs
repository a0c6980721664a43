//! `GET /console/hosts`: on PostgreSQL, every host of the fleet (the advertisements
//! in `serve_hosts` and every holder the `leases` table names): its URL, when it last
//! advertised, the sessions it holds, its expired leases and the leases it took over,
//! and when its leases run out (its last renewal plus the lease duration). On a redb
//! file there is one host: this server, whose lease is the file lock.

use axum::Extension;
use axum::extract::State;
use axum::response::Response;

use super::super::html::{Html, Nav, frame};
use super::super::login::LoggedIn;
use crate::serve::state::AppState;

/// The hosts page.
pub(crate) async fn page(
    State(state): State<AppState>,
    Extension(LoggedIn(logged_in)): Extension<LoggedIn>,
) -> Response {
    let mut h = Html::default();
    let me = state.host().ok().map(|host| host.holder_id());
    h.raw("<dl>")
        .dt(
            "this server",
            me.map_or_else(|| "starting".to_owned(), |m| m.to_string()),
        )
        .dt("its URL", &state.inner.base_url)
        .raw("</dl>");
    match state.inner.directory.hosts().await {
        None => {
            h.raw("<p class=\"note\">This server is the journal's only host: a redb file is locked by the one process that opened it, which holds every session's lease while it runs. There is no fleet, no renewal to show and no takeover.</p>");
        }
        Some(Err(e)) => {
            h.raw("<p class=\"bad\">").text(e).raw("</p>");
        }
        Some(Ok(rows)) => {
            h.raw("<table>")
                .thead(&[
                    "host (lease holder)",
                    "URL",
                    "last advertised",
                    "sessions held",
                    "expired leases",
                    "taken over (epoch > 1)",
                    "leases run until",
                ])
                .raw("<tbody>");
            for r in &rows {
                h.raw("<tr><td class=\"id\">").text(r.holder);
                if Some(r.holder) == me {
                    h.raw(" (this server)");
                }
                h.raw("</td>")
                    .td(r.url.as_deref().unwrap_or("not advertised"))
                    .td(r.seen_at.as_deref().unwrap_or("-"))
                    .raw("<td>")
                    .link(
                        format!("/console/sessions?owner={}", r.holder),
                        r.live_leases,
                    )
                    .raw("</td>")
                    .td(r.expired_leases)
                    .td(r.taken_over)
                    .td(r.leases_until.as_deref().unwrap_or("-"))
                    .raw("</tr>");
            }
            if rows.is_empty() {
                h.raw("<tr><td colspan=\"7\" class=\"note\">No host advertised and no lease held.</td></tr>");
            }
            h.raw("</tbody></table><p class=\"note\">The schema keeps each lease's current holder and epoch, not its history: a takeover shows as an epoch above 1. A host advertises every minute and withdraws at a clean shutdown; one that died stays listed with its expired leases until others adopt them.</p>");
        }
    }
    frame("Hosts", Nav::Hosts, logged_in, h)
}
