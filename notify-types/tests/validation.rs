//! `validate()` for both DTOs: the completion-pair table, the lifecycle matrix, each
//! shape rule, handle edges, and first-failing-field order.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this crate's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(dead_code)]
mod common;

use common::*;
use notify_types::*;

use ProcessLifecycleKind as K;
use ProcessLifecycleState as S;
use ProcessTerminalReason as R;
use ValidationField as F;

type EditN = fn(&mut ProcessCompletionNotification);

/// Asserts that `m` validates to `want` (`None` = Ok, `Some(field)` = that field).
#[track_caller]
fn check(m: &ProcessLifecycleMetadata, want: Option<F>) {
    let got = m.validate().err().map(|e| e.field());
    assert_eq!(got, want, "{m:#?}");
}

#[track_caller]
fn check_n(n: &ProcessCompletionNotification, want: Option<F>) {
    let got = n.validate().err().map(|e| e.field());
    assert_eq!(got, want, "{n:#?}");
}

fn reasons_or_none() -> impl Iterator<Item = Option<R>> {
    std::iter::once(None).chain(R::ALL.iter().copied().map(Some))
}

// ---------------------------------------------------------------------------------------
// ProcessCompletionNotification

#[test]
fn notification_state_reason_table_is_exactly_the_eleven_pairs() {
    assert_eq!(S::ALL.len(), 9);
    assert_eq!(R::ALL.len(), 9);
    let mut accepted = 0;
    for &state in S::ALL {
        for &reason in R::ALL {
            let n = ProcessCompletionNotification {
                state,
                reason,
                ..notification()
            };
            let ok = COMPLETION_PAIRS.contains(&(state, reason));
            check_n(&n, (!ok).then_some(F::StateReason));
            assert_eq!(is_completion_pair(state, reason), ok, "{state}/{reason}");
            accepted += usize::from(ok);
        }
    }
    assert_eq!(accepted, 11);
}

#[test]
fn notification_reports_each_field_alone() {
    let cases: [(EditN, F); 5] = [
        (|n| n.command_id = CommandId::NIL, F::CommandId),
        (|n| n.session_id = SessionId::NIL, F::SessionId),
        (|n| n.loop_id = LoopId::NIL, F::LoopId),
        (|n| n.process_handle = "a b".into(), F::ProcessHandle),
        (|n| n.state = S::Running, F::StateReason),
    ];
    for (breaker, field) in cases {
        let mut n = notification();
        breaker(&mut n);
        check_n(&n, Some(field));
    }
    check_n(&notification(), None);
}

#[test]
fn notification_reports_the_first_failing_field() {
    // Everything broken; fix one field at a time and watch the next one surface.
    let mut n = ProcessCompletionNotification {
        command_id: CommandId::NIL,
        session_id: SessionId::NIL,
        loop_id: LoopId::NIL,
        process_handle: String::new(),
        state: S::Starting,
        reason: R::Exited,
    };
    let fixes: [(F, EditN); 5] = [
        (F::CommandId, |n| {
            n.command_id = CommandId::from_uuid(uuid(1))
        }),
        (F::SessionId, |n| {
            n.session_id = SessionId::from_uuid(uuid(2))
        }),
        (F::LoopId, |n| n.loop_id = LoopId::from_uuid(uuid(3))),
        (F::ProcessHandle, |n| n.process_handle = "h".into()),
        (F::StateReason, |n| n.state = S::Exited),
    ];
    for (field, fix) in fixes {
        check_n(&n, Some(field));
        fix(&mut n);
    }
    check_n(&n, None);
}

// ---------------------------------------------------------------------------------------
// Handle edges (both DTOs share the rule)

#[track_caller]
fn check_handle(handle: &str, ok: bool) {
    let want = (!ok).then_some(F::ProcessHandle);
    check_n(
        &ProcessCompletionNotification {
            process_handle: handle.to_owned(),
            ..notification()
        },
        want,
    );
    let mut m = valid_metadata(K::Started);
    m.process_handle = handle.to_owned();
    check(&m, want);
    assert_eq!(is_valid_handle(handle), ok, "{handle:?}");
}

#[test]
fn handle_length_edges() {
    assert_eq!(MAX_PROCESS_HANDLE_BYTES, 128);
    check_handle("", false);
    check_handle("a", true);
    check_handle(&"a".repeat(127), true);
    check_handle(&"a".repeat(128), true);
    check_handle(&"Z9_-".repeat(32), true);
    check_handle(&"a".repeat(129), false);
    check_handle(&"a".repeat(1000), false);
    // 128 characters but more than 128 bytes.
    check_handle(&format!("{}é", "a".repeat(127)), false);
}

#[test]
fn handle_accepts_exactly_the_url_safe_alphabet() {
    let mut accepted = 0;
    let mut rejected = 0;
    for b in 0u8..=255 {
        let c = char::from(b); // 0x80..=0xff become the Latin-1 chars, two UTF-8 bytes.
        let ok = c.is_ascii_alphanumeric() || c == '_' || c == '-';
        for handle in [
            format!("ab{c}cd"),
            c.to_string(),
            format!("{c}-x"),
            format!("x_{c}"),
        ] {
            check_handle(&handle, ok);
        }
        if ok {
            accepted += 1;
        } else {
            rejected += 1;
        }
    }
    assert_eq!((accepted, rejected), (64, 192));
    for c in ['é', '€', '😀', 'ß', '\u{200b}', '\u{feff}', 'ａ', '٣'] {
        check_handle(&format!("ab{c}cd"), false);
        check_handle(&c.to_string(), false);
    }
}

// ---------------------------------------------------------------------------------------
// ProcessLifecycleMetadata: the kind x state x reason matrix

#[test]
fn lifecycle_state_reason_matrix() {
    let mut ok_count = 0;
    let mut cases = 0;
    for &kind in K::ALL {
        for &state in S::ALL {
            for reason in reasons_or_none() {
                let m = metadata(kind, state, reason);
                let ok = state_reason_allowed(kind, state, reason);
                check(&m, (!ok).then_some(F::StateReason));
                ok_count += usize::from(ok);
                cases += 1;
            }
        }
    }
    assert_eq!(cases, 5 * 9 * 10);
    // Started 1 + Backgrounded 1 + StopRequested 2x3 + Completed 10 + Lost 1.
    assert_eq!(ok_count, 19);
}

// ---------------------------------------------------------------------------------------
// lifecycle_fields: each shape rule per kind

type Edit = fn(&mut ProcessLifecycleMetadata);

#[track_caller]
fn check_shape(base: ProcessLifecycleMetadata, edit: Edit, want: Option<F>) {
    check(&base, None);
    let mut m = base;
    edit(&mut m);
    check(&m, want);
}

#[test]
fn started_and_backgrounded_shape() {
    const LF: Option<F> = Some(F::LifecycleFields);
    for kind in [K::Started, K::Backgrounded] {
        let base = || valid_metadata(kind);
        check_shape(base(), |m| m.process_started_at = None, LF);
        check_shape(base(), |m| m.process_finished_at = Some(finished()), LF);
        check_shape(base(), |m| m.exit_code = Some(0), LF);
        check_shape(base(), |m| m.exit_code = Some(-1), LF);
        // Started exactly at creation is fine.
        check_shape(base(), |m| m.process_started_at = Some(created()), None);
    }
}

#[test]
fn stop_requested_shape() {
    const LF: Option<F> = Some(F::LifecycleFields);
    for reason in [R::Interrupted, R::Terminated, R::Killed] {
        let running = || metadata(K::StopRequested, S::Running, Some(reason));
        let starting = || metadata(K::StopRequested, S::Starting, Some(reason));
        // started set exactly when Running.
        check_shape(running(), |m| m.process_started_at = None, LF);
        check_shape(starting(), |m| m.process_started_at = Some(started()), LF);
        // finished never; exit code never.
        check_shape(running(), |m| m.process_finished_at = Some(finished()), LF);
        check_shape(starting(), |m| m.process_finished_at = Some(finished()), LF);
        check_shape(running(), |m| m.exit_code = Some(0), LF);
        check_shape(starting(), |m| m.exit_code = Some(137), LF);
        // "No diagnostic" for StopRequested is reported by the earlier `diagnostic`
        // presence rule, which allows one only for Completed+Failed or Lost.
        check_shape(
            running(),
            |m| m.diagnostic = Some("x".into()),
            Some(F::Diagnostic),
        );
    }
}

#[test]
fn completed_shape() {
    const LF: Option<F> = Some(F::LifecycleFields);
    for &(state, reason) in &COMPLETION_PAIRS[..10] {
        let base = || metadata(K::Completed, state, Some(reason));
        check_shape(base(), |m| m.process_finished_at = None, LF);
        match state {
            S::Exited => {
                check_shape(base(), |m| m.process_started_at = None, LF);
                check_shape(base(), |m| m.exit_code = None, LF);
                check_shape(base(), |m| m.exit_code = Some(-1), None);
                check_shape(base(), |m| m.exit_code = Some(i32::MIN), None);
                check_shape(base(), |m| m.exit_code = Some(i32::MAX), None);
            }
            S::Failed => {
                check_shape(base(), |m| m.exit_code = Some(1), LF);
                check_shape(base(), |m| m.process_started_at = None, None);
                check_shape(base(), |m| m.diagnostic = Some("spawn failed".into()), None);
            }
            _ => {
                check_shape(base(), |m| m.process_started_at = None, LF);
                check_shape(base(), |m| m.exit_code = Some(0), LF);
                check_shape(base(), |m| m.exit_code = Some(143), LF);
            }
        }
    }
}

#[test]
fn lost_shape() {
    const LF: Option<F> = Some(F::LifecycleFields);
    let base = || valid_metadata(K::Lost);
    check_shape(base(), |m| m.process_finished_at = None, LF);
    check_shape(base(), |m| m.exit_code = Some(0), LF);
    check_shape(base(), |m| m.process_started_at = None, None);
    check_shape(
        base(),
        |m| m.diagnostic = Some("runner vanished".into()),
        None,
    );
}

// ---------------------------------------------------------------------------------------
// The fields checked before state_reason, each alone

#[test]
fn lifecycle_reports_each_earlier_field_alone() {
    let before_created = ts(1_699_999_999, 999_999_999);
    let between = ts(1_700_000_000, 500_000_000); // after created, before started
    let cases: Vec<(K, Edit, F)> = vec![
        (K::Started, |m| m.event_id = EventId::NIL, F::EventId),
        (
            K::Completed,
            |m| m.session_id = SessionId::NIL,
            F::SessionId,
        ),
        (K::Lost, |m| m.loop_id = LoopId::NIL, F::LoopId),
        (
            K::StopRequested,
            |m| m.process_handle = String::new(),
            F::ProcessHandle,
        ),
        (
            K::Backgrounded,
            |m| m.process_handle = "x".repeat(129),
            F::ProcessHandle,
        ),
        (
            K::Completed,
            |m| m.process_handle = "a.b".into(),
            F::ProcessHandle,
        ),
        (
            K::Started,
            |m| m.origin_execution_id = ExecutionId::NIL,
            F::OriginExecutionId,
        ),
        (
            K::Started,
            |m| m.process_created_at = ZERO_TIME,
            F::ProcessCreatedAt,
        ),
        (
            K::Lost,
            |m| m.process_created_at = ZERO_TIME,
            F::ProcessCreatedAt,
        ),
        (
            K::Started,
            |m| m.process_started_at = Some(ts(1_699_999_999, 999_999_999)),
            F::ProcessStartedAt,
        ),
        (
            K::Completed,
            |m| m.process_finished_at = Some(ts(1_699_999_999, 999_999_999)),
            F::ProcessFinishedAt,
        ),
        (
            // Lost without a start: finished is compared with created alone.
            K::Lost,
            |m| {
                m.process_started_at = None;
                m.process_finished_at = Some(ts(1_699_999_999, 0));
            },
            F::ProcessFinishedAt,
        ),
        (
            // After created but before started.
            K::Completed,
            |m| m.process_finished_at = Some(ts(1_700_000_000, 500_000_000)),
            F::ProcessFinishedAt,
        ),
        (
            K::Lost,
            |m| m.diagnostic = Some("x".repeat(513)),
            F::Diagnostic,
        ),
        (
            K::Started,
            |m| m.diagnostic = Some(String::new()),
            F::Diagnostic,
        ),
        (
            K::Backgrounded,
            |m| m.diagnostic = Some("x".into()),
            F::Diagnostic,
        ),
        (
            K::StopRequested,
            |m| m.diagnostic = Some("x".into()),
            F::Diagnostic,
        ),
        (
            K::Completed,
            |m| m.diagnostic = Some("x".into()),
            F::Diagnostic,
        ),
    ];
    assert!(before_created < created() && created() < between && between < started());
    for (kind, edit, field) in cases {
        check_shape(valid_metadata(kind), edit, Some(field));
    }
}

#[test]
fn diagnostic_presence_follows_kind_and_state() {
    // Allowed only for Completed+Failed and for Lost (any state it validates with).
    for &kind in K::ALL {
        for &state in S::ALL {
            for reason in reasons_or_none() {
                if !state_reason_allowed(kind, state, reason) {
                    continue;
                }
                let mut m = metadata(kind, state, reason);
                m.diagnostic = Some("d".into());
                let allowed = (kind, state) == (K::Completed, S::Failed) || kind == K::Lost;
                check(&m, (!allowed).then_some(F::Diagnostic));
            }
        }
    }
}

#[test]
fn diagnostic_size_edges() {
    assert_eq!(MAX_PROCESS_DIAGNOSTIC_BYTES, 512);
    let with = |d: String| {
        let mut m = valid_metadata(K::Lost);
        m.diagnostic = Some(d);
        m
    };
    check(&with(String::new()), None);
    check(&with("x".repeat(512)), None);
    check(&with("é".repeat(256)), None); // 512 bytes, 256 chars
    check(&with("x".repeat(513)), Some(F::Diagnostic));
    check(&with(format!("{}x", "é".repeat(256))), Some(F::Diagnostic));
    check(&with("€".repeat(171)), Some(F::Diagnostic)); // 513 bytes, 171 chars
}

#[test]
fn equal_timestamps_are_not_before() {
    let mut m = valid_metadata(K::Completed);
    m.process_started_at = Some(created());
    m.process_finished_at = Some(created());
    check(&m, None);
}

#[test]
fn exit_code_without_has_exit_code_is_refused_on_the_wire() {
    let m = valid_metadata(K::Completed);
    let bytes = SessionEvent::from(m).encode();
    let text = String::from_utf8(bytes).unwrap();
    assert!(
        text.contains(r#""has_exit_code":true,"exit_code":0"#),
        "{text}"
    );
    let orphan = text.replace(r#""has_exit_code":true,"#, "");
    let err = SessionEvent::decode(orphan.as_bytes()).unwrap_err();
    assert_eq!(err, DecodeError::Invalid(ValidationError::new(F::ExitCode)));
    assert_eq!(err.field(), Some("exit_code"));
    // `has_exit_code: false` beside an exit code is the same orphan.
    let explicit_false = text.replace(r#""has_exit_code":true"#, r#""has_exit_code":false"#);
    let err = SessionEvent::decode(explicit_false.as_bytes()).unwrap_err();
    assert_eq!(err.field(), Some("exit_code"));
    // The orphan check comes after `diagnostic` and before `state_reason`.
    let mut late = valid_metadata(K::Started);
    late.reason = Some(R::Killed);
    let text = String::from_utf8(SessionEvent::from(late).encode()).unwrap();
    let doc = text.replace(r#""metadata":{"#, r#""metadata":{"exit_code":3,"#);
    let err = SessionEvent::decode(doc.as_bytes()).unwrap_err();
    assert_eq!(err.field(), Some("exit_code"));
    let mut early = valid_metadata(K::Started);
    early.diagnostic = Some("x".into());
    let text = String::from_utf8(SessionEvent::from(early).encode()).unwrap();
    let doc = text.replace(r#""metadata":{"#, r#""metadata":{"exit_code":3,"#);
    let err = SessionEvent::decode(doc.as_bytes()).unwrap_err();
    assert_eq!(err.field(), Some("diagnostic"));
}

#[test]
fn lifecycle_reports_the_first_failing_field() {
    // Every field broken at once; fixing one at a time reveals the spec's order.
    let mut m = ProcessLifecycleMetadata {
        event_id: EventId::NIL,
        kind: K::Started,
        session_id: SessionId::NIL,
        loop_id: LoopId::NIL,
        process_handle: "no spaces".into(),
        origin_execution_id: ExecutionId::NIL,
        state: S::Killed,
        process_created_at: ZERO_TIME,
        // Before the real creation time set below, and finished before started.
        process_started_at: Some(ts(1_000, 0)),
        process_finished_at: Some(ts(500, 0)),
        exit_code: Some(1),
        reason: Some(R::Killed),
        diagnostic: Some("x".repeat(600)),
    };
    let fixes: Vec<(F, Edit)> = vec![
        (F::EventId, |m| m.event_id = EventId::from_uuid(uuid(4))),
        (F::SessionId, |m| {
            m.session_id = SessionId::from_uuid(uuid(2))
        }),
        (F::LoopId, |m| m.loop_id = LoopId::from_uuid(uuid(3))),
        (F::ProcessHandle, |m| m.process_handle = "h".into()),
        (F::OriginExecutionId, |m| {
            m.origin_execution_id = ExecutionId::from_uuid(uuid(5));
        }),
        (F::ProcessCreatedAt, |m| m.process_created_at = ts(2_000, 0)),
        (F::ProcessStartedAt, |m| {
            m.process_started_at = Some(ts(3_000, 0))
        }),
        (F::ProcessFinishedAt, |m| {
            m.process_finished_at = Some(ts(2_500, 0))
        }),
        (F::ProcessFinishedAt, |m| {
            m.process_finished_at = Some(ts(4_000, 0))
        }),
        (F::Diagnostic, |m| m.diagnostic = Some("x".into())),
        (F::Diagnostic, |m| m.diagnostic = None),
        (F::StateReason, |m| m.state = S::Running),
        (F::StateReason, |m| m.reason = None),
        (F::LifecycleFields, |m| m.process_finished_at = None),
        (F::LifecycleFields, |m| m.exit_code = None),
    ];
    for (field, fix) in fixes {
        check(&m, Some(field));
        fix(&mut m);
    }
    check(&m, None);
}

#[test]
fn validation_error_is_typed_and_usable_with_question_mark() {
    fn run(n: &ProcessCompletionNotification) -> Result<(), NotifyError> {
        n.validate()?;
        Ok(())
    }
    let bad = ProcessCompletionNotification {
        loop_id: LoopId::NIL,
        ..notification()
    };
    let err = bad.validate().unwrap_err();
    assert_eq!(err.field(), F::LoopId);
    assert_eq!(err.field().as_str(), "loop_id");
    assert!(err.to_string().contains("loop_id"), "{err}");
    assert!(matches!(
        run(&bad),
        Err(NotifyError::Invalid { field: F::LoopId })
    ));
    let spellings = [
        (F::CommandId, "command_id"),
        (F::SessionId, "session_id"),
        (F::LoopId, "loop_id"),
        (F::ProcessHandle, "process_handle"),
        (F::EventId, "event_id"),
        (F::OriginExecutionId, "origin_execution_id"),
        (F::ProcessCreatedAt, "process_created_at"),
        (F::ProcessStartedAt, "process_started_at"),
        (F::ProcessFinishedAt, "process_finished_at"),
        (F::Diagnostic, "diagnostic"),
        (F::ExitCode, "exit_code"),
        (F::StateReason, "state_reason"),
        (F::LifecycleFields, "lifecycle_fields"),
    ];
    for (field, wire) in spellings {
        assert_eq!(field.as_str(), wire);
        assert_eq!(field.to_string(), wire);
    }
}

#[test]
fn created_before_the_zero_time_is_invalid_and_would_not_encode_as_rfc3339() {
    // postmortem: the decoder accepts RFC 3339 only (years 0000-9999); a creation time
    // before 0001-01-01 validated, encoded as "-000001-…", and failed to decode.
    let valid = started_metadata();
    let mut m = valid.clone();
    m.process_created_at = notify_types::Timestamp::constant(-62_135_596_801, 0);
    m.process_started_at = Some(m.process_created_at);
    assert_eq!(
        m.validate().unwrap_err().field(),
        notify_types::ValidationField::ProcessCreatedAt
    );
    assert!(valid.validate().is_ok());
}

fn started_metadata() -> notify_types::ProcessLifecycleMetadata {
    use notify_types::*;
    ProcessLifecycleMetadata {
        event_id: EventId::new(),
        kind: ProcessLifecycleKind::Started,
        session_id: SessionId::new(),
        loop_id: LoopId::new(),
        process_handle: "h".into(),
        origin_execution_id: ExecutionId::new(),
        state: ProcessLifecycleState::Running,
        process_created_at: Timestamp::constant(1_700_000_000, 0),
        process_started_at: Some(Timestamp::constant(1_700_000_001, 0)),
        process_finished_at: None,
        exit_code: None,
        reason: None,
        diagnostic: None,
    }
}
