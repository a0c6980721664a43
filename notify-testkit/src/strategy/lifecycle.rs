//! Lifecycle metadata: valid for every kind, and broken in exactly one field.

#[allow(clippy::wildcard_imports)] // the parent's scalars and helpers
use super::*;

/// Everything a lifecycle value needs besides its kind and owner; `build` shapes it.
#[derive(Debug, Clone)]
struct Raw {
    event_id: EventId,
    process_handle: String,
    origin: ExecutionId,
    created: Timestamp,
    start_gap: i64,
    finish_gap: i64,
    exit_code: i32,
    diagnostic: Option<String>,
    /// Selects among the kind's allowed choices (state, reason, optional start).
    picks: (usize, usize, bool),
}

fn raw() -> impl Strategy<Value = Raw> {
    (
        event_id(),
        process_handle(),
        execution_id(),
        timestamp(),
        0..MAX_GAP_NS,
        0..MAX_GAP_NS,
        any::<i32>(),
        proptest::option::of(diagnostic()),
        (any::<usize>(), any::<usize>(), any::<bool>()),
    )
        .prop_map(
            |(
                event_id,
                process_handle,
                origin,
                created,
                start_gap,
                finish_gap,
                exit_code,
                diagnostic,
                picks,
            )| {
                Raw {
                    event_id,
                    process_handle,
                    origin,
                    created,
                    start_gap,
                    finish_gap,
                    exit_code,
                    diagnostic,
                    picks,
                }
            },
        )
}

/// Shapes `raw` into valid metadata of `kind`, following the specification's rules.
fn build(
    kind: K,
    session: SessionId,
    loop_id: LoopId,
    raw: Raw,
) -> Option<ProcessLifecycleMetadata> {
    let (p_state, p_reason, p_started) = raw.picks;
    let started_at = add_ns(raw.created, raw.start_gap)?;
    let finished_at = add_ns(started_at, raw.finish_gap)?;
    let (state, reason, started, finished, exit_code, diagnostic) = match kind {
        K::Started | K::Backgrounded => (S::Running, None, true, false, None, None),
        K::StopRequested => {
            let state = pick(&[S::Starting, S::Running], p_state)?;
            let reason = pick(&STOP_REASONS, p_reason)?;
            (state, Some(reason), state == S::Running, false, None, None)
        }
        K::Completed => {
            let pairs: Vec<(S, R)> = COMPLETION_PAIRS
                .into_iter()
                .filter(|&(s, _)| s != S::LostOnRestore)
                .collect();
            let (state, reason) = pick(&pairs, p_state)?;
            match state {
                S::Exited => (state, Some(reason), true, true, Some(raw.exit_code), None),
                S::Failed => (state, Some(reason), p_started, true, None, raw.diagnostic),
                _ => (state, Some(reason), true, true, None, None),
            }
        }
        K::Lost => (
            S::LostOnRestore,
            Some(R::LostOnRestore),
            p_started,
            true,
            None,
            raw.diagnostic,
        ),
    };
    Some(ProcessLifecycleMetadata {
        event_id: raw.event_id,
        kind,
        session_id: session,
        loop_id,
        process_handle: raw.process_handle,
        origin_execution_id: raw.origin,
        state,
        process_created_at: raw.created,
        process_started_at: started.then_some(started_at),
        process_finished_at: finished.then_some(if started {
            finished_at
        } else {
            add_ns(raw.created, raw.finish_gap)?
        }),
        exit_code,
        reason,
        diagnostic,
    })
}

/// Valid [`ProcessLifecycleMetadata`] of `kind` (every allowed state, reason and
/// optional field of that kind is reachable).
pub fn lifecycle_metadata_of(kind: K) -> impl Strategy<Value = ProcessLifecycleMetadata> {
    (session_id(), loop_id()).prop_flat_map(move |(s, l)| lifecycle_metadata_in(s, l, kind))
}

/// Valid metadata of `kind` pinned to `session` and `loop_id`.
pub fn lifecycle_metadata_in(
    session: SessionId,
    loop_id: LoopId,
    kind: K,
) -> impl Strategy<Value = ProcessLifecycleMetadata> {
    raw().prop_filter_map("timestamps in range", move |raw| {
        build(kind, session, loop_id, raw)
    })
}

/// Valid metadata of any kind.
pub fn lifecycle_metadata() -> impl Strategy<Value = ProcessLifecycleMetadata> {
    select(K::ALL.to_vec()).prop_flat_map(lifecycle_metadata_of)
}

/// How a valid value is broken; applied by [`break_metadata`].
#[derive(Debug, Clone, Copy)]
enum Break {
    EventId,
    SessionId,
    LoopId,
    ProcessHandle,
    Origin,
    CreatedZero,
    StartedBeforeCreated,
    FinishedBeforeCreated,
    FinishedBeforeStarted,
    DiagnosticTooLong,
    DiagnosticNotAllowed,
    StateReason,
    LifecycleFields,
}

/// Breaks exactly one field of valid `m` as `how` says, returning the field
/// `validate()` must name, or `None` when `how` does not apply to this value.
fn break_metadata(
    mut m: ProcessLifecycleMetadata,
    how: Break,
    gap: i64,
    choice: usize,
    bad_handle: String,
) -> Option<(ProcessLifecycleMetadata, F)> {
    let gap = gap.max(1);
    let field = match how {
        Break::EventId => {
            m.event_id = EventId::NIL;
            F::EventId
        }
        Break::SessionId => {
            m.session_id = SessionId::NIL;
            F::SessionId
        }
        Break::LoopId => {
            m.loop_id = LoopId::NIL;
            F::LoopId
        }
        Break::ProcessHandle => {
            m.process_handle = bad_handle;
            F::ProcessHandle
        }
        Break::Origin => {
            m.origin_execution_id = ExecutionId::NIL;
            F::OriginExecutionId
        }
        Break::CreatedZero => {
            m.process_created_at = ZERO_TIME;
            F::ProcessCreatedAt
        }
        Break::StartedBeforeCreated => {
            m.process_started_at = Some(add_ns(m.process_created_at, -gap)?);
            F::ProcessStartedAt
        }
        Break::FinishedBeforeCreated => {
            m.process_finished_at = Some(add_ns(m.process_created_at, -gap)?);
            F::ProcessFinishedAt
        }
        Break::FinishedBeforeStarted => {
            let started = m.process_started_at?;
            let room = started.as_nanosecond() - m.process_created_at.as_nanosecond();
            if room < 1 {
                return None;
            }
            // Somewhere in [created, started): after creation, before the start.
            let back = 1 + i128::from(gap) % room;
            m.process_finished_at =
                Some(Timestamp::from_nanosecond(started.as_nanosecond() - back).ok()?);
            F::ProcessFinishedAt
        }
        Break::DiagnosticTooLong => {
            let len = notify_types::MAX_PROCESS_DIAGNOSTIC_BYTES + 1 + choice % 64;
            m.diagnostic = Some("d".repeat(len));
            F::Diagnostic
        }
        Break::DiagnosticNotAllowed => {
            let allowed = matches!((m.kind, m.state), (K::Completed, S::Failed) | (K::Lost, _));
            if allowed {
                return None;
            }
            m.diagnostic = Some("not allowed here".into());
            F::Diagnostic
        }
        Break::StateReason => {
            // Change only the reason (the diagnostic rule depends on kind and state).
            let reasons: Vec<Option<R>> = std::iter::once(None)
                .chain(R::ALL.iter().copied().map(Some))
                .filter(|&r| !reason_allowed(m.kind, m.state, r))
                .collect();
            m.reason = pick(&reasons, choice)?;
            F::StateReason
        }
        Break::LifecycleFields => {
            let later = add_ns(m.process_started_at.unwrap_or(m.process_created_at), gap)?;
            let mut options: Vec<fn(&mut ProcessLifecycleMetadata, Timestamp)> = Vec::new();
            match (m.kind, m.state) {
                (K::Started | K::Backgrounded, _) => {
                    options.push(|m, _| m.process_started_at = None);
                    options.push(|m, t| m.process_finished_at = Some(t));
                    options.push(|m, _| m.exit_code = Some(0));
                }
                (K::StopRequested, S::Running) => {
                    options.push(|m, _| m.process_started_at = None);
                    options.push(|m, t| m.process_finished_at = Some(t));
                    options.push(|m, _| m.exit_code = Some(1));
                }
                (K::StopRequested, _) => {
                    options.push(|m, t| m.process_started_at = Some(t));
                    options.push(|m, t| m.process_finished_at = Some(t));
                    options.push(|m, _| m.exit_code = Some(1));
                }
                (K::Completed, S::Exited) => {
                    options.push(|m, _| m.process_finished_at = None);
                    options.push(|m, _| m.process_started_at = None);
                    options.push(|m, _| m.exit_code = None);
                }
                (K::Completed, S::Failed) => {
                    options.push(|m, _| m.process_finished_at = None);
                    options.push(|m, _| m.exit_code = Some(2));
                }
                (K::Completed, _) => {
                    options.push(|m, _| m.process_finished_at = None);
                    options.push(|m, _| m.process_started_at = None);
                    options.push(|m, _| m.exit_code = Some(3));
                }
                (K::Lost, _) => {
                    options.push(|m, _| m.process_finished_at = None);
                    options.push(|m, _| m.exit_code = Some(4));
                }
            }
            let apply = pick(&options, choice)?;
            apply(&mut m, later);
            F::LifecycleFields
        }
    };
    Some((m, field))
}

/// Whether `reason` is allowed for `kind` in `state` (the `state_reason` rule).
fn reason_allowed(kind: K, state: S, reason: Option<R>) -> bool {
    match kind {
        K::Started | K::Backgrounded => state == S::Running && reason.is_none(),
        K::StopRequested => {
            matches!(state, S::Starting | S::Running)
                && reason.is_some_and(|r| STOP_REASONS.contains(&r))
        }
        K::Completed => state != S::LostOnRestore && reason.is_some_and(|r| is_pair(state, r)),
        K::Lost => state == S::LostOnRestore && reason == Some(R::LostOnRestore),
    }
}

/// Valid metadata with exactly one field broken, and the field `validate()` must name.
///
/// Every field `validate()` can name on a Rust value is reachable: `event_id`,
/// `session_id`, `loop_id`, `process_handle`, `origin_execution_id`,
/// `process_created_at`, `process_started_at`, `process_finished_at` (before creation
/// or before the start), `diagnostic` (too long, or where not allowed),
/// `state_reason` and `lifecycle_fields` (each rule of each kind).
pub fn broken_lifecycle_metadata() -> impl Strategy<Value = (ProcessLifecycleMetadata, F)> {
    let how = select(vec![
        Break::EventId,
        Break::SessionId,
        Break::LoopId,
        Break::ProcessHandle,
        Break::Origin,
        Break::CreatedZero,
        Break::StartedBeforeCreated,
        Break::FinishedBeforeCreated,
        Break::FinishedBeforeStarted,
        Break::DiagnosticTooLong,
        Break::DiagnosticNotAllowed,
        Break::StateReason,
        Break::LifecycleFields,
    ]);
    (
        lifecycle_metadata(),
        how,
        1..MAX_GAP_NS,
        any::<usize>(),
        invalid_process_handle(),
    )
        .prop_filter_map(
            "break applies to this value",
            |(m, how, gap, choice, bad)| break_metadata(m, how, gap, choice, bad),
        )
}
