//! The records every bench writes, so that the benches of each crate measure the same
//! fixture: session `n`, the key of record `i` (increasing with `i`, like the
//! time-ordered UUIDv7 of `CommandId::new()`), a completion notification of about 310
//! bytes of JSON, its consumption, and the runtime the benches drive journals from.

use notify_types::{
    CommandId, JournalRecord, LoopId, NotificationConsumed, ProcessCompletionNotification,
    ProcessLifecycleState, ProcessNotification, ProcessTerminalReason, SessionEvent, SessionId,
    Uuid,
};

/// The loop every bench record is addressed to.
pub const LOOP: u128 = 7;

/// Session `n` of a bench.
#[must_use]
pub fn session(n: u64) -> SessionId {
    SessionId::from_uuid(Uuid::from_u128((0x5e55 << 112) | u128::from(n)))
}

/// The command ID of record `i`: increasing with `i`, like the time-ordered UUIDv7 of
/// `CommandId::new()`.
#[must_use]
pub fn command_id(i: u64) -> CommandId {
    CommandId::from_uuid(Uuid::from_u128((1 << 127) | u128::from(i)))
}

/// A completion notification of session `s` with key `command_id(i)` (~310 bytes of
/// JSON).
#[must_use]
pub fn record(s: SessionId, i: u64) -> JournalRecord {
    JournalRecord::from(notification(s, i))
}

/// The notification behind [`record`].
#[must_use]
pub fn notification(s: SessionId, i: u64) -> ProcessNotification {
    ProcessNotification::new(ProcessCompletionNotification {
        command_id: command_id(i),
        session_id: s,
        loop_id: LoopId::from_uuid(Uuid::from_u128(LOOP)),
        process_handle: format!("build-{i}"),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    })
}

/// The consumption of record `i` of session `s`.
#[must_use]
pub fn consumed(s: SessionId, i: u64) -> JournalRecord {
    JournalRecord::from(SessionEvent::NotificationConsumed(
        NotificationConsumed::new(s, LoopId::from_uuid(Uuid::from_u128(LOOP)), command_id(i)),
    ))
}

/// The runtime every bench drives a journal from: 2 workers, like the machine the
/// figures were taken on.
///
/// # Panics
///
/// When the runtime cannot be started.
#[must_use]
pub fn runtime() -> tokio::runtime::Runtime {
    #[allow(clippy::expect_used)] // a bench helper: no runtime, no bench
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}
