//! `GET /console/integrity`: the background scrub (now, and each change this server
//! saw), and the last deep verify the console ran. `POST /console/integrity/verify`
//! starts one in the background, one at a time (a second POST while one runs starts
//! nothing and says so), waits a few seconds for it, then returns here; while it runs
//! the page says so and reloads itself. Damage is named in words: which session,
//! which frame, what is wrong.

use std::time::{Duration, Instant};

use axum::Extension;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use notify_journal::{EngineCheck, VerifyReport};
use notify_types::Timestamp;

use super::super::VerifyRun;
use super::super::html::{Html, Nav, frame_refreshing};
use super::super::login::LoggedIn;
use super::{secs, time};
use crate::serve::console::kept::{Busy, REST_FACTOR};
use crate::serve::state::{AppState, until_true};

/// The most problems a verify from the console names.
const PROBLEMS: usize = 50;
/// How long the POST waits for the verify it started before it returns to the page
/// (which then reloads itself until the verify is done).
pub(crate) const WAIT: Duration = Duration::from_secs(10);
/// Seconds between reloads of a page while its background run is under way.
pub(crate) const RELOAD: u32 = 2;

/// The page's query: `verify=already-running` after a POST that started nothing.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct Said {
    #[serde(default)]
    verify: String,
}

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
    Query(said): Query<Said>,
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
    let running = console.verify.running();
    if let Some(since) = running {
        h.raw("<p class=\"note\">")
            .text(format!(
                "A verify is running (started {}): this page reloads every {RELOAD} seconds until it is done.",
                time(since)
            ))
            .raw("</p>");
        if said.verify == "already-running" {
            h.raw("<p class=\"note\">A verify was already running: no second one was started.</p>");
        }
    }
    if let Some(rest) = console.verify.resting() {
        h.raw("<p class=\"note\">")
            .text(format!(
                "The next verify may start in {} s: after a run, the console waits {REST_FACTOR} times as long before another (a whole-journal check runs at most a fifth of the time).",
                rest.as_secs() + 1
            ))
            .raw("</p>");
    }
    match console.verify.last() {
        None if running.is_none() => {
            h.raw(
                "<p class=\"note\">No verify run from this console since the server started.</p>",
            );
        }
        None => {}
        Some(run) => {
            h.raw("<p>")
                .text(format!(
                    "{} {} (took {}).",
                    if running.is_some() {
                        "The last one ran"
                    } else {
                        "Run"
                    },
                    time(run.at),
                    secs(run.took)
                ))
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
    frame_refreshing(
        "Integrity",
        Nav::Integrity,
        logged_in,
        h,
        running.map(|_| RELOAD),
    )
}

/// `POST /console/integrity/verify`: starts the deep verify in the background unless
/// one runs (then it says so), waits up to [`WAIT`] for it, and sends the browser back
/// to the page (so a reload does not post again).
pub(crate) async fn run(State(state): State<AppState>) -> Response {
    let console = &state.inner.console;
    let Some(inspect) = console.inspect.clone() else {
        return Redirect::to("/console/integrity").into_response();
    };
    let ticket = match console.verify.begin() {
        Ok(ticket) => ticket,
        Err(Busy::Running) => {
            return Redirect::to("/console/integrity?verify=already-running").into_response();
        }
        Err(Busy::Resting(_)) => return Redirect::to("/console/integrity").into_response(),
    };
    let mut finished = console.verify.finished();
    let mut drain = state.drain_signal();
    tokio::spawn(async move {
        let started = Instant::now();
        // A shutdown abandons the run (the ticket, dropped, frees the flight).
        let report = tokio::select! {
            r = inspect.verify(PROBLEMS) => r.map_err(|e| e.to_string()),
            () = until_true(&mut drain) => return,
        };
        ticket.finish(VerifyRun {
            at: Timestamp::now(),
            took: started.elapsed(),
            report,
        });
    });
    // Done in time: the page shows the report; else it shows the run under way.
    let _ = tokio::time::timeout(WAIT, finished.changed()).await;
    Redirect::to("/console/integrity").into_response()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::body::Body;
    use axum::http::{Request, StatusCode, header};
    use notify_journal::{BoxFuture, CommitStats, JournalError, ScrubStatus};
    use tower::ServiceExt as _;

    use super::super::super::inspect::{JournalCounts, JournalInspect};

    /// A journal whose verify waits until released, counting how many began.
    struct Slow {
        began: AtomicUsize,
        began_signal: tokio::sync::Notify,
        release: tokio::sync::Semaphore,
    }

    impl Default for Slow {
        fn default() -> Self {
            Self {
                began: AtomicUsize::new(0),
                began_signal: tokio::sync::Notify::new(),
                release: tokio::sync::Semaphore::new(0),
            }
        }
    }

    impl Slow {
        async fn until_began(&self, n: usize) {
            loop {
                let signal = self.began_signal.notified();
                if self.began.load(Ordering::SeqCst) >= n {
                    return;
                }
                signal.await;
            }
        }
    }

    impl JournalInspect for Slow {
        fn engine(&self) -> &'static str {
            "slow"
        }
        fn location(&self) -> String {
            "nowhere".into()
        }
        fn counts(&self) -> BoxFuture<'_, Result<JournalCounts, JournalError>> {
            Box::pin(async { Err(JournalError::Closed) })
        }
        fn scrub(&self) -> Option<ScrubStatus> {
            None
        }
        fn commit_stats(&self) -> CommitStats {
            CommitStats::default()
        }
        fn verify(
            &self,
            _max_problems: usize,
        ) -> BoxFuture<'_, Result<notify_journal::VerifyReport, JournalError>> {
            Box::pin(async move {
                self.began.fetch_add(1, Ordering::SeqCst);
                self.began_signal.notify_waiters();
                let _ = self.release.acquire().await;
                Err(JournalError::Closed)
            })
        }
    }

    fn post(path: &str) -> Request<Body> {
        Request::post(path)
            .header(header::HOST, "127.0.0.1:8080")
            .body(Body::empty())
            .unwrap_or_default()
    }

    /// The body of the page at `path`.
    async fn page(app: &axum::Router, path: &str) -> String {
        let answer = app
            .clone()
            .oneshot(
                Request::get(path)
                    .header(header::HOST, "127.0.0.1:8080")
                    .body(Body::empty())
                    .unwrap_or_default(),
            )
            .await
            .unwrap_or_else(|e| match e {});
        let body = axum::body::to_bytes(answer.into_body(), 1 << 20)
            .await
            .unwrap_or_default();
        String::from_utf8_lossy(&body).into_owned()
    }

    #[tokio::test]
    async fn a_second_verify_while_one_runs_starts_nothing() {
        let slow = Arc::new(Slow::default());
        let inspect: Arc<dyn JournalInspect> = slow.clone();
        let state = super::super::super::kept::test_state(Some(inspect), true);
        let app = super::super::super::router(&state).with_state(state.clone());
        let first = tokio::spawn(app.clone().oneshot(post("/console/integrity/verify")));
        slow.until_began(1).await;
        let second = app.clone().oneshot(post("/console/integrity/verify"));
        let answer = tokio::select! {
            r = second => r.unwrap_or_else(|e| match e {}),
            () = slow.until_began(2) => panic!("a second verify began while one ran"),
        };
        assert_eq!(answer.status(), StatusCode::SEE_OTHER);
        let to = answer
            .headers()
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert_eq!(to, "/console/integrity?verify=already-running");
        assert_eq!(slow.began.load(Ordering::SeqCst), 1);
        // The page says one runs.
        let body = page(&app, "/console/integrity?verify=already-running").await;
        assert!(body.contains("A verify is running"), "{body}");
        assert!(body.contains("already running: no second one"), "{body}");
        slow.release.add_permits(1);
        let first = first
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|e| match e {});
        assert_eq!(first.status(), StatusCode::SEE_OTHER);
        // Its result is kept where the page reads it.
        let body = page(&app, "/console/integrity").await;
        assert!(body.contains("The verify could not read"), "{body}");
        assert_eq!(slow.began.load(Ordering::SeqCst), 1);
    }

    /// A shutdown abandons a verify the console started: the run ends with the drain
    /// (its flight freed, nothing kept), instead of holding the journal while the
    /// server exits.
    ///
    /// On the code before, the run went on until the journal answered.
    #[tokio::test]
    async fn a_shutdown_abandons_a_verify_under_way() {
        let slow = Arc::new(Slow::default());
        let inspect: Arc<dyn JournalInspect> = slow.clone();
        let state = super::super::super::kept::test_state(Some(inspect), true);
        let app = super::super::super::router(&state).with_state(state.clone());
        let posted = tokio::spawn(app.clone().oneshot(post("/console/integrity/verify")));
        slow.until_began(1).await;
        let mut finished = state.inner.console.verify.finished();
        state.begin_drain();
        tokio::time::timeout(std::time::Duration::from_secs(10), finished.changed())
            .await
            .expect("the verify ended with the drain")
            .unwrap_or_default();
        assert!(state.inner.console.verify.running().is_none());
        assert!(state.inner.console.verify.last().is_none(), "nothing kept");
        posted.abort();
    }
}
