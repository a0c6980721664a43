//! Where a request to the console comes from, checked before anything else: a POST
//! (the only requests that make the server do work) must come from the console's own
//! pages, not from another site's page in the operator's browser (`Sec-Fetch-Site`,
//! else `Origin` against `Host`); and an open console (unsigned, on loopback) answers
//! only requests addressed to a loopback name, so a DNS name of an attacker's that
//! resolves to 127.0.0.1 (DNS rebinding) reads nothing. Refusals are 403 with the
//! console's error page.

use std::net::IpAddr;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::pages::PageError;
use crate::serve::state::AppState;

/// The layer in front of every console route (the login's too).
pub(crate) async fn check(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let host = host_of(&request);
    if state.inner.console.open {
        match host.as_deref() {
            Some(h) if is_loopback(h) => {}
            Some(h) => {
                return PageError::forbidden(format!(
                    "this console has no login, so it answers only requests addressed to a loopback name or address (localhost, 127.0.0.1, [::1]), not {h:?}"
                ))
                .into_response();
            }
            None => {
                return PageError::forbidden(
                    "this console has no login, so it answers only requests that name their host (a loopback name or address)",
                )
                .into_response();
            }
        }
    }
    if !matches!(*request.method(), Method::GET | Method::HEAD)
        && let Err(why) = same_origin(request.headers(), host.as_deref())
    {
        return PageError::forbidden(why).into_response();
    }
    next.run(request).await
}

/// The host the request names: its URI's authority (HTTP/2) or its `Host` header.
fn host_of(request: &Request) -> Option<String> {
    request
        .uri()
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| {
            request
                .headers()
                .get(header::HOST)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        })
}

/// Whether `authority` (`name[:port]`, `[v6][:port]`) is `localhost` or a loopback
/// address.
fn is_loopback(authority: &str) -> bool {
    let name = match authority.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((v6, port)) if port.is_empty() || port.starts_with(':') => v6,
            _ => return false,
        },
        None => match authority.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            Some(_) => return false,
            None => authority,
        },
    };
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A state-changing request comes from this console's own pages: `Sec-Fetch-Site`
/// says `same-origin` (or `none`: the operator's own action), or, from a browser that
/// does not send it, `Origin` names this host. A request with neither (a command-line
/// client) is let through: it carries no browser's cookie or ambient access.
fn same_origin(headers: &HeaderMap, host: Option<&str>) -> Result<(), String> {
    if let Some(site) = headers.get("sec-fetch-site") {
        return match site.to_str() {
            Ok("same-origin" | "none") => Ok(()),
            Ok(other) => Err(format!(
                "a request from another site's page (Sec-Fetch-Site: {other}): the console acts only on its own forms"
            )),
            Err(_) => Err("an unreadable Sec-Fetch-Site header".to_owned()),
        };
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    // "null": an origin the sending page hid (its own `Referrer-Policy: no-referrer`).
    // The console's pages send `same-origin` (`html.rs`), so their forms name their
    // origin: a "null" one comes from elsewhere, and is refused below.
    let origin = origin.to_str().unwrap_or("");
    let authority = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    match (authority, host) {
        (Some(a), Some(h)) if a.eq_ignore_ascii_case(h) => Ok(()),
        _ => Err(format!(
            "a request from another origin ({origin:?}, not this console's): the console acts only on its own forms"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_and_addresses() {
        for yes in [
            "localhost",
            "LOCALHOST:8080",
            "127.0.0.1",
            "127.0.0.1:8080",
            "127.5.6.7:1",
            "[::1]",
            "[::1]:8080",
        ] {
            assert!(is_loopback(yes), "{yes}");
        }
        for no in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "10.0.0.1:80",
            "[::2]:80",
            "[::1]x",
            "127.0.0.1:x",
            "",
        ] {
            assert!(!is_loopback(no), "{no}");
        }
    }

    #[test]
    fn only_this_origin_may_post() {
        let with = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, axum::http::HeaderValue::from_static(v));
            }
            h
        };
        let host = Some("127.0.0.1:8080");
        assert!(same_origin(&with(&[("sec-fetch-site", "same-origin")]), host).is_ok());
        assert!(same_origin(&with(&[("sec-fetch-site", "cross-site")]), host).is_err());
        assert!(same_origin(&with(&[("sec-fetch-site", "same-site")]), host).is_err());
        assert!(same_origin(&with(&[("origin", "http://127.0.0.1:8080")]), host).is_ok());
        assert!(same_origin(&with(&[("origin", "http://127.0.0.1:9")]), host).is_err());
        // The console's pages name their origin (Referrer-Policy: same-origin): a
        // hidden one comes from another site's page.
        assert!(same_origin(&with(&[("origin", "null")]), host).is_err());
        assert!(same_origin(&HeaderMap::new(), host).is_ok());
    }
}
