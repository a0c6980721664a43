//! Session events: round trips of every kind, golden bytes, refusals, exit codes and
//! strings.

use super::*;

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
