//! proptest strategies for every DTO: valid values, values with exactly one field
//! broken (yielding the [`ValidationField`](notify_types::ValidationField) `validate()` must name), and lifecycle
//! sequences a real process could produce.
//!
//! The validity rules are written here from the specification, independently of
//! `notify-types` (the completion pairs are spelled out, not taken from
//! [`notify_types::is_completion_pair`]), so testing one against the other means
//! something.
//!
//! ```
//! use notify_testkit::strategy;
//! use proptest::prelude::*;
//!
//! proptest!(|((n, field) in strategy::broken_completion_notification())| {
//!     prop_assert_eq!(n.validate().map_err(|e| e.field()), Err(field));
//! });
//! ```
//!
//! `ValidationField::ExitCode` ("`exit_code` without `has_exit_code`") exists only on
//! the wire; no Rust value can express it, so no strategy here yields it.

use notify_types::{
    CommandId, EventId, ExecutionId, JournalRecord, LoopId, NotificationAbandoned,
    NotificationConsumed, ProcessCompletionNotification, ProcessLifecycleKind as K,
    ProcessLifecycleMetadata, ProcessLifecycleState as S, ProcessNotification,
    ProcessTerminalReason as R, SessionEnded, SessionEvent, SessionId, Timestamp, Uuid,
    ValidationField as F, ZERO_TIME,
};
use proptest::prelude::*;
use proptest::sample::select;

mod lifecycle;
mod sequence;

pub use lifecycle::*;
pub use sequence::*;

/// The eleven completion pairs of the specification, spelled out.
pub const COMPLETION_PAIRS: [(S, R); 11] = [
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

const STOP_REASONS: [R; 3] = [R::Interrupted, R::Terminated, R::Killed];

/// The largest gap generated between two timestamps of one process: about 11 days.
const MAX_GAP_NS: i64 = 1_000_000_000_000_000;

fn is_pair(state: S, reason: R) -> bool {
    COMPLETION_PAIRS.contains(&(state, reason))
}

fn all_pairs() -> impl Iterator<Item = (S, R)> {
    S::ALL
        .iter()
        .flat_map(|&s| R::ALL.iter().map(move |&r| (s, r)))
}

fn add_ns(t: Timestamp, ns: i64) -> Option<Timestamp> {
    Timestamp::from_nanosecond(t.as_nanosecond() + i128::from(ns)).ok()
}

fn pick<T: Copy>(items: &[T], index: usize) -> Option<T> {
    items.get(index % items.len().max(1)).copied()
}

// ---------------------------------------------------------------------------------------
// IDs and scalars

/// Any non-nil UUID.
pub fn uuid() -> impl Strategy<Value = Uuid> {
    (1..=u128::MAX).prop_map(Uuid::from_u128)
}

/// A non-nil [`CommandId`].
pub fn command_id() -> impl Strategy<Value = CommandId> {
    uuid().prop_map(CommandId::from_uuid)
}

/// A non-nil [`SessionId`].
pub fn session_id() -> impl Strategy<Value = SessionId> {
    uuid().prop_map(SessionId::from_uuid)
}

/// A non-nil [`LoopId`].
pub fn loop_id() -> impl Strategy<Value = LoopId> {
    uuid().prop_map(LoopId::from_uuid)
}

/// A non-nil [`EventId`].
pub fn event_id() -> impl Strategy<Value = EventId> {
    uuid().prop_map(EventId::from_uuid)
}

/// A non-nil [`ExecutionId`].
pub fn execution_id() -> impl Strategy<Value = ExecutionId> {
    uuid().prop_map(ExecutionId::from_uuid)
}

/// A valid process handle: 1 to 128 bytes of `[A-Za-z0-9_-]`.
pub fn process_handle() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_-]{1,128}"
}

/// An invalid process handle: empty, 129 to 200 valid bytes, or a valid prefix and
/// suffix around one character outside `[A-Za-z0-9_-]`.
pub fn invalid_process_handle() -> impl Strategy<Value = String> {
    let bad_char = any::<char>().prop_filter("outside the handle alphabet", |c| {
        !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
    });
    prop_oneof![
        Just(String::new()),
        "[A-Za-z0-9_-]{129,200}",
        ("[A-Za-z0-9_-]{0,40}", bad_char, "[A-Za-z0-9_-]{0,40}")
            .prop_map(|(a, c, b)| format!("{a}{c}{b}")),
    ]
}

/// A valid creation time, with nanoseconds: mostly between 2017 and 2036, and one
/// time in four anywhere from just after the zero time (`0001-01-01T00:00:00Z`) to
/// late in year 9999, leaving room for the generated start and finish gaps.
pub fn timestamp() -> impl Strategy<Value = Timestamp> {
    let upper = Timestamp::MAX.as_second() - 3 * (MAX_GAP_NS / 1_000_000_000);
    prop_oneof![
        3 => (1_500_000_000i64..2_100_000_000, 0i32..1_000_000_000),
        1 => (ZERO_TIME.as_second()..upper, 0i32..1_000_000_000),
    ]
    .prop_filter_map("after the zero time, in jiff's range", |(s, ns)| {
        Timestamp::new(s, ns).ok().filter(|t| *t > ZERO_TIME)
    })
}

/// A valid diagnostic (at most 512 bytes): printable text with quotes, backslashes
/// and non-ASCII; any characters at all, control characters included (at most 128,
/// so at most 512 bytes); or exactly 512 printable ASCII bytes.
pub fn diagnostic() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => "\\PC{0,128}".boxed(),
        2 => proptest::collection::vec(any::<char>(), 0..=128)
            .prop_map(|cs| cs.into_iter().collect::<String>())
            .boxed(),
        1 => "[ -~]{512}".boxed(),
    ]
}

/// One of the eleven completion pairs.
pub fn completion_pair() -> impl Strategy<Value = (S, R)> {
    select(COMPLETION_PAIRS.to_vec())
}

/// A (state, reason) pair that is not a completion pair.
pub fn non_completion_pair() -> impl Strategy<Value = (S, R)> {
    select(
        all_pairs()
            .filter(|&(s, r)| !is_pair(s, r))
            .collect::<Vec<_>>(),
    )
}

// ---------------------------------------------------------------------------------------
// Completion notifications and commands

/// A valid [`ProcessCompletionNotification`].
pub fn completion_notification() -> impl Strategy<Value = ProcessCompletionNotification> {
    (session_id(), loop_id()).prop_flat_map(|(s, l)| completion_notification_in(s, l))
}

/// A valid [`ProcessCompletionNotification`] pinned to `session` and `loop_id`.
pub fn completion_notification_in(
    session: SessionId,
    loop_id: LoopId,
) -> impl Strategy<Value = ProcessCompletionNotification> {
    (command_id(), process_handle(), completion_pair()).prop_map(
        move |(command_id, process_handle, (state, reason))| ProcessCompletionNotification {
            command_id,
            session_id: session,
            loop_id,
            process_handle,
            state,
            reason,
        },
    )
}

/// A [`ProcessNotification`] command around a valid notification.
pub fn process_notification() -> impl Strategy<Value = ProcessNotification> {
    completion_notification().prop_map(ProcessNotification::new)
}

/// A valid notification with exactly one field broken, and the field `validate()`
/// must name.
pub fn broken_completion_notification() -> impl Strategy<Value = (ProcessCompletionNotification, F)>
{
    let valid = completion_notification;
    prop_oneof![
        valid().prop_map(|n| (
            ProcessCompletionNotification {
                command_id: CommandId::NIL,
                ..n
            },
            F::CommandId
        )),
        valid().prop_map(|n| (
            ProcessCompletionNotification {
                session_id: SessionId::NIL,
                ..n
            },
            F::SessionId
        )),
        valid().prop_map(|n| (
            ProcessCompletionNotification {
                loop_id: LoopId::NIL,
                ..n
            },
            F::LoopId
        )),
        (valid(), invalid_process_handle()).prop_map(|(n, process_handle)| (
            ProcessCompletionNotification {
                process_handle,
                ..n
            },
            F::ProcessHandle
        )),
        (valid(), non_completion_pair()).prop_map(|(n, (state, reason))| (
            ProcessCompletionNotification { state, reason, ..n },
            F::StateReason
        )),
    ]
}

// ---------------------------------------------------------------------------------------
// Events and records

/// A [`NotificationConsumed`] event.
pub fn notification_consumed() -> impl Strategy<Value = NotificationConsumed> {
    (session_id(), loop_id(), command_id())
        .prop_map(|(s, l, cause)| NotificationConsumed::new(s, l, cause))
}

/// A [`NotificationAbandoned`] event.
pub fn notification_abandoned() -> impl Strategy<Value = NotificationAbandoned> {
    (session_id(), loop_id(), command_id())
        .prop_map(|(s, l, cause)| NotificationAbandoned::new(s, l, cause))
}

/// A valid [`SessionEvent`] of any type.
pub fn session_event() -> impl Strategy<Value = SessionEvent> {
    prop_oneof![
        5 => lifecycle_metadata().prop_map(SessionEvent::Lifecycle),
        1 => notification_consumed().prop_map(SessionEvent::NotificationConsumed),
        1 => notification_abandoned().prop_map(SessionEvent::NotificationAbandoned),
        1 => session_id().prop_map(|s| SessionEvent::SessionEnded(SessionEnded::new(s))),
    ]
}

/// A valid [`JournalRecord`] of any type.
pub fn journal_record() -> impl Strategy<Value = JournalRecord> {
    prop_oneof![
        process_notification().prop_map(JournalRecord::Command),
        session_event().prop_map(JournalRecord::Event),
    ]
}

/// A valid [`JournalRecord`] owned by `session`, of any type but the session's end
/// marker (which would end the session).
pub fn journal_record_in(session: SessionId) -> impl Strategy<Value = JournalRecord> {
    loop_id().prop_flat_map(move |l| {
        prop_oneof![
            completion_notification_in(session, l)
                .prop_map(|n| JournalRecord::Command(ProcessNotification::new(n))),
            select(K::ALL.to_vec())
                .prop_flat_map(move |k| lifecycle_metadata_in(session, l, k))
                .prop_map(|m| JournalRecord::Event(SessionEvent::Lifecycle(m))),
            command_id().prop_map(move |c| JournalRecord::Event(
                SessionEvent::NotificationConsumed(NotificationConsumed::new(session, l, c))
            )),
            command_id().prop_map(move |c| JournalRecord::Event(
                SessionEvent::NotificationAbandoned(NotificationAbandoned::new(session, l, c))
            )),
        ]
    })
}
