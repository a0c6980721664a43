//! The real `notify serve` exporting its spans to a real OTLP/HTTP receiver on
//! loopback (hyper, decoding the protobuf bodies with `opentelemetry-proto`'s types):
//! the caller's W3C `traceparent` is the parent of the request span, so the append,
//! dispatch and ack spans land in the caller's trace; a request without one starts its
//! own trace; a malformed one is ignored and the request answered as usual; a request
//! span is named `METHOD route`, `HTTP route` for a method outside HTTP's nine; a
//! stream's request span lasts as the stream; SIGTERM flushes what was not exported yet.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod serve_support;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode as HyperStatus};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use reqwest::StatusCode;
use serve_support::{Client, Server, Start, completion, journal_dir, new_secret, polled};

/// One span as the receiver got it, with its resource's `service.name`.
#[derive(Clone, Debug)]
struct Got {
    service: String,
    span: Span,
}

/// What the receiver got: spans, and anything it had to refuse.
#[derive(Default)]
struct Received {
    spans: Vec<Got>,
    refused: Vec<String>,
}

/// A real OTLP/HTTP trace receiver on loopback.
struct Receiver {
    addr: SocketAddr,
    got: Arc<Mutex<Received>>,
}

fn string_value(kv: &KeyValue) -> Option<String> {
    match kv.value.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        any_value::Value::BoolValue(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Records why an export was refused, and answers `status`.
fn refuse(got: &Mutex<Received>, why: String, status: HyperStatus) -> Response<Full<Bytes>> {
    got.lock().unwrap().refused.push(why);
    Response::builder()
        .status(status)
        .body(Full::new(Bytes::new()))
        .unwrap()
}

async fn export(
    request: Request<Incoming>,
    got: Arc<Mutex<Received>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    let content_type = request
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = match request.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Ok(refuse(&got, format!("body: {e}"), HyperStatus::BAD_REQUEST)),
    };
    if path != "/v1/traces" || content_type != "application/x-protobuf" {
        let why = format!("{path} with {content_type}");
        return Ok(refuse(&got, why, HyperStatus::NOT_FOUND));
    }
    let export = match ExportTraceServiceRequest::decode(body) {
        Ok(export) => export,
        Err(e) => {
            return Ok(refuse(
                &got,
                format!("decode: {e}"),
                HyperStatus::BAD_REQUEST,
            ));
        }
    };
    let mut received = got.lock().unwrap();
    for resource_spans in export.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(string_value)
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                received.spans.push(Got {
                    service: service.clone(),
                    span,
                });
            }
        }
    }
    drop(received);
    let answer = ExportTraceServiceResponse::default().encode_to_vec();
    Ok(Response::builder()
        .header("content-type", "application/x-protobuf")
        .body(Full::new(Bytes::from(answer)))
        .unwrap())
}

async fn receiver() -> Receiver {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let got = Arc::new(Mutex::new(Received::default()));
    let shared = Arc::clone(&got);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                break;
            };
            let got = Arc::clone(&shared);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |r| export(r, Arc::clone(&got)));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Receiver { addr, got }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(string_value)
}

/// Whether `span` descends from the span `ancestor` (hex), following parents through
/// the spans received.
fn descends_from(span: &Span, ancestor: &str, by_id: &HashMap<String, &Span>) -> bool {
    let mut parent = hex(&span.parent_span_id);
    for _ in 0..64 {
        if parent == ancestor {
            return true;
        }
        match by_id.get(&parent) {
            Some(p) => parent = hex(&p.parent_span_id),
            None => return false,
        }
    }
    false
}

/// How long the client holds a stream open after its first event.
const STREAM_HELD: std::time::Duration = std::time::Duration::from_millis(400);

/// A client that sends `traceparent` (when given) with every request.
fn traced(client: &Client, traceparent: Option<&str>) -> Client {
    Client {
        headers: traceparent
            .map(|t| vec![("traceparent".to_owned(), t.to_owned())])
            .unwrap_or_default(),
        ..client.clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_the_collector_in_the_callers_trace() {
    let receiver = receiver().await;
    let (_dir, journal) = journal_dir();
    let secret = new_secret();
    let mut start = Start::redb(&journal, &[&secret]);
    start.envs = vec![
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT".into(),
            format!("http://{}", receiver.addr),
        ),
        ("OTEL_EXPORTER_OTLP_PROTOCOL".into(), "http/protobuf".into()),
        ("OTEL_SERVICE_NAME".into(), "notify-otel-test".into()),
    ];
    let mut server = Server::start(&start);
    let client = Client::new(&server.url, Some(&secret));

    // The caller's traces: one for the delivery, one for the acknowledgement.
    let (deliver_trace, deliver_parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let (ack_trace, ack_parent) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let s = notify_types::SessionId::new();
    let l = notify_types::LoopId::new();
    // No traceparent: a trace of its own.
    assert_eq!(client.open(s).await.status, StatusCode::CREATED);
    assert_eq!(client.register(s, l, 8).await.status, StatusCode::CREATED);
    let first = completion(s, l);
    let r = traced(
        &client,
        Some(&format!("00-{deliver_trace}-{deliver_parent}-01")),
    )
    .deliver(&first)
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    // A malformed traceparent is ignored: answered as usual, in a new trace.
    let second = completion(s, l);
    let r = traced(&client, Some("00-not-a-trace-id-01"))
        .deliver(&second)
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    let polled = polled(&client.poll(s, l, "max=10").await);
    assert_eq!(polled.len(), 2, "{polled:?}");
    let r = traced(&client, Some(&format!("00-{ack_trace}-{ack_parent}-01")))
        .ack(s, l, &first.command_id.to_string())
        .await;
    assert_eq!(
        (r.status, r.str("outcome")),
        (StatusCode::OK, "acknowledged"),
        "{r:?}"
    );

    // A stream, in the caller's trace: the client reads its first event, then holds
    // it open for STREAM_HELD before it goes away; the stream's request span lasts as
    // the stream, so it ends no sooner (not when the answer's head was sent).
    let (stream_trace, stream_parent) = ("5b8aa5a2d2c872e8321cf37308d69df2", "051581bf3cb55c13");
    let streamed = notify_types::LoopId::new();
    assert_eq!(
        client.register(s, streamed, 8).await.status,
        StatusCode::CREATED
    );
    let r = client.deliver(&completion(s, streamed)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    let mut stream = traced(
        &client,
        Some(&format!("00-{stream_trace}-{stream_parent}-01")),
    )
    .stream(s, streamed, "")
    .await;
    let first_event = tokio::time::timeout(std::time::Duration::from_secs(10), stream.chunk())
        .await
        .expect("an event within 10 s")
        .unwrap()
        .expect("the stream goes on");
    assert!(
        String::from_utf8_lossy(&first_event).contains("event: notification"),
        "{first_event:?}"
    );
    tokio::time::sleep(STREAM_HELD).await;
    drop(stream);

    // A method outside HTTP's nine is named `HTTP` in the span's name.
    let invented = reqwest::Client::new()
        .request(
            reqwest::Method::from_bytes(b"FOO").unwrap(),
            format!("{}/healthz", server.url),
        )
        .send()
        .await
        .unwrap();
    assert!(invented.status().is_client_error(), "{invented:?}");

    // SIGTERM: the server flushes its spans before it exits.
    let status = server.terminate();
    assert!(status.success(), "{status:?}: {}", server.log());
    let got = receiver.got.lock().unwrap();
    assert!(got.refused.is_empty(), "refused: {:?}", got.refused);
    assert!(
        !got.spans.is_empty(),
        "no span reached the receiver: {}",
        server.log()
    );
    assert!(
        got.spans.iter().all(|g| g.service == "notify-otel-test"),
        "{:?}",
        got.spans.iter().map(|g| &g.service).collect::<Vec<_>>()
    );
    let spans: Vec<&Span> = got.spans.iter().map(|g| &g.span).collect();
    let by_id: HashMap<String, &Span> = spans.iter().map(|s| (hex(&s.span_id), *s)).collect();
    let names = |trace: &str| -> Vec<&str> {
        spans
            .iter()
            .filter(|s| hex(&s.trace_id) == trace)
            .map(|s| s.name.as_str())
            .collect()
    };
    let in_trace = |trace: &str, name: &str| -> Vec<&Span> {
        spans
            .iter()
            .filter(|s| hex(&s.trace_id) == trace && s.name == name)
            .copied()
            .collect()
    };

    // The delivery: append and dispatch under the caller's span, in its trace.
    for name in ["notify.append", "notify.dispatch"] {
        let found = in_trace(deliver_trace, name);
        assert_eq!(found.len(), 1, "{name} in {:?}", names(deliver_trace));
        let span = found[0];
        assert!(
            descends_from(span, deliver_parent, &by_id),
            "{name} does not descend from the caller's span"
        );
        assert_eq!(
            attr(span, "command_id").as_deref(),
            Some(first.command_id.to_string().as_str()),
            "{span:?}"
        );
        assert_eq!(
            attr(span, "session").as_deref(),
            Some(s.to_string().as_str())
        );
    }
    let append = in_trace(deliver_trace, "notify.append")[0];
    assert_eq!(attr(append, "outcome").as_deref(), Some("appended"));
    let dispatch = in_trace(deliver_trace, "notify.dispatch")[0];
    assert_eq!(attr(dispatch, "outcome").as_deref(), Some("accepted"));
    // The request span's parent is the caller's span itself.
    let request = spans
        .iter()
        .find(|sp| {
            hex(&sp.trace_id) == deliver_trace
                && attr(sp, "webhook_id") == Some(first.command_id.to_string())
        })
        .unwrap_or_else(|| panic!("no request span in {:?}", names(deliver_trace)));
    assert_eq!(hex(&request.parent_span_id), deliver_parent);
    assert_eq!(request.name, "POST /v1/sessions/{session_id}/completions");
    let all: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert!(all.iter().any(|n| n.starts_with("HTTP ")), "{all:?}");
    assert!(!all.iter().any(|n| n.starts_with("FOO")), "{all:?}");

    // The stream's request span: under the caller's span, open while the stream was.
    let streams = in_trace(
        stream_trace,
        "GET /v1/sessions/{session_id}/loops/{loop_id}/notifications/stream",
    );
    assert_eq!(streams.len(), 1, "{:?}", names(stream_trace));
    let stream_span = streams[0];
    assert_eq!(hex(&stream_span.parent_span_id), stream_parent);
    let lasted = std::time::Duration::from_nanos(
        stream_span.end_time_unix_nano - stream_span.start_time_unix_nano,
    );
    assert!(
        lasted >= STREAM_HELD,
        "the stream's request span lasted {lasted:?}, the stream at least {STREAM_HELD:?}"
    );

    // The acknowledgement over HTTP: ack, and the consumption's append under it.
    let acks = in_trace(ack_trace, "notify.ack");
    assert_eq!(acks.len(), 1, "notify.ack in {:?}", names(ack_trace));
    let ack = acks[0];
    assert!(descends_from(ack, ack_parent, &by_id));
    assert_eq!(
        attr(ack, "command_id").as_deref(),
        Some(first.command_id.to_string().as_str())
    );
    assert_eq!(attr(ack, "outcome").as_deref(), Some("acknowledged"));
    let consumed = in_trace(ack_trace, "notify.append");
    assert_eq!(consumed.len(), 1, "{:?}", names(ack_trace));
    assert!(descends_from(consumed[0], &hex(&ack.span_id), &by_id));
    assert_eq!(
        attr(consumed[0], "kind").as_deref(),
        Some("NotificationConsumed")
    );

    // No traceparent (the open), and a malformed one (the second delivery): each
    // request is the root of a trace of its own, its spans under it.
    for (webhook_id, appends) in [
        (format!("open:{s}"), false),
        (second.command_id.to_string(), true),
    ] {
        let roots: Vec<&Span> = spans
            .iter()
            .filter(|sp| attr(sp, "webhook_id").as_deref() == Some(webhook_id.as_str()))
            .copied()
            .collect();
        assert_eq!(roots.len(), 1, "request spans for {webhook_id}");
        let root = roots[0];
        assert!(root.parent_span_id.is_empty(), "{root:?}");
        let trace = hex(&root.trace_id);
        assert!(trace != deliver_trace && trace != ack_trace && trace.len() == 32);
        if appends {
            assert!(
                names(&trace).contains(&"notify.append"),
                "{:?}",
                names(&trace)
            );
        }
    }
}

#[test]
fn what_this_build_cannot_export_is_refused_at_start() {
    let (_dir, journal) = journal_dir();
    let journal = journal.display().to_string();
    let args = [
        "serve",
        "--journal",
        journal.as_str(),
        "--listen",
        "127.0.0.1:0",
        "--insecure-unsigned",
    ];
    for (envs, names) in [
        (
            vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ],
            "OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
        ),
        (
            vec![(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "https://collector:4318",
            )],
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=https://collector:4318",
        ),
    ] {
        let (code, stderr) = serve_support::run_to_exit(&args, &envs);
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(names), "{stderr}");
    }
}
