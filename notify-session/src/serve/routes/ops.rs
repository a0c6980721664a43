//! The operational routes: `/healthz`, `/readyz`, `/metrics`, `/openapi.json`.
//! Not signed (they reveal no payload: counts and the server's own state).

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::json;
use crate::serve::OPENAPI;
use crate::serve::state::AppState;

/// Alive: the process answers.
pub(crate) async fn healthz() -> Response {
    json(StatusCode::OK, json!({"status": "ok"}))
}

/// Ready: the host has finished its first adoption pass and no shutdown began.
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    if state.draining() {
        return json(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"status": "draining"}),
        );
    }
    match state.inner.host.get() {
        None => json(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"status": "starting"}),
        ),
        Some(host) => {
            let status = host.status();
            json(
                StatusCode::OK,
                json!({
                    "status": "ready",
                    "holder": status.holder.to_string(),
                    "sessions": status.sessions.len(),
                    "capacity": status.capacity,
                    "url": state.inner.base_url,
                }),
            )
        }
    }
}

/// The Prometheus text exposition of the `metrics` facade's recorder.
pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    match &state.inner.metrics {
        Some(handle) => {
            let mut response = handle.render().into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        }
        None => json(
            StatusCode::NOT_FOUND,
            json!({"status": "no metrics exporter installed"}),
        ),
    }
}

/// The OpenAPI 3.1 document.
pub(crate) async fn openapi() -> Response {
    let mut response = OPENAPI.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
