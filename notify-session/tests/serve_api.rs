//! The real `notify serve` on a redb file, over HTTP: every disposition and refusal
//! with its status code and a body naming it, the lifecycle events, ending a session,
//! the operational routes, HTTP/2, and the OpenAPI document listing every route.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod serve_support;

use notify_types::{
    EventId, ExecutionId, LoopId, ProcessLifecycleKind, ProcessLifecycleMetadata,
    ProcessLifecycleState, SessionEvent, SessionId, Timestamp,
};
use reqwest::{Method, StatusCode};
use serve_support::{
    Client, Server, Start, completion, journal_dir, new_secret, polled, sha256_hex,
};

struct Fixture {
    _dir: tempfile::TempDir,
    server: Server,
    client: Client,
}

fn fixture() -> Fixture {
    let (dir, journal) = journal_dir();
    let secret = new_secret();
    let server = Server::start(&Start::redb(&journal, &[&secret]));
    let client = Client::new(&server.url, Some(&secret));
    Fixture {
        _dir: dir,
        server,
        client,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_disposition_has_its_status_and_names_itself() {
    let f = fixture();
    let c = &f.client;
    let (s, l) = (SessionId::new(), LoopId::new());
    assert_eq!(c.open(s).await.status, StatusCode::CREATED);
    assert_eq!(c.open(s).await.status, StatusCode::OK, "open is idempotent");
    let r = c.register(s, l, 1).await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    assert_eq!(c.register(s, l, 1).await.status, StatusCode::OK);
    let r = c.register(s, l, 2).await;
    assert_eq!(
        (r.status, r.str("reason")),
        (StatusCode::CONFLICT, "capacity_mismatch")
    );

    // Accepted 201.
    let n = completion(s, l);
    let r = c.deliver(&n).await;
    assert_eq!(
        (r.status, r.str("disposition")),
        (StatusCode::CREATED, "accepted"),
        "{r:?}"
    );
    // Duplicate 200, with the original seq.
    let r = c.deliver(&n).await;
    assert_eq!(
        (r.status, r.str("disposition")),
        (StatusCode::OK, "duplicate")
    );
    assert_eq!(r.body["seq"], 1, "the original frame's seq: {r:?}");
    // Collision 409: the digest of the stored payload, never the payload.
    let mut other = n.clone();
    other.process_handle = "build-43".into();
    let r = c.deliver(&other).await;
    assert_eq!(
        (r.status, r.str("disposition")),
        (StatusCode::CONFLICT, "collision")
    );
    assert_eq!(r.str("stored_sha256"), sha256_hex(&n.encode()));
    assert_eq!(r.body["seq"], 1);
    let text = r.body.to_string();
    assert!(
        !text.contains("build-42") && !text.contains("build-43"),
        "{text}"
    );
    assert_eq!(r.headers["content-type"], "application/problem+json");
    // Stopped 503 + Retry-After: the loop's live set (capacity 1) is full.
    let stopped = completion(s, l);
    let r = c.deliver(&stopped).await;
    assert_eq!(
        (r.status, r.str("disposition"), r.str("reason")),
        (StatusCode::SERVICE_UNAVAILABLE, "stopped", "loop_full"),
        "{r:?}"
    );
    assert_eq!(r.headers["retry-after"], "1");
    assert_eq!(r.body["retryable"], true);
    // Loop not registered: 404, stopped, not retryable.
    let r = c.deliver(&completion(s, LoopId::new())).await;
    assert_eq!(
        (r.status, r.str("disposition"), r.str("reason")),
        (StatusCode::NOT_FOUND, "stopped", "loop_not_found")
    );
    // Session never opened: 404.
    let r = c.deliver(&completion(SessionId::new(), l)).await;
    assert_eq!(
        (r.status, r.str("reason")),
        (StatusCode::NOT_FOUND, "session_not_found")
    );

    // Invalid 400, naming the first failing field by the wire names.
    let mut bad = completion(s, l);
    bad.process_handle = "has a space".into();
    let r = c.deliver(&bad).await;
    assert_eq!(
        (r.status, r.str("disposition"), r.str("field")),
        (StatusCode::BAD_REQUEST, "none", "process_handle")
    );
    let mut bad = completion(s, l);
    bad.reason = notify_types::ProcessTerminalReason::Killed;
    let r = c.deliver(&bad).await;
    assert_eq!(
        (r.status, r.str("field")),
        (StatusCode::BAD_REQUEST, "state_reason")
    );
    let n2 = completion(s, l);
    let mut with_pid = String::from_utf8(n2.encode()).unwrap();
    with_pid.insert_str(1, "\"pid\":4242,");
    let r = c
        .deliver_bytes(s, &n2.command_id.to_string(), with_pid.into_bytes())
        .await;
    assert_eq!(
        (r.status, r.str("field")),
        (StatusCode::BAD_REQUEST, "pid"),
        "{r:?}"
    );
    let r = c
        .deliver_bytes(s, &n2.command_id.to_string(), b"{not json".to_vec())
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // webhook-id must be the command ID.
    let r = c
        .deliver_bytes(s, &LoopId::new().to_string(), n2.encode())
        .await;
    assert_eq!(
        (r.status, r.str("field")),
        (StatusCode::BAD_REQUEST, "command_id")
    );
    // The path's session must be the notification's.
    let other_session = SessionId::new();
    let r = c
        .send(
            Method::POST,
            &format!("/v1/sessions/{other_session}/completions"),
            &n2.command_id.to_string(),
            n2.encode(),
        )
        .await;
    assert_eq!(
        (r.status, r.str("field")),
        (StatusCode::BAD_REQUEST, "session_id")
    );
    // Too large 413.
    let r = c
        .deliver_bytes(s, &n2.command_id.to_string(), vec![b' '; 65 * 1024])
        .await;
    assert_eq!(
        (r.status, r.str("reason")),
        (StatusCode::PAYLOAD_TOO_LARGE, "too_large")
    );
    // Unauthenticated 401.
    let r = Client::new(&f.server.url, Some(&new_secret()))
        .deliver(&n2)
        .await;
    assert_eq!(
        (r.status, r.str("disposition"), r.str("reason")),
        (StatusCode::UNAUTHORIZED, "none", "unauthenticated")
    );
    let r = Client::new(&f.server.url, None).deliver(&n2).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);

    // Consume and acknowledge the accepted one; then the loop takes another.
    let r = c.poll(s, l, "wait_ms=1000").await;
    assert_eq!(polled(&r), vec![(n.command_id.to_string(), 1)]);
    assert_eq!(
        r.body["notifications"][0]["notification"]["process_handle"],
        "build-42"
    );
    assert_eq!(
        c.ack(s, l, &n.command_id.to_string()).await.str("outcome"),
        "acknowledged"
    );
    assert_eq!(
        c.ack(s, l, &n.command_id.to_string()).await.str("outcome"),
        "already_acknowledged"
    );
    let r = c.ack(s, l, &n2.command_id.to_string()).await;
    assert_eq!(
        (r.status, r.str("reason")),
        (StatusCode::NOT_FOUND, "not_handed_out")
    );
    // A consumed notification's retry is still a duplicate.
    assert_eq!(c.deliver(&n).await.status, StatusCode::OK);
    let pending = completion(s, l);
    assert_eq!(c.deliver(&pending).await.status, StatusCode::CREATED);

    // Ending refuses while something is pending, then abandons it.
    let r = c.end(s, false).await;
    assert_eq!(
        (r.status, r.str("reason")),
        (StatusCode::CONFLICT, "pending")
    );
    // The stopped one stays journaled (a retry would deliver it): pending too.
    assert_eq!(r.body["pending"], 2);
    let r = c.end(s, true).await;
    assert_eq!(
        (r.status, r.str("outcome")),
        (StatusCode::OK, "ended"),
        "{r:?}"
    );
    let end_seq = r.body["seq"].as_u64().expect("the end marker's seq");
    // Its retry at once: the same end, with the same seq.
    let again = c.end(s, true).await;
    assert_eq!(
        (
            again.status,
            again.str("outcome"),
            again.body["seq"].as_u64()
        ),
        (StatusCode::OK, "already_ended", Some(end_seq)),
        "{again:?}"
    );
    let abandoned: Vec<&str> = r.body["abandoned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        abandoned,
        [
            stopped.command_id.to_string(),
            pending.command_id.to_string()
        ]
    );
    // At once after the end (the host still holds the ended session for a few seconds):
    // neither opened again nor given a loop.
    let r = c.open(s).await;
    assert_eq!(
        (r.status, r.str("reason")),
        (StatusCode::GONE, "session_ended"),
        "{r:?}"
    );
    let r = c.register(s, LoopId::new(), 64).await;
    assert_eq!(
        (r.status, r.str("reason")),
        (StatusCode::GONE, "session_ended"),
        "{r:?}"
    );
    // After the end: a retry of a journaled one is answered truthfully, a new ID 410.
    assert_eq!(c.deliver(&n).await.status, StatusCode::OK);
    assert_eq!(c.deliver(&other).await.status, StatusCode::CONFLICT);
    let r = c.deliver(&completion(s, l)).await;
    assert_eq!(
        (r.status, r.str("disposition"), r.str("reason")),
        (StatusCode::GONE, "stopped", "session_ended")
    );
    assert_eq!(r.body["purged"], false);
    assert_eq!(c.end(s, false).await.str("outcome"), "already_ended");
}

/// A query parameter or a body field of the wrong type is a 400 naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_query_parameter_or_body_field_is_named() {
    let f = fixture();
    let c = &f.client;
    let (s, l) = (SessionId::new(), LoopId::new());
    assert_eq!(c.open(s).await.status, StatusCode::CREATED);
    assert_eq!(c.register(s, l, 64).await.status, StatusCode::CREATED);
    for (query, field) in [
        ("max=abc", "max"),
        ("wait_ms=-1", "wait_ms"),
        ("visibility_ms=99999999999999999999999", "visibility_ms"),
        ("bogus=1", "bogus"),
    ] {
        let r = c.poll(s, l, query).await;
        assert_eq!(
            (r.status, r.str("field")),
            (StatusCode::BAD_REQUEST, field),
            "{query}: {r:?}"
        );
    }
    for body in [r#"{"capacity":-1}"#, r#"{"capacity":"x"}"#] {
        let l2 = LoopId::new();
        let r = c
            .send(
                Method::PUT,
                &format!("/v1/sessions/{s}/loops/{l2}"),
                &format!("register:{s}:{l2}"),
                body.as_bytes().to_vec(),
            )
            .await;
        assert_eq!(
            (r.status, r.str("field")),
            (StatusCode::BAD_REQUEST, "capacity"),
            "{body}: {r:?}"
        );
    }
    let r = c
        .send(
            Method::POST,
            &format!("/v1/sessions/{s}/end"),
            &format!("end:{s}"),
            br#"{"if_pending":"x"}"#.to_vec(),
        )
        .await;
    assert_eq!(
        (r.status, r.str("field")),
        (StatusCode::BAD_REQUEST, "if_pending"),
        "{r:?}"
    );
    // A body that is not JSON at all names no field.
    let r = c
        .send(
            Method::POST,
            &format!("/v1/sessions/{s}/end"),
            &format!("end:{s}"),
            b"{".to_vec(),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    assert!(r.body["field"].is_null(), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_events_are_journaled_with_dispositions() {
    let f = fixture();
    let c = &f.client;
    let (s, l) = (SessionId::new(), LoopId::new());
    c.open(s).await;
    let created: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let m = ProcessLifecycleMetadata {
        event_id: EventId::new(),
        kind: ProcessLifecycleKind::Started,
        session_id: s,
        loop_id: l,
        process_handle: "build-42".into(),
        origin_execution_id: ExecutionId::new(),
        state: ProcessLifecycleState::Running,
        process_created_at: created,
        process_started_at: Some(created),
        process_finished_at: None,
        exit_code: None,
        reason: None,
        diagnostic: None,
    };
    let body = SessionEvent::Lifecycle(m.clone()).encode();
    let path = format!("/v1/sessions/{s}/events");
    let id = m.event_id.to_string();
    let r = c.send(Method::POST, &path, &id, body.clone()).await;
    assert_eq!(
        (r.status, r.str("disposition")),
        (StatusCode::CREATED, "accepted"),
        "{r:?}"
    );
    let seq = r.body["seq"].clone();
    let r = c.send(Method::POST, &path, &id, body.clone()).await;
    assert_eq!((r.status, r.body["seq"].clone()), (StatusCode::OK, seq));
    let mut other = m.clone();
    other.process_handle = "build-43".into();
    let other_body = SessionEvent::Lifecycle(other).encode();
    let r = c.send(Method::POST, &path, &id, other_body).await;
    assert_eq!(
        (r.status, r.str("disposition")),
        (StatusCode::CONFLICT, "collision")
    );
    assert_eq!(r.str("stored_sha256"), sha256_hex(&body));
    let mut bad = m.clone();
    bad.event_id = EventId::new();
    bad.process_started_at = None;
    let r = c
        .send(
            Method::POST,
            &path,
            &bad.event_id.to_string(),
            SessionEvent::Lifecycle(bad).encode(),
        )
        .await;
    assert_eq!(
        (r.status, r.str("field")),
        (StatusCode::BAD_REQUEST, "lifecycle_fields"),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operational_routes_and_http2() {
    let f = fixture();
    let c = &f.client;
    let plain = reqwest::Client::new();
    let r = plain
        .get(format!("{}/healthz", f.server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = plain
        .get(format!("{}/readyz", f.server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // A request first, so the metrics have something to show.
    let (s, l) = (SessionId::new(), LoopId::new());
    c.open(s).await;
    c.register(s, l, 8).await;
    c.deliver(&completion(s, l)).await;
    let text = plain
        .get(format!("{}/metrics", f.server.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("notify_serve_requests_total"), "{text}");
    assert!(
        text.contains("notify_serve_request_duration_seconds"),
        "{text}"
    );
    assert!(
        text.contains("notify_session_notifications_total"),
        "the library's own metrics: {text}"
    );
    // Unknown routes and methods: JSON problems. A route that does not take the
    // method is 405 with `Allow` naming those it takes (RFC 9110).
    let r = c.send(Method::GET, "/v2/nothing", "x", Vec::new()).await;
    assert_eq!(
        (r.status, r.str("reason")),
        (StatusCode::NOT_FOUND, "route_not_found")
    );
    let r = c
        .send(
            Method::DELETE,
            &format!("/v1/sessions/{s}/completions"),
            &s.to_string(),
            Vec::new(),
        )
        .await;
    assert_eq!(
        (r.status, r.str("reason"), r.str("disposition")),
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "none"),
        "{r:?}"
    );
    assert_eq!(
        r.headers.get("allow").and_then(|v| v.to_str().ok()),
        Some("POST"),
        "{r:?}"
    );
    assert_eq!(
        r.headers.get("content-type").and_then(|v| v.to_str().ok()),
        Some("application/problem+json")
    );
    // HTTP/2 with prior knowledge (plaintext), the same API.
    let h2 = Client::with_http(
        &f.server.url,
        Some(&new_secret()),
        reqwest::Client::builder().http2_prior_knowledge(),
    );
    let r = h2.open(SessionId::new()).await;
    assert_eq!(
        (r.version, r.status),
        (reqwest::Version::HTTP_2, StatusCode::UNAUTHORIZED)
    );
    let h2 = Client {
        key: c.key.clone(),
        ..h2
    };
    let r = h2.deliver(&completion(s, l)).await;
    assert_eq!(
        (r.version, r.status),
        (reqwest::Version::HTTP_2, StatusCode::CREATED)
    );
}

/// The value of the sample of `name` whose labels include every one of `labels`
/// (`key="value"`), in Prometheus text; `None` if no sample matches.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| labels.iter().all(|want| l.contains(want)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_metrics_count_each_answer_by_route_status_and_reason() {
    let f = fixture();
    let c = &f.client;
    let (s, l) = (SessionId::new(), LoopId::new());
    c.open(s).await;
    c.register(s, l, 8).await;
    let first = completion(s, l);
    for n in [first.clone(), completion(s, l), completion(s, l)] {
        assert_eq!(c.deliver(&n).await.status, StatusCode::CREATED);
    }
    assert_eq!(c.deliver(&first).await.status, StatusCode::OK);
    let unsigned = reqwest::Client::new()
        .post(format!("{}/v1/sessions/{s}/completions", f.server.url))
        .body(completion(s, l).encode())
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), StatusCode::UNAUTHORIZED);
    // Methods outside HTTP's nine, whatever their name, share one label.
    for method in ["FOO", "BAR"] {
        let r = reqwest::Client::new()
            .request(
                Method::from_bytes(method.as_bytes()).unwrap(),
                format!("{}/healthz", f.server.url),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    }
    let text = reqwest::get(format!("{}/metrics", f.server.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let route = r#"route="/v1/sessions/{session_id}/completions""#;
    let post = r#"method="POST""#;
    let answers = |status: &str, reason: &str| {
        sample(
            &text,
            "notify_serve_requests_total",
            &[
                route,
                post,
                &format!("status=\"{status}\""),
                &format!("reason=\"{reason}\""),
            ],
        )
    };
    assert_eq!(answers("201", "none"), Some(3.0), "{text}");
    assert_eq!(answers("200", "none"), Some(1.0), "{text}");
    assert_eq!(answers("401", "unauthenticated"), Some(1.0), "{text}");
    assert_eq!(
        sample(
            &text,
            "notify_serve_requests_total",
            &[
                r#"route="/healthz""#,
                r#"method="other""#,
                r#"status="405""#
            ]
        ),
        Some(2.0),
        "{text}"
    );
    assert!(!text.contains(r#"method="FOO""#), "{text}");
    assert_eq!(
        sample(
            &text,
            "notify_serve_request_duration_seconds_count",
            &[route, post]
        ),
        Some(5.0),
        "{text}"
    );
    // The journal's commit sizes are counted in appends, not in seconds' buckets:
    // every commit so far held a few appends at most (the client sends one at a time).
    let commits = sample(
        &text,
        "notify_journal_commit_batch_size_count",
        &[r#"backend="redb""#],
    )
    .unwrap();
    assert!(commits >= 3.0, "{text}");
    assert_eq!(
        sample(
            &text,
            "notify_journal_commit_batch_size_bucket",
            &[r#"backend="redb""#, r#"le="64""#]
        ),
        Some(commits),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_lists_every_route() {
    let f = fixture();
    let doc: serde_json::Value = reqwest::get(format!("{}/openapi.json", f.server.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["openapi"].as_str().unwrap().get(..3), Some("3.1"));
    let paths = doc["paths"].as_object().unwrap();
    for (method, path) in notify_session::serve::ROUTES {
        assert!(
            paths.get(*path).and_then(|p| p.get(*method)).is_some(),
            "{method} {path} is missing from the OpenAPI document"
        );
    }
    // And nothing the server does not serve.
    let listed: usize = paths
        .values()
        .map(|p| {
            p.as_object()
                .unwrap()
                .keys()
                .filter(|k| *k != "parameters")
                .count()
        })
        .sum();
    assert_eq!(listed, notify_session::serve::ROUTES.len());
    assert_eq!(
        doc,
        serde_json::from_str::<serde_json::Value>(notify_session::serve::OPENAPI).unwrap()
    );
}

/// The document states the codec's rules on what it describes: the completion's
/// `(state, reason)` pairs are exactly the eleven `is_completion_pair` accepts, and an
/// ID is never the nil UUID (the codec refuses it in every ID field).
#[test]
fn the_openapi_document_states_the_codecs_completion_pairs_and_refuses_the_nil_uuid() {
    use notify_types::{ProcessLifecycleState, ProcessTerminalReason, is_completion_pair};
    use std::collections::BTreeSet;

    let doc: serde_json::Value = serde_json::from_str(notify_session::serve::OPENAPI).unwrap();
    let schemas = &doc["components"]["schemas"];
    let listed: BTreeSet<(u64, u64)> = schemas["ProcessCompletionNotification"]["oneOf"]
        .as_array()
        .expect("the completion's schema lists its pairs under oneOf")
        .iter()
        .map(|pair| {
            let code = |field: &str| pair["properties"][field]["const"].as_u64().unwrap();
            (code("state"), code("reason"))
        })
        .collect();
    let codec: BTreeSet<(u64, u64)> = ProcessLifecycleState::ALL
        .iter()
        .flat_map(|s| ProcessTerminalReason::ALL.iter().map(move |r| (*s, *r)))
        .filter(|(s, r)| is_completion_pair(*s, *r))
        .map(|(s, r)| (u64::from(s.code()), u64::from(r.code())))
        .collect();
    assert_eq!(codec.len(), 11);
    assert_eq!(listed, codec);
    assert_eq!(
        schemas["Uuid"]["not"]["const"],
        serde_json::json!(notify_types::Uuid::nil().to_string())
    );
}

/// The document's links (the workflow schemathesis follows in CI) name what the
/// document has: an operation, that operation's parameters, and fields of the
/// schemas they read from and write to. A link naming a renamed field would lead a
/// generated client (or the CI's stateful tests) to requests no handler expects.
#[test]
fn the_openapi_documents_links_name_operations_parameters_and_fields_it_has() {
    let doc: serde_json::Value = serde_json::from_str(notify_session::serve::OPENAPI).unwrap();
    let schema = |s: &serde_json::Value| -> serde_json::Value {
        match s["$ref"].as_str() {
            Some(r) => doc.pointer(r.trim_start_matches('#')).unwrap().clone(),
            None => s.clone(),
        }
    };
    let has_field =
        |s: &serde_json::Value, field: &str| schema(s)["properties"].get(field).is_some();
    // The JSON schema of a request body or an answer.
    let json_body = |v: &'_ serde_json::Value| v["content"]["application/json"]["schema"].clone();
    // An operation's parameter `name` in `place` (`path`, `query`).
    let parameter = |op: &serde_json::Value, place: &str, name: &str| {
        op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["in"] == place && p["name"] == name)
    };
    let mut operations = std::collections::BTreeMap::new();
    for item in doc["paths"].as_object().unwrap().values() {
        for (method, op) in item.as_object().unwrap() {
            if method != "parameters" {
                operations.insert(op["operationId"].as_str().unwrap(), op);
            }
        }
    }
    let mut links = 0;
    for (from_id, from) in &operations {
        for (status, response) in from["responses"].as_object().unwrap() {
            let Some(named) = response.get("links") else {
                continue;
            };
            let (body, request) = (json_body(response), json_body(&from["requestBody"]));
            // Where a runtime expression reads from: `$request.path.x`, `$request.body`,
            // `$request.body#/x` or `$response.body#/x`.
            let reads = |expr: &str| match expr.split_once('#') {
                Some(("$response.body", pointer)) => {
                    has_field(&body, pointer.trim_start_matches('/'))
                }
                Some(("$request.body", pointer)) => {
                    has_field(&request, pointer.trim_start_matches('/'))
                }
                Some(_) => false,
                None if expr == "$request.body" => !request.is_null(),
                None => expr
                    .strip_prefix("$request.path.")
                    .is_some_and(|name| parameter(from, "path", name)),
            };
            for (name, link) in named.as_object().unwrap() {
                let at = format!("{from_id} {status} link {name}");
                let target = operations
                    .get(link["operationId"].as_str().unwrap())
                    .unwrap_or_else(|| panic!("{at}: no such operation"));
                for (param, expr) in link["parameters"].as_object().unwrap() {
                    let (place, pname) = param.split_once('.').unwrap();
                    assert!(
                        parameter(target, place, pname),
                        "{at}: the target has no parameter {param}"
                    );
                    assert!(reads(expr.as_str().unwrap()), "{at}: {expr} reads nothing");
                }
                if let Some(fields) = link.get("requestBody") {
                    // The body's fields the link sets, at any depth, each in the
                    // target's schema at that place.
                    let mut places = vec![(fields, json_body(&target["requestBody"]))];
                    while let Some((fields, body)) = places.pop() {
                        match fields {
                            serde_json::Value::String(expr) => {
                                assert!(reads(expr), "{at}: {expr} reads nothing");
                            }
                            fields => {
                                for (field, value) in fields.as_object().unwrap() {
                                    assert!(
                                        has_field(&body, field),
                                        "{at}: the target's body has no field {field}"
                                    );
                                    places
                                        .push((value, schema(&body)["properties"][field].clone()));
                                }
                            }
                        }
                    }
                }
                links += 1;
            }
        }
    }
    assert_eq!(links, 5, "the document's links");
}

/// Whether `value` satisfies `schema`, for the keywords the document uses (a test's
/// evaluator: `pattern` and `format` are not checked, the generated values meet them;
/// a keyword it does not know fails the test rather than pass unchecked).
fn satisfies(
    doc: &serde_json::Value,
    schema: &serde_json::Value,
    value: &serde_json::Value,
) -> bool {
    use serde_json::Value;
    let Value::Object(keywords) = schema else {
        return schema
            .as_bool()
            .expect("a schema is an object or a boolean");
    };
    keywords
        .iter()
        .all(|(keyword, arg)| match keyword.as_str() {
            "$ref" => {
                let target = doc
                    .pointer(arg.as_str().unwrap().trim_start_matches('#'))
                    .unwrap();
                satisfies(doc, target, value)
            }
            "type" => match arg.as_str().unwrap() {
                "object" => value.is_object(),
                "string" => value.is_string(),
                "integer" => value.is_i64() || value.is_u64(),
                "boolean" => value.is_boolean(),
                other => panic!("type {other}"),
            },
            "const" => value == arg,
            "enum" => arg.as_array().unwrap().contains(value),
            "required" => arg
                .as_array()
                .unwrap()
                .iter()
                .all(|f| value.get(f.as_str().unwrap()).is_some()),
            "properties" => arg
                .as_object()
                .unwrap()
                .iter()
                .all(|(field, sub)| value.get(field).is_none_or(|v| satisfies(doc, sub, v))),
            "additionalProperties" => {
                assert_eq!(arg, &Value::Bool(false), "additionalProperties");
                let known = keywords["properties"].as_object().unwrap();
                value
                    .as_object()
                    .is_none_or(|o| o.keys().all(|k| known.contains_key(k)))
            }
            "oneOf" => {
                let matching = arg.as_array().unwrap().iter();
                matching.filter(|s| satisfies(doc, s, value)).count() == 1
            }
            "not" => !satisfies(doc, arg, value),
            "minimum" => value.as_f64().is_none_or(|v| v >= arg.as_f64().unwrap()),
            "maximum" => value.as_f64().is_none_or(|v| v <= arg.as_f64().unwrap()),
            "maxLength" => value
                .as_str()
                .is_none_or(|s| s.chars().count() as u64 <= arg.as_u64().unwrap()),
            "description" | "pattern" | "format" | "default" => true,
            other => panic!("the test's evaluator does not know `{other}`"),
        })
}

/// The document's lifecycle event schema accepts exactly the events the codec
/// accepts, across every kind, state, reason and presence of the optional fields
/// (timestamps in order, IDs and handle valid): what JSON Schema can state of the
/// codec's rules, it states, and no more.
#[test]
fn the_openapi_documents_lifecycle_events_are_the_ones_the_codec_accepts() {
    use notify_types::{
        ProcessLifecycleKind, ProcessLifecycleState, ProcessTerminalReason, SessionEvent, Uuid,
    };
    use serde_json::{Value, json};

    let doc: Value = serde_json::from_str(notify_session::serve::OPENAPI).unwrap();
    let schema = json!({"$ref": "#/components/schemas/LifecycleEvent"});
    // An event of `ty` whose metadata has `kind` and `state`, valid IDs, handle and
    // creation time; the caller adds the optional fields.
    let event = |ty: &str, kind: ProcessLifecycleKind, state: ProcessLifecycleState| {
        json!({"type": ty, "v": 1, "metadata": {
            "event_id": Uuid::new_v4().to_string(),
            "kind": kind.code(),
            "session_id": Uuid::new_v4().to_string(),
            "loop_id": Uuid::new_v4().to_string(),
            "process_handle": "build-42",
            "origin_execution_id": Uuid::new_v4().to_string(),
            "state": state.code(),
            "process_created_at": "2026-01-01T00:00:00Z",
        }})
    };
    let (mut accepted, mut checked) = (0, 0);
    for &kind in ProcessLifecycleKind::ALL {
        for &state in ProcessLifecycleState::ALL {
            let reasons = ProcessTerminalReason::ALL.iter().map(Some);
            for reason in std::iter::once(None).chain(reasons) {
                for presence in 0..48u32 {
                    let mut event = event(kind.event_type(), kind, state);
                    let m = event["metadata"].as_object_mut().unwrap();
                    if let Some(reason) = reason {
                        m.insert("reason".into(), json!(reason.code()));
                    }
                    if presence & 1 != 0 {
                        m.insert("process_started_at".into(), json!("2026-01-01T00:00:01Z"));
                    }
                    if presence & 2 != 0 {
                        m.insert("process_finished_at".into(), json!("2026-01-01T00:00:02Z"));
                    }
                    if presence & 4 != 0 {
                        m.insert("exit_code".into(), json!(3));
                    }
                    if presence & 8 != 0 {
                        m.insert("diagnostic".into(), json!("out of memory"));
                    }
                    match presence >> 4 {
                        0 => {}
                        1 => drop(m.insert("has_exit_code".into(), json!(false))),
                        _ => drop(m.insert("has_exit_code".into(), json!(true))),
                    }
                    let codec = matches!(
                        SessionEvent::decode(event.to_string().as_bytes()),
                        Ok(SessionEvent::Lifecycle(_))
                    );
                    assert_eq!(
                        satisfies(&doc, &schema, &event),
                        codec,
                        "the document and the codec disagree (codec accepts: {codec}) on {event}"
                    );
                    accepted += usize::from(codec);
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 5 * 9 * 10 * 48);
    // The combinations the codec accepts: started and backgrounded 2 each (has_exit_code
    // absent or false), a stop requested 12 (two states, three reasons), an exit 2
    // (exit_code given or not), a failure 8 and a loss 8 (started, a diagnostic and
    // has_exit_code each optional), the other completion pairs 16 (eight pairs).
    assert_eq!(accepted, 2 + 2 + 12 + 2 + 8 + 16 + 8, "of {checked}");
    // A `type` naming another kind than `metadata.kind` is refused by both.
    let mut mismatched = event(
        ProcessLifecycleKind::Lost.event_type(),
        ProcessLifecycleKind::Started,
        ProcessLifecycleState::Running,
    );
    mismatched["metadata"]["process_started_at"] = json!("2026-01-01T00:00:01Z");
    assert!(SessionEvent::decode(mismatched.to_string().as_bytes()).is_err());
    assert!(!satisfies(&doc, &schema, &mismatched));
}
