//! The console's door. A browser cannot sign each request, so the operator logs in
//! once with a key the server accepts (a `whsec_` secret or a read-only `whro_` key:
//! a key that can only read opens the console; see `keys.rs`), and the server sets a
//! cookie holding a token it tagged (`cookie.rs`): `HttpOnly`, `SameSite=Strict`,
//! `Path=/console`, `Secure` under TLS. Every page checks it (`require`): without a
//! valid one a page load (GET or HEAD) is sent to the login form (303), anything
//! else is 401.
//! A server started unsigned on loopback (`--insecure-unsigned`) has an open console.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Form};

use super::cookie::{COOKIE, LOGIN_TTL};
use super::html::{Html, html_response};
use crate::serve::keys::READ_ONLY_PREFIX;
use crate::serve::state::AppState;

/// Whether the request came through a login (so the page shows "Log out").
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoggedIn(pub(crate) bool);

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The console cookie's value, if the request carries one.
fn cookie_of(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// Where a login returns to: a path under `/console/` (printable ASCII, no `//`, no
/// `\\`, no `.` or `..` segment, even percent-encoded), or the console's root.
fn safe_next(next: Option<&str>) -> &str {
    match next {
        Some(n)
            if n.starts_with("/console/")
                && n.bytes().all(|b| b.is_ascii_graphic())
                && !n.contains("//")
                && !n.contains('\\')
                && !has_dot_segment(n) =>
        {
            n
        }
        _ => "/console/",
    }
}

/// Whether the path of `target` has a `.` or `..` segment (a browser resolves
/// `%2e` as `.`).
fn has_dot_segment(target: &str) -> bool {
    let path = target.split(['?', '#']).next().unwrap_or("");
    path.to_ascii_lowercase()
        .replace("%2e", ".")
        .split('/')
        .any(|segment| segment == "." || segment == "..")
}

/// The layer in front of every page.
pub(crate) async fn require(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let console = &state.inner.console;
    if console.open {
        request.extensions_mut().insert(LoggedIn(false));
        return next.run(request).await;
    }
    let verdict = match cookie_of(request.headers()) {
        Some(token) => console.cookie.check(token, now()).map_err(Some),
        None => Err(None),
    };
    match verdict {
        Ok(()) => {
            request.extensions_mut().insert(LoggedIn(true));
            next.run(request).await
        }
        Err(why) => {
            let retry = match why {
                Some(super::cookie::Refused::Expired) => "expired",
                Some(_) => "refused",
                None => "",
            };
            // A HEAD is a GET without its body: the same redirect.
            if matches!(*request.method(), Method::GET | Method::HEAD) {
                let target = request
                    .uri()
                    .path_and_query()
                    .map_or("/console/", |p| p.as_str());
                let mut location = format!("/console/login?next={}", percent(target));
                if !retry.is_empty() {
                    location.push_str("&why=");
                    location.push_str(retry);
                }
                let mut response = StatusCode::SEE_OTHER.into_response();
                if let Ok(v) = HeaderValue::from_str(&location) {
                    response.headers_mut().insert(header::LOCATION, v);
                }
                response
            } else {
                let mut h = Html::default();
                h.raw("<p>Log in at <a href=\"/console/login\">/console/login</a>.</p>");
                (StatusCode::UNAUTHORIZED, html_response(h)).into_response()
            }
        }
    }
}

/// `s` percent-encoded for a query value (everything but unreserved characters).
fn percent(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The login form's query.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct LoginQuery {
    next: Option<String>,
    why: Option<String>,
}

/// The form; `private`: a key typed in cannot be read on the way (see
/// `Console::private`), else it asks for a read-only key only.
fn login_page(
    status: StatusCode,
    next: &str,
    message: Option<&'static str>,
    private: bool,
) -> Response {
    let mut h = Html::default();
    h.raw("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><link rel=\"icon\" href=\"data:,\"><link rel=\"stylesheet\" href=\"/console/assets/console.css\"><title>Log in · notify console</title></head><body><form class=\"login\" method=\"post\" action=\"/console/login\"><h1>notify console</h1>");
    if let Some(m) = message {
        h.raw("<p class=\"bad\">").raw(m).raw("</p>");
    }
    if private {
        h.raw("<label for=\"key\">A key this server accepts: <code>whsec_…</code> or a read-only <code>whro_…</code></label>");
    } else {
        h.raw("<label for=\"key\">A read-only key <code>whro_…</code>: this server speaks plain HTTP to other machines, so never type an API secret here</label>");
    }
    h
        .raw("<input id=\"key\" name=\"key\" type=\"password\" autocomplete=\"off\" required autofocus>")
        .raw("<input type=\"hidden\" name=\"next\" value=\"")
        .text(next)
        .raw("\"><button class=\"primary\" type=\"submit\">Log in</button>")
        .raw("<p class=\"note\">The console only reads. A login lasts 12 hours, or until the server restarts.</p></form></body></html>");
    (status, html_response(h)).into_response()
}

/// `GET /console/login`.
pub(crate) async fn form(
    State(state): State<AppState>,
    axum::extract::Query(q): axum::extract::Query<LoginQuery>,
) -> Response {
    let message = match q.why.as_deref() {
        Some("expired") => Some("Your login expired: log in again."),
        Some(_) => Some("Your login was not accepted (the server restarted?): log in again."),
        None => None,
    };
    login_page(
        StatusCode::OK,
        safe_next(q.next.as_deref()),
        message,
        state.inner.console.private,
    )
}

/// The login form's fields.
#[derive(serde::Deserialize)]
pub(crate) struct LoginForm {
    key: String,
    next: Option<String>,
}

impl std::fmt::Debug for LoginForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginForm").finish_non_exhaustive()
    }
}

/// `POST /console/login`: a key the server accepts sets the cookie.
pub(crate) async fn submit(State(state): State<AppState>, Form(form): Form<LoginForm>) -> Response {
    let console = &state.inner.console;
    let next = safe_next(form.next.as_deref()).to_owned();
    // An API secret typed in here would cross the network in the clear (the API only
    // ever sends signatures): over plain HTTP off loopback, only a read-only key.
    if !console.private && !form.key.trim().starts_with(READ_ONLY_PREFIX) {
        tracing::warn!("console login refused: an API secret over plain HTTP");
        return login_page(
            StatusCode::UNAUTHORIZED,
            &next,
            Some(
                "This server speaks plain HTTP to other machines: log in with a read-only key (whro_…), never an API secret. A secret typed here has crossed the network in the clear: rotate it.",
            ),
            false,
        );
    }
    if !console.keys.opens_console(&form.key, console.cookie.salt()) {
        tracing::warn!("console login refused: the key is not one this server accepts");
        return login_page(
            StatusCode::UNAUTHORIZED,
            &next,
            Some("That key is not one this server accepts."),
            console.private,
        );
    }
    let cookie = format!(
        "{COOKIE}={}; Path=/console; Max-Age={}; HttpOnly; SameSite=Strict{}",
        console.cookie.mint(now()),
        LOGIN_TTL.as_secs(),
        if console.secure { "; Secure" } else { "" }
    );
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(c) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, c);
    }
    // `next` is printable ASCII (`safe_next`), so a header value; the root otherwise.
    let location =
        HeaderValue::from_str(&next).unwrap_or_else(|_| HeaderValue::from_static("/console/"));
    response.headers_mut().insert(header::LOCATION, location);
    response
}

/// `POST /console/logout`: clears the cookie.
pub(crate) async fn logout(Extension(_): Extension<LoggedIn>) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "notify_console=; Path=/console; Max-Age=0; HttpOnly; SameSite=Strict",
        ),
    );
    response
        .headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static("/console/login"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_returns_only_to_a_console_path() {
        assert_eq!(
            safe_next(Some("/console/sessions?state=live")),
            "/console/sessions?state=live"
        );
        assert_eq!(safe_next(Some("https://evil.example/")), "/console/");
        assert_eq!(safe_next(Some("/console//evil.example")), "/console/");
        assert_eq!(safe_next(Some("/v1/sessions")), "/console/");
        assert_eq!(safe_next(None), "/console/");
        assert_eq!(safe_next(Some("/console/a\nb")), "/console/");
        assert_eq!(safe_next(Some("/console/é")), "/console/");
        assert_eq!(safe_next(Some("/console/../v1/sessions")), "/console/");
        assert_eq!(safe_next(Some("/console/%2E%2e/v1")), "/console/");
        assert_eq!(safe_next(Some("/console/./x")), "/console/");
        assert_eq!(
            safe_next(Some("/console/sessions?after=a..b")),
            "/console/sessions?after=a..b"
        );
    }

    /// A server's state with a console that needs a login (no host: pages answer
    /// 503, which is past the door).
    fn state() -> AppState {
        super::super::kept::test_state(None, false)
    }

    async fn status_of(state: &AppState, cookie: Option<String>) -> (StatusCode, String) {
        use tower::ServiceExt as _;
        let app = super::super::router(state).with_state(state.clone());
        let mut request = axum::http::Request::get("/console/sessions");
        if let Some(c) = cookie {
            request = request.header(header::COOKIE, c);
        }
        let response = app
            .oneshot(request.body(axum::body::Body::empty()).unwrap_or_default())
            .await
            .unwrap_or_else(|e| match e {});
        let location = response
            .headers()
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        (response.status(), location)
    }

    #[tokio::test]
    async fn an_expired_or_forged_cookie_is_refused_a_fresh_one_passes() {
        let state = state();
        let key = &state.inner.console.cookie;
        let fresh = format!("{COOKIE}={}", key.mint(now()));
        let expired = format!("{COOKIE}={}", key.mint(now() - LOGIN_TTL.as_secs() - 1));
        let forged = format!(
            "{COOKIE}={}",
            super::super::cookie::CookieKey::random().mint(now())
        );
        let (status, location) = status_of(&state, Some(expired)).await;
        assert_eq!(
            (status, location.as_str()),
            (
                StatusCode::SEE_OTHER,
                "/console/login?next=/console/sessions&why=expired"
            )
        );
        let (status, location) = status_of(&state, Some(forged)).await;
        assert_eq!(
            (status, location.as_str()),
            (
                StatusCode::SEE_OTHER,
                "/console/login?next=/console/sessions&why=refused"
            )
        );
        let (status, location) = status_of(&state, None).await;
        assert_eq!(
            (status, location.as_str()),
            (
                StatusCode::SEE_OTHER,
                "/console/login?next=/console/sessions"
            )
        );
        // Past the door: the page itself (503 while the host is not started).
        let (status, _) = status_of(&state, Some(fresh)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; notify_console=v1.2.x; b=3"),
        );
        assert_eq!(cookie_of(&h), Some("v1.2.x"));
        assert_eq!(cookie_of(&HeaderMap::new()), None);
    }
}
