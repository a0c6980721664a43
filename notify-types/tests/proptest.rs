//! Property tests: generated valid values validate and round-trip; one broken field is
//! named exactly; arbitrary and mutated bytes never panic a decoder.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this crate's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(dead_code)]
mod common;

use common::COMPLETION_PAIRS;
use notify_types::*;
use proptest::prelude::*;
use proptest::sample::select;

use ProcessLifecycleKind as K;
use ProcessLifecycleState as S;
use ProcessTerminalReason as R;
use ValidationField as F;

// ---------------------------------------------------------------------------------------
// Strategies

fn non_nil_uuid() -> impl Strategy<Value = Uuid> {
    any::<u128>().prop_map(|n| Uuid::from_u128(n.max(1)))
}

fn handle() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_-]{1,128}"
}

/// Nanoseconds from the Unix epoch, from just after the zero time to the year ~8300.
fn created_ns() -> impl Strategy<Value = i128> {
    const ZERO_NS: i128 = -62_135_596_800 * 1_000_000_000;
    prop_oneof![
        (ZERO_NS + 1)..(200_000_000_000 * 1_000_000_000),
        Just(ZERO_NS + 1),
        Just(0),
    ]
}

/// A non-negative gap in nanoseconds (zero is allowed: "before" is strict).
fn gap_ns() -> impl Strategy<Value = i128> {
    prop_oneof![Just(0), 1i128..1_000, 0i128..(1_000_000 * 1_000_000_000)]
}

fn at(ns: i128) -> Timestamp {
    Timestamp::from_nanosecond(ns).unwrap()
}

/// A diagnostic of at most 512 bytes: any chars (controls, quotes, astral), 0..=128 of
/// them, so at most 512 bytes.
fn diagnostic() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::collection::vec(any::<char>(), 0..=128).prop_map(String::from_iter),
        "[ -~]{0,512}",
    ]
}

fn notification() -> impl Strategy<Value = ProcessCompletionNotification> {
    (
        non_nil_uuid(),
        non_nil_uuid(),
        non_nil_uuid(),
        handle(),
        select(COMPLETION_PAIRS.to_vec()),
    )
        .prop_map(
            |(c, s, l, process_handle, (state, reason))| ProcessCompletionNotification {
                command_id: CommandId::from_uuid(c),
                session_id: SessionId::from_uuid(s),
                loop_id: LoopId::from_uuid(l),
                process_handle,
                state,
                reason,
            },
        )
}

/// What a kind allows: its (state, reason) pairs.
fn state_reason(kind: K) -> Vec<(S, Option<R>)> {
    match kind {
        K::Started | K::Backgrounded => vec![(S::Running, None)],
        K::StopRequested => [S::Starting, S::Running]
            .into_iter()
            .flat_map(|s| {
                [R::Interrupted, R::Terminated, R::Killed]
                    .into_iter()
                    .map(move |r| (s, Some(r)))
            })
            .collect(),
        K::Completed => COMPLETION_PAIRS[..10]
            .iter()
            .map(|&(s, r)| (s, Some(r)))
            .collect(),
        K::Lost => vec![(S::LostOnRestore, Some(R::LostOnRestore))],
    }
}

/// Valid metadata of any kind, with every optional field exercised where the spec
/// allows it.
fn metadata() -> impl Strategy<Value = ProcessLifecycleMetadata> {
    select(K::ALL.to_vec())
        .prop_flat_map(|kind| (Just(kind), select(state_reason(kind))))
        .prop_flat_map(|(kind, (state, reason))| {
            (
                (
                    non_nil_uuid(),
                    non_nil_uuid(),
                    non_nil_uuid(),
                    non_nil_uuid(),
                ),
                handle(),
                (created_ns(), gap_ns(), gap_ns()),
                (any::<bool>(), any::<i32>()),
                proptest::option::of(diagnostic()),
            )
                .prop_map(
                    move |(
                        (event, session, loop_, origin),
                        process_handle,
                        (created, gap1, gap2),
                        (coin, code),
                        diag,
                    )| {
                        let started = created + gap1;
                        let finished = started + gap2;
                        let (has_started, has_finished, exit_code) = match (kind, state) {
                            (K::Started | K::Backgrounded, _) => (true, false, None),
                            (K::StopRequested, s) => (s == S::Running, false, None),
                            (K::Completed, S::Exited) => (true, true, Some(code)),
                            (K::Completed, S::Failed) => (coin, true, None),
                            (K::Completed, _) => (true, true, None),
                            (K::Lost, _) => (coin, true, None),
                        };
                        let diag_allowed =
                            kind == K::Lost || (kind, state) == (K::Completed, S::Failed);
                        ProcessLifecycleMetadata {
                            event_id: EventId::from_uuid(event),
                            kind,
                            session_id: SessionId::from_uuid(session),
                            loop_id: LoopId::from_uuid(loop_),
                            process_handle,
                            origin_execution_id: ExecutionId::from_uuid(origin),
                            state,
                            process_created_at: at(created),
                            process_started_at: has_started.then(|| at(started)),
                            process_finished_at: has_finished.then(|| at(finished)),
                            exit_code,
                            reason,
                            diagnostic: diag.filter(|_| diag_allowed),
                        }
                    },
                )
        })
}

fn bad_handle() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z]{129,200}",
        "[a-z]{0,10}[^A-Za-z0-9_-][a-z]{0,10}",
    ]
}

/// A valid notification with exactly one field broken, and the field validation
/// must name.
fn broken_notification() -> impl Strategy<Value = (ProcessCompletionNotification, F)> {
    let non_pairs: Vec<(S, R)> = S::ALL
        .iter()
        .flat_map(|&s| R::ALL.iter().map(move |&r| (s, r)))
        .filter(|p| !COMPLETION_PAIRS.contains(p))
        .collect();
    (notification(), 0..5usize, bad_handle(), select(non_pairs)).prop_map(
        |(mut n, which, bad, (state, reason))| {
            let field = match which {
                0 => {
                    n.command_id = CommandId::NIL;
                    F::CommandId
                }
                1 => {
                    n.session_id = SessionId::NIL;
                    F::SessionId
                }
                2 => {
                    n.loop_id = LoopId::NIL;
                    F::LoopId
                }
                3 => {
                    n.process_handle = bad;
                    F::ProcessHandle
                }
                _ => {
                    n.state = state;
                    n.reason = reason;
                    F::StateReason
                }
            };
            (n, field)
        },
    )
}

/// Valid metadata with exactly one field broken, and the field validation must name.
fn broken_metadata() -> impl Strategy<Value = (ProcessLifecycleMetadata, F)> {
    (
        metadata(),
        0..12usize,
        bad_handle(),
        1i128..1_000_000_000_000,
        513usize..2_000,
    )
        .prop_map(|(mut m, which, bad, back, long)| {
            let created = m.process_created_at.as_nanosecond();
            let field = match which {
                0 => {
                    m.event_id = EventId::NIL;
                    F::EventId
                }
                1 => {
                    m.session_id = SessionId::NIL;
                    F::SessionId
                }
                2 => {
                    m.loop_id = LoopId::NIL;
                    F::LoopId
                }
                3 => {
                    m.process_handle = bad;
                    F::ProcessHandle
                }
                4 => {
                    m.origin_execution_id = ExecutionId::NIL;
                    F::OriginExecutionId
                }
                5 => {
                    m.process_created_at = ZERO_TIME;
                    F::ProcessCreatedAt
                }
                6 => {
                    m.process_started_at = Timestamp::from_nanosecond(created - back).ok();
                    F::ProcessStartedAt
                }
                7 => {
                    m.process_finished_at = Timestamp::from_nanosecond(created - back).ok();
                    F::ProcessFinishedAt
                }
                8 => {
                    m.diagnostic = Some("d".repeat(long));
                    F::Diagnostic
                }
                9 => {
                    let allowed =
                        m.kind == K::Lost || (m.kind, m.state) == (K::Completed, S::Failed);
                    m.diagnostic = Some(if allowed {
                        "é".repeat(257)
                    } else {
                        "d".into()
                    });
                    F::Diagnostic
                }
                10 => {
                    match m.kind {
                        K::Started | K::Backgrounded => m.reason = Some(R::Exited),
                        K::StopRequested | K::Completed => m.reason = None,
                        K::Lost => m.reason = Some(R::Killed),
                    }
                    F::StateReason
                }
                _ => {
                    match m.kind {
                        K::Started | K::Backgrounded => m.process_started_at = None,
                        K::StopRequested => m.exit_code = Some(0),
                        K::Completed => m.process_finished_at = None,
                        K::Lost => m.exit_code = Some(1),
                    }
                    F::LifecycleFields
                }
            };
            (m, field)
        })
        // `created - back` may fall outside jiff's range (then the field is unset and
        // nothing is broken); drop those rare cases.
        .prop_filter("timestamp out of range", |(m, f)| match f {
            F::ProcessStartedAt => m.process_started_at.is_some(),
            F::ProcessFinishedAt => m.process_finished_at.is_some(),
            _ => true,
        })
}

fn record() -> impl Strategy<Value = JournalRecord> {
    prop_oneof![
        notification().prop_map(|n| JournalRecord::from(ProcessNotification::new(n))),
        metadata().prop_map(|m| JournalRecord::from(SessionEvent::from(m))),
        (non_nil_uuid(), non_nil_uuid(), non_nil_uuid()).prop_map(|(s, l, c)| {
            JournalRecord::from(SessionEvent::from(NotificationConsumed::new(
                SessionId::from_uuid(s),
                LoopId::from_uuid(l),
                CommandId::from_uuid(c),
            )))
        }),
    ]
}

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
        prop_assert_eq!(&bytes, &cmd.encode());
        let back = ProcessNotification::decode(&bytes).unwrap();
        prop_assert_eq!(&back, &cmd);
        prop_assert_eq!(back.encode(), bytes);
    }

    #[test]
    fn valid_metadata_validates_and_round_trips(m in metadata()) {
        prop_assert_eq!(m.validate(), Ok(()));
        let e = SessionEvent::from(m);
        let bytes = e.encode();
        prop_assert_eq!(&bytes, &e.encode());
        let back = SessionEvent::decode(&bytes).unwrap();
        prop_assert_eq!(&back, &e);
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
