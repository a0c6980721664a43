//! The strict, deterministic JSON wire codec.
//!
//! Encoding is hand-written so that the bytes are fixed by this file alone: the same
//! value always yields the same bytes, which the journal's duplicate check relies on.
//! Decoding parses into a JSON tree that refuses duplicate keys, then walks it field by
//! field, refusing anything the wire format does not name.

use std::fmt;

use jiff::Timestamp;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::event::{NotificationConsumed, SessionEvent, consumed_event_id};
use crate::id::{CommandId, EventId, ExecutionId, LoopId, SessionId, parse_canonical};
use crate::lifecycle::{ProcessLifecycleMetadata, ZERO_TIME};
use crate::notification::{ProcessCompletionNotification, ProcessNotification};
use crate::state::{ProcessLifecycleKind, ProcessLifecycleState, ProcessTerminalReason};
use crate::validation::ValidationError;

/// The only wire version this crate reads and writes.
pub const WIRE_VERSION: u64 = 1;

/// The largest document the decoder accepts: 16 MiB.
pub const MAX_DECODE_BYTES: usize = 16 * 1024 * 1024;

/// Why a document could not be decoded. Decoding fails closed: nothing partial is
/// returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input is larger than [`MAX_DECODE_BYTES`].
    #[error("document is {len} bytes, over the {max}-byte limit")]
    TooLarge {
        /// The input's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The input is not well-formed JSON, or an object repeats a key.
    #[error("malformed JSON: {message}")]
    Syntax {
        /// The parser's description, with line and column.
        message: String,
    },
    /// The document, or the object at `field`, is not a JSON object.
    #[error("`{field}` is not a JSON object")]
    NotAnObject {
        /// The field (`""` for the document itself).
        field: &'static str,
    },
    /// The document has no `type`.
    #[error("missing `type`")]
    MissingType,
    /// The document's `type` is not one this codec knows (or not the expected one).
    #[error("unknown `type` {found}")]
    UnknownType {
        /// The `type` found, as JSON.
        found: String,
    },
    /// The document's `v` is missing or not [`WIRE_VERSION`].
    #[error("unsupported version `v`: {found}")]
    UnsupportedVersion {
        /// The `v` found, as JSON (or `missing`).
        found: String,
    },
    /// A key the wire format does not define (dotted path, e.g. `notification.pid`).
    #[error("unknown field `{field}`")]
    UnknownField {
        /// The offending key's path.
        field: String,
    },
    /// A required field is absent.
    #[error("missing field `{field}`")]
    MissingField {
        /// The field.
        field: &'static str,
    },
    /// A field holds a value of the wrong JSON type or shape (e.g. a non-canonical UUID).
    #[error("invalid value for `{field}`: expected {expected}")]
    InvalidValue {
        /// The field.
        field: &'static str,
        /// What the field must hold.
        expected: &'static str,
    },
    /// A closed enum field holds an unknown code.
    #[error("unknown code {found} for `{field}`")]
    UnknownCode {
        /// The field.
        field: &'static str,
        /// The value found, as JSON.
        found: String,
    },
    /// The envelope's `command_id` differs from the notification's.
    #[error("`command_id` differs from `notification.command_id`")]
    CommandIdMismatch,
    /// A `NotificationConsumed` event's `event_id` is not the one derived from `cause`.
    #[error("`event_id` is not the ID derived from `cause`")]
    EventIdMismatch,
    /// The decoded value failed validation.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
}

impl DecodeError {
    /// The wire field the error names, if it names one.
    #[must_use]
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::NotAnObject { field } if !field.is_empty() => Some(field),
            Self::MissingType | Self::UnknownType { .. } => Some("type"),
            Self::UnsupportedVersion { .. } => Some("v"),
            Self::UnknownField { field } => Some(field),
            Self::MissingField { field }
            | Self::InvalidValue { field, .. }
            | Self::UnknownCode { field, .. } => Some(field),
            Self::CommandIdMismatch => Some("command_id"),
            Self::EventIdMismatch => Some("event_id"),
            Self::Invalid(e) => Some(e.field().as_str()),
            Self::TooLarge { .. } | Self::Syntax { .. } | Self::NotAnObject { .. } => None,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Encoding

/// A compact JSON object writer. Keys are written in the order the caller gives.
struct ObjectWriter<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> ObjectWriter<'a> {
    fn begin(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        Self { out, first: true }
    }

    fn key(&mut self, key: &str) -> &mut Vec<u8> {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        write_str(self.out, key);
        self.out.push(b':');
        self.out
    }

    fn str(&mut self, key: &str, value: &str) {
        let out = self.key(key);
        write_str(out, value);
    }

    fn uuid(&mut self, key: &str, value: &Uuid) {
        let mut buf = Uuid::encode_buffer();
        let s = value.hyphenated().encode_lower(&mut buf);
        self.str(key, s);
    }

    /// Writes a UUID unless it is nil (nil means absent and is omitted).
    fn id(&mut self, key: &str, value: &Uuid) {
        if !value.is_nil() {
            self.uuid(key, value);
        }
    }

    fn raw(&mut self, key: &str, value: impl fmt::Display) {
        use std::io::Write as _;
        let out = self.key(key);
        // ok-by-construction: writing into a Vec never fails.
        let _ = write!(out, "{value}");
    }

    fn time(&mut self, key: &str, value: Timestamp) {
        self.str(key, &value.to_string());
    }

    fn end(self) {
        self.out.push(b'}');
    }
}

/// Writes a JSON string with the same escapes as `serde_json`.
fn write_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if esc.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xf)]);
        } else {
            out.extend_from_slice(esc);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

fn write_notification(out: &mut Vec<u8>, n: &ProcessCompletionNotification) {
    let mut w = ObjectWriter::begin(out);
    w.id("command_id", n.command_id.as_uuid());
    w.id("session_id", n.session_id.as_uuid());
    w.id("loop_id", n.loop_id.as_uuid());
    w.str("process_handle", &n.process_handle);
    w.raw("state", n.state.code());
    w.raw("reason", n.reason.code());
    w.end();
}

fn write_metadata(out: &mut Vec<u8>, m: &ProcessLifecycleMetadata) {
    let mut w = ObjectWriter::begin(out);
    w.id("event_id", m.event_id.as_uuid());
    w.raw("kind", m.kind.code());
    w.id("session_id", m.session_id.as_uuid());
    w.id("loop_id", m.loop_id.as_uuid());
    w.str("process_handle", &m.process_handle);
    w.id("origin_execution_id", m.origin_execution_id.as_uuid());
    w.raw("state", m.state.code());
    w.time("process_created_at", m.process_created_at);
    if let Some(t) = m.process_started_at {
        w.time("process_started_at", t);
    }
    if let Some(t) = m.process_finished_at {
        w.time("process_finished_at", t);
    }
    if let Some(code) = m.exit_code {
        w.raw("has_exit_code", true);
        w.raw("exit_code", code);
    }
    if let Some(r) = m.reason {
        w.raw("reason", r.code());
    }
    if let Some(d) = &m.diagnostic {
        w.str("diagnostic", d);
    }
    w.end();
}

impl ProcessCompletionNotification {
    /// The notification's wire form (fields in wire order; nil IDs omitted).
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        write_notification(&mut out, self);
        out
    }

    /// Decodes and validates a notification.
    ///
    /// # Errors
    ///
    /// A [`DecodeError`] naming what is wrong; see the module documentation.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let obj = parse_object(bytes)?;
        let n = decode_notification(obj, "")?;
        n.validate()?;
        Ok(n)
    }
}

impl ProcessNotification {
    /// The command's journal wire form, keys sorted:
    /// `{"command_id":…,"notification":{…},"type":"ProcessNotification","v":1}`.
    ///
    /// ```
    /// # use notify_types::*;
    /// let n = ProcessCompletionNotification {
    ///     command_id: CommandId::new(),
    ///     session_id: SessionId::new(),
    ///     loop_id: LoopId::new(),
    ///     process_handle: "build-42".into(),
    ///     state: ProcessLifecycleState::Killed,
    ///     reason: ProcessTerminalReason::OutputLimit,
    /// };
    /// let cmd = ProcessNotification::new(n);
    /// let bytes = cmd.encode();
    /// assert_eq!(ProcessNotification::decode(&bytes)?, cmd);
    /// # Ok::<(), DecodeError>(())
    /// ```
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(320);
        let mut w = ObjectWriter::begin(&mut out);
        w.id("command_id", self.command_id().as_uuid());
        write_notification(w.key("notification"), self.notification());
        w.str("type", Self::TYPE);
        w.raw("v", WIRE_VERSION);
        w.end();
        out
    }

    /// Decodes a command strictly: wrong `type` or `v`, an unknown key at either level,
    /// a mismatched `command_id` or an invalid notification is an error.
    ///
    /// # Errors
    ///
    /// A [`DecodeError`] naming what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut obj = parse_object(bytes)?;
        expect_type(&mut obj, &[Self::TYPE])?;
        decode_command(obj)
    }
}

impl SessionEvent {
    /// The event's journal wire form (keys sorted, like the command's).
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(512);
        let mut w = ObjectWriter::begin(&mut out);
        match self {
            Self::Lifecycle(m) => {
                write_metadata(w.key("metadata"), m);
                w.str("type", m.kind.event_type());
            }
            Self::NotificationConsumed(c) => {
                w.id("cause", c.cause().as_uuid());
                w.id("event_id", c.event_id().as_uuid());
                w.id("loop_id", c.loop_id().as_uuid());
                w.id("session_id", c.session_id().as_uuid());
                w.str("type", NotificationConsumed::TYPE);
            }
        }
        w.raw("v", WIRE_VERSION);
        w.end();
        out
    }

    /// Decodes an event strictly (lifecycle metadata is validated).
    ///
    /// # Errors
    ///
    /// A [`DecodeError`] naming what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut obj = parse_object(bytes)?;
        let ty = expect_type(&mut obj, EVENT_TYPES)?;
        decode_event(obj, ty)
    }
}

const EVENT_TYPES: &[&str] = &[
    "ProcessStarted",
    "ProcessBackgrounded",
    "ProcessCompleted",
    "ProcessStopRequested",
    "ProcessLost",
    NotificationConsumed::TYPE,
];

/// One journal record: the completion command or a session event.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum JournalRecord {
    /// A completion notification command, keyed by its command ID.
    Command(ProcessNotification),
    /// A session event, keyed by its event ID.
    Event(SessionEvent),
}

impl JournalRecord {
    /// The idempotency key: the command ID or the event ID.
    #[must_use]
    pub fn key(&self) -> Uuid {
        match self {
            Self::Command(c) => *c.command_id().as_uuid(),
            Self::Event(e) => *e.event_id().as_uuid(),
        }
    }

    /// The owning session.
    #[must_use]
    pub fn session_id(&self) -> SessionId {
        match self {
            Self::Command(c) => c.session_id(),
            Self::Event(e) => e.session_id(),
        }
    }

    /// The wire `type`.
    #[must_use]
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Command(_) => ProcessNotification::TYPE,
            Self::Event(e) => e.type_name(),
        }
    }

    /// Checks that the record would decode: the command's notification or the event's
    /// metadata validates, and a consumption names non-nil IDs. Journals call this
    /// before writing, so that nothing undecodable is ever made durable.
    ///
    /// # Errors
    ///
    /// A [`DecodeError`] naming the first failing field, as decoding would.
    pub fn validate(&self) -> Result<(), DecodeError> {
        match self {
            Self::Command(c) => c.validate().map_err(DecodeError::from),
            Self::Event(SessionEvent::Lifecycle(m)) => m.validate().map_err(DecodeError::from),
            Self::Event(SessionEvent::NotificationConsumed(c)) => {
                for (nil, field) in [
                    (c.cause().is_nil(), "cause"),
                    (c.loop_id().is_nil(), "loop_id"),
                    (c.session_id().is_nil(), "session_id"),
                ] {
                    if nil {
                        return Err(DecodeError::MissingField { field });
                    }
                }
                Ok(())
            }
        }
    }

    /// The record's deterministic wire form.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Self::Command(c) => c.encode(),
            Self::Event(e) => e.encode(),
        }
    }

    /// Decodes any record, dispatching on its `type`.
    ///
    /// # Errors
    ///
    /// A [`DecodeError`] naming what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut obj = parse_object(bytes)?;
        let ty = expect_type(&mut obj, ALL_TYPES)?;
        if ty == ProcessNotification::TYPE {
            decode_command(obj).map(Self::Command)
        } else {
            decode_event(obj, ty).map(Self::Event)
        }
    }
}

const ALL_TYPES: &[&str] = &[
    ProcessNotification::TYPE,
    "ProcessStarted",
    "ProcessBackgrounded",
    "ProcessCompleted",
    "ProcessStopRequested",
    "ProcessLost",
    NotificationConsumed::TYPE,
];

impl From<ProcessNotification> for JournalRecord {
    fn from(c: ProcessNotification) -> Self {
        Self::Command(c)
    }
}

impl From<SessionEvent> for JournalRecord {
    fn from(e: SessionEvent) -> Self {
        Self::Event(e)
    }
}

// ---------------------------------------------------------------------------------------
// Decoding

/// A JSON value parsed by a deserializer that refuses duplicate object keys (which
/// `serde_json::Value` would silently collapse to the last one).
struct NoDup(Value);

impl<'de> Deserialize<'de> for NoDup {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NoDupVisitor)
    }
}

struct NoDupVisitor;

impl<'de> Visitor<'de> for NoDupVisitor {
    type Value = NoDup;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<NoDup, E> {
        Ok(NoDup(Value::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<NoDup, E> {
        Ok(NoDup(Value::from(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<NoDup, E> {
        Ok(NoDup(Value::from(v)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<NoDup, E> {
        Ok(NoDup(Value::from(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<NoDup, E> {
        Ok(NoDup(Value::String(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<NoDup, E> {
        Ok(NoDup(Value::String(v)))
    }
    fn visit_unit<E>(self) -> Result<NoDup, E> {
        Ok(NoDup(Value::Null))
    }
    fn visit_none<E>(self) -> Result<NoDup, E> {
        Ok(NoDup(Value::Null))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NoDup, A::Error> {
        let mut items = Vec::new();
        while let Some(NoDup(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(NoDup(Value::Array(items)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NoDup, A::Error> {
        let mut obj = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if obj.contains_key(&key) {
                return Err(de::Error::custom(format_args!("duplicate key `{key}`")));
            }
            let NoDup(v) = map.next_value()?;
            obj.insert(key, v);
        }
        Ok(NoDup(Value::Object(obj)))
    }
}

/// A decoded JSON object being consumed field by field.
struct Object {
    map: Map<String, Value>,
    /// The path prefix for unknown-field errors (`""` or `"notification."`).
    prefix: &'static str,
}

fn parse_object(bytes: &[u8]) -> Result<Object, DecodeError> {
    if bytes.len() > MAX_DECODE_BYTES {
        return Err(DecodeError::TooLarge {
            len: bytes.len(),
            max: MAX_DECODE_BYTES,
        });
    }
    let NoDup(value) = serde_json::from_slice(bytes).map_err(|e| DecodeError::Syntax {
        message: e.to_string(),
    })?;
    match value {
        Value::Object(map) => Ok(Object { map, prefix: "" }),
        _ => Err(DecodeError::NotAnObject { field: "" }),
    }
}

/// Checks `type` against `allowed` and `v` against [`WIRE_VERSION`]; returns the type.
fn expect_type(obj: &mut Object, allowed: &[&'static str]) -> Result<&'static str, DecodeError> {
    let ty =
        match obj.map.remove("type") {
            None => return Err(DecodeError::MissingType),
            Some(Value::String(s)) => {
                allowed.iter().find(|t| **t == s).copied().ok_or_else(|| {
                    DecodeError::UnknownType {
                        found: Value::String(s).to_string(),
                    }
                })?
            }
            Some(other) => {
                return Err(DecodeError::UnknownType {
                    found: other.to_string(),
                });
            }
        };
    match obj.map.remove("v") {
        Some(Value::Number(n)) if n.as_u64() == Some(WIRE_VERSION) => Ok(ty),
        Some(other) => Err(DecodeError::UnsupportedVersion {
            found: other.to_string(),
        }),
        None => Err(DecodeError::UnsupportedVersion {
            found: "missing".to_owned(),
        }),
    }
}

impl Object {
    /// Refuses any key not yet taken. Run before field decoding so that an unknown key
    /// (say, `output`) is reported even when another field is also wrong.
    fn refuse_unknown(&self, known: &[&str]) -> Result<(), DecodeError> {
        match self.map.keys().find(|k| !known.contains(&k.as_str())) {
            Some(k) => Err(DecodeError::UnknownField {
                field: format!("{}{k}", self.prefix),
            }),
            None => Ok(()),
        }
    }

    fn take(&mut self, field: &'static str) -> Option<Value> {
        self.map.remove(field)
    }

    fn uuid(&mut self, field: &'static str) -> Result<Uuid, DecodeError> {
        match self.take(field) {
            None => Ok(Uuid::nil()),
            Some(Value::String(s)) => parse_canonical(&s).map_err(|_| DecodeError::InvalidValue {
                field,
                expected: "a lowercase hyphenated UUID",
            }),
            Some(_) => Err(DecodeError::InvalidValue {
                field,
                expected: "a UUID string",
            }),
        }
    }

    fn string(&mut self, field: &'static str) -> Result<Option<String>, DecodeError> {
        match self.take(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(DecodeError::InvalidValue {
                field,
                expected: "a string",
            }),
        }
    }

    fn code(&mut self, field: &'static str) -> Result<Option<u64>, DecodeError> {
        match self.take(field) {
            None => Ok(None),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(c) => Ok(Some(c)),
                None => Err(DecodeError::UnknownCode {
                    field,
                    found: n.to_string(),
                }),
            },
            Some(other) => Err(DecodeError::UnknownCode {
                field,
                found: other.to_string(),
            }),
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
        match self.string(field)? {
            None => Ok(None),
            Some(s) if is_rfc3339_shape(&s) => {
                s.parse::<Timestamp>()
                    .map(Some)
                    .map_err(|_| DecodeError::InvalidValue {
                        field,
                        expected: "an RFC 3339 timestamp",
                    })
            }
            Some(_) => Err(DecodeError::InvalidValue {
                field,
                expected: "an RFC 3339 timestamp",
            }),
        }
    }

    fn bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        match self.take(field) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(b),
            Some(_) => Err(DecodeError::InvalidValue {
                field,
                expected: "a boolean",
            }),
        }
    }

    fn i32(&mut self, field: &'static str) -> Result<Option<i32>, DecodeError> {
        match self.take(field) {
            None => Ok(None),
            Some(Value::Number(n)) => n
                .as_i64()
                .and_then(|v| i32::try_from(v).ok())
                .map(Some)
                .ok_or(DecodeError::InvalidValue {
                    field,
                    expected: "a 32-bit integer",
                }),
            Some(_) => Err(DecodeError::InvalidValue {
                field,
                expected: "a 32-bit integer",
            }),
        }
    }

    fn object(&mut self, field: &'static str, prefix: &'static str) -> Result<Object, DecodeError> {
        match self.take(field) {
            None => Err(DecodeError::MissingField { field }),
            Some(Value::Object(map)) => Ok(Object { map, prefix }),
            Some(_) => Err(DecodeError::NotAnObject { field }),
        }
    }
}

/// Whether `s` has the RFC 3339 `date-time` shape:
/// `YYYY-MM-DDTHH:MM:SS[.fraction]` then `Z` or `±HH:MM`, with `T`/`Z` in either case
/// and at most nine fraction digits. jiff alone would also accept other ISO 8601 and
/// Temporal spellings (basic format, a space separator, bracketed zones); the wire
/// format is RFC 3339 only. Ranges (month 13, second 61) are left to jiff.
fn is_rfc3339_shape(s: &str) -> bool {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let at = |i: usize, c: &[u8]| b.get(i).is_some_and(|x| c.contains(x));
    if !(digits(0..4) && at(4, b"-") && digits(5..7) && at(7, b"-") && digits(8..10)) {
        return false;
    }
    if !(at(10, b"Tt")
        && digits(11..13)
        && at(13, b":")
        && digits(14..16)
        && at(16, b":")
        && digits(17..19))
    {
        return false;
    }
    let mut i = 19;
    if at(i, b".") {
        let frac = b[i + 1..].iter().take_while(|d| d.is_ascii_digit()).count();
        if frac == 0 || frac > 9 {
            return false;
        }
        i += 1 + frac;
    }
    match b.get(i..) {
        Some([b'Z' | b'z']) => true,
        Some([b'+' | b'-', ..]) => {
            b.len() == i + 6 && digits(i + 1..i + 3) && at(i + 3, b":") && digits(i + 4..i + 6)
        }
        _ => false,
    }
}

const NOTIFICATION_FIELDS: &[&str] = &[
    "command_id",
    "session_id",
    "loop_id",
    "process_handle",
    "state",
    "reason",
];

fn decode_notification(
    mut obj: Object,
    prefix: &'static str,
) -> Result<ProcessCompletionNotification, DecodeError> {
    obj.prefix = prefix;
    obj.refuse_unknown(NOTIFICATION_FIELDS)?;
    Ok(ProcessCompletionNotification {
        command_id: CommandId::from_uuid(obj.uuid("command_id")?),
        session_id: SessionId::from_uuid(obj.uuid("session_id")?),
        loop_id: LoopId::from_uuid(obj.uuid("loop_id")?),
        process_handle: obj.string("process_handle")?.unwrap_or_default(),
        state: obj.required_enum("state", ProcessLifecycleState::from_code)?,
        reason: obj.required_enum("reason", ProcessTerminalReason::from_code)?,
    })
}

fn decode_command(mut obj: Object) -> Result<ProcessNotification, DecodeError> {
    obj.refuse_unknown(&["command_id", "notification"])?;
    let command_id = CommandId::from_uuid(obj.uuid("command_id")?);
    let inner = obj.object("notification", "notification.")?;
    let notification = decode_notification(inner, "notification.")?;
    if command_id != notification.command_id {
        return Err(DecodeError::CommandIdMismatch);
    }
    notification.validate()?;
    Ok(ProcessNotification::new(notification))
}

const METADATA_FIELDS: &[&str] = &[
    "event_id",
    "kind",
    "session_id",
    "loop_id",
    "process_handle",
    "origin_execution_id",
    "state",
    "process_created_at",
    "process_started_at",
    "process_finished_at",
    "has_exit_code",
    "exit_code",
    "reason",
    "diagnostic",
];

fn decode_metadata(mut obj: Object) -> Result<(ProcessLifecycleMetadata, bool), DecodeError> {
    obj.refuse_unknown(METADATA_FIELDS)?;
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

fn decode_event(mut obj: Object, ty: &'static str) -> Result<SessionEvent, DecodeError> {
    if ty == NotificationConsumed::TYPE {
        obj.refuse_unknown(&["cause", "event_id", "loop_id", "session_id"])?;
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
        if event_id != consumed_event_id(cause) {
            return Err(DecodeError::EventIdMismatch);
        }
        return Ok(SessionEvent::NotificationConsumed(
            NotificationConsumed::new(session_id, loop_id, cause),
        ));
    }
    obj.refuse_unknown(&["metadata"])?;
    let inner = obj.object("metadata", "metadata.")?;
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
