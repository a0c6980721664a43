//! Lifecycle sequences a real process could produce, finished or not.

#[allow(clippy::wildcard_imports)] // the parent's scalars and helpers
use super::*;

#[derive(Debug, Clone)]
struct Life {
    handle: String,
    origin: ExecutionId,
    created: Timestamp,
    start_gap: i64,
    finish_gap: i64,
    event_ids: [EventId; 4],
    backgrounded: bool,
    stop: Option<R>,
    /// `None`: lost; `Some(i)`: completed with the `i`th allowed pair.
    completion: Option<usize>,
    exit_code: i32,
    diagnostic: Option<String>,
}

fn life() -> impl Strategy<Value = Life> {
    (
        (process_handle(), execution_id(), timestamp()),
        (0..MAX_GAP_NS, 0..MAX_GAP_NS),
        [event_id(), event_id(), event_id(), event_id()],
        (
            any::<bool>(),
            proptest::option::of(select(STOP_REASONS.to_vec())),
        ),
        (
            proptest::option::weighted(0.8, any::<usize>()),
            any::<i32>(),
        ),
        proptest::option::of(diagnostic()),
    )
        .prop_map(
            |(
                (handle, origin, created),
                (start_gap, finish_gap),
                event_ids,
                (backgrounded, stop),
                (completion, exit_code),
                diagnostic,
            )| Life {
                handle,
                origin,
                created,
                start_gap,
                finish_gap,
                event_ids,
                backgrounded,
                stop,
                completion,
                exit_code,
                diagnostic,
            },
        )
}

fn unfinished_events(
    session: SessionId,
    loop_id: LoopId,
    l: &Life,
) -> Option<Vec<ProcessLifecycleMetadata>> {
    let started_at = add_ns(l.created, l.start_gap)?;
    let [e_start, e_bg, e_stop, _] = l.event_ids;
    let base = ProcessLifecycleMetadata {
        event_id: e_start,
        kind: K::Started,
        session_id: session,
        loop_id,
        process_handle: l.handle.clone(),
        origin_execution_id: l.origin,
        state: S::Running,
        process_created_at: l.created,
        process_started_at: Some(started_at),
        process_finished_at: None,
        exit_code: None,
        reason: None,
        diagnostic: None,
    };
    let mut out = vec![base.clone()];
    if l.backgrounded {
        out.push(ProcessLifecycleMetadata {
            event_id: e_bg,
            kind: K::Backgrounded,
            ..base.clone()
        });
    }
    if let Some(reason) = l.stop {
        out.push(ProcessLifecycleMetadata {
            event_id: e_stop,
            kind: K::StopRequested,
            reason: Some(reason),
            ..base
        });
    }
    Some(out)
}

fn complete_events(
    session: SessionId,
    loop_id: LoopId,
    l: Life,
) -> Option<Vec<ProcessLifecycleMetadata>> {
    let mut out = unfinished_events(session, loop_id, &l)?;
    let last = out.last()?.clone();
    let finished_at = add_ns(last.process_started_at?, l.finish_gap)?;
    let terminal = match l.completion {
        None => ProcessLifecycleMetadata {
            event_id: l.event_ids[3],
            kind: K::Lost,
            state: S::LostOnRestore,
            reason: Some(R::LostOnRestore),
            process_finished_at: Some(finished_at),
            diagnostic: l.diagnostic,
            ..last
        },
        Some(i) => {
            // After a stop request the process ends as asked, or exits on its own first.
            let pairs: Vec<(S, R)> = match l.stop {
                Some(R::Interrupted) => {
                    vec![(S::Interrupted, R::Interrupted), (S::Exited, R::Exited)]
                }
                Some(R::Terminated) => vec![(S::Terminated, R::Terminated), (S::Exited, R::Exited)],
                Some(_) => vec![(S::Killed, R::Killed), (S::Exited, R::Exited)],
                None => COMPLETION_PAIRS
                    .into_iter()
                    .filter(|&(s, _)| s != S::LostOnRestore)
                    .collect(),
            };
            let (state, reason) = pick(&pairs, i)?;
            ProcessLifecycleMetadata {
                event_id: l.event_ids[3],
                kind: K::Completed,
                state,
                reason: Some(reason),
                process_finished_at: Some(finished_at),
                exit_code: (state == S::Exited).then_some(l.exit_code),
                diagnostic: if state == S::Failed {
                    l.diagnostic
                } else {
                    None
                },
                ..last
            }
        }
    };
    out.push(terminal);
    Some(out)
}

/// The lifecycle events of one process, as a real supervisor would publish them:
/// `Started`, optionally `Backgrounded`, optionally `StopRequested`, then `Completed`
/// (consistent with a stop request, if any) or `Lost`.
///
/// All events share session, loop, handle, origin execution and creation/start times;
/// timestamps are monotone (created ≤ started ≤ finished); event IDs are distinct.
pub fn lifecycle_sequence() -> impl Strategy<Value = Vec<ProcessLifecycleMetadata>> {
    (session_id(), loop_id()).prop_flat_map(|(s, l)| lifecycle_sequence_in(s, l))
}

/// A [`lifecycle_sequence`] pinned to `session` and `loop_id`.
pub fn lifecycle_sequence_in(
    session: SessionId,
    loop_id: LoopId,
) -> impl Strategy<Value = Vec<ProcessLifecycleMetadata>> {
    life().prop_filter_map("timestamps in range", move |l| {
        complete_events(session, loop_id, l)
    })
}

/// The events of a process still running (an orphan after a crash): `Started`,
/// optionally `Backgrounded`, optionally `StopRequested`, and no terminal event.
pub fn unfinished_lifecycle_sequence_in(
    session: SessionId,
    loop_id: LoopId,
) -> impl Strategy<Value = Vec<ProcessLifecycleMetadata>> {
    life().prop_filter_map("timestamps in range", move |l| {
        unfinished_events(session, loop_id, &l)
    })
}
