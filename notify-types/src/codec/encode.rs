//! The encoder: hand-written so that the bytes are fixed by this file alone.

use std::fmt;

use jiff::Timestamp;
use uuid::Uuid;

use crate::event::{NotificationAbandoned, NotificationConsumed, SessionEnded, SessionEvent};
use crate::lifecycle::ProcessLifecycleMetadata;
use crate::notification::{ProcessCompletionNotification, ProcessNotification};

use super::{JournalRecord, WIRE_VERSION};

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
pub(super) fn write_str(out: &mut Vec<u8>, s: &str) {
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
            Self::NotificationAbandoned(a) => {
                w.id("cause", a.cause().as_uuid());
                w.id("event_id", a.event_id().as_uuid());
                w.id("loop_id", a.loop_id().as_uuid());
                w.id("session_id", a.session_id().as_uuid());
                w.str("type", NotificationAbandoned::TYPE);
            }
            Self::SessionEnded(e) => {
                w.id("event_id", e.event_id().as_uuid());
                w.id("session_id", e.session_id().as_uuid());
                w.str("type", SessionEnded::TYPE);
            }
        }
        w.raw("v", WIRE_VERSION);
        w.end();
        out
    }
}

impl JournalRecord {
    /// The record's deterministic wire form.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Self::Command(c) => c.encode(),
            Self::Event(e) => e.encode(),
        }
    }
}
