//! The cross-cutting layer every route runs under, [`Observe`]: the request's span,
//! its timeout, its metrics and panic containment, in one service and one future per
//! request (a streamed answer's body holds the span: [`InSpan`]). Its refusals are
//! [`ApiError`]s.
//!
//! One layer, not four: stacked as separate middleware (axum's `from_fn` twice,
//! tower-http's trace and catch-panic layers) the same work cloned the inner service
//! stack and boxed a future at every level, and looked the metrics up by their label
//! strings in the recorder's registry on every request. Merged, the server runs about
//! 9% fewer instructions per signed delivery (`docs/serve.md`, Performance).

use std::any::Any;
use std::convert::Infallible;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{MatchedPath, Request};
use axum::http::{Method, Response};
use axum::response::IntoResponse;
use futures_util::FutureExt as _;
use http_body::{Frame, SizeHint};
use tower::{Layer, Service};
use tracing::Instrument as _;

use super::auth::WEBHOOK_ID;
use super::error::{ApiError, Refusal};
use super::metrics::RequestMetrics;

/// The route label of a request no route matched.
const UNMATCHED: &str = "unmatched";

/// Builds [`Observe`] around each route.
#[derive(Clone)]
pub(crate) struct ObserveLayer {
    timeout: Duration,
    metrics: Arc<RequestMetrics>,
}

impl ObserveLayer {
    /// A handler taking longer than `timeout` is answered 503 `timeout`.
    pub(crate) fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            metrics: Arc::new(RequestMetrics::default()),
        }
    }
}

impl<S> Layer<S> for ObserveLayer {
    type Service = Observe<S>;

    fn layer(&self, inner: S) -> Observe<S> {
        Observe {
            inner,
            timeout: self.timeout,
            metrics: Arc::clone(&self.metrics),
        }
    }
}

/// One request, observed:
///
/// - **a span**, `request`: method, route, `webhook-id` (the command ID of a
///   delivery) and the answer's status, so the session's own spans nest under it.
///   With OpenTelemetry export (feature `otel`) it is the server span
///   `METHOD route`, child of the caller's `traceparent`;
/// - **a timeout**: a handler that takes longer is answered 503 `timeout` (a
///   delivery may have been journaled meanwhile: the client retries with the same
///   ID);
/// - **metrics**: requests by route, method, status and refusal reason
///   (`notify_serve_requests_total`), their duration by route and method
///   (`notify_serve_request_duration_seconds`);
/// - **panic containment**: a handler that panicked (a bug) is answered 500 with the
///   error body and logged; the server goes on.
#[derive(Clone)]
pub(crate) struct Observe<S> {
    inner: S,
    timeout: Duration,
    metrics: Arc<RequestMetrics>,
}

impl<S> Service<Request> for Observe<S>
where
    S: Service<Request, Response = Response<Body>, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let started = Instant::now();
        let route = request.extensions().get::<MatchedPath>().cloned();
        let method = known_method(request.method());
        // The span, the handler (its future dropped at the timeout too) and the
        // recording each run inside `catch_unwind`: a panic in the first two is a 500,
        // one in the recording loses that record, never the answer.
        let called = catch_unwind(AssertUnwindSafe(|| {
            let span = request_span(&request, method, route.as_ref());
            let future = span.in_scope(|| self.inner.call(request));
            (span, future)
        }));
        let (timeout, metrics) = (self.timeout, Arc::clone(&self.metrics));
        Box::pin(async move {
            let (response, span) = match called {
                Ok((span, future)) => {
                    let answered = AssertUnwindSafe(
                        async move {
                            match tokio::time::timeout(timeout, future).await {
                                Ok(Ok(response)) => response,
                                Err(_elapsed) => ApiError::Timeout.into_response(),
                            }
                        }
                        .instrument(span.clone()),
                    )
                    .catch_unwind()
                    .await;
                    (answered.unwrap_or_else(panicked), span)
                }
                Err(panic) => (panicked(panic), tracing::Span::none()),
            };
            let _recorded = catch_unwind(AssertUnwindSafe(|| {
                span.in_scope(|| answered(&response, route.as_ref(), method, started, &metrics));
            }));
            Ok(if response.body().size_hint().exact().is_some() {
                response
            } else {
                response.map(|body| Body::new(InSpan { body, span }))
            })
        })
    }
}

/// A streamed answer's body (one of no known size: server-sent events) holding the
/// request's span, entered while the body is polled: the span lasts until the stream
/// ends, as tower-http's trace layer does for a body. An answer of known size (every
/// JSON one) is sent as it is, without the extra box.
struct InSpan {
    body: Body,
    span: tracing::Span,
}

impl HttpBody for InSpan {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        let _entered = this.span.enter();
        Pin::new(&mut this.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Records the answer: the status in the request's span (current here), an event
/// (WARN for a 5xx, ERROR for a 500; else DEBUG), the request metrics (a method
/// outside HTTP's nine labelled `other`).
fn answered(
    response: &Response<Body>,
    route: Option<&MatchedPath>,
    method: Option<&'static str>,
    started: Instant,
    metrics: &RequestMetrics,
) {
    let status = response.status();
    let reason = response
        .extensions()
        .get::<Refusal>()
        .map_or("none", |r| r.0);
    let took = started.elapsed();
    tracing::Span::current().record("status", status.as_u16());
    if status == axum::http::StatusCode::INTERNAL_SERVER_ERROR {
        tracing::error!(status = status.as_u16(), reason, ?took, "answered");
    } else if status.is_server_error() {
        tracing::warn!(status = status.as_u16(), reason, ?took, "answered");
    } else {
        tracing::debug!(status = status.as_u16(), reason, ?took, "answered");
    }
    metrics.record(
        route.map_or(UNMATCHED, MatchedPath::as_str),
        method.unwrap_or("other"),
        status.as_u16(),
        reason,
        took,
    );
}

/// The request's span (see [`Observe`]); `method` is the request's if it is one of
/// HTTP's nine.
fn request_span(
    request: &Request,
    method: Option<&'static str>,
    route: Option<&MatchedPath>,
) -> tracing::Span {
    let route = route.map_or(UNMATCHED, MatchedPath::as_str);
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
    super::otel::server_span(&span, method, route, request.headers());
    #[cfg(not(feature = "otel"))]
    let _ = method;
    span
}

/// A handler that panicked (a bug): answered 500 with the error body, the server
/// goes on.
fn panicked(panic: Box<dyn Any + Send + 'static>) -> Response<Body> {
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

/// `method`'s name if it is one of HTTP's nine; `None` for any other token (a client
/// may send any token as a method: the metrics label it `other`, an OpenTelemetry span
/// name says `HTTP`, so neither grows without bound).
fn known_method(method: &Method) -> Option<&'static str> {
    Some(match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        Method::TRACE => "TRACE",
        Method::CONNECT => "CONNECT",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use axum::Router;
    use axum::http::StatusCode;
    use axum::routing::get;
    use tower::ServiceExt as _;

    use super::*;

    fn app() -> Router {
        Router::new()
            .route("/slow", get(|| tokio::time::sleep(Duration::from_secs(30))))
            .route("/bug", get(bug))
            .route("/slow-bug", get(slow_bug))
            .route("/fine", get(|| async { "fine" }))
            .layer(ObserveLayer::new(Duration::from_millis(50)))
    }

    async fn bug() -> &'static str {
        panic!("a handler's bug")
    }

    /// Panics when dropped.
    struct Bug;

    impl Drop for Bug {
        fn drop(&mut self) {
            panic!("a handler's bug, found when its future is dropped");
        }
    }

    async fn slow_bug() -> &'static str {
        let _bug = Bug;
        tokio::time::sleep(Duration::from_secs(30)).await;
        "never"
    }

    /// The status and the body's `reason` (empty if none) of `path`'s answer.
    async fn answer(app: &Router, path: &str) -> (StatusCode, String) {
        let response = app
            .clone()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        (
            status,
            body["reason"].as_str().unwrap_or_default().to_owned(),
        )
    }

    #[tokio::test]
    async fn a_handler_past_the_timeout_is_answered_503_timeout() {
        let slow = answer(&app(), "/slow").await;
        assert_eq!(slow, (StatusCode::SERVICE_UNAVAILABLE, "timeout".into()));
    }

    #[tokio::test]
    async fn a_handler_that_panics_is_answered_500_and_the_server_goes_on() {
        let app = app();
        let bug = answer(&app, "/bug").await;
        assert_eq!(bug, (StatusCode::INTERNAL_SERVER_ERROR, "internal".into()));
        assert_eq!(answer(&app, "/fine").await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn a_handler_whose_future_panics_when_dropped_at_the_timeout_is_answered_500() {
        let bug = answer(&app(), "/slow-bug").await;
        assert_eq!(bug, (StatusCode::INTERNAL_SERVER_ERROR, "internal".into()));
    }
}
