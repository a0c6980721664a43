//! The notification's fields: validation, wrong JSON types, enum codes, UUID
//! spellings and nil IDs.

use super::*;

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
