//! The `serde` feature: the serde form of each DTO round-trips, and what comes back
//! encodes to exactly the hand-written codec's bytes for the original.
#![cfg(feature = "serde")]
// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this crate's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(dead_code)]
mod common;

use notify_types::*;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// `value` through serde_json and back.
fn through_serde<T: Serialize + DeserializeOwned>(value: &T) -> T {
    let json = serde_json::to_string(value).unwrap();
    serde_json::from_str(&json).unwrap()
}

/// Serde round trip, then the codec: the serde copy encodes to the original's bytes,
/// and those decode to the original.
fn check(record: JournalRecord) {
    let back = match &record {
        JournalRecord::Command(c) => JournalRecord::from(through_serde(c)),
        JournalRecord::Event(SessionEvent::Lifecycle(m)) => {
            JournalRecord::from(SessionEvent::Lifecycle(through_serde(m)))
        }
        other => panic!("no serde form for {other:?}"),
    };
    assert_eq!(back, record);
    let bytes = record.encode();
    assert_eq!(back.encode(), bytes);
    assert_eq!(JournalRecord::decode(&bytes).unwrap(), record);
}

#[test]
fn completion_notifications_round_trip_through_serde_and_the_codec() {
    for &(state, reason) in &common::COMPLETION_PAIRS {
        let n = ProcessCompletionNotification {
            state,
            reason,
            ..common::notification()
        };
        assert_eq!(through_serde(&n), n);
        check(JournalRecord::from(ProcessNotification::new(n)));
    }
}

#[test]
fn lifecycle_metadata_round_trips_through_serde_and_the_codec() {
    let completed = common::metadata(
        ProcessLifecycleKind::Completed,
        ProcessLifecycleState::Exited,
        Some(ProcessTerminalReason::Exited),
    );
    let lost = common::metadata(
        ProcessLifecycleKind::Lost,
        ProcessLifecycleState::LostOnRestore,
        Some(ProcessTerminalReason::LostOnRestore),
    );
    let started = common::metadata(
        ProcessLifecycleKind::Started,
        ProcessLifecycleState::Running,
        None,
    );
    for m in [completed, lost, started] {
        m.validate().unwrap();
        assert_eq!(through_serde(&m), m);
        check(JournalRecord::from(SessionEvent::Lifecycle(m)));
    }
}

#[test]
fn the_serde_form_is_readable() {
    let n = common::notification();
    let json = serde_json::to_value(&n).unwrap();
    assert_eq!(json["command_id"], n.command_id.to_string());
    assert_eq!(json["state"], "Exited");
    assert_eq!(json["reason"], "Exited");
    // A command is its notification.
    let command = ProcessNotification::new(n);
    assert_eq!(serde_json::to_value(&command).unwrap(), json);
    assert_eq!(
        serde_json::to_value(Notified::Duplicate).unwrap(),
        "Duplicate"
    );
    assert_eq!(serde_json::to_value(StopCause::Full).unwrap(), "Full");
}

#[test]
fn bad_serde_input_is_an_error_not_a_panic() {
    let mut json = serde_json::to_value(common::notification()).unwrap();
    json["state"] = serde_json::json!("Sleeping");
    assert!(serde_json::from_value::<ProcessCompletionNotification>(json).is_err());
    assert!(serde_json::from_str::<CommandId>("\"not-a-uuid\"").is_err());
    assert!(serde_json::from_str::<ProcessLifecycleKind>("3").is_err());
}
