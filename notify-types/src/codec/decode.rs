//! The decoder: reads a document with the streaming parser (`parse.rs`), then judges
//! what was read field by field, refusing anything the wire format does not allow.

use jiff::Timestamp;
use uuid::Uuid;

use crate::event::{
    NotificationAbandoned, NotificationConsumed, SessionEnded, SessionEvent, abandoned_event_id,
    consumed_event_id, ended_event_id,
};
use crate::id::{CommandId, EventId, ExecutionId, LoopId, SessionId, parse_canonical};
use crate::lifecycle::{ProcessLifecycleMetadata, ZERO_TIME};
use crate::notification::{ProcessCompletionNotification, ProcessNotification};
use crate::state::{ProcessLifecycleKind, ProcessLifecycleState, ProcessTerminalReason};

use super::parse::{Captured, Fields, Kind, Scalar, Shape, Transcript, parse};
use super::{DecodeError, JournalRecord, WIRE_VERSION, time};

// ---------------------------------------------------------------------------------------
// Shapes: the fields each object may hold

const NOTIFICATION_FIELDS: &[(&str, Kind)] = &[
    ("command_id", Kind::Uuid),
    ("session_id", Kind::Uuid),
    ("loop_id", Kind::Uuid),
    ("process_handle", Kind::Str),
    ("state", Kind::Code),
    ("reason", Kind::Code),
];

/// A bare notification document.
static NOTIFICATION: Shape = Shape {
    fields: NOTIFICATION_FIELDS,
    prefix: "",
};

static NESTED_NOTIFICATION: Shape = Shape {
    fields: NOTIFICATION_FIELDS,
    prefix: "notification.",
};

static METADATA: Shape = Shape {
    fields: &[
        ("event_id", Kind::Uuid),
        ("kind", Kind::Code),
        ("session_id", Kind::Uuid),
        ("loop_id", Kind::Uuid),
        ("process_handle", Kind::Str),
        ("origin_execution_id", Kind::Uuid),
        ("state", Kind::Code),
        ("process_created_at", Kind::Time),
        ("process_started_at", Kind::Time),
        ("process_finished_at", Kind::Time),
        ("has_exit_code", Kind::Bool),
        ("exit_code", Kind::I32),
        ("reason", Kind::Code),
        ("diagnostic", Kind::Str),
    ],
    prefix: "metadata.",
};

const COMMAND_KEYS: &[&str] = &["command_id", "notification"];
const LIFECYCLE_KEYS: &[&str] = &["metadata"];
const CONSUMED_KEYS: &[&str] = &["cause", "event_id", "loop_id", "session_id"];
const ENDED_KEYS: &[&str] = &["event_id", "session_id"];

/// Any record: the keys of the command, of every event type and of a bare notification.
/// Every envelope decoder reads with this shape, so that a document of another kind (a
/// bare notification included) is refused for its `type`, as before; the keys that
/// `type` does not allow are refused once it is known. Any other key is refused where
/// it is met.
static RECORD: Shape = Shape {
    fields: &[
        ("command_id", Kind::Uuid),
        ("notification", Kind::Object(&NESTED_NOTIFICATION)),
        ("metadata", Kind::Object(&METADATA)),
        ("cause", Kind::Uuid),
        ("event_id", Kind::Uuid),
        ("loop_id", Kind::Uuid),
        ("session_id", Kind::Uuid),
        ("process_handle", Kind::Str),
        ("state", Kind::Code),
        ("reason", Kind::Code),
        ("type", Kind::Type),
        ("v", Kind::Version),
    ],
    prefix: "",
};

const EVENT_TYPES: &[&str] = &[
    "ProcessStarted",
    "ProcessBackgrounded",
    "ProcessCompleted",
    "ProcessStopRequested",
    "ProcessLost",
    NotificationConsumed::TYPE,
    NotificationAbandoned::TYPE,
    SessionEnded::TYPE,
];

const ALL_TYPES: &[&str] = &[
    ProcessNotification::TYPE,
    "ProcessStarted",
    "ProcessBackgrounded",
    "ProcessCompleted",
    "ProcessStopRequested",
    "ProcessLost",
    NotificationConsumed::TYPE,
    NotificationAbandoned::TYPE,
    SessionEnded::TYPE,
];

// ---------------------------------------------------------------------------------------
// Entry points

impl ProcessCompletionNotification {
    /// Decodes and validates a notification.
    ///
    /// # Errors
    ///
    /// A [`DecodeError`] naming what is wrong; see the [`DecodeError`] documentation
    /// for which errors are reported where they are met.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let obj = Object(parse(bytes, &NOTIFICATION)?);
        let n = decode_notification(obj)?;
        n.validate()?;
        Ok(n)
    }
}

impl ProcessNotification {
    /// Decodes a command strictly: wrong `type` or `v`, an unknown key at either level,
    /// a mismatched `command_id` or an invalid notification is an error.
    ///
    /// # Errors
    ///
    /// A [`DecodeError`] naming what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut obj = Object(parse(bytes, &RECORD)?);
        obj.expect_type(&[Self::TYPE])?;
        decode_command(obj)
    }
}

impl SessionEvent {
    /// Decodes an event strictly (lifecycle metadata is validated).
    ///
    /// # Errors
    ///
    /// A [`DecodeError`] naming what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut obj = Object(parse(bytes, &RECORD)?);
        let ty = obj.expect_type(EVENT_TYPES)?;
        decode_event(obj, ty)
    }
}

impl JournalRecord {
    /// Decodes any record, dispatching on its `type`.
    ///
    /// # Errors
    ///
    /// A [`DecodeError`] naming what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut obj = Object(parse(bytes, &RECORD)?);
        let ty = obj.expect_type(ALL_TYPES)?;
        if ty == ProcessNotification::TYPE {
            decode_command(obj).map(Self::Command)
        } else {
            decode_event(obj, ty).map(Self::Event)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Judging what was read

/// A parsed object being consumed field by field.
struct Object<'de>(Fields<'de>);

impl<'de> Object<'de> {
    /// Takes a scalar field. (A shape puts objects only in object fields; one elsewhere
    /// would be the wrong type like any other.)
    fn scalar(
        &mut self,
        field: &'static str,
        kind: Kind,
    ) -> Result<Option<Scalar<'de>>, DecodeError> {
        match self.0.take(field) {
            None => Ok(None),
            Some(Captured::Scalar(s)) => Ok(Some(s)),
            Some(Captured::Object(_)) => Err(kind.wrong_type(field, || "{…}".to_owned())),
        }
    }

    /// Checks `type` against `allowed` and `v` against [`WIRE_VERSION`]; returns the type.
    fn expect_type(&mut self, allowed: &[&'static str]) -> Result<&'static str, DecodeError> {
        let ty = match self.scalar("type", Kind::Type)? {
            None => return Err(DecodeError::MissingType),
            Some(Scalar::Str(s)) => match allowed.iter().copied().find(|t| *t == s) {
                Some(t) => t,
                None => {
                    return Err(DecodeError::UnknownType {
                        found: Transcript::of(&Scalar::Str(s)),
                    });
                }
            },
            Some(other) => {
                return Err(DecodeError::UnknownType {
                    found: Transcript::of(&other),
                });
            }
        };
        match self.scalar("v", Kind::Version)? {
            Some(Scalar::Number(n)) if n.as_u64() == Some(WIRE_VERSION) => Ok(ty),
            Some(other) => Err(DecodeError::UnsupportedVersion {
                found: Transcript::of(&other),
            }),
            None => Err(DecodeError::UnsupportedVersion {
                found: "missing".to_owned(),
            }),
        }
    }

    /// Refuses any key not yet taken and not in `known` (the first in byte order). The
    /// parser refused every key no type allows; this refuses the keys of another type.
    /// Run before field decoding so that an unknown key is reported even when another
    /// field is also wrong.
    fn refuse_unknown(&self, known: &[&str]) -> Result<(), DecodeError> {
        match self.0.present().filter(|k| !known.contains(k)).min() {
            Some(k) => Err(DecodeError::UnknownField {
                field: format!("{}{k}", self.0.prefix()),
            }),
            None => Ok(()),
        }
    }

    fn uuid(&mut self, field: &'static str) -> Result<Uuid, DecodeError> {
        match self.scalar(field, Kind::Uuid)? {
            None => Ok(Uuid::nil()),
            Some(Scalar::Str(s)) => parse_canonical(&s).map_err(|_| DecodeError::InvalidValue {
                field,
                expected: "a lowercase hyphenated UUID",
            }),
            Some(_) => Err(Kind::Uuid.wrong_type(field, String::new)),
        }
    }

    fn string(&mut self, field: &'static str) -> Result<Option<String>, DecodeError> {
        match self.scalar(field, Kind::Str)? {
            None => Ok(None),
            Some(Scalar::Str(s)) => Ok(Some(s.into_owned())),
            Some(_) => Err(Kind::Str.wrong_type(field, String::new)),
        }
    }

    fn code(&mut self, field: &'static str) -> Result<Option<u64>, DecodeError> {
        match self.scalar(field, Kind::Code)? {
            None => Ok(None),
            Some(Scalar::Number(n)) => match n.as_u64() {
                Some(c) => Ok(Some(c)),
                None => Err(DecodeError::UnknownCode {
                    field,
                    found: n.to_string(),
                }),
            },
            Some(other) => Err(Kind::Code.wrong_type(field, || Transcript::of(&other))),
        }
    }

    fn enum_code<T>(
        &mut self,
        field: &'static str,
        from_code: fn(u64) -> Option<T>,
    ) -> Result<Option<T>, DecodeError> {
        match self.code(field)? {
            None => Ok(None),
            Some(c) => from_code(c)
                .map(Some)
                .ok_or_else(|| DecodeError::UnknownCode {
                    field,
                    found: c.to_string(),
                }),
        }
    }

    fn required_enum<T>(
        &mut self,
        field: &'static str,
        from_code: fn(u64) -> Option<T>,
    ) -> Result<T, DecodeError> {
        self.enum_code(field, from_code)?
            .ok_or(DecodeError::MissingField { field })
    }

    fn time(&mut self, field: &'static str) -> Result<Option<Timestamp>, DecodeError> {
        match self.scalar(field, Kind::Time)? {
            None => Ok(None),
            Some(Scalar::Str(s)) => time::parse(field, &s).map(Some),
            Some(_) => Err(Kind::Time.wrong_type(field, String::new)),
        }
    }

    fn bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        match self.scalar(field, Kind::Bool)? {
            None => Ok(false),
            Some(Scalar::Bool(b)) => Ok(b),
            Some(_) => Err(Kind::Bool.wrong_type(field, String::new)),
        }
    }

    fn i32(&mut self, field: &'static str) -> Result<Option<i32>, DecodeError> {
        match self.scalar(field, Kind::I32)? {
            None => Ok(None),
            Some(Scalar::Number(n)) => n
                .as_i64()
                .and_then(|v| i32::try_from(v).ok())
                .map(Some)
                .ok_or(Kind::I32.wrong_type(field, String::new)),
            Some(_) => Err(Kind::I32.wrong_type(field, String::new)),
        }
    }

    fn object(&mut self, field: &'static str) -> Result<Object<'de>, DecodeError> {
        match self.0.take(field) {
            None => Err(DecodeError::MissingField { field }),
            Some(Captured::Object(fields)) => Ok(Object(fields)),
            Some(Captured::Scalar(_)) => Err(DecodeError::NotAnObject { field }),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Records

fn decode_notification(mut obj: Object<'_>) -> Result<ProcessCompletionNotification, DecodeError> {
    Ok(ProcessCompletionNotification {
        command_id: CommandId::from_uuid(obj.uuid("command_id")?),
        session_id: SessionId::from_uuid(obj.uuid("session_id")?),
        loop_id: LoopId::from_uuid(obj.uuid("loop_id")?),
        process_handle: obj.string("process_handle")?.unwrap_or_default(),
        state: obj.required_enum("state", ProcessLifecycleState::from_code)?,
        reason: obj.required_enum("reason", ProcessTerminalReason::from_code)?,
    })
}

fn decode_command(mut obj: Object<'_>) -> Result<ProcessNotification, DecodeError> {
    obj.refuse_unknown(COMMAND_KEYS)?;
    let command_id = CommandId::from_uuid(obj.uuid("command_id")?);
    let inner = obj.object("notification")?;
    let notification = decode_notification(inner)?;
    if command_id != notification.command_id {
        return Err(DecodeError::CommandIdMismatch);
    }
    notification.validate()?;
    Ok(ProcessNotification::new(notification))
}

fn decode_metadata(mut obj: Object<'_>) -> Result<(ProcessLifecycleMetadata, bool), DecodeError> {
    let event_id = EventId::from_uuid(obj.uuid("event_id")?);
    let kind = obj.required_enum("kind", ProcessLifecycleKind::from_code)?;
    let session_id = SessionId::from_uuid(obj.uuid("session_id")?);
    let loop_id = LoopId::from_uuid(obj.uuid("loop_id")?);
    let process_handle = obj.string("process_handle")?.unwrap_or_default();
    let origin_execution_id = ExecutionId::from_uuid(obj.uuid("origin_execution_id")?);
    let state = obj.required_enum("state", ProcessLifecycleState::from_code)?;
    let process_created_at = obj.time("process_created_at")?.unwrap_or(ZERO_TIME);
    let process_started_at = obj.time("process_started_at")?;
    let process_finished_at = obj.time("process_finished_at")?;
    let has_exit_code = obj.bool("has_exit_code")?;
    let raw_exit_code = obj.i32("exit_code")?;
    let reason = obj.enum_code("reason", ProcessTerminalReason::from_code)?;
    let diagnostic = obj.string("diagnostic")?;
    // `exit_code` without `has_exit_code` is invalid; `has_exit_code` alone means 0 (the
    // reference omits a zero exit code).
    let orphan_exit_code = !has_exit_code && raw_exit_code.is_some();
    let exit_code = has_exit_code.then(|| raw_exit_code.unwrap_or(0));
    let metadata = ProcessLifecycleMetadata {
        event_id,
        kind,
        session_id,
        loop_id,
        process_handle,
        origin_execution_id,
        state,
        process_created_at,
        process_started_at,
        process_finished_at,
        exit_code,
        reason,
        diagnostic,
    };
    Ok((metadata, orphan_exit_code))
}

fn decode_event(mut obj: Object<'_>, ty: &'static str) -> Result<SessionEvent, DecodeError> {
    if ty == NotificationConsumed::TYPE || ty == NotificationAbandoned::TYPE {
        obj.refuse_unknown(CONSUMED_KEYS)?;
        let cause = CommandId::from_uuid(obj.uuid("cause")?);
        let event_id = EventId::from_uuid(obj.uuid("event_id")?);
        let loop_id = LoopId::from_uuid(obj.uuid("loop_id")?);
        let session_id = SessionId::from_uuid(obj.uuid("session_id")?);
        for (nil, field) in [
            (cause.is_nil(), "cause"),
            (event_id.is_nil(), "event_id"),
            (loop_id.is_nil(), "loop_id"),
            (session_id.is_nil(), "session_id"),
        ] {
            if nil {
                return Err(DecodeError::MissingField { field });
            }
        }
        let consumed = ty == NotificationConsumed::TYPE;
        let derived = if consumed {
            consumed_event_id(cause)
        } else {
            abandoned_event_id(cause)
        };
        if event_id != derived {
            return Err(DecodeError::EventIdMismatch);
        }
        return Ok(if consumed {
            NotificationConsumed::new(session_id, loop_id, cause).into()
        } else {
            NotificationAbandoned::new(session_id, loop_id, cause).into()
        });
    }
    if ty == SessionEnded::TYPE {
        obj.refuse_unknown(ENDED_KEYS)?;
        let event_id = EventId::from_uuid(obj.uuid("event_id")?);
        let session_id = SessionId::from_uuid(obj.uuid("session_id")?);
        for (nil, field) in [
            (event_id.is_nil(), "event_id"),
            (session_id.is_nil(), "session_id"),
        ] {
            if nil {
                return Err(DecodeError::MissingField { field });
            }
        }
        if event_id != ended_event_id(session_id) {
            return Err(DecodeError::EventIdMismatch);
        }
        return Ok(SessionEnded::new(session_id).into());
    }
    obj.refuse_unknown(LIFECYCLE_KEYS)?;
    let inner = obj.object("metadata")?;
    let (metadata, orphan_exit_code) = decode_metadata(inner)?;
    if metadata.kind.event_type() != ty {
        return Err(DecodeError::InvalidValue {
            field: "kind",
            expected: "the kind named by `type`",
        });
    }
    metadata.validate_wire(orphan_exit_code)?;
    Ok(SessionEvent::Lifecycle(metadata))
}
