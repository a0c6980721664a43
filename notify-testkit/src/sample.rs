//! Deterministic, valid sample records for tests that need "some record" rather than a
//! generated one. Every builder mints fresh IDs, so samples never collide by accident.

use notify_types::{
    CommandId, EventId, ExecutionId, JournalRecord, LoopId, NotificationConsumed,
    ProcessCompletionNotification, ProcessLifecycleKind, ProcessLifecycleMetadata,
    ProcessLifecycleState, ProcessNotification, ProcessTerminalReason, SessionEvent, SessionId,
    Timestamp,
};

/// The creation time of every sample process.
pub const CREATED_AT: Timestamp = Timestamp::constant(1_700_000_000, 0);
/// The start time of every sample process.
pub const STARTED_AT: Timestamp = Timestamp::constant(1_700_000_001, 500);
/// The finish time of every sample process.
pub const FINISHED_AT: Timestamp = Timestamp::constant(1_700_000_060, 0);

/// A valid completion notification (`Exited`/`Exited`) with a fresh command ID.
#[must_use]
pub fn notification(session: SessionId, loop_id: LoopId) -> ProcessCompletionNotification {
    ProcessCompletionNotification {
        command_id: CommandId::new(),
        session_id: session,
        loop_id,
        process_handle: "sample-proc".into(),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }
}

/// A [`ProcessNotification`] command record for [`notification`].
#[must_use]
pub fn command(session: SessionId, loop_id: LoopId) -> JournalRecord {
    JournalRecord::Command(ProcessNotification::new(notification(session, loop_id)))
}

/// Valid lifecycle metadata of `kind` with a fresh event ID.
///
/// Started/Backgrounded: `Running`; StopRequested: `Running`/`Terminated`; Completed:
/// `Exited` with exit code 0; Lost: `LostOnRestore` with a diagnostic.
#[must_use]
pub fn lifecycle(
    session: SessionId,
    loop_id: LoopId,
    kind: ProcessLifecycleKind,
) -> ProcessLifecycleMetadata {
    use ProcessLifecycleKind as K;
    use ProcessLifecycleState as S;
    use ProcessTerminalReason as R;
    let (state, reason, finished, exit_code, diagnostic) = match kind {
        K::Started | K::Backgrounded => (S::Running, None, None, None, None),
        K::StopRequested => (S::Running, Some(R::Terminated), None, None, None),
        K::Completed => (S::Exited, Some(R::Exited), Some(FINISHED_AT), Some(0), None),
        K::Lost => (
            S::LostOnRestore,
            Some(R::LostOnRestore),
            Some(FINISHED_AT),
            None,
            Some("runner lost in a crash".to_owned()),
        ),
    };
    ProcessLifecycleMetadata {
        event_id: EventId::new(),
        kind,
        session_id: session,
        loop_id,
        process_handle: "sample-proc".into(),
        origin_execution_id: ExecutionId::new(),
        state,
        process_created_at: CREATED_AT,
        process_started_at: Some(STARTED_AT),
        process_finished_at: finished,
        exit_code,
        reason,
        diagnostic,
    }
}

/// A lifecycle event record for [`lifecycle`].
#[must_use]
pub fn event(session: SessionId, loop_id: LoopId, kind: ProcessLifecycleKind) -> JournalRecord {
    JournalRecord::Event(SessionEvent::Lifecycle(lifecycle(session, loop_id, kind)))
}

/// A `NotificationConsumed` record for `cause`.
#[must_use]
pub fn consumed(session: SessionId, loop_id: LoopId, cause: CommandId) -> JournalRecord {
    JournalRecord::Event(SessionEvent::NotificationConsumed(
        NotificationConsumed::new(session, loop_id, cause),
    ))
}

/// One record of every kind for `session`: a command, the five lifecycle events and
/// the consumption of the command, in that order.
#[must_use]
pub fn one_of_each(session: SessionId, loop_id: LoopId) -> Vec<JournalRecord> {
    let cmd = ProcessNotification::new(notification(session, loop_id));
    let cause = cmd.command_id();
    let mut out = vec![JournalRecord::Command(cmd)];
    out.extend(
        ProcessLifecycleKind::ALL
            .iter()
            .map(|&kind| event(session, loop_id, kind)),
    );
    out.push(consumed(session, loop_id, cause));
    out
}
