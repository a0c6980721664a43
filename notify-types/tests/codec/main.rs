//! The strict, deterministic wire codec: every refusal with its exact error and field,
//! and round trips of every record kind.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this crate's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(dead_code)]
#[path = "../common/mod.rs"]
mod common;

mod dispatch;
mod envelope;
mod events;
mod fields;
mod timestamps;

use common::*;
use notify_types::*;
use serde_json::{Value, json};

use ProcessLifecycleKind as K;
use ProcessLifecycleState as S;
use ProcessTerminalReason as R;

/// Keys a process supervisor might leak; the wire format names none of them.
const FORBIDDEN: [&str; 6] = ["command", "output", "stdin", "environment", "path", "pid"];

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
