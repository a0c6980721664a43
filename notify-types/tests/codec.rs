//! The strict, deterministic wire codec: every refusal with its exact error and field,
//! and round trips of every record kind.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this crate's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(dead_code)]
mod common;

use common::*;
use notify_types::*;
use serde_json::{Value, json};

use ProcessLifecycleKind as K;
use ProcessLifecycleState as S;
use ProcessTerminalReason as R;

fn command() -> ProcessNotification {
    ProcessNotification::new(notification())
}

/// The valid command as a JSON tree, to be edited.
fn command_json() -> Value {
    serde_json::from_slice(&command().encode()).unwrap()
}

/// Decodes `doc` as a command, a journal record, and (when it is a bare notification
/// document) nothing else, and asserts the exact error and the field it names.
#[track_caller]
fn check(doc: &[u8], want: &DecodeError, field: Option<&str>) {
    let got = ProcessNotification::decode(doc).unwrap_err();
    assert_eq!(&got, want, "{}", String::from_utf8_lossy(doc));
    assert_eq!(got.field(), field, "{got}");
    // The dispatching decoder refuses the same document the same way.
    let via_record = JournalRecord::decode(doc).unwrap_err();
    assert_eq!(via_record.field(), field, "{via_record}");
}

#[track_caller]
fn check_json(doc: &Value, want: &DecodeError, field: Option<&str>) {
    check(doc.to_string().as_bytes(), want, field);
}

/// Edits the nested notification.
fn with_notification(edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> Value {
    let mut doc = command_json();
    edit(doc["notification"].as_object_mut().unwrap());
    doc
}

fn event(m: ProcessLifecycleMetadata) -> SessionEvent {
    SessionEvent::Lifecycle(m)
}

#[track_caller]
fn round_trip_event(e: &SessionEvent) -> Vec<u8> {
    if let SessionEvent::Lifecycle(m) = e {
        m.validate().unwrap();
    }
    let bytes = e.encode();
    assert_eq!(bytes, e.encode(), "deterministic");
    let back = SessionEvent::decode(&bytes).unwrap();
    assert_eq!(&back, e);
    assert_eq!(back.encode(), bytes);
    let record = JournalRecord::decode(&bytes).unwrap();
    assert_eq!(record, JournalRecord::Event(e.clone()));
    assert_eq!(record.encode(), bytes);
    assert_eq!(record.key(), *e.event_id().as_uuid());
    assert_eq!(record.type_name(), e.type_name());
    bytes
}

// ---------------------------------------------------------------------------------------
// Envelope refusals

#[test]
fn non_objects_are_refused() {
    for doc in ["[]", "[1,2]", r#""x""#, "1", "-3.5", "null", "true"] {
        check(
            doc.as_bytes(),
            &DecodeError::NotAnObject { field: "" },
            None,
        );
        let err = SessionEvent::decode(doc.as_bytes()).unwrap_err();
        assert_eq!(err, DecodeError::NotAnObject { field: "" });
        let err = ProcessCompletionNotification::decode(doc.as_bytes()).unwrap_err();
        assert_eq!(err, DecodeError::NotAnObject { field: "" });
    }
    for doc in ["", "{", "{\"type\":", "not json", "{}{}", "\u{feff}{}"] {
        let err = ProcessNotification::decode(doc.as_bytes()).unwrap_err();
        assert!(matches!(err, DecodeError::Syntax { .. }), "{doc:?}: {err}");
        assert_eq!(err.field(), None);
    }
    let mut doc = command_json();
    doc["notification"] = json!([1]);
    check_json(
        &doc,
        &DecodeError::NotAnObject {
            field: "notification",
        },
        Some("notification"),
    );
    doc.as_object_mut().unwrap().remove("notification");
    check_json(
        &doc,
        &DecodeError::MissingField {
            field: "notification",
        },
        Some("notification"),
    );
}

#[test]
fn type_is_required_known_and_a_string() {
    let mut doc = command_json();
    doc.as_object_mut().unwrap().remove("type");
    check_json(&doc, &DecodeError::MissingType, Some("type"));
    for (ty, found) in [
        (json!("Unknown"), r#""Unknown""#),
        (json!("processnotification"), r#""processnotification""#),
        (json!(""), r#""""#),
        (json!(3), "3"),
        (json!(null), "null"),
        (json!(["ProcessNotification"]), r#"["ProcessNotification"]"#),
    ] {
        doc["type"] = ty;
        check_json(
            &doc,
            &DecodeError::UnknownType {
                found: found.into(),
            },
            Some("type"),
        );
    }
    // An event type is not a command, and a command is not an event.
    let started = event(valid_metadata(K::Started)).encode();
    let err = ProcessNotification::decode(&started).unwrap_err();
    assert_eq!(
        err,
        DecodeError::UnknownType {
            found: r#""ProcessStarted""#.into()
        }
    );
    let err = SessionEvent::decode(&command().encode()).unwrap_err();
    assert_eq!(
        err,
        DecodeError::UnknownType {
            found: r#""ProcessNotification""#.into()
        }
    );
}

#[test]
fn version_must_be_exactly_one() {
    let mut doc = command_json();
    for (v, found) in [
        (json!(0), "0"),
        (json!(2), "2"),
        (json!("1"), r#""1""#),
        (json!(1.0), "1.0"),
        (json!(-1), "-1"),
        (json!(null), "null"),
        (json!(true), "true"),
    ] {
        doc["v"] = v;
        check_json(
            &doc,
            &DecodeError::UnsupportedVersion {
                found: found.into(),
            },
            Some("v"),
        );
    }
    doc.as_object_mut().unwrap().remove("v");
    check_json(
        &doc,
        &DecodeError::UnsupportedVersion {
            found: "missing".into(),
        },
        Some("v"),
    );
}

const FORBIDDEN: [&str; 6] = ["command", "output", "stdin", "environment", "path", "pid"];

#[test]
fn unknown_keys_are_refused_at_both_levels() {
    for key in FORBIDDEN.into_iter().chain(["x", "Type", "created_at", ""]) {
        for value in [json!(null), json!(1), json!("secret"), json!({})] {
            let mut doc = command_json();
            doc[key] = value.clone();
            check_json(
                &doc,
                &DecodeError::UnknownField { field: key.into() },
                Some(key),
            );
            let doc = with_notification(|n| {
                n.insert(key.into(), value.clone());
            });
            let path = format!("notification.{key}");
            check_json(
                &doc,
                &DecodeError::UnknownField {
                    field: path.clone(),
                },
                Some(&path),
            );
            // The bare notification decoder names the key without a prefix.
            let inner = doc["notification"].to_string();
            let err = ProcessCompletionNotification::decode(inner.as_bytes()).unwrap_err();
            assert_eq!(err, DecodeError::UnknownField { field: key.into() });
        }
    }
}

#[test]
fn unknown_keys_win_over_other_errors_in_the_same_object() {
    // A leaked `output` is reported even when a known field is also wrong.
    let doc = with_notification(|n| {
        n.insert("output".into(), json!("hunter2"));
        n.insert("state".into(), json!(99));
        n.remove("command_id");
    });
    check_json(
        &doc,
        &DecodeError::UnknownField {
            field: "notification.output".into(),
        },
        Some("notification.output"),
    );
}

#[test]
fn duplicate_keys_are_refused() {
    let text = String::from_utf8(command().encode()).unwrap();
    let dups = [
        text.replace(r#""v":1"#, r#""v":1,"v":1"#),
        text.replace(
            r#""type":"ProcessNotification""#,
            r#""type":"ProcessNotification","type":"ProcessNotification""#,
        ),
        text.replacen(r#""state":3"#, r#""state":3,"state":3"#, 1),
        text.replacen(r#""state":3"#, r#""state":3,"state":4"#, 1),
        text.replacen(
            r#""process_handle":"proc-handle-01""#,
            r#""process_handle":"evil","process_handle":"proc-handle-01""#,
            1,
        ),
    ];
    for doc in dups {
        assert_ne!(doc, text);
        let err = ProcessNotification::decode(doc.as_bytes()).unwrap_err();
        assert!(
            matches!(&err, DecodeError::Syntax { message } if message.contains("duplicate key")),
            "{doc}: {err}"
        );
        assert!(JournalRecord::decode(doc.as_bytes()).is_err());
    }
}

#[test]
fn refusals_are_made_where_they_are_met() {
    // An unknown key ends the parse: what follows it is never read, malformed or not.
    let text = String::from_utf8(command().encode()).unwrap();
    let doc = text.replacen('{', r#"{"output":[{"a":0},"#, 1) + "garbage";
    check(
        doc.as_bytes(),
        &DecodeError::UnknownField {
            field: "output".into(),
        },
        Some("output"),
    );
    let doc = text.replacen(r#""state":"#, r#""pid":{"#, 1);
    check(
        doc.as_bytes(),
        &DecodeError::UnknownField {
            field: "notification.pid".into(),
        },
        Some("notification.pid"),
    );
    // So is a container where a scalar or an object belongs.
    let mut doc = command_json();
    doc["command_id"] = json!({"a": [1, 2]});
    check_json(
        &doc,
        &DecodeError::InvalidValue {
            field: "command_id",
            expected: "a UUID string",
        },
        Some("command_id"),
    );
    // A repeated key inside a refused value is not looked for.
    let doc = text.replacen(r#""state":3"#, r#""state":{"a":1,"a":2}"#, 1);
    check(
        doc.as_bytes(),
        &DecodeError::UnknownCode {
            field: "state",
            found: r#"{"a":1,"a":2}"#.into(),
        },
        Some("state"),
    );
}

#[test]
fn quoted_values_are_cut_after_max_found_bytes() {
    assert_eq!(MAX_FOUND_BYTES, 128);
    let mut doc = command_json();
    let long: Vec<u64> = (0..1000).collect();
    doc["type"] = json!(long);
    let full = doc["type"].to_string();
    let want = format!("{}…", &full[..MAX_FOUND_BYTES]);
    check_json(
        &doc,
        &DecodeError::UnknownType { found: want },
        Some("type"),
    );
    // A long string, cut on a character boundary.
    doc["type"] = json!("é".repeat(200));
    let full = doc["type"].to_string();
    let want = format!("{}…", &full[..MAX_FOUND_BYTES - 1]);
    check_json(
        &doc,
        &DecodeError::UnknownType { found: want },
        Some("type"),
    );
    // Exactly at the limit: not cut.
    doc["type"] = json!("x".repeat(MAX_FOUND_BYTES - 2));
    let full = doc["type"].to_string();
    assert_eq!(full.len(), MAX_FOUND_BYTES);
    check_json(
        &doc,
        &DecodeError::UnknownType { found: full },
        Some("type"),
    );
    // A cut value is not read to its end: its malformed tail goes unseen.
    let text = String::from_utf8(command().encode()).unwrap();
    let doc = text.replacen(r#""v":1"#, &format!(r#""v":[{}"#, "0,".repeat(100)), 1);
    let err = ProcessNotification::decode(doc.as_bytes()).unwrap_err();
    let DecodeError::UnsupportedVersion { found } = err else {
        panic!("{err}")
    };
    assert!(
        found.starts_with("[0,0,") && found.ends_with('…'),
        "{found}"
    );
}

#[test]
fn size_limit_is_sixteen_mib() {
    assert_eq!(MAX_DECODE_BYTES, 16 * 1024 * 1024);
    // Exactly at the limit (a valid document padded with whitespace) decodes.
    let mut at_limit = command().encode();
    at_limit.resize(MAX_DECODE_BYTES, b' ');
    assert_eq!(ProcessNotification::decode(&at_limit).unwrap(), command());
    // One byte more is refused before parsing.
    let mut over = at_limit;
    over.push(b' ');
    let want = DecodeError::TooLarge {
        len: MAX_DECODE_BYTES + 1,
        max: MAX_DECODE_BYTES,
    };
    check(&over, &want, None);
    assert_eq!(SessionEvent::decode(&over).unwrap_err(), want);
    assert_eq!(
        ProcessCompletionNotification::decode(&over).unwrap_err(),
        want
    );
}

#[test]
fn mismatched_command_id_is_refused() {
    let mut doc = command_json();
    doc["command_id"] = json!(uuid(9).to_string());
    check_json(&doc, &DecodeError::CommandIdMismatch, Some("command_id"));
    // Absent on one side only is a mismatch too (absent decodes to nil).
    let mut doc = command_json();
    doc.as_object_mut().unwrap().remove("command_id");
    check_json(&doc, &DecodeError::CommandIdMismatch, Some("command_id"));
    // Absent on both sides: the envelope agrees, and validation names the field.
    let doc = with_notification(|n| {
        n.remove("command_id");
    });
    let mut doc = doc;
    doc.as_object_mut().unwrap().remove("command_id");
    check_json(
        &doc,
        &DecodeError::Invalid(ValidationError::new(ValidationField::CommandId)),
        Some("command_id"),
    );
}

#[test]
fn invalid_notification_names_the_validation_field() {
    use ValidationField as F;
    type Edit = Box<dyn Fn(&mut serde_json::Map<String, Value>)>;
    let cases: Vec<(Edit, F)> = vec![
        (Box::new(|n| drop(n.remove("session_id"))), F::SessionId),
        (Box::new(|n| drop(n.remove("loop_id"))), F::LoopId),
        (
            Box::new(|n| drop(n.remove("process_handle"))),
            F::ProcessHandle,
        ),
        (
            Box::new(|n| drop(n.insert("process_handle".into(), json!("a/b")))),
            F::ProcessHandle,
        ),
        (
            Box::new(|n| drop(n.insert("process_handle".into(), json!("")))),
            F::ProcessHandle,
        ),
        (
            Box::new(|n| drop(n.insert("reason".into(), json!(2)))),
            F::StateReason,
        ),
        (
            Box::new(|n| drop(n.insert("state".into(), json!(2)))),
            F::StateReason,
        ),
    ];
    for (edit, field) in cases {
        let doc = with_notification(|n| edit(n));
        check_json(
            &doc,
            &DecodeError::Invalid(ValidationError::new(field)),
            Some(field.as_str()),
        );
        let inner = doc["notification"].to_string();
        let err = ProcessCompletionNotification::decode(inner.as_bytes()).unwrap_err();
        assert_eq!(err.field(), Some(field.as_str()));
    }
}

#[test]
fn wrongly_typed_fields_are_refused() {
    let cases = [
        ("process_handle", json!(7), "process_handle"),
        ("process_handle", json!(null), "process_handle"),
        ("session_id", json!(1), "session_id"),
        ("loop_id", json!(null), "loop_id"),
    ];
    for (key, value, field) in cases {
        let doc = with_notification(|n| drop(n.insert(key.into(), value.clone())));
        let err = ProcessNotification::decode(doc.to_string().as_bytes()).unwrap_err();
        assert!(
            matches!(err, DecodeError::InvalidValue { field: f, .. } if f == field),
            "{key}={value}: {err}"
        );
    }
    for key in ["state", "reason"] {
        let doc = with_notification(|n| drop(n.remove(key)));
        check_json(
            &doc,
            &DecodeError::MissingField {
                field: if key == "state" { "state" } else { "reason" },
            },
            Some(key),
        );
    }
}

#[test]
fn unknown_enum_codes_name_the_field() {
    let codes = [
        (json!(0), "0"),
        (json!(10), "10"),
        (json!(255), "255"),
        (json!(256), "256"),
        (json!("3"), r#""3""#),
        (json!(-1), "-1"),
        (json!(3.5), "3.5"),
        (json!(3.0), "3.0"),
        (json!(null), "null"),
        (json!(true), "true"),
        (json!([3]), "[3]"),
        (json!(u64::MAX), "18446744073709551615"),
    ];
    for key in ["state", "reason"] {
        let field: &'static str = if key == "state" { "state" } else { "reason" };
        for (code, found) in &codes {
            let doc = with_notification(|n| drop(n.insert(key.into(), code.clone())));
            check_json(
                &doc,
                &DecodeError::UnknownCode {
                    field,
                    found: (*found).into(),
                },
                Some(key),
            );
        }
    }
    // The same in lifecycle metadata, for kind, state and reason.
    let base = event(valid_metadata(K::Completed));
    let base: Value = serde_json::from_slice(&base.encode()).unwrap();
    for field in ["kind", "state", "reason"] {
        for (code, found) in &codes {
            let mut doc = base.clone();
            doc["metadata"][field] = code.clone();
            let err = SessionEvent::decode(doc.to_string().as_bytes()).unwrap_err();
            assert!(
                matches!(&err, DecodeError::UnknownCode { field: f, found: got }
                    if *f == field && got == found),
                "{field}={code}: {err}"
            );
            assert_eq!(err.field(), Some(field));
        }
    }
}

#[test]
fn every_known_code_decodes_to_its_variant() {
    for (i, &s) in S::ALL.iter().enumerate() {
        assert_eq!(usize::from(s.code()), i + 1);
        assert_eq!(S::from_code(u64::from(s.code())), Some(s));
    }
    for (i, &r) in R::ALL.iter().enumerate() {
        assert_eq!(usize::from(r.code()), i + 1);
        assert_eq!(R::from_code(u64::from(r.code())), Some(r));
    }
    for (i, &k) in K::ALL.iter().enumerate() {
        assert_eq!(usize::from(k.code()), i + 1);
    }
    for (i, &d) in Disposition::ALL.iter().enumerate() {
        assert_eq!(usize::from(d.code()), i + 1);
    }
    for bad in [0, 10, 255, u64::MAX] {
        assert_eq!(S::from_code(bad), None);
        assert_eq!(R::from_code(bad), None);
    }
    assert_eq!(K::from_code(6), None);
    assert_eq!(Disposition::from_code(5), None);
    for &(state, reason) in &COMPLETION_PAIRS {
        let n = ProcessCompletionNotification {
            state,
            reason,
            ..notification()
        };
        let cmd = ProcessNotification::new(n);
        assert_eq!(ProcessNotification::decode(&cmd.encode()).unwrap(), cmd);
    }
}

#[test]
fn non_canonical_uuids_are_refused() {
    let id = uuid(1).to_string();
    let spellings = [
        id.to_uppercase(),
        format!("{{{id}}}"),
        id.replace('-', ""),
        format!("urn:uuid:{id}"),
        format!(" {id}"),
        id[..35].to_owned(),
        String::new(),
        "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz".to_owned(),
    ];
    for bad in &spellings {
        // The envelope's ID.
        let mut doc = command_json();
        doc["command_id"] = json!(bad);
        let err = ProcessNotification::decode(doc.to_string().as_bytes()).unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::InvalidValue {
                    field: "command_id",
                    ..
                }
            ),
            "{bad}: {err}"
        );
        // Each ID inside the notification.
        for key in ["command_id", "session_id", "loop_id"] {
            let doc = with_notification(|n| drop(n.insert(key.into(), json!(bad))));
            let err = ProcessNotification::decode(doc.to_string().as_bytes()).unwrap_err();
            assert!(
                matches!(err, DecodeError::InvalidValue { field, .. } if field == key),
                "{key}={bad}: {err}"
            );
        }
        assert!(bad.parse::<CommandId>().is_err(), "{bad}");
    }
}

#[test]
fn nil_ids_are_omitted_on_encode() {
    let n = ProcessCompletionNotification {
        session_id: SessionId::NIL,
        ..notification()
    };
    let text = String::from_utf8(n.encode()).unwrap();
    assert!(!text.contains("session_id"), "{text}");
    let err = ProcessCompletionNotification::decode(text.as_bytes()).unwrap_err();
    assert_eq!(err.field(), Some("session_id"));
    // An explicit nil string is the canonical spelling of nil and also fails validation.
    let doc = with_notification(|n| {
        n.insert("loop_id".into(), json!(Uuid::nil().to_string()));
    });
    check_json(
        &doc,
        &DecodeError::Invalid(ValidationError::new(ValidationField::LoopId)),
        Some("loop_id"),
    );
}

// ---------------------------------------------------------------------------------------
// Session events

#[test]
fn every_lifecycle_kind_round_trips() {
    let mut types = Vec::new();
    for &kind in K::ALL {
        let e = event(valid_metadata(kind));
        let bytes = round_trip_event(&e);
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["type"], json!(kind.event_type()));
        assert_eq!(v["v"], json!(1));
        assert_eq!(e.lifecycle_kind(), Some(kind));
        types.push(kind.event_type());
    }
    assert_eq!(
        types,
        [
            "ProcessStarted",
            "ProcessBackgrounded",
            "ProcessCompleted",
            "ProcessStopRequested",
            "ProcessLost"
        ]
    );
    // Every allowed combination of the lifecycle matrix round-trips too.
    for &kind in K::ALL {
        for &state in S::ALL {
            for reason in std::iter::once(None).chain(R::ALL.iter().copied().map(Some)) {
                if state_reason_allowed(kind, state, reason) {
                    round_trip_event(&event(metadata(kind, state, reason)));
                }
            }
        }
    }
}

#[test]
fn lifecycle_event_golden_bytes() {
    let mut m = valid_metadata(K::Completed);
    m.exit_code = Some(-2);
    m.process_created_at = ts(1_700_000_000, 123_456_789);
    let bytes = round_trip_event(&event(m));
    let want = concat!(
        r#"{"metadata":{"#,
        r#""event_id":"0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e04","kind":3,"#,
        r#""session_id":"0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e02","#,
        r#""loop_id":"0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e03","#,
        r#""process_handle":"proc-handle-01","#,
        r#""origin_execution_id":"0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e05","state":3,"#,
        r#""process_created_at":"2023-11-14T22:13:20.123456789Z","#,
        r#""process_started_at":"2023-11-14T22:13:21Z","#,
        r#""process_finished_at":"2023-11-14T22:13:22Z","#,
        r#""has_exit_code":true,"exit_code":-2,"reason":1},"#,
        r#""type":"ProcessCompleted","v":1}"#,
    );
    assert_eq!(String::from_utf8(bytes).unwrap(), want);
}

#[test]
fn notification_consumed_round_trips_and_derives_its_id() {
    let cause = CommandId::from_uuid(uuid(1));
    let c = NotificationConsumed::new(
        SessionId::from_uuid(uuid(2)),
        LoopId::from_uuid(uuid(3)),
        cause,
    );
    assert_eq!(c.event_id(), consumed_event_id(cause));
    assert_eq!(c.event_id().as_uuid().get_version_num(), 5);
    assert_eq!(
        consumed_event_id(cause),
        consumed_event_id(cause),
        "derived, not random"
    );
    assert_ne!(
        consumed_event_id(cause),
        consumed_event_id(CommandId::from_uuid(uuid(9)))
    );
    let e = SessionEvent::NotificationConsumed(c);
    let bytes = round_trip_event(&e);
    let want = format!(
        r#"{{"cause":"{}","event_id":"{}","loop_id":"{}","session_id":"{}","type":"NotificationConsumed","v":1}}"#,
        uuid(1),
        consumed_event_id(cause),
        uuid(3),
        uuid(2)
    );
    assert_eq!(String::from_utf8(bytes).unwrap(), want);
    assert_eq!(e.lifecycle_kind(), None);
}

#[test]
fn notification_consumed_refusals() {
    let cause = CommandId::from_uuid(uuid(1));
    let c = NotificationConsumed::new(
        SessionId::from_uuid(uuid(2)),
        LoopId::from_uuid(uuid(3)),
        cause,
    );
    let base: Value =
        serde_json::from_slice(&SessionEvent::NotificationConsumed(c).encode()).unwrap();

    let mut doc = base.clone();
    doc["event_id"] = json!(uuid(7).to_string());
    let err = SessionEvent::decode(doc.to_string().as_bytes()).unwrap_err();
    assert_eq!(err, DecodeError::EventIdMismatch);
    assert_eq!(err.field(), Some("event_id"));
    // Derived from a different cause is just as wrong.
    let mut doc = base.clone();
    doc["event_id"] = json!(consumed_event_id(CommandId::from_uuid(uuid(8))).to_string());
    assert_eq!(
        SessionEvent::decode(doc.to_string().as_bytes()).unwrap_err(),
        DecodeError::EventIdMismatch
    );
    for key in ["cause", "event_id", "loop_id", "session_id"] {
        let mut doc = base.clone();
        doc.as_object_mut().unwrap().remove(key);
        let err = SessionEvent::decode(doc.to_string().as_bytes()).unwrap_err();
        assert_eq!(err.field(), Some(key), "{err}");
        assert!(matches!(err, DecodeError::MissingField { .. }), "{err}");
    }
    for key in FORBIDDEN.into_iter().chain(["metadata"]) {
        let mut doc = base.clone();
        doc[key] = json!(1);
        let err = SessionEvent::decode(doc.to_string().as_bytes()).unwrap_err();
        assert_eq!(err, DecodeError::UnknownField { field: key.into() });
    }
}

#[test]
fn lifecycle_event_refusals() {
    let base: Value = serde_json::from_slice(&event(valid_metadata(K::Started)).encode()).unwrap();
    // type and kind must agree.
    for other in [
        "ProcessBackgrounded",
        "ProcessCompleted",
        "ProcessStopRequested",
        "ProcessLost",
    ] {
        let mut doc = base.clone();
        doc["type"] = json!(other);
        let err = SessionEvent::decode(doc.to_string().as_bytes()).unwrap_err();
        assert!(
            matches!(err, DecodeError::InvalidValue { field: "kind", .. }),
            "{other}: {err}"
        );
        assert_eq!(err.field(), Some("kind"));
    }
    let mut doc = base.clone();
    doc["type"] = json!("NotificationConsumed");
    let err = SessionEvent::decode(doc.to_string().as_bytes()).unwrap_err();
    assert_eq!(
        err,
        DecodeError::UnknownField {
            field: "metadata".into()
        }
    );
    // Unknown keys, at the top and inside the metadata.
    for key in FORBIDDEN {
        let mut doc = base.clone();
        doc[key] = json!("x");
        let err = SessionEvent::decode(doc.to_string().as_bytes()).unwrap_err();
        assert_eq!(err, DecodeError::UnknownField { field: key.into() });
        let mut doc = base.clone();
        doc["metadata"][key] = json!("x");
        let err = SessionEvent::decode(doc.to_string().as_bytes()).unwrap_err();
        let path = format!("metadata.{key}");
        assert_eq!(
            err,
            DecodeError::UnknownField {
                field: path.clone()
            }
        );
        assert_eq!(err.field(), Some(path.as_str()));
    }
    // Missing or malformed metadata.
    let mut doc = base.clone();
    doc.as_object_mut().unwrap().remove("metadata");
    assert_eq!(
        SessionEvent::decode(doc.to_string().as_bytes()).unwrap_err(),
        DecodeError::MissingField { field: "metadata" }
    );
    doc["metadata"] = json!("{}");
    assert_eq!(
        SessionEvent::decode(doc.to_string().as_bytes()).unwrap_err(),
        DecodeError::NotAnObject { field: "metadata" }
    );
    // Timestamps must be RFC 3339 strings; a missing creation time is the zero time.
    for bad in [
        json!("yesterday"),
        json!(1_700_000_000),
        json!(null),
        json!(""),
    ] {
        let mut doc = base.clone();
        doc["metadata"]["process_started_at"] = bad.clone();
        let err = SessionEvent::decode(doc.to_string().as_bytes()).unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::InvalidValue {
                    field: "process_started_at",
                    ..
                }
            ),
            "{bad}: {err}"
        );
    }
    for created in [None, Some("0001-01-01T00:00:00Z")] {
        let mut doc = base.clone();
        match created {
            None => drop(
                doc["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("process_created_at"),
            ),
            Some(t) => doc["metadata"]["process_created_at"] = json!(t),
        }
        let err = SessionEvent::decode(doc.to_string().as_bytes()).unwrap_err();
        assert_eq!(err.field(), Some("process_created_at"), "{err}");
    }
    // Exit codes outside i32, and a non-boolean has_exit_code.
    let completed: Value =
        serde_json::from_slice(&event(valid_metadata(K::Completed)).encode()).unwrap();
    for bad in [
        json!(2_147_483_648_i64),
        json!(-2_147_483_649_i64),
        json!(1.5),
        json!("0"),
    ] {
        let mut doc = completed.clone();
        doc["metadata"]["exit_code"] = bad;
        let err = SessionEvent::decode(doc.to_string().as_bytes()).unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::InvalidValue {
                    field: "exit_code",
                    ..
                }
            ),
            "{err}"
        );
    }
    let mut doc = completed.clone();
    doc["metadata"]["has_exit_code"] = json!(1);
    let err = SessionEvent::decode(doc.to_string().as_bytes()).unwrap_err();
    assert!(matches!(
        err,
        DecodeError::InvalidValue {
            field: "has_exit_code",
            ..
        }
    ));
    // A lifecycle event that fails validation names the validation field.
    let mut doc = completed;
    doc["metadata"]["diagnostic"] = json!("not allowed for Exited");
    let err = SessionEvent::decode(doc.to_string().as_bytes()).unwrap_err();
    assert_eq!(
        err,
        DecodeError::Invalid(ValidationError::new(ValidationField::Diagnostic))
    );
}

#[test]
fn exit_codes_round_trip() {
    for code in [0, 1, -1, 2, 127, 128, 255, 256, -255, i32::MIN, i32::MAX] {
        let mut m = valid_metadata(K::Completed);
        m.exit_code = Some(code);
        let bytes = round_trip_event(&event(m));
        let text = String::from_utf8(bytes).unwrap();
        assert!(
            text.contains(&format!(r#""has_exit_code":true,"exit_code":{code},"#)),
            "{text}"
        );
    }
    // No exit code: neither key appears.
    let text = String::from_utf8(event(valid_metadata(K::Lost)).encode()).unwrap();
    assert!(!text.contains("exit_code"), "{text}");
}

#[test]
fn timestamps_round_trip_to_the_nanosecond() {
    let cases = [
        (
            ts(1_700_000_000, 123_456_789),
            "2023-11-14T22:13:20.123456789Z",
        ),
        (ts(1_700_000_000, 1), "2023-11-14T22:13:20.000000001Z"),
        (ts(1_700_000_000, 100_000_000), "2023-11-14T22:13:20.1Z"),
        (ts(1_700_000_000, 0), "2023-11-14T22:13:20Z"),
        (ts(0, 0), "1970-01-01T00:00:00Z"),
        (ts(-1, 999_999_999), "1969-12-31T23:59:59.999999999Z"),
        (ts(-62_135_596_800, 1), "0001-01-01T00:00:00.000000001Z"),
        (
            ts(253_402_207_199, 999_999_999),
            "9999-12-30T21:59:59.999999999Z",
        ),
    ];
    for (t, text) in cases {
        let mut m = valid_metadata(K::Lost);
        m.process_created_at = t;
        m.process_started_at = Some(t);
        m.process_finished_at = Some(t);
        let bytes = round_trip_event(&event(m));
        let doc = String::from_utf8(bytes).unwrap();
        for key in [
            "process_created_at",
            "process_started_at",
            "process_finished_at",
        ] {
            assert!(doc.contains(&format!(r#""{key}":"{text}""#)), "{doc}");
        }
        // The text parses back to the same instant, nanosecond for nanosecond.
        assert_eq!(text.parse::<Timestamp>().unwrap(), t);
    }
}

#[test]
fn diagnostic_strings_round_trip_with_serde_json_escapes() {
    let mut diagnostics: Vec<String> = vec![
        r#"quote " backslash \ slash / both \" end"#.into(),
        "newline \n return \r tab \t backspace \u{8} formfeed \u{c}".into(),
        "nul \u{0} bell \u{7} esc \u{1b} unit-sep \u{1f} del \u{7f}".into(),
        "é € 😀 \u{2028} \u{2029} \u{feff} 日本語".into(),
        "<script>&amp;</script>".into(),
        String::new(),
        "x".repeat(512),
        "é".repeat(256),
    ];
    // Every ASCII character alone, and every control character beside text.
    for b in 0u8..=0x7f {
        diagnostics.push(char::from(b).to_string());
        diagnostics.push(format!("a{}b", char::from(b)));
    }
    for d in diagnostics {
        for kind in [K::Completed, K::Lost] {
            let mut m = match kind {
                K::Completed => metadata(K::Completed, S::Failed, Some(R::Failed)),
                _ => valid_metadata(K::Lost),
            };
            m.diagnostic = Some(d.clone());
            let bytes = round_trip_event(&event(m));
            let text = String::from_utf8(bytes).unwrap();
            let escaped = serde_json::to_string(&d).unwrap();
            assert!(
                text.contains(&format!(r#","diagnostic":{escaped}}},"type""#)),
                "{d:?}: {text}"
            );
        }
    }
}

#[test]
fn handle_strings_encode_like_serde_json() {
    // Handles are validated on decode, but the encoder writes any string: an invalid
    // handle still encodes to well-formed JSON and is refused on the way back.
    for handle in ["a\"b", "a\\b", "a\nb", "é", "\u{0}"] {
        let n = ProcessCompletionNotification {
            process_handle: handle.into(),
            ..notification()
        };
        let text = String::from_utf8(n.encode()).unwrap();
        let escaped = serde_json::to_string(handle).unwrap();
        assert!(
            text.contains(&format!(r#""process_handle":{escaped},"#)),
            "{text}"
        );
        let err = ProcessCompletionNotification::decode(text.as_bytes()).unwrap_err();
        assert_eq!(err.field(), Some("process_handle"));
    }
}

// ---------------------------------------------------------------------------------------
// Dispatch and determinism

#[test]
fn journal_record_dispatches_by_type() {
    let cmd = command();
    let record = JournalRecord::decode(&cmd.encode()).unwrap();
    assert_eq!(record, JournalRecord::Command(cmd.clone()));
    assert_eq!(record.key(), *cmd.command_id().as_uuid());
    assert_eq!(record.type_name(), "ProcessNotification");
    assert_eq!(record.session_id(), cmd.session_id());
    for &kind in K::ALL {
        let e = event(valid_metadata(kind));
        let record = JournalRecord::decode(&e.encode()).unwrap();
        assert_eq!(record, JournalRecord::Event(e.clone()));
        assert_eq!(record.type_name(), kind.event_type());
        assert_eq!(record.key(), *e.event_id().as_uuid());
    }
    let c = SessionEvent::NotificationConsumed(NotificationConsumed::new(
        SessionId::from_uuid(uuid(2)),
        LoopId::from_uuid(uuid(3)),
        CommandId::from_uuid(uuid(1)),
    ));
    let record = JournalRecord::decode(&c.encode()).unwrap();
    assert_eq!(record, JournalRecord::Event(c));
    assert_eq!(record.type_name(), "NotificationConsumed");
    // A bare notification has no envelope: no `type`.
    assert_eq!(
        JournalRecord::decode(&notification().encode()).unwrap_err(),
        DecodeError::MissingType
    );
}

#[test]
fn encoding_is_deterministic() {
    let records: Vec<JournalRecord> = std::iter::once(JournalRecord::from(command()))
        .chain(
            K::ALL
                .iter()
                .map(|&k| JournalRecord::from(event(valid_metadata(k)))),
        )
        .collect();
    for r in records {
        let a = r.encode();
        let b = r.encode();
        let c = r.clone().encode();
        let d = JournalRecord::decode(&a).unwrap().encode();
        assert_eq!(a, b);
        assert_eq!(a, c);
        assert_eq!(a, d);
    }
    // The command's keys are sorted, as the journal form requires.
    let v = command_json();
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["command_id", "notification", "type", "v"]);
    let text = String::from_utf8(command().encode()).unwrap();
    assert!(text.starts_with(r#"{"command_id":"#));
    assert!(text.ends_with(r#"},"type":"ProcessNotification","v":1}"#));
    // Fresh IDs change the bytes; equal values never do.
    let n1 = ProcessCompletionNotification {
        command_id: CommandId::new(),
        ..notification()
    };
    let n2 = n1.clone();
    assert_eq!(n1.encode(), n2.encode());
    assert_ne!(n1.encode(), notification().encode());
}

#[test]
fn timestamps_must_be_rfc3339_not_other_iso8601_spellings() {
    let good = [
        "2023-11-14T22:13:20Z",
        "2023-11-14t22:13:20z",
        "2023-11-14T22:13:20.5Z",
        "2023-11-14T22:13:20.123456789Z",
        "2023-11-14T23:13:20+01:00",
    ];
    let bad = [
        "2023-11-14 22:13:20Z",
        "20231114T221320Z",
        "2023-11-14T22:13:20,5Z",
        "2023-11-14T22:13:20Z[UTC]",
        "2023-11-14T22:13:20",
        "2023-11-14T22:13:20.Z",
        "2023-11-14T22:13:20.1234567891Z",
        "2023-11-14T22:13Z",
        "2023-11-14T22:13:20+0100",
        "2023-11-14T22:13:20+01",
        "2023-13-14T22:13:20Z",
        "",
    ];
    let doc = |ts: &str| {
        format!(
            r#"{{"metadata":{{"event_id":"0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e04","kind":1,"session_id":"0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e02","loop_id":"0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e03","process_handle":"h","origin_execution_id":"0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e05","state":2,"process_created_at":"2000-01-01T00:00:00Z","process_started_at":"{ts}"}},"type":"ProcessStarted","v":1}}"#
        )
    };
    for ts in good {
        let decoded = notify_types::SessionEvent::decode(doc(ts).as_bytes());
        assert!(decoded.is_ok(), "{ts}: {decoded:?}");
    }
    for ts in bad {
        let err = notify_types::SessionEvent::decode(doc(ts).as_bytes()).unwrap_err();
        assert_eq!(err.field(), Some("process_started_at"), "{ts}: {err:?}");
    }
}

/// A `ProcessStarted` document whose `process_started_at` is `ts`.
fn started_at_doc(ts: &str) -> String {
    format!(
        r#"{{"metadata":{{"event_id":"0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e04","kind":1,"session_id":"0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e02","loop_id":"0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e03","process_handle":"h","origin_execution_id":"0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e05","state":2,"process_created_at":"2000-01-01T00:00:00Z","process_started_at":"{ts}"}},"type":"ProcessStarted","v":1}}"#
    )
}

#[test]
fn timestamps_round_trip_through_the_last_representable_instant() {
    // The upper edge: jiff's last instant, 26 hours before RFC 3339's.
    assert_eq!(MAX_TIMESTAMP, Timestamp::MAX);
    assert_eq!(MAX_TIMESTAMP.to_string(), "9999-12-30T22:00:00.999999999Z");
    let mut m = valid_metadata(K::Lost);
    m.process_created_at = MAX_TIMESTAMP;
    m.process_started_at = Some(MAX_TIMESTAMP);
    m.process_finished_at = Some(MAX_TIMESTAMP);
    let bytes = round_trip_event(&event(m));
    assert!(
        String::from_utf8(bytes)
            .unwrap()
            .contains(r#""process_finished_at":"9999-12-30T22:00:00.999999999Z""#)
    );
    // The same instant in other spellings, and the instants just before it.
    for ts in [
        "9999-12-30T22:00:00.999999999Z",
        "9999-12-30t22:00:00.999999999z",
        "9999-12-31T00:00:00.999999999+02:00",
        "9999-12-30T20:30:00.999999999-01:30",
        "9999-12-30T22:00:00.99999999Z",
        "9999-12-30T22:00:00Z",
    ] {
        let got = SessionEvent::decode(started_at_doc(ts).as_bytes()).unwrap();
        let SessionEvent::Lifecycle(m) = got else {
            panic!("{ts}: not a lifecycle event")
        };
        assert!(m.process_started_at.unwrap() <= MAX_TIMESTAMP, "{ts}");
        assert_eq!(
            ts.parse::<Timestamp>().unwrap(),
            m.process_started_at.unwrap()
        );
    }
    // Later RFC 3339 instants, through the last one, are refused by name.
    for ts in [
        "9999-12-30T22:00:01Z",
        "9999-12-30T22:00:01.000000000Z",
        "9999-12-30T21:00:01-01:00",
        "9999-12-31T00:00:00Z",
        "9999-12-31t23:59:59z",
        "9999-12-31T23:59:59.999999999Z",
        "9999-12-31T23:59:59.999999999+23:59",
        "9999-12-31T23:59:59.999999999-23:59",
    ] {
        let err = SessionEvent::decode(started_at_doc(ts).as_bytes()).unwrap_err();
        assert_eq!(
            err,
            DecodeError::TimestampOutOfRange {
                field: "process_started_at"
            },
            "{ts}"
        );
        assert_eq!(err.field(), Some("process_started_at"));
        assert!(
            err.to_string().contains("9999-12-30T22:00:00.999999999Z"),
            "{err}"
        );
    }
    // What is not a calendar instant at all stays an invalid value.
    for ts in [
        "9999-12-32T00:00:00Z",
        "9999-13-31T00:00:00Z",
        "9999-12-31T24:00:00Z",
        "9999-12-31T23:60:00Z",
        "9999-12-31T23:59:59+24:00",
        "9999-12-31T23:59:59+23:60",
    ] {
        let err = SessionEvent::decode(started_at_doc(ts).as_bytes()).unwrap_err();
        assert_eq!(
            err,
            DecodeError::InvalidValue {
                field: "process_started_at",
                expected: "an RFC 3339 timestamp"
            },
            "{ts}"
        );
    }
}

#[test]
fn timestamps_decode_from_the_first_rfc3339_instant() {
    // The lower edge: every RFC 3339 instant is representable, the earliest (year 0
    // at the largest offset) included; validation then wants a creation time after
    // the zero time.
    for ts in ["0000-01-01T00:00:00Z", "0000-01-01T00:00:00+23:59"] {
        let t: Timestamp = ts.parse().unwrap();
        assert!(t < ZERO_TIME);
        let doc = started_at_doc("2000-01-01T00:00:00Z").replace(
            r#""process_created_at":"2000-01-01T00:00:00Z""#,
            &format!(r#""process_created_at":"{ts}""#),
        );
        let err = SessionEvent::decode(doc.as_bytes()).unwrap_err();
        assert_eq!(
            err,
            DecodeError::Invalid(ValidationError::new(ValidationField::ProcessCreatedAt)),
            "{ts}"
        );
    }
    let first = "0001-01-01T00:00:00.000000001Z";
    let mut m = valid_metadata(K::Lost);
    m.process_created_at = first.parse().unwrap();
    m.process_started_at = Some(m.process_created_at);
    m.process_finished_at = Some(m.process_created_at);
    let text = String::from_utf8(round_trip_event(&event(m))).unwrap();
    assert!(text.contains(first), "{text}");
}

#[test]
fn journal_record_validate_agrees_with_decode() {
    use notify_types::*;
    let nil_consumed = JournalRecord::Event(SessionEvent::NotificationConsumed(
        NotificationConsumed::new(SessionId::new(), LoopId::NIL, CommandId::new()),
    ));
    let err = nil_consumed.validate().unwrap_err();
    assert_eq!(err.field(), Some("loop_id"));
    assert!(JournalRecord::decode(&nil_consumed.encode()).is_err());

    let bad_command =
        JournalRecord::Command(ProcessNotification::new(ProcessCompletionNotification {
            command_id: CommandId::new(),
            session_id: SessionId::new(),
            loop_id: LoopId::new(),
            process_handle: String::new(),
            state: ProcessLifecycleState::Exited,
            reason: ProcessTerminalReason::Exited,
        }));
    assert_eq!(
        bad_command.validate().unwrap_err().field(),
        Some("process_handle")
    );
    assert!(JournalRecord::decode(&bad_command.encode()).is_err());

    let good = JournalRecord::Event(SessionEvent::NotificationConsumed(
        NotificationConsumed::new(SessionId::new(), LoopId::new(), CommandId::new()),
    ));
    assert!(good.validate().is_ok());
    assert!(JournalRecord::decode(&good.encode()).is_ok());
}
