//! The routes: thin adapters from HTTP to the session's API. Authentication, the
//! body limit, the timeout, tracing and metrics are layers (`router`); a handler
//! decodes, calls the library once, and maps the answer.

mod consume;
mod deliver;
mod ops;
mod sessions;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use notify_types::{LoopId, SessionId, Uuid};
use serde_json::Value;

use super::auth::{Auth, authenticate};
use super::error::ApiError;
use super::layers;
use super::state::AppState;

/// Every route of the API, as the OpenAPI document must list them (method, path).
pub const ROUTES: &[(&str, &str)] = &[
    ("put", "/v1/sessions/{session_id}"),
    ("post", "/v1/sessions/{session_id}/end"),
    ("post", "/v1/sessions/{session_id}/completions"),
    ("post", "/v1/sessions/{session_id}/events"),
    ("put", "/v1/sessions/{session_id}/loops/{loop_id}"),
    (
        "get",
        "/v1/sessions/{session_id}/loops/{loop_id}/notifications",
    ),
    (
        "get",
        "/v1/sessions/{session_id}/loops/{loop_id}/notifications/stream",
    ),
    (
        "post",
        "/v1/sessions/{session_id}/loops/{loop_id}/notifications/{command_id}/ack",
    ),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
];

/// The whole application: the signed API under `/v1` and the operational routes.
pub(crate) fn router(state: AppState, auth: Arc<Auth>, timeout: std::time::Duration) -> Router {
    let api = Router::new()
        .route("/v1/sessions/{session_id}", put(sessions::open))
        .route("/v1/sessions/{session_id}/end", post(sessions::end))
        .route(
            "/v1/sessions/{session_id}/completions",
            post(deliver::completion),
        )
        .route("/v1/sessions/{session_id}/events", post(deliver::event))
        .route(
            "/v1/sessions/{session_id}/loops/{loop_id}",
            put(sessions::register_loop),
        )
        .route(
            "/v1/sessions/{session_id}/loops/{loop_id}/notifications",
            get(consume::poll),
        )
        .route(
            "/v1/sessions/{session_id}/loops/{loop_id}/notifications/stream",
            get(consume::stream),
        )
        .route(
            "/v1/sessions/{session_id}/loops/{loop_id}/notifications/{command_id}/ack",
            post(consume::ack),
        )
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&auth),
            authenticate,
        ))
        // The authentication layer reads the body under its own limit (413 in JSON).
        .layer(DefaultBodyLimit::disable());
    let ops = Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/openapi.json", get(ops::openapi));
    api.merge(ops)
        .merge(super::console::router(&state))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(layers::ObserveLayer::new(timeout))
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::NotFound {
        reason: "route_not_found",
        detail: "no such route: see /openapi.json".into(),
    }
}

/// 405; the router adds `Allow` (the route's methods) to the answer.
async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

/// A JSON answer.
pub(crate) fn json(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

fn parse_id(field: &'static str, s: &str) -> Result<Uuid, ApiError> {
    s.parse::<Uuid>()
        .ok()
        .filter(|u| !u.is_nil())
        .ok_or_else(|| ApiError::Invalid {
            field: Some(field.into()),
            detail: format!("`{field}` in the path is not a UUID"),
        })
}

/// The session ID a path names.
pub(crate) fn session_id(s: &str) -> Result<SessionId, ApiError> {
    parse_id("session_id", s).map(SessionId::from_uuid)
}

/// The loop ID a path names.
pub(crate) fn loop_id(s: &str) -> Result<LoopId, ApiError> {
    parse_id("loop_id", s).map(LoopId::from_uuid)
}

/// The command ID a path names.
pub(crate) fn command_id(s: &str) -> Result<notify_types::CommandId, ApiError> {
    parse_id("command_id", s).map(notify_types::CommandId::from_uuid)
}
