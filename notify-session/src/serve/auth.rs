//! Standard Webhooks verification, as a layer: every request under `/v1` is signed
//! (`webhook-id`, `webhook-timestamp`, `webhook-signature`), unless the server was
//! started unsigned on a loopback address.
//!
//! The signed content is `{webhook-id}.{webhook-timestamp}.{body}`; the signature
//! header holds space-separated entries, `v1,<base64 HMAC-SHA256>` and
//! `v1a,<base64 ed25519>`, and the request passes if any entry verifies under any
//! active key (HMAC tags compared in constant time). The timestamp (Unix seconds)
//! must be within the tolerance of the server's clock, both ways. The layer also
//! reads the body, bounded by the body limit (413 past it), so a handler gets the
//! exact bytes that were verified.
//!
//! The signature covers the ID, not the path: so a captured request cannot be
//! replayed against another resource, every handler checks that `webhook-id` names
//! its target (the command ID of a completion, the event ID of an event, the session,
//! loop or command ID the path names).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use notify_types::Uuid;

use super::error::ApiError;
use super::keys::KeySet;

/// The header carrying the message ID.
pub const WEBHOOK_ID: &str = "webhook-id";
/// The header carrying the Unix timestamp (seconds).
pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
/// The header carrying the signatures.
pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";

/// The longest `webhook-id` accepted.
const MAX_ID_BYTES: usize = 256;
/// The most signature entries one header may carry (bounds the work per request).
const MAX_SIGNATURES: usize = 8;

/// What the layer checks requests against.
#[derive(Debug, Clone)]
pub(crate) struct Auth {
    /// The active keys.
    pub(crate) keys: Arc<KeySet>,
    /// How far `webhook-timestamp` may be from the server's clock.
    pub(crate) tolerance: Duration,
    /// Unsigned requests are let through (loopback only; checked at start).
    pub(crate) unsigned: bool,
    /// The body limit in bytes.
    pub(crate) body_limit: usize,
}

/// The request's `webhook-id`, verified (or, unsigned, as sent, if sent).
#[derive(Debug, Clone, Default)]
pub(crate) struct WebhookId(pub(crate) Option<String>);

impl WebhookId {
    /// Checks that the ID is the delivery's own ID `want` (a command or event ID,
    /// compared as a UUID), naming `field` if not.
    pub(crate) fn check(&self, field: &'static str, want: Uuid) -> Result<(), ApiError> {
        match &self.0 {
            None => Ok(()),
            Some(id) if id.parse::<Uuid>().ok() == Some(want) => Ok(()),
            Some(_) => Err(ApiError::id_mismatch(field, want.to_string())),
        }
    }

    /// Checks that the ID is `{operation}:{target}` (`target`: the path's IDs,
    /// `:`-separated, each compared as a UUID), naming `field` (the last target's)
    /// if not: the ID of every operation but a delivery. The signature covers the ID
    /// and the body but not the method or the path, so without the operation and its
    /// whole target a captured request of one (a delivery, under its bare command ID;
    /// an open; a registration) could be replayed as another (an open of a session
    /// named by that ID, an end, a poll, an acknowledgement, a registration in another
    /// session).
    pub(crate) fn check_operation(
        &self,
        operation: &'static str,
        field: &'static str,
        target: &[Uuid],
    ) -> Result<(), ApiError> {
        let named = |id: &str| {
            let mut parts = id.split(':');
            parts.next() == Some(operation)
                && target
                    .iter()
                    .all(|want| parts.next().and_then(|p| p.parse::<Uuid>().ok()) == Some(*want))
                && parts.next().is_none()
        };
        match &self.0 {
            None => Ok(()),
            Some(id) if named(id) => Ok(()),
            Some(_) => {
                let mut expected = operation.to_owned();
                for t in target {
                    expected.push(':');
                    expected.push_str(&t.to_string());
                }
                Err(ApiError::id_mismatch(field, expected))
            }
        }
    }
}

/// The layer's function (`axum::middleware::from_fn_with_state`).
pub(crate) async fn authenticate(
    State(auth): State<Arc<Auth>>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let (mut parts, body) = request.into_parts();
    let too_large = ApiError::TooLarge {
        limit: auth.body_limit,
    };
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > auth.body_limit as u64) {
        return Err(too_large);
    }
    let presented = presented(&auth, &parts.headers, now_unix())?;
    let bytes = match axum::body::to_bytes(body, auth.body_limit).await {
        Ok(b) => b,
        Err(e) => {
            let over = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            return Err(if over {
                too_large
            } else {
                ApiError::Invalid {
                    field: None,
                    detail: "the request body could not be read".into(),
                }
            });
        }
    };
    let id = presented.verify(&auth, &bytes, now_unix())?;
    parts.extensions.insert(WebhookId(id));
    Ok(next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await)
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// A request's signature headers, checked as far as they can be before its body is
/// read ([`presented`]).
pub(crate) enum Presented<'h> {
    /// Unsigned, and the server takes unsigned requests: the `webhook-id` as sent.
    Unsigned(Option<&'h str>),
    /// Signed, within the tolerance: the signature is still to be checked.
    Signed {
        id: &'h str,
        timestamp: &'h str,
        signature: &'h str,
    },
}

/// Checks the signature headers at time `now`: all three present, the ID well
/// formed, the timestamp within the tolerance. Refuses before the body is read, so an
/// unauthenticated request never makes the server buffer a body.
pub(crate) fn presented<'h>(
    auth: &Auth,
    headers: &'h HeaderMap,
    now: i64,
) -> Result<Presented<'h>, ApiError> {
    let id = header(headers, WEBHOOK_ID);
    let timestamp = header(headers, WEBHOOK_TIMESTAMP);
    let signature = header(headers, WEBHOOK_SIGNATURE);
    if auth.unsigned && signature.is_none() {
        return Ok(Presented::Unsigned(id));
    }
    let (Some(id), Some(timestamp), Some(signature)) = (id, timestamp, signature) else {
        return Err(ApiError::Unauthenticated {
            detail: "a signed request needs webhook-id, webhook-timestamp and webhook-signature",
        });
    };
    if id.is_empty() || id.len() > MAX_ID_BYTES || id.contains('.') {
        return Err(ApiError::Unauthenticated {
            detail: "webhook-id must be 1 to 256 bytes without a dot",
        });
    }
    within_tolerance(auth, timestamp, now)?;
    Ok(Presented::Signed {
        id,
        timestamp,
        signature,
    })
}

/// Whether `timestamp` (Unix seconds) is within the tolerance of `now`.
fn within_tolerance(auth: &Auth, timestamp: &str, now: i64) -> Result<(), ApiError> {
    let Ok(ts) = timestamp.parse::<i64>() else {
        return Err(ApiError::Unauthenticated {
            detail: "webhook-timestamp is not a Unix time in seconds",
        });
    };
    let tolerance = i64::try_from(auth.tolerance.as_secs()).unwrap_or(i64::MAX);
    if now.abs_diff(ts) > tolerance.unsigned_abs() {
        return Err(ApiError::Unauthenticated {
            detail: "webhook-timestamp is outside the server's tolerance",
        });
    }
    Ok(())
}

impl Presented<'_> {
    /// Verifies the signature over `body` at time `now` (the timestamp again: the
    /// body may have taken a while); the verified `webhook-id`.
    pub(crate) fn verify(
        self,
        auth: &Auth,
        body: &[u8],
        now: i64,
    ) -> Result<Option<String>, ApiError> {
        let (id, timestamp, signature) = match self {
            Self::Unsigned(id) => return Ok(id.map(str::to_owned)),
            Self::Signed {
                id,
                timestamp,
                signature,
            } => (id, timestamp, signature),
        };
        within_tolerance(auth, timestamp, now)?;
        let content: [&[u8]; 5] = [id.as_bytes(), b".", timestamp.as_bytes(), b".", body];
        for entry in signature.split_whitespace().take(MAX_SIGNATURES) {
            let (ed25519, encoded) = match entry.split_once(',') {
                Some(("v1", s)) => (false, s),
                Some(("v1a", s)) => (true, s),
                _ => continue,
            };
            let Ok(sig) = STANDARD.decode(encoded) else {
                continue;
            };
            if auth
                .keys
                .keys()
                .iter()
                .any(|k| k.verifies(ed25519, &content, &sig))
            {
                return Ok(Some(id.to_owned()));
            }
        }
        Err(ApiError::Unauthenticated {
            detail: "no signature verifies under an active key",
        })
    }
}
