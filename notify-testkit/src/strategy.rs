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
// Lifecycle metadata

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

// ---------------------------------------------------------------------------------------
// Lifecycle sequences

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
