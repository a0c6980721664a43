//! The envelope: non-objects, `type`, `v`, unknown and repeated keys, the size limit,
//! where refusals are made, and the command ID agreement.

use super::*;

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
