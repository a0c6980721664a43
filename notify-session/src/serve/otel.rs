//! OpenTelemetry for `notify serve` (feature `otel`): the OTLP exporter, set up from
//! the standard environment variables, and the W3C trace context a caller sends.
//!
//! With `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) set,
//! [`OtelExport::from_env`] builds an OTLP/HTTP exporter (protobuf bodies, on hyper)
//! behind a batch span processor on tokio, and installs the W3C trace-context
//! propagator; its [`layer`](OtelExport::layer) turns `tracing` spans into
//! OpenTelemetry spans. Unset, nothing of OpenTelemetry runs: no exporter, no
//! propagator, no per-request work beyond a header look-up.
//!
//! Each request span takes the caller's `traceparent` (and `tracestate`) as its
//! parent, so the spans under it (`notify.append`, `notify.dispatch`, `notify.ack`)
//! land in the caller's trace. A malformed `traceparent` is ignored: the request
//! starts a trace of its own and is answered as any other.

use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::HeaderMap;
use opentelemetry::propagation::Extractor;
use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing_opentelemetry::{OpenTelemetryLayer, OpenTelemetrySpanExt as _};
use tracing_subscriber::registry::LookupSpan;

/// The generic endpoint variable; the traces-only one wins when both are set.
const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
const PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
const TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";
/// The one protocol this build exports with.
const HTTP_PROTOBUF: &str = "http/protobuf";

/// Whether an exporter was installed (request spans then take the caller's parent).
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Why OpenTelemetry export could not be set up or flushed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// An `OTEL_*` variable asks for what this build cannot do.
    #[error("{var}={value}: {why}")]
    Unsupported {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What this build does instead.
        why: &'static str,
    },
    /// The exporter could not be built (e.g. an endpoint that is not a URL).
    #[error("cannot build the OTLP exporter")]
    Build(#[source] opentelemetry_otlp::ExporterBuildError),
    /// The spans could not all be exported at shutdown.
    #[error("cannot flush the spans")]
    Flush(#[source] opentelemetry_sdk::error::OTelSdkError),
}

/// OpenTelemetry export of this process's spans over OTLP/HTTP. While one built by
/// [`from_env`](Self::from_env) is live (until [`shutdown`](Self::shutdown)), the
/// server's request spans take the caller's `traceparent` as their parent.
#[derive(Debug)]
pub struct OtelExport {
    provider: SdkTracerProvider,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl OtelExport {
    /// The exporter the environment asks for, or `None` when neither
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` nor `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set
    /// (or `OTEL_SDK_DISABLED=true`). Honours `OTEL_SERVICE_NAME` (default
    /// `notify`), `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_EXPORTER_OTLP_HEADERS`,
    /// `OTEL_EXPORTER_OTLP_TIMEOUT` and the `OTEL_BSP_*` batch settings. Installs the
    /// W3C trace-context propagator as the global one.
    ///
    /// # Errors
    ///
    /// [`OtelError::Unsupported`] for a protocol other than `http/protobuf` or an
    /// `https` endpoint (this build speaks plain HTTP: export to a collector nearby);
    /// [`OtelError::Build`] if the exporter cannot be built.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (the batch span processor is a tokio task).
    pub fn from_env() -> Result<Option<Self>, OtelError> {
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let endpoint = [TRACES_ENDPOINT, ENDPOINT]
            .into_iter()
            .find_map(|name| var(name).map(|v| (name, v)));
        let Some((endpoint_var, endpoint)) = endpoint else {
            return Ok(None);
        };
        if endpoint.trim().to_ascii_lowercase().starts_with("https:") {
            return Err(OtelError::Unsupported {
                var: endpoint_var,
                value: endpoint,
                why: "this build exports over plain HTTP: point it at a collector nearby",
            });
        }
        for name in [TRACES_PROTOCOL, PROTOCOL] {
            if let Some(protocol) = var(name)
                && protocol.trim() != HTTP_PROTOBUF
            {
                return Err(OtelError::Unsupported {
                    var: name,
                    value: protocol,
                    why: "this build exports http/protobuf only",
                });
            }
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .build()
            .map_err(OtelError::Build)?;
        let named = var("OTEL_SERVICE_NAME").is_some()
            || var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| a.contains("service.name="));
        let resource = if named {
            Resource::builder().build()
        } else {
            Resource::builder().with_service_name("notify").build()
        };
        let processor =
            BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio).build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource)
            .build();
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        INSTALLED.store(true, Ordering::Release);
        Ok(Some(Self { provider }))
    }

    /// The `tracing` layer that exports spans through this exporter (add it to the
    /// subscriber; spans at INFO and above are worth exporting).
    #[must_use]
    pub fn layer<S>(&self) -> OpenTelemetryLayer<S, SdkTracer>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        tracing_opentelemetry::layer().with_tracer(self.provider.tracer("notify"))
    }

    /// Exports every span not exported yet, then stops the exporter (at most 5 s).
    /// Blocks: call it off the runtime's worker threads (e.g. after `block_on`
    /// returned), while the runtime still runs.
    ///
    /// # Errors
    ///
    /// [`OtelError::Flush`] if the spans could not all be exported.
    pub fn shutdown(self) -> Result<(), OtelError> {
        INSTALLED.store(false, Ordering::Release);
        self.provider.shutdown().map_err(OtelError::Flush)
    }
}

/// Reads a request's headers for the propagator.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(axum::http::HeaderName::as_str).collect()
    }
}

/// Makes `span` (a request's) an OpenTelemetry server span named `METHOD route`,
/// child of the caller's span when the request carries a valid `traceparent`. Does
/// nothing unless an exporter is installed. A method outside HTTP's nine is named
/// `HTTP`, as OpenTelemetry's HTTP conventions say: a client inventing methods would
/// otherwise make span names without bound at the trace backend.
/// `method` is the request's if it is one of HTTP's nine (`layers::known_method`).
pub(crate) fn server_span(
    span: &tracing::Span,
    method: Option<&'static str>,
    route: &str,
    headers: &HeaderMap,
) {
    if !INSTALLED.load(Ordering::Acquire) {
        return;
    }
    let method = method.unwrap_or("HTTP");
    span.record("otel.name", format!("{method} {route}"));
    span.record("otel.kind", "server");
    if !headers.contains_key("traceparent") {
        return;
    }
    let parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(&Headers(headers)));
    // A malformed traceparent extracts to no span: the request is a root of its own.
    if parent.span().span_context().is_valid() {
        // Fails only when the span is disabled or already started: then it keeps
        // the parent it has.
        let _ = span.set_parent(parent);
    }
}
