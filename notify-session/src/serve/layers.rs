//! The cross-cutting layers: request timeout, request metrics, tracing spans and
//! panic containment. Each answers its refusals with [`ApiError`].

use std::any::Any;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::Response;
use axum::middleware::Next;
use axum::response::IntoResponse;
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::trace::{MakeSpan, TraceLayer};

use super::auth::WEBHOOK_ID;
use super::error::{ApiError, Refusal};

/// Answers 503 `timeout` when the handler takes longer than `timeout` (a delivery
/// may have been journaled meanwhile: the client retries with the same ID).
pub(crate) async fn timeout(
    State(timeout): State<Duration>,
    request: Request,
    next: Next,
) -> axum::response::Response {
    match tokio::time::timeout(timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::Timeout.into_response(),
    }
}

/// Counts requests by route, method, status and refusal reason
/// (`notify_serve_requests_total`) and times them
/// (`notify_serve_request_duration_seconds`).
pub(crate) async fn record(request: Request, next: Next) -> axum::response::Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = request.method().as_str().to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    tracing::Span::current().record("status", response.status().as_u16());
    let status = response.status().as_u16().to_string();
    let reason = response
        .extensions()
        .get::<Refusal>()
        .map_or("none", |r| r.0);
    metrics::counter!(
        "notify_serve_requests_total",
        "route" => route.clone(),
        "method" => method.clone(),
        "status" => status,
        "reason" => reason,
    )
    .increment(1);
    metrics::histogram!(
        "notify_serve_request_duration_seconds",
        "route" => route,
        "method" => method,
    )
    .record(started.elapsed().as_secs_f64());
    response
}

/// One span per request, `request`: method, route, `webhook-id` (the command ID of a
/// delivery), the answer's status, so the session's own spans nest under it. With
/// OpenTelemetry export (feature `otel`), it is the server span `METHOD route`, child
/// of the caller's `traceparent`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RequestSpan;

impl<B> MakeSpan<B> for RequestSpan {
    fn make_span(&mut self, request: &axum::http::Request<B>) -> tracing::Span {
        let route = request
            .extensions()
            .get::<MatchedPath>()
            .map_or("unmatched", |p| p.as_str());
        let id = request
            .headers()
            .get(WEBHOOK_ID)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let span = tracing::info_span!(
            "request",
            method = %request.method(),
            route,
            webhook_id = id,
            status = tracing::field::Empty,
            otel.name = tracing::field::Empty,
            otel.kind = tracing::field::Empty,
        );
        #[cfg(feature = "otel")]
        super::otel::server_span(&span, request.method(), route, request.headers());
        span
    }
}

/// The tracing layer.
pub(crate) fn trace() -> TraceLayer<SharedClassifier<ServerErrorsAsFailures>, RequestSpan> {
    TraceLayer::new_for_http().make_span_with(RequestSpan)
}

/// A handler that panicked (a bug): answered 500 with the error body, the server
/// goes on.
pub(crate) fn panicked(panic: Box<dyn Any + Send + 'static>) -> Response<Body> {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    tracing::error!(panic = %what, "a request handler panicked");
    ApiError::Journal {
        reason: "internal",
        detail: "the server failed on this request (a bug: see its log)".into(),
        retryable: false,
    }
    .into_response()
}
