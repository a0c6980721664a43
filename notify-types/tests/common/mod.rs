//! Fixtures shared by the integration tests: fixed IDs, a valid notification, and
//! shape-correct lifecycle metadata for any (kind, state, reason).

use notify_types::*;

use ProcessLifecycleKind as K;
use ProcessLifecycleState as S;
use ProcessTerminalReason as R;

/// A fixed, non-nil UUID whose last byte is `n`.
pub(crate) fn uuid(n: u8) -> Uuid {
    Uuid::from_u128(0x0191_e2a0_7c4b_7d3e_9a10_3b5f_6c7d_8e00 | u128::from(n))
}

/// A timestamp `secs` seconds and `nanos` nanoseconds after the Unix epoch.
pub(crate) fn ts(secs: i64, nanos: i32) -> Timestamp {
    Timestamp::new(secs, nanos).unwrap()
}

/// When the fixture process was created, started and finished.
pub(crate) fn created() -> Timestamp {
    ts(1_700_000_000, 0)
}
pub(crate) fn started() -> Timestamp {
    ts(1_700_000_001, 0)
}
pub(crate) fn finished() -> Timestamp {
    ts(1_700_000_002, 0)
}

/// A valid Exited/Exited notification.
pub(crate) fn notification() -> ProcessCompletionNotification {
    ProcessCompletionNotification {
        command_id: CommandId::from_uuid(uuid(1)),
        session_id: SessionId::from_uuid(uuid(2)),
        loop_id: LoopId::from_uuid(uuid(3)),
        process_handle: "proc-handle-01".into(),
        state: S::Exited,
        reason: R::Exited,
    }
}

/// The eleven completion pairs of the specification, written out here independently
/// of the crate's own table. (The testkit has the same list; it is not used here so that
/// notify-types needs no dev-dependency on a crate that depends on it.)
pub(crate) const COMPLETION_PAIRS: [(S, R); 11] = [
    (S::Exited, R::Exited),
    (S::Failed, R::Failed),
    (S::TimedOut, R::TimedOut),
    (S::Interrupted, R::Interrupted),
    (S::Terminated, R::Terminated),
    (S::Terminated, R::RunnerShutdown),
    (S::Terminated, R::OutputLimit),
    (S::Killed, R::Killed),
    (S::Killed, R::RunnerShutdown),
    (S::Killed, R::OutputLimit),
    (S::LostOnRestore, R::LostOnRestore),
];

/// Whether the spec allows `(state, reason)` for an event of `kind`.
pub(crate) fn state_reason_allowed(kind: K, state: S, reason: Option<R>) -> bool {
    match kind {
        K::Started | K::Backgrounded => state == S::Running && reason.is_none(),
        K::StopRequested => {
            matches!(state, S::Starting | S::Running)
                && matches!(reason, Some(R::Interrupted | R::Terminated | R::Killed))
        }
        K::Completed => {
            reason.is_some_and(|r| r != R::LostOnRestore && COMPLETION_PAIRS.contains(&(state, r)))
        }
        K::Lost => state == S::LostOnRestore && reason == Some(R::LostOnRestore),
    }
}

/// Metadata for `(kind, state, reason)` whose timestamps and exit code follow the
/// spec's `lifecycle_fields` rules for that kind and state, with every ID set and no
/// diagnostic.
pub(crate) fn metadata(kind: K, state: S, reason: Option<R>) -> ProcessLifecycleMetadata {
    let (started_at, finished_at, exit_code) = match kind {
        K::Started | K::Backgrounded => (Some(started()), None, None),
        K::StopRequested => ((state == S::Running).then(started), None, None),
        K::Completed => (
            Some(started()),
            Some(finished()),
            (state == S::Exited).then_some(0),
        ),
        K::Lost => (Some(started()), Some(finished()), None),
    };
    ProcessLifecycleMetadata {
        event_id: EventId::from_uuid(uuid(4)),
        kind,
        session_id: SessionId::from_uuid(uuid(2)),
        loop_id: LoopId::from_uuid(uuid(3)),
        process_handle: "proc-handle-01".into(),
        origin_execution_id: ExecutionId::from_uuid(uuid(5)),
        state,
        process_created_at: created(),
        process_started_at: started_at,
        process_finished_at: finished_at,
        exit_code,
        reason,
        diagnostic: None,
    }
}

/// One valid metadata value per kind.
pub(crate) fn valid_metadata(kind: K) -> ProcessLifecycleMetadata {
    match kind {
        K::Started | K::Backgrounded => metadata(kind, S::Running, None),
        K::StopRequested => metadata(kind, S::Running, Some(R::Terminated)),
        K::Completed => metadata(kind, S::Exited, Some(R::Exited)),
        K::Lost => metadata(kind, S::LostOnRestore, Some(R::LostOnRestore)),
    }
}
