//! The console's one home for HTML: every dynamic value goes through [`Html::text`],
//! which escapes it (or [`Html::num`], digits); markup is only ever a `&'static str`
//! ([`Html::raw`]), so no text from a journal, a key file or a request can become
//! markup. No other way makes an [`Html`] from a string.

use std::fmt::{Display, Write as _};

use axum::http::header;
use axum::response::{IntoResponse, Response};

/// The stylesheet, embedded in the binary and served at `/console/assets/console.css`.
pub(crate) const CSS: &str = include_str!("console.css");

/// The Content-Security-Policy of every page: no script at all, styles and images
/// from the console itself (the charts are inline SVG).
const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// HTML under construction.
#[derive(Debug, Default)]
pub(crate) struct Html(String);

/// `s` with `&`, `<`, `>`, `"` and `'` escaped (safe in text and in quoted attributes).
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

impl Html {
    /// Markup: a string written in this crate, never a value.
    pub(crate) fn raw(&mut self, markup: &'static str) -> &mut Self {
        self.0.push_str(markup);
        self
    }

    /// A value, escaped.
    pub(crate) fn text(&mut self, value: impl Display) -> &mut Self {
        let mut s = String::new();
        let _ = write!(s, "{value}");
        self.0.push_str(&escape(&s));
        self
    }

    /// A link to `href` (escaped) reading `label` (escaped).
    pub(crate) fn link(&mut self, href: impl Display, label: impl Display) -> &mut Self {
        self.raw("<a href=\"")
            .text(href)
            .raw("\">")
            .text(label)
            .raw("</a>")
    }

    /// One table cell of text.
    pub(crate) fn td(&mut self, value: impl Display) -> &mut Self {
        self.raw("<td>").text(value).raw("</td>")
    }

    /// A table's head row.
    pub(crate) fn thead(&mut self, columns: &[&'static str]) -> &mut Self {
        self.raw("<thead><tr>");
        for c in columns {
            self.raw("<th>").raw(c).raw("</th>");
        }
        self.raw("</tr></thead>")
    }

    /// A definition list row: `term` and its value.
    pub(crate) fn dt(&mut self, term: &'static str, value: impl Display) -> &mut Self {
        self.raw("<dt>")
            .raw(term)
            .raw("</dt><dd>")
            .text(value)
            .raw("</dd>")
    }

    /// Appends another piece (already safe: built by this type).
    pub(crate) fn push(&mut self, other: Html) -> &mut Self {
        self.0.push_str(&other.0);
        self
    }

    /// A number (no escaping needed: digits only), e.g. an SVG coordinate.
    pub(crate) fn num(&mut self, n: usize) -> &mut Self {
        let _ = write!(self.0, "{n}");
        self
    }
}

/// The console's sections, for the navigation bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Overview,
    Sessions,
    Hosts,
    Integrity,
    None,
}

/// A whole page: the navigation, `title`, `body`; with a logout button when the
/// console was opened by a login.
pub(crate) fn frame(title: impl Display, nav: Nav, logged_in: bool, body: Html) -> Response {
    frame_refreshing(title, nav, logged_in, body, None)
}

/// [`frame`], reloading itself every `reload` seconds when given (a page showing a
/// background run under way; no script: a `<meta http-equiv="refresh">`).
pub(crate) fn frame_refreshing(
    title: impl Display,
    nav: Nav,
    logged_in: bool,
    body: Html,
    reload: Option<u32>,
) -> Response {
    let mut h = Html::default();
    h.raw("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">");
    if let Some(seconds) = reload {
        h.raw("<meta http-equiv=\"refresh\" content=\"")
            .num(usize::try_from(seconds).unwrap_or(2))
            .raw("\">");
    }
    h.raw("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">")
        .raw("<link rel=\"icon\" href=\"data:,\">")
        .raw("<link rel=\"stylesheet\" href=\"/console/assets/console.css\"><title>")
        .text(&title)
        .raw(" · notify console</title></head><body><header><nav>")
        .raw("<span class=\"brand\">notify</span>");
    for (item, href, label) in [
        (Nav::Overview, "/console/", "Overview"),
        (Nav::Sessions, "/console/sessions", "Sessions"),
        (Nav::Hosts, "/console/hosts", "Hosts"),
        (Nav::Integrity, "/console/integrity", "Integrity"),
    ] {
        h.raw(if item == nav {
            "<a class=\"on\" href=\""
        } else {
            "<a href=\""
        })
        .raw(href)
        .raw("\">")
        .raw(label)
        .raw("</a>");
    }
    if logged_in {
        h.raw("<form method=\"post\" action=\"/console/logout\" class=\"logout\"><button>Log out</button></form>");
    }
    h.raw("</nav></header><main><h1>")
        .text(&title)
        .raw("</h1>")
        .push(body)
        .raw("</main></body></html>");
    html_response(h)
}

/// An HTML response with the console's headers (no caching: every page is live).
pub(crate) fn html_response(h: Html) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            // Not `no-referrer`: under it a browser sends `Origin: null` on the pages'
            // own forms, which the same-origin check (`guard.rs`) must refuse, as it
            // is what another site's page sends when it hides its origin.
            (header::REFERRER_POLICY, "same-origin"),
        ],
        h.0,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_markup_is_not() {
        let mut h = Html::default();
        h.raw("<b>")
            .text("<script>alert('x')</script> & \"q\"")
            .raw("</b>");
        assert_eq!(
            h.0,
            "<b>&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;</b>"
        );
    }
}
