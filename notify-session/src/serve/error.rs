//! [`ApiError`]: every refusal the server answers, as one status code and one
//! `application/problem+json` body (RFC 9457) that names the disposition.
//!
//! Every handler and layer answers its failures through this one type, so a client
//! reads the same shape everywhere: `type`, `title`, `status`, `detail`, and the
//! members this API adds, `disposition` (the contract's four, or `none`) and `reason`
//! (what refused it, a stable snake_case word), plus the variant's own fields.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use notify_types::{CommandId, LoopId, NotifyError, SessionId, StopCause, Uuid, ValidationField};
use serde_json::{Map, Value, json};

/// The media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Why the server refused a request (or could not answer it), with everything the
/// client needs to act: the HTTP status, and a JSON body naming the disposition.
///
/// | variant | status | disposition |
/// | --- | --- | --- |
/// | [`Collision`](Self::Collision) | 409 | `collision` |
/// | [`Stopped`](Self::Stopped) (full, exited) | 503 + `Retry-After` | `stopped` |
/// | [`Stopped`](Self::Stopped) (refused by the loop) | 422 | `stopped` |
/// | [`LoopNotFound`](Self::LoopNotFound) | 404 | `stopped` |
/// | [`Unsupported`](Self::Unsupported) | 422 | `stopped` |
/// | [`NotOwner`](Self::NotOwner) | 307 + `Location` (owner known) or 421 | `stopped` |
/// | [`Ended`](Self::Ended) | 410 | `stopped` |
/// | [`Invalid`](Self::Invalid) | 400 | `none` |
/// | [`Unauthenticated`](Self::Unauthenticated) | 401 | `none` |
/// | [`TooLarge`](Self::TooLarge) | 413 | `none` |
/// | [`NotFound`](Self::NotFound) | 404 | `none` |
/// | [`MethodNotAllowed`](Self::MethodNotAllowed) | 405 + `Allow` | `none` |
/// | [`Conflict`](Self::Conflict) | 409 | `none` |
/// | [`Unavailable`](Self::Unavailable) | 503 + `Retry-After` | `none` |
/// | [`Timeout`](Self::Timeout) | 503 + `Retry-After` | `none` |
/// | [`Journal`](Self::Journal) | 500 (503 when retryable) | `none` |
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApiError {
    /// The ID names another journaled payload: fail closed. `stored_sha256` is the
    /// SHA-256 (hex) of the stored record's wire form (for a completion, of the
    /// notification's canonical bytes: compare it with the body you sent), never the
    /// payload itself.
    Collision {
        /// The reused ID (command ID or event ID).
        id: Uuid,
        /// The original frame's sequence.
        seq: u64,
        /// SHA-256 of the stored payload, when the frame could be read back.
        stored_sha256: Option<String>,
    },
    /// The loop did not take the notification (it stays journaled).
    Stopped {
        /// The loop.
        loop_id: LoopId,
        /// Why: full or exited (retry later with the same ID and body), or refused.
        cause: StopCause,
    },
    /// The loop is not registered in this session (on this host): register it
    /// (`PUT …/loops/{loop_id}`), then retry with the same ID.
    LoopNotFound {
        /// The loop.
        loop_id: LoopId,
    },
    /// The loop belongs to a foreign engine: never retry.
    Unsupported {
        /// The loop.
        loop_id: LoopId,
    },
    /// This host does not serve the session; another one does (or will).
    NotOwner {
        /// The session.
        session_id: SessionId,
        /// The owner's lease-holder identity, when known.
        owner: Option<Uuid>,
        /// The owner's advertised base URL, when known.
        owner_url: Option<String>,
        /// The same request's URL at the owner (the `Location` of the 307).
        location: Option<String>,
    },
    /// The session has ended (and perhaps been purged): never retry.
    Ended {
        /// The session.
        session_id: SessionId,
        /// Whether its log was purged.
        purged: bool,
    },
    /// The request is malformed: `field` names the first failing field, by the wire
    /// format's (the seed's) field names, when one is to blame.
    Invalid {
        /// The first failing field.
        field: Option<String>,
        /// What is wrong.
        detail: String,
    },
    /// No valid signature (or an expired timestamp, or no signature headers).
    Unauthenticated {
        /// What was wrong, without revealing anything about the keys.
        detail: &'static str,
    },
    /// The body is over the server's limit.
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// No such resource (session never opened, route unknown, notification not
    /// handed out).
    NotFound {
        /// The reason word (`session_not_found`, `route_not_found`, …).
        reason: &'static str,
        /// What is missing.
        detail: String,
    },
    /// The route exists but does not take the request's method. The answer carries
    /// `Allow`, naming the methods it takes (set by the router).
    MethodNotAllowed,
    /// The request conflicts with the resource's state (ending a session with
    /// pending notifications, a loop registered with another capacity, …).
    Conflict {
        /// The reason word.
        reason: &'static str,
        /// What conflicts.
        detail: String,
        /// Extra members for the body.
        extra: Map<String, Value>,
    },
    /// The server cannot answer now; retry after `retry_after` seconds.
    Unavailable {
        /// The reason word (`not_ready`, `opening`, `at_capacity`, `shutting_down`).
        reason: &'static str,
        /// What is going on.
        detail: String,
        /// Seconds to wait before retrying.
        retry_after: u32,
    },
    /// The request took longer than the server's request timeout. A delivery may
    /// or may not have been journaled: retry with the same ID and body.
    Timeout,
    /// The journal failed; `retryable` when retrying the same request is safe and
    /// may succeed (an unknown commit outcome, a journal temporarily unavailable).
    Journal {
        /// The failure's kind, as a reason word.
        reason: &'static str,
        /// What failed.
        detail: String,
        /// Whether retrying (same ID, same body) may succeed.
        retryable: bool,
    },
}

impl ApiError {
    /// The answer for a delivery or publish the session refused.
    pub(crate) fn from_notify(e: NotifyError) -> Self {
        match e {
            NotifyError::Invalid { field } => Self::invalid_field(field),
            NotifyError::OwnerMismatch { want, got } => Self::Invalid {
                field: Some("session_id".into()),
                detail: format!("the notification names session {got}, the request {want}"),
            },
            NotifyError::LoopNotFound { loop_id } => Self::LoopNotFound { loop_id },
            NotifyError::Unsupported { loop_id } => Self::Unsupported { loop_id },
            NotifyError::DeliveryStopped { loop_id, cause } => Self::Stopped { loop_id, cause },
            NotifyError::Collision { command_id, seq } => Self::Collision {
                id: *command_id.as_uuid(),
                seq,
                stored_sha256: None,
            },
            NotifyError::SessionEnded { session_id, purged } => Self::Ended { session_id, purged },
            NotifyError::NotOwner { session_id, owner } => Self::NotOwner {
                session_id,
                owner,
                owner_url: None,
                location: None,
            },
            NotifyError::Journal(failure) => {
                use notify_types::JournalFailureKind as K;
                let (reason, retryable) = match failure.kind() {
                    K::OutcomeUnknown => ("journal_outcome_unknown", true),
                    K::Unavailable => ("journal_unavailable", true),
                    K::Poisoned => ("journal_poisoned", false),
                    K::Fenced => ("journal_fenced", true),
                    K::TooLarge => ("journal_too_large", false),
                    _ => ("journal_failed", false),
                };
                Self::Journal {
                    reason,
                    detail: error_chain(&failure),
                    retryable,
                }
            }
            // A variant added to the contract later.
            other => Self::Journal {
                reason: "refused",
                detail: other.to_string(),
                retryable: false,
            },
        }
    }

    /// A validation failure naming `field`.
    pub(crate) fn invalid_field(field: ValidationField) -> Self {
        Self::Invalid {
            field: Some(field.as_str().to_owned()),
            detail: format!("`{}` is invalid", field.as_str()),
        }
    }

    /// A decode failure of a request body.
    pub(crate) fn from_decode(e: &notify_types::DecodeError) -> Self {
        Self::Invalid {
            field: e.field().map(str::to_owned),
            detail: e.to_string(),
        }
    }

    /// `webhook-id` does not name the request's target.
    pub(crate) fn id_mismatch(field: &'static str, expected: String) -> Self {
        Self::Invalid {
            field: Some(field.into()),
            detail: format!("`webhook-id` must be `{expected}` for this request"),
        }
    }

    /// The command ID a collision names, as a `CommandId` (for logging).
    pub(crate) fn collision_of(command: CommandId, seq: u64, digest: Option<String>) -> Self {
        Self::Collision {
            id: *command.as_uuid(),
            seq,
            stored_sha256: digest,
        }
    }

    /// The HTTP status this answer is sent with.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Collision { .. } | Self::Conflict { .. } => StatusCode::CONFLICT,
            Self::Stopped {
                cause: StopCause::Refused,
                ..
            }
            | Self::Unsupported { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Stopped { .. } | Self::Unavailable { .. } | Self::Timeout => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::LoopNotFound { .. } | Self::NotFound { .. } => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::NotOwner {
                location: Some(_), ..
            } => StatusCode::TEMPORARY_REDIRECT,
            Self::NotOwner { .. } => StatusCode::MISDIRECTED_REQUEST,
            Self::Ended { .. } => StatusCode::GONE,
            Self::Invalid { .. } => StatusCode::BAD_REQUEST,
            Self::Unauthenticated { .. } => StatusCode::UNAUTHORIZED,
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Journal {
                retryable: true, ..
            } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Journal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The disposition the body names: one of the contract's four, or `none`.
    #[must_use]
    pub fn disposition(&self) -> &'static str {
        match self {
            Self::Collision { .. } => "collision",
            Self::Stopped { .. }
            | Self::LoopNotFound { .. }
            | Self::Unsupported { .. }
            | Self::NotOwner { .. }
            | Self::Ended { .. } => "stopped",
            _ => "none",
        }
    }

    /// The reason word the body names (the problem type's last part).
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Collision { .. } => "collision",
            Self::Stopped { cause, .. } => match cause {
                StopCause::Full => "loop_full",
                StopCause::Exited => "loop_exited",
                _ => "loop_refused",
            },
            Self::LoopNotFound { .. } => "loop_not_found",
            Self::Unsupported { .. } => "unsupported",
            Self::NotOwner { .. } => "not_owner",
            Self::Ended { .. } => "session_ended",
            Self::Invalid { .. } => "invalid",
            Self::Unauthenticated { .. } => "unauthenticated",
            Self::TooLarge { .. } => "too_large",
            Self::Timeout => "timeout",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::NotFound { reason, .. }
            | Self::Conflict { reason, .. }
            | Self::Unavailable { reason, .. }
            | Self::Journal { reason, .. } => reason,
        }
    }

    /// Seconds a client should wait before retrying, when it should retry here.
    fn retry_after(&self) -> Option<u32> {
        match self {
            Self::Stopped {
                cause: StopCause::Full | StopCause::Exited,
                ..
            } => Some(1),
            Self::NotOwner { location: None, .. } => Some(1),
            Self::Unavailable { retry_after, .. } => Some(*retry_after),
            Self::Timeout
            | Self::Journal {
                retryable: true, ..
            } => Some(1),
            _ => None,
        }
    }

    /// The body's `title` and `detail`, and its extension members.
    fn describe(&self) -> (&'static str, String, Map<String, Value>) {
        let mut extra = Map::new();
        let mut put = |k: &str, v: Value| {
            extra.insert(k.to_owned(), v);
        };
        let (title, detail) = match self {
            Self::Collision {
                id,
                seq,
                stored_sha256,
            } => {
                put("id", json!(id.to_string()));
                put("seq", json!(seq));
                put("stored_sha256", json!(stored_sha256));
                (
                    "ID collision",
                    format!("{id} names another payload (journal seq {seq}): fail closed"),
                )
            }
            Self::Stopped { loop_id, cause } => {
                put("loop_id", json!(loop_id.to_string()));
                put(
                    "retryable",
                    json!(matches!(cause, StopCause::Full | StopCause::Exited)),
                );
                (
                    "Delivery stopped",
                    format!("loop {loop_id} did not take it: {cause}"),
                )
            }
            Self::LoopNotFound { loop_id } => {
                put("loop_id", json!(loop_id.to_string()));
                put("retryable", json!(false));
                (
                    "Loop not registered",
                    format!("loop {loop_id} is not registered here: register it, then retry"),
                )
            }
            Self::Unsupported { loop_id } => {
                put("loop_id", json!(loop_id.to_string()));
                put("retryable", json!(false));
                (
                    "Foreign loop",
                    format!("loop {loop_id} belongs to a foreign engine"),
                )
            }
            Self::NotOwner {
                session_id,
                owner,
                owner_url,
                location,
            } => {
                put("session_id", json!(session_id.to_string()));
                put("owner", json!(owner.map(|o| o.to_string())));
                put("owner_url", json!(owner_url));
                put("location", json!(location));
                put("retryable", json!(true));
                (
                    "Not the owner",
                    match owner_url {
                        Some(url) => format!("session {session_id} is served by {url}"),
                        None => format!(
                            "this host does not serve session {session_id}; retry (another host adopts it)"
                        ),
                    },
                )
            }
            Self::Ended { session_id, purged } => {
                put("session_id", json!(session_id.to_string()));
                put("purged", json!(purged));
                put("retryable", json!(false));
                (
                    "Session ended",
                    format!(
                        "session {session_id} has ended{}",
                        if *purged { " and was purged" } else { "" }
                    ),
                )
            }
            Self::Invalid { field, detail } => {
                put("field", json!(field));
                ("Invalid request", detail.clone())
            }
            Self::Unauthenticated { detail } => ("Unauthenticated", (*detail).to_owned()),
            Self::TooLarge { limit } => {
                put("limit", json!(limit));
                (
                    "Body too large",
                    format!("the body is over the {limit}-byte limit"),
                )
            }
            Self::NotFound { detail, .. } => ("Not found", detail.clone()),
            Self::MethodNotAllowed => (
                "Method not allowed",
                "this route does not take that method (`Allow` names those it takes): see /openapi.json".to_owned(),
            ),
            Self::Conflict {
                detail,
                extra: more,
                ..
            } => {
                for (k, v) in more {
                    put(k, v.clone());
                }
                ("Conflict", detail.clone())
            }
            Self::Unavailable { detail, .. } => ("Unavailable", detail.clone()),
            Self::Timeout => (
                "Request timeout",
                "the request took longer than the server's timeout; retry with the same ID and body"
                    .to_owned(),
            ),
            Self::Journal {
                detail, retryable, ..
            } => {
                put("retryable", json!(retryable));
                ("Journal failure", detail.clone())
            }
        };
        (title, detail, extra)
    }

    /// The body, as JSON.
    #[must_use]
    pub fn body(&self) -> Value {
        let (title, detail, extra) = self.describe();
        let status = self.status();
        let mut body = Map::new();
        body.insert(
            "type".into(),
            json!(format!("urn:notify:problem:{}", self.reason())),
        );
        body.insert("title".into(), json!(title));
        body.insert("status".into(), json!(status.as_u16()));
        body.insert("detail".into(), json!(detail));
        body.insert("disposition".into(), json!(self.disposition()));
        body.insert("reason".into(), json!(self.reason()));
        body.extend(extra);
        Value::Object(body)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (_, detail, _) = self.describe();
        write!(
            f,
            "{} ({}): {detail}",
            self.status().as_u16(),
            self.reason()
        )
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = serde_json::to_vec(&self.body()).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(secs) = self.retry_after() {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Self::NotOwner {
            location: Some(location),
            ..
        } = &self
            && let Ok(v) = HeaderValue::from_str(location)
        {
            headers.insert(header::LOCATION, v);
        }
        response.extensions_mut().insert(Refusal(self.reason()));
        response
    }
}

/// Marks a response as a refusal, for the request metrics (`reason` label).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refusal(pub(crate) &'static str);

/// An error and its sources, one line.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
