//! Property tests: generated valid values validate and round-trip; one broken field is
//! named exactly; arbitrary and mutated bytes never panic a decoder. The strategies are
//! the testkit's, the ones users of the library test with.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this crate's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use notify_testkit::strategy::{
    broken_completion_notification as broken_notification,
    broken_lifecycle_metadata as broken_metadata, completion_notification as notification,
    journal_record as record, lifecycle_metadata as metadata,
};
use notify_types::*;
use proptest::prelude::*;
use proptest::sample::select;

use ValidationField as F;

// ---------------------------------------------------------------------------------------
// Helpers

/// Asserts that a decoded record is one the decoder may return: it validates, and its
/// own encoding decodes back to it with the same bytes.
fn assert_sound(r: &JournalRecord) {
    match r {
        JournalRecord::Command(c) => {
            c.validate().unwrap();
            assert_eq!(c.command_id(), c.notification().command_id);
        }
        JournalRecord::Event(SessionEvent::Lifecycle(m)) => m.validate().unwrap(),
        JournalRecord::Event(SessionEvent::NotificationConsumed(c)) => {
            assert_eq!(c.event_id(), consumed_event_id(c.cause()));
        }
        JournalRecord::Event(SessionEvent::NotificationAbandoned(a)) => {
            assert_eq!(a.event_id(), notify_types::abandoned_event_id(a.cause()));
        }
        JournalRecord::Event(SessionEvent::SessionEnded(e)) => {
            assert_eq!(e.event_id(), notify_types::ended_event_id(e.session_id()));
        }
    }
    let bytes = r.encode();
    let back = JournalRecord::decode(&bytes).unwrap();
    assert_eq!(&back, r);
    assert_eq!(back.encode(), bytes);
}

/// Runs every decoder on `bytes`. None may panic; a success must be sound; an error
/// must render and name its field without panicking.
fn decode_all(bytes: &[u8]) {
    fn typed(e: &DecodeError) {
        assert!(!e.to_string().is_empty());
        let _ = e.field();
    }
    match JournalRecord::decode(bytes) {
        Ok(r) => assert_sound(&r),
        Err(e) => typed(&e),
    }
    match ProcessNotification::decode(bytes) {
        Ok(c) => assert_sound(&JournalRecord::from(c)),
        Err(e) => typed(&e),
    }
    match SessionEvent::decode(bytes) {
        Ok(e) => assert_sound(&JournalRecord::from(e)),
        Err(e) => typed(&e),
    }
    match ProcessCompletionNotification::decode(bytes) {
        Ok(n) => {
            n.validate().unwrap();
            assert_eq!(
                ProcessCompletionNotification::decode(&n.encode()).unwrap(),
                n
            );
        }
        Err(e) => typed(&e),
    }
}

/// Keys that appear in some valid record, plus forbidden and unknown ones.
const KEYS: &[&str] = &[
    "command_id",
    "notification",
    "type",
    "v",
    "session_id",
    "loop_id",
    "process_handle",
    "state",
    "reason",
    "metadata",
    "event_id",
    "kind",
    "origin_execution_id",
    "process_created_at",
    "process_started_at",
    "process_finished_at",
    "has_exit_code",
    "exit_code",
    "diagnostic",
    "cause",
    "command",
    "output",
    "stdin",
    "environment",
    "path",
    "pid",
    "",
];

#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, mask: u8 },
    Truncate { at: usize },
    Insert { at: usize, byte: u8 },
    Remove { at: usize },
    RenameKey { nth: usize, to: &'static str },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(at, mask)| Mutation::Flip { at, mask }),
        any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        (
            any::<usize>(),
            select(b"{}[]\",:0123456789-. \\ntrufalse\x00\xff".to_vec())
        )
            .prop_map(|(at, byte)| Mutation::Insert { at, byte }),
        any::<usize>().prop_map(|at| Mutation::Remove { at }),
        (any::<usize>(), select(KEYS.to_vec()))
            .prop_map(|(nth, to)| Mutation::RenameKey { nth, to }),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    let len = bytes.len().max(1);
    match *m {
        Mutation::Flip { at, mask } => {
            if let Some(b) = bytes.get_mut(at % len) {
                *b ^= mask;
            }
        }
        Mutation::Truncate { at } => bytes.truncate(at % len),
        Mutation::Insert { at, byte } => bytes.insert(at % (bytes.len() + 1), byte),
        Mutation::Remove { at } => {
            if !bytes.is_empty() {
                bytes.remove(at % len);
            }
        }
        Mutation::RenameKey { nth, to } => {
            // Keys are the strings followed by a colon; rename the nth one.
            let text = String::from_utf8_lossy(bytes).into_owned();
            let keys: Vec<(usize, usize)> = text
                .match_indices("\":")
                .filter_map(|(end, _)| text[..end].rfind('"').map(|start| (start + 1, end)))
                .collect();
            if keys.is_empty() {
                return;
            }
            let (start, end) = keys[nth % keys.len()];
            let mut out = text[..start].to_owned();
            out.push_str(to);
            out.push_str(&text[end..]);
            *bytes = out.into_bytes();
        }
    }
}

// ---------------------------------------------------------------------------------------
// Properties

proptest! {
    // 256 cases by default (proptest's own default); PROPTEST_CASES=N runs more.
    #![proptest_config(ProptestConfig::default())]

    #[test]
    fn valid_notifications_validate_and_round_trip(n in notification()) {
        prop_assert_eq!(n.validate(), Ok(()));
        let bytes = n.encode();
        let back = ProcessCompletionNotification::decode(&bytes).unwrap();
        prop_assert_eq!(&back, &n);
        prop_assert_eq!(back.encode(), bytes);
        let cmd = ProcessNotification::new(n);
        prop_assert_eq!(cmd.command_id(), cmd.notification().command_id);
        let bytes = cmd.encode();
        let back = ProcessNotification::decode(&bytes).unwrap();
        prop_assert_eq!(&back, &cmd);
        // An equal value built anew (decoded, not cloned) encodes to the same bytes.
        prop_assert_eq!(back.encode(), bytes);
    }

    #[test]
    fn valid_metadata_validates_and_round_trips(m in metadata()) {
        prop_assert_eq!(m.validate(), Ok(()));
        let e = SessionEvent::from(m);
        let bytes = e.encode();
        let back = SessionEvent::decode(&bytes).unwrap();
        prop_assert_eq!(&back, &e);
        // An equal value built anew (decoded, not cloned) encodes to the same bytes.
        prop_assert_eq!(back.encode(), bytes);
    }

    #[test]
    fn one_broken_notification_field_is_named((n, field) in broken_notification()) {
        prop_assert_eq!(n.validate().map_err(|e| e.field()), Err(field));
        let err = ProcessNotification::decode(&ProcessNotification::new(n).encode()).unwrap_err();
        prop_assert_eq!(err.field(), Some(field.as_str()));
    }

    #[test]
    fn one_broken_metadata_field_is_named((m, field) in broken_metadata()) {
        prop_assert_eq!(m.validate().map_err(|e| e.field()), Err(field));
        let err = SessionEvent::decode(&SessionEvent::from(m).encode()).unwrap_err();
        prop_assert_eq!(err, DecodeError::Invalid(ValidationError::new(field)));
    }

    #[test]
    fn orphan_exit_code_is_named(m in metadata(), code in any::<i32>()) {
        // On the wire only: drop `has_exit_code`, or add an `exit_code` without it.
        let text = String::from_utf8(SessionEvent::from(m.clone()).encode()).unwrap();
        let doc = if m.exit_code.is_some() {
            text.replace(r#""has_exit_code":true,"#, "")
        } else {
            text.replace(r#""metadata":{"#, &format!(r#""metadata":{{"exit_code":{code},"#))
        };
        prop_assert_ne!(&doc, &text);
        let err = SessionEvent::decode(doc.as_bytes()).unwrap_err();
        prop_assert_eq!(err, DecodeError::Invalid(ValidationError::new(F::ExitCode)));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        decode_all(&bytes);
    }

    #[test]
    fn json_shaped_noise_never_panics(
        text in r#"[{}\[\]",:0-9a-z_ .\\-]{0,200}"#,
        prefix in select(vec!["", "{", r#"{"type":"ProcessNotification","v":1,"#,
            r#"{"type":"ProcessStarted","v":1,"metadata":{"#]),
    ) {
        decode_all(format!("{prefix}{text}").as_bytes());
    }

    #[test]
    fn mutated_records_never_panic(
        r in record(),
        mutations in proptest::collection::vec(mutation(), 1..4),
    ) {
        let mut bytes = r.encode();
        for m in &mutations {
            apply(&mut bytes, m);
        }
        decode_all(&bytes);
    }
}
