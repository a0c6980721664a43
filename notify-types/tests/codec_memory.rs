//! Hostile input has bounded cost: decoding any document, however it is built, peaks
//! at no more than four times the document's size in heap.
//!
//! A counting global allocator (`notify_testkit::bench`'s, installed in this binary alone, hence a
//! test binary of its own with a single test) records the peak of live heap bytes
//! while each document is decoded by the decoders. The documents are the expensive shapes for a tree-building parser:
//! an unknown key holding a huge array of objects, deep nesting, long strings, many
//! small numbers, containers where scalars belong, and valid documents at the size
//! limit.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this file's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use std::hint::black_box;

use notify_testkit::bench::alloc::{CountingAlloc, peak_during};
use notify_types::*;

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

type Decoder = fn(&[u8]) -> Result<(), DecodeError>;

/// Decodes `doc` with the record and the bare-notification decoders; returns the highest peak and a short outcome.
fn worst_peak(doc: &[u8]) -> (usize, String) {
    let mut worst = 0;
    let mut outcome = String::new();
    // Each decoder's result is held until the measurement ends, then summarised. The
    // command and event decoders read with the record decoder's shape and judge the
    // same fields afterwards, so the record decoder stands for all three.
    let decoders: [(&str, Decoder); 2] = [
        ("record", |d| JournalRecord::decode(d).map(drop)),
        ("notification", |d| {
            ProcessCompletionNotification::decode(d).map(drop)
        }),
    ];
    for (name, decode) in decoders {
        let mut result = Ok(());
        let peak = peak_during(|| result = black_box(decode(black_box(doc))));
        worst = worst.max(peak);
        if name == "record" {
            outcome = summary(result);
        }
    }
    (worst, outcome)
}

fn summary(r: Result<(), DecodeError>) -> String {
    match r {
        Ok(()) => "ok".to_owned(),
        Err(DecodeError::Syntax { .. }) => "Syntax".to_owned(),
        Err(e) => {
            let text = format!("{e:?}");
            text.chars().take(60).collect()
        }
    }
}

/// `prefix`, then `item` repeated (comma-separated) while the document stays within
/// `MAX_DECODE_BYTES`, then `suffix`.
fn repeated(prefix: &str, item: &str, suffix: &str) -> Vec<u8> {
    let room = MAX_DECODE_BYTES - prefix.len() - suffix.len();
    let n = (room + 1) / (item.len() + 1);
    let mut doc = Vec::with_capacity(MAX_DECODE_BYTES);
    doc.extend_from_slice(prefix.as_bytes());
    for i in 0..n {
        if i > 0 {
            doc.push(b',');
        }
        doc.extend_from_slice(item.as_bytes());
    }
    doc.extend_from_slice(suffix.as_bytes());
    assert!(doc.len() <= MAX_DECODE_BYTES);
    doc
}

/// `prefix`, then `fill` repeated to fill the limit, then `suffix`.
fn filled(prefix: &str, fill: &str, suffix: &str) -> Vec<u8> {
    let room = MAX_DECODE_BYTES - prefix.len() - suffix.len();
    let mut doc = Vec::with_capacity(MAX_DECODE_BYTES);
    doc.extend_from_slice(prefix.as_bytes());
    doc.extend_from_slice(fill.repeat(room / fill.len()).as_bytes());
    doc.extend_from_slice(suffix.as_bytes());
    doc
}

/// A document at the size limit: `doc` with whitespace added before its last byte.
fn padded(doc: &[u8]) -> Vec<u8> {
    let (last, body) = doc.split_last().unwrap();
    let mut out = body.to_vec();
    out.resize(MAX_DECODE_BYTES - 1, b' ');
    out.push(*last);
    out
}

const ENV: &str = r#""type":"ProcessNotification","v":1"#;

fn id(n: u8) -> Uuid {
    Uuid::from_u128(0x0191_e2a0_7c4b_7d3e_9a10_3b5f_6c7d_8e00 | u128::from(n))
}

fn notification() -> ProcessCompletionNotification {
    ProcessCompletionNotification {
        command_id: CommandId::from_uuid(id(1)),
        session_id: SessionId::from_uuid(id(2)),
        loop_id: LoopId::from_uuid(id(3)),
        process_handle: "proc-handle-01".into(),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }
}

fn lost() -> SessionEvent {
    SessionEvent::Lifecycle(ProcessLifecycleMetadata {
        event_id: EventId::from_uuid(id(4)),
        kind: ProcessLifecycleKind::Lost,
        session_id: SessionId::from_uuid(id(2)),
        loop_id: LoopId::from_uuid(id(3)),
        process_handle: "h".repeat(MAX_PROCESS_HANDLE_BYTES),
        origin_execution_id: ExecutionId::from_uuid(id(5)),
        state: ProcessLifecycleState::LostOnRestore,
        process_created_at: Timestamp::constant(1_700_000_000, 0),
        process_started_at: Some(Timestamp::constant(1_700_000_001, 0)),
        process_finished_at: Some(Timestamp::constant(1_700_000_002, 0)),
        exit_code: None,
        reason: Some(ProcessTerminalReason::LostOnRestore),
        diagnostic: Some("\"\\\n\u{1}é".repeat(MAX_PROCESS_DIAGNOSTIC_BYTES / 8)),
    })
}

fn hostile_documents() -> Vec<(&'static str, Vec<u8>)> {
    let command = ProcessNotification::new(notification()).encode();
    let lost = lost().encode();
    let consumed = SessionEvent::NotificationConsumed(NotificationConsumed::new(
        SessionId::from_uuid(id(2)),
        LoopId::from_uuid(id(3)),
        CommandId::from_uuid(id(1)),
    ))
    .encode();
    let deep = MAX_DECODE_BYTES / 2 - 16;
    vec![
        // The issue's document: an unknown key holding `[{"a":0},…]`, after the
        // envelope, before it, and inside the nested objects.
        (
            "unknown key, array of objects (last)",
            repeated(&format!("{{{ENV},\"x\":["), r#"{"a":0}"#, "]}"),
        ),
        (
            "unknown key, array of objects (first)",
            repeated(r#"{"x":["#, r#"{"a":0}"#, &format!("],{ENV}}}")),
        ),
        (
            "unknown nested key, array of objects",
            repeated(r#"{"notification":{"x":["#, r#"{"a":0}"#, "]}}"),
        ),
        (
            "unknown metadata key, array of objects",
            repeated(r#"{"metadata":{"pid":["#, r#"{"a":0}"#, "]}}"),
        ),
        (
            "top-level array of objects",
            repeated("[", r#"{"a":0,"b":[1,2]}"#, "]"),
        ),
        // Containers where a scalar or an object belongs.
        (
            "array of objects as `type`",
            repeated(r#"{"type":["#, r#"{"a":0}"#, "]}"),
        ),
        (
            "object of duplicates as `v`",
            repeated(r#"{"v":{"#, r#""a":0"#, "}}"),
        ),
        (
            "array of objects as `state`",
            repeated(r#"{"notification":{"state":["#, r#"{"a":0}"#, "]}}"),
        ),
        (
            "array as `metadata`",
            repeated(r#"{"metadata":["#, r#"{"a":0}"#, "]}"),
        ),
        // Deep nesting.
        (
            "deep arrays under an unknown key",
            filled(r#"{"x":"#, "[", "]}"),
        ),
        ("deep arrays as `type`", filled(r#"{"type":"#, "[", "")),
        ("deep top-level arrays", {
            let mut d = vec![b'['; deep];
            d.resize(2 * deep, b']');
            d
        }),
        ("deep objects", filled("", r#"{"a":"#, "")),
        // Long strings, plain and escaped, in every kind of place.
        (
            "long process_handle",
            filled(r#"{"notification":{"process_handle":""#, "a", r#""}}"#),
        ),
        (
            "long escaped process_handle",
            filled(
                r#"{"notification":{"process_handle":""#,
                r"\u00e9\n",
                r#""}}"#,
            ),
        ),
        (
            "long escaped diagnostic",
            filled(r#"{"metadata":{"diagnostic":""#, r"\\\u0001", r#""}}"#),
        ),
        (
            "long escaped time",
            filled(
                r#"{"metadata":{"process_created_at":""#,
                r"\u0032",
                r#""}}"#,
            ),
        ),
        (
            "long escaped `type`",
            filled(r#"{"type":""#, r"\u0041", r#"","v":1}"#),
        ),
        ("long unknown key", filled(r#"{""#, "k", r#"":0}"#)),
        (
            "long escaped unknown key",
            filled(r#"{""#, r"\u006b", r#"":0}"#),
        ),
        ("long top-level string", filled(r#"""#, r"\n", r#"""#)),
        // Many small numbers.
        (
            "numbers under an unknown key",
            repeated(&format!("{{{ENV},\"x\":["), "0", "]}"),
        ),
        ("numbers as `v`", repeated(r#"{"v":["#, "0", "]}")),
        (
            "floats as `reason`",
            repeated(r#"{"notification":{"reason":["#, "1e5", "]}}"),
        ),
        ("top-level numbers", repeated("[", "0", "]")),
        // Valid documents at the size limit, and one just over it.
        ("valid command, padded", padded(&command)),
        ("valid lost event, padded", padded(&lost)),
        ("valid consumption, padded", padded(&consumed)),
        (
            "valid command, padded inside",
            String::from_utf8(command.clone())
                .unwrap()
                .replacen(
                    ':',
                    &format!(":{}", " ".repeat(MAX_DECODE_BYTES - command.len())),
                    1,
                )
                .into_bytes(),
        ),
        ("over the limit", {
            let mut d = padded(&command);
            d.push(b' ');
            d
        }),
    ]
}

/// Small documents, valid and not: the fixed cost of a decode (the field table, the
/// decoded value, an error) shows against their size.
fn small_documents() -> Vec<(&'static str, Vec<u8>)> {
    let command = ProcessNotification::new(notification()).encode();
    let text = String::from_utf8(command.clone()).unwrap();
    vec![
        ("command", command),
        ("notification", notification().encode()),
        ("lost event", lost().encode()),
        ("empty object", b"{}".to_vec()),
        ("empty array", b"[]".to_vec()),
        ("unknown key", br#"{"x":[{"a":0},{"a":0}]}"#.to_vec()),
        ("array as type", br#"{"type":[{"a":0},{"a":0}]}"#.to_vec()),
        (
            "duplicate v",
            text.replace(r#""v":1"#, r#""v":1,"v":1"#).into_bytes(),
        ),
        (
            "unknown nested key",
            text.replacen(r#""state""#, r#""pid""#, 1).into_bytes(),
        ),
        ("malformed", br#"{"type":"#.to_vec()),
    ]
}

/// What a decode may hold besides four times its input: the fields table and the
/// decoded value (a lifecycle event holds about 1 KiB), fixed in size.
const FIXED_ALLOWANCE: usize = 1024;

#[test]
fn decoding_peaks_at_most_four_times_the_input() {
    // Warm up lazily allocated runtime state outside the measurements.
    let _ = JournalRecord::decode(b"{}");
    let mut failures = Vec::new();
    println!(
        "{:<42} {:>10} {:>10} {:>6}  outcome",
        "document", "bytes", "peak", "ratio"
    );
    for (name, doc) in hostile_documents() {
        let (peak, outcome) = worst_peak(&doc);
        let ratio = peak as f64 / doc.len() as f64;
        println!(
            "{name:<42} {:>10} {peak:>10} {ratio:>6.3}  {outcome}",
            doc.len()
        );
        assert!(
            doc.len() > MAX_DECODE_BYTES / 2,
            "{name}: {} bytes",
            doc.len()
        );
        if peak > 4 * doc.len() {
            failures.push(format!("{name}: peak {peak} > 4 × {}", doc.len()));
        }
    }
    for (name, doc) in small_documents() {
        let (peak, outcome) = worst_peak(&doc);
        println!(
            "{name:<42} {:>10} {peak:>10} {:>6}  {outcome}",
            doc.len(),
            "-"
        );
        if peak > 4 * doc.len() + FIXED_ALLOWANCE {
            failures.push(format!(
                "{name}: peak {peak} > 4 × {} + {FIXED_ALLOWANCE}",
                doc.len()
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
