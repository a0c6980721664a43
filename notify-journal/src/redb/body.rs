//! The compact binary frame body: a journal record as the new storage format keeps it.
//!
//! The canonical wire encoding stays the codec's JSON (`JournalRecord::encode`); this
//! body is the storage form only. It is deterministic and injective — two records are
//! equal exactly when their bodies are byte-equal — so the duplicate check can compare
//! bodies. Decoding accepts only the canonical body of a valid record: whenever
//! [`decode_body`] returns a record, [`encode_body`] of it gives back the same bytes.
//!
//! # Layout
//!
//! Every integer is big-endian. A UUID is its 16 bytes (`u128` big-endian); an enum is
//! its one-byte wire code; a string is a length (LEB128 varint, minimal) then UTF-8
//! bytes; a timestamp is `i64` seconds then `u32` nanoseconds in `0..1e9` (the
//! Euclidean split, exact for every `jiff::Timestamp`). The first byte is the record's
//! tag, which also versions the body: a changed layout takes a new tag.
//!
//! ```text
//! tag 1, command:      command_id session_id loop_id state reason handle
//! tag 2, lifecycle:    flags event_id session_id loop_id origin_execution_id kind
//!                      state created [started] [finished] [exit_code:i32] [reason]
//!                      handle [diagnostic]
//! tag 3, consumption:  session_id loop_id cause          (event_id is derived)
//! tag 4, abandonment:  session_id loop_id cause          (event_id is derived)
//! tag 5, session end:  session_id                        (event_id is derived)
//! ```
//!
//! The lifecycle flags byte says which optional fields follow (bit 0 started, 1
//! finished, 2 exit code, 3 reason, 4 diagnostic); other bits are zero.

use crate::error::Corruption;
use notify_types::{
    CommandId, DecodeError, EventId, ExecutionId, JournalRecord, LoopId, NotificationAbandoned,
    NotificationConsumed, ProcessCompletionNotification, ProcessLifecycleKind,
    ProcessLifecycleMetadata, ProcessLifecycleState, ProcessNotification, ProcessTerminalReason,
    SessionEnded, SessionEvent, SessionId, Timestamp, Uuid,
};

const TAG_COMMAND: u8 = 1;
const TAG_LIFECYCLE: u8 = 2;
const TAG_CONSUMED: u8 = 3;
const TAG_ABANDONED: u8 = 4;
const TAG_ENDED: u8 = 5;

const HAS_STARTED: u8 = 1 << 0;
const HAS_FINISHED: u8 = 1 << 1;
const HAS_EXIT_CODE: u8 = 1 << 2;
const HAS_REASON: u8 = 1 << 3;
const HAS_DIAGNOSTIC: u8 = 1 << 4;
const ALL_FLAGS: u8 = HAS_STARTED | HAS_FINISHED | HAS_EXIT_CODE | HAS_REASON | HAS_DIAGNOSTIC;

const NANOS_PER_SECOND: i128 = 1_000_000_000;

/// Why bytes are not the body of a valid record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum BodyError {
    /// The body ends inside `field`.
    #[error("body ends inside `{field}`")]
    Truncated {
        /// The field being read.
        field: &'static str,
    },
    /// The first byte is not a known record tag.
    #[error("unknown record tag {tag}")]
    UnknownTag {
        /// The tag found.
        tag: u8,
    },
    /// A closed enum field holds an unknown code.
    #[error("unknown code {code} for `{field}`")]
    UnknownCode {
        /// The field.
        field: &'static str,
        /// The code found.
        code: u8,
    },
    /// The lifecycle flags byte sets a bit that names no field.
    #[error("unknown lifecycle flags {flags:#04x}")]
    UnknownFlags {
        /// The flags byte.
        flags: u8,
    },
    /// A length prefix is not a minimal LEB128 varint, or overflows.
    #[error("malformed length of `{field}`")]
    BadLength {
        /// The field.
        field: &'static str,
    },
    /// A string field is not UTF-8.
    #[error("`{field}` is not UTF-8")]
    InvalidUtf8 {
        /// The field.
        field: &'static str,
    },
    /// A timestamp's nanoseconds are not below one second, or the instant is outside
    /// the representable range.
    #[error("`{field}` is not a representable timestamp")]
    BadTimestamp {
        /// The field.
        field: &'static str,
    },
    /// Bytes follow the record.
    #[error("{count} bytes after the record")]
    TrailingBytes {
        /// How many.
        count: usize,
    },
    /// The body decodes to a record that fails validation (which the journal never
    /// writes).
    #[error("the body holds an invalid record")]
    Invalid(#[source] DecodeError),
}

// ---------------------------------------------------------------------------------------
// Encoding

/// Appends the body of `record` to `out`.
pub(crate) fn encode_body(record: &JournalRecord, out: &mut Vec<u8>) {
    match record {
        JournalRecord::Command(c) => {
            let n = c.notification();
            out.push(TAG_COMMAND);
            put_uuid(out, c.command_id().as_uuid());
            put_uuid(out, n.session_id.as_uuid());
            put_uuid(out, n.loop_id.as_uuid());
            out.push(n.state.code());
            out.push(n.reason.code());
            put_str(out, &n.process_handle);
        }
        JournalRecord::Event(SessionEvent::Lifecycle(m)) => {
            let flags = [
                (m.process_started_at.is_some(), HAS_STARTED),
                (m.process_finished_at.is_some(), HAS_FINISHED),
                (m.exit_code.is_some(), HAS_EXIT_CODE),
                (m.reason.is_some(), HAS_REASON),
                (m.diagnostic.is_some(), HAS_DIAGNOSTIC),
            ]
            .into_iter()
            .filter(|(set, _)| *set)
            .fold(0, |acc, (_, bit)| acc | bit);
            out.push(TAG_LIFECYCLE);
            out.push(flags);
            put_uuid(out, m.event_id.as_uuid());
            put_uuid(out, m.session_id.as_uuid());
            put_uuid(out, m.loop_id.as_uuid());
            put_uuid(out, m.origin_execution_id.as_uuid());
            out.push(m.kind.code());
            out.push(m.state.code());
            put_time(out, m.process_created_at);
            if let Some(t) = m.process_started_at {
                put_time(out, t);
            }
            if let Some(t) = m.process_finished_at {
                put_time(out, t);
            }
            if let Some(code) = m.exit_code {
                out.extend_from_slice(&code.to_be_bytes());
            }
            if let Some(r) = m.reason {
                out.push(r.code());
            }
            put_str(out, &m.process_handle);
            if let Some(d) = &m.diagnostic {
                put_str(out, d);
            }
        }
        JournalRecord::Event(SessionEvent::NotificationConsumed(c)) => {
            out.push(TAG_CONSUMED);
            put_uuid(out, c.session_id().as_uuid());
            put_uuid(out, c.loop_id().as_uuid());
            put_uuid(out, c.cause().as_uuid());
        }
        JournalRecord::Event(SessionEvent::NotificationAbandoned(a)) => {
            out.push(TAG_ABANDONED);
            put_uuid(out, a.session_id().as_uuid());
            put_uuid(out, a.loop_id().as_uuid());
            put_uuid(out, a.cause().as_uuid());
        }
        JournalRecord::Event(SessionEvent::SessionEnded(e)) => {
            out.push(TAG_ENDED);
            put_uuid(out, e.session_id().as_uuid());
        }
    }
}

fn put_uuid(out: &mut Vec<u8>, id: &Uuid) {
    out.extend_from_slice(&id.as_u128().to_be_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    let mut len = s.len() as u64;
    while len >= 0x80 {
        // ok: the mask keeps the low seven bits, which fit a byte.
        out.push((len & 0x7f) as u8 | 0x80);
        len >>= 7;
    }
    // ok: the loop leaves `len` below 0x80.
    out.push(len as u8);
    out.extend_from_slice(s.as_bytes());
}

fn put_time(out: &mut Vec<u8>, t: Timestamp) {
    let nanos = t.as_nanosecond();
    let secs = nanos.div_euclid(NANOS_PER_SECOND);
    let sub = nanos.rem_euclid(NANOS_PER_SECOND);
    // ok: jiff's range is about ±2.5e11 seconds, far inside i64; `sub` is below 1e9.
    out.extend_from_slice(&(secs as i64).to_be_bytes());
    out.extend_from_slice(&(sub as u32).to_be_bytes());
}

// ---------------------------------------------------------------------------------------
// Decoding

/// Decodes a body made by [`encode_body`]. Never panics, and allocates at most the
/// string bytes the input holds.
///
/// # Errors
///
/// A [`BodyError`] saying what is wrong with the bytes.
pub(crate) fn decode_body(bytes: &[u8]) -> Result<JournalRecord, BodyError> {
    let mut r = Reader { rest: bytes };
    let record = match r.u8("tag")? {
        TAG_COMMAND => {
            let command_id = CommandId::from_uuid(r.uuid("command_id")?);
            let session_id = SessionId::from_uuid(r.uuid("session_id")?);
            let loop_id = LoopId::from_uuid(r.uuid("loop_id")?);
            let state = r.code("state", ProcessLifecycleState::from_code)?;
            let reason = r.code("reason", ProcessTerminalReason::from_code)?;
            let process_handle = r.string("process_handle")?;
            JournalRecord::Command(ProcessNotification::new(ProcessCompletionNotification {
                command_id,
                session_id,
                loop_id,
                process_handle,
                state,
                reason,
            }))
        }
        TAG_LIFECYCLE => JournalRecord::Event(SessionEvent::Lifecycle(r.lifecycle()?)),
        tag @ (TAG_CONSUMED | TAG_ABANDONED) => {
            let session_id = SessionId::from_uuid(r.uuid("session_id")?);
            let loop_id = LoopId::from_uuid(r.uuid("loop_id")?);
            let cause = CommandId::from_uuid(r.uuid("cause")?);
            JournalRecord::Event(if tag == TAG_CONSUMED {
                NotificationConsumed::new(session_id, loop_id, cause).into()
            } else {
                NotificationAbandoned::new(session_id, loop_id, cause).into()
            })
        }
        TAG_ENDED => {
            let session_id = SessionId::from_uuid(r.uuid("session_id")?);
            JournalRecord::Event(SessionEnded::new(session_id).into())
        }
        tag => return Err(BodyError::UnknownTag { tag }),
    };
    if !r.rest.is_empty() {
        return Err(BodyError::TrailingBytes {
            count: r.rest.len(),
        });
    }
    record.validate().map_err(BodyError::Invalid)?;
    Ok(record)
}

/// The unread part of a body.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], BodyError> {
        if self.rest.len() < n {
            return Err(BodyError::Truncated { field });
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], BodyError> {
        let bytes = self.take(N, field)?;
        // ok: `take` returned exactly N bytes.
        bytes.try_into().map_err(|_| BodyError::Truncated { field })
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, BodyError> {
        let [b] = self.array(field)?;
        Ok(b)
    }

    fn uuid(&mut self, field: &'static str) -> Result<Uuid, BodyError> {
        Ok(Uuid::from_u128(u128::from_be_bytes(self.array(field)?)))
    }

    fn code<T>(
        &mut self,
        field: &'static str,
        from_code: fn(u64) -> Option<T>,
    ) -> Result<T, BodyError> {
        let code = self.u8(field)?;
        from_code(u64::from(code)).ok_or(BodyError::UnknownCode { field, code })
    }

    /// A minimal LEB128 length, checked against what is left before anything is
    /// allocated for it.
    fn len(&mut self, field: &'static str) -> Result<usize, BodyError> {
        let mut value: u64 = 0;
        for i in 0..10 {
            let byte = self.u8(field)?;
            let bits = u64::from(byte & 0x7f);
            let shift = 7 * i;
            if shift == 63 && bits > 1 {
                return Err(BodyError::BadLength { field });
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                // A zero last byte after the first is a longer spelling of a shorter
                // length: refused, so that every length has one encoding.
                if i > 0 && byte == 0 {
                    return Err(BodyError::BadLength { field });
                }
                return usize::try_from(value).map_err(|_| BodyError::BadLength { field });
            }
        }
        Err(BodyError::BadLength { field })
    }

    fn string(&mut self, field: &'static str) -> Result<String, BodyError> {
        let len = self.len(field)?;
        let bytes = self.take(len, field)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| BodyError::InvalidUtf8 { field })
    }

    fn time(&mut self, field: &'static str) -> Result<Timestamp, BodyError> {
        let secs = i64::from_be_bytes(self.array(field)?);
        let nanos = u32::from_be_bytes(self.array(field)?);
        if i128::from(nanos) >= NANOS_PER_SECOND {
            return Err(BodyError::BadTimestamp { field });
        }
        let total = i128::from(secs) * NANOS_PER_SECOND + i128::from(nanos);
        Timestamp::from_nanosecond(total).map_err(|_| BodyError::BadTimestamp { field })
    }

    fn lifecycle(&mut self) -> Result<ProcessLifecycleMetadata, BodyError> {
        let flags = self.u8("flags")?;
        if flags & !ALL_FLAGS != 0 {
            return Err(BodyError::UnknownFlags { flags });
        }
        let has = |bit: u8| flags & bit != 0;
        let event_id = EventId::from_uuid(self.uuid("event_id")?);
        let session_id = SessionId::from_uuid(self.uuid("session_id")?);
        let loop_id = LoopId::from_uuid(self.uuid("loop_id")?);
        let origin_execution_id = ExecutionId::from_uuid(self.uuid("origin_execution_id")?);
        let kind = self.code("kind", ProcessLifecycleKind::from_code)?;
        let state = self.code("state", ProcessLifecycleState::from_code)?;
        let process_created_at = self.time("process_created_at")?;
        let process_started_at = has(HAS_STARTED)
            .then(|| self.time("process_started_at"))
            .transpose()?;
        let process_finished_at = has(HAS_FINISHED)
            .then(|| self.time("process_finished_at"))
            .transpose()?;
        let exit_code = has(HAS_EXIT_CODE)
            .then(|| self.array("exit_code").map(i32::from_be_bytes))
            .transpose()?;
        let reason = has(HAS_REASON)
            .then(|| self.code("reason", ProcessTerminalReason::from_code))
            .transpose()?;
        let process_handle = self.string("process_handle")?;
        let diagnostic = has(HAS_DIAGNOSTIC)
            .then(|| self.string("diagnostic"))
            .transpose()?;
        Ok(ProcessLifecycleMetadata {
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
        })
    }
}

/// Encodes `record` as a frame body into `out` (appended).
pub(crate) fn encode(record: &JournalRecord, out: &mut Vec<u8>) {
    encode_body(record, out);
}

/// Decodes a frame body; what is wrong with a bad one is a [`Corruption::Body`].
pub(crate) fn decode(bytes: &[u8]) -> Result<JournalRecord, Corruption> {
    decode_body(bytes).map_err(|e| Corruption::Body(e.to_string()))
}

#[cfg(test)]
mod tests {
    use notify_testkit::{sample, strategy};
    use notify_types::{ValidationField, is_valid_handle};
    use proptest::prelude::*;

    use super::*;

    fn body(record: &JournalRecord) -> Vec<u8> {
        let mut out = Vec::new();
        encode_body(record, &mut out);
        out
    }

    /// Decodes `bytes`; a record that decodes must be the one whose body they are.
    fn decode_canonical(bytes: &[u8]) -> Result<JournalRecord, BodyError> {
        let record = decode_body(bytes)?;
        assert_eq!(
            body(&record),
            bytes,
            "a decoded body re-encodes to its bytes"
        );
        Ok(record)
    }

    fn samples() -> Vec<JournalRecord> {
        sample::one_of_each(SessionId::new(), LoopId::new())
    }

    fn sample_command() -> JournalRecord {
        sample::command(SessionId::new(), LoopId::new())
    }

    fn sample_lost() -> JournalRecord {
        sample::event(SessionId::new(), LoopId::new(), ProcessLifecycleKind::Lost)
    }

    #[test]
    fn samples_round_trip_and_are_compact() {
        println!(
            "{:<22} {:>5} {:>5} {:>6}",
            "record", "body", "json", "ratio"
        );
        let (mut body_total, mut json_total) = (0, 0);
        for record in samples() {
            let bytes = body(&record);
            assert_eq!(decode_canonical(&bytes).unwrap(), record);
            assert_eq!(body(&record), bytes, "deterministic");
            let json = record.encode().len();
            println!(
                "{:<22} {:>5} {json:>5} {:>6.2}",
                record.type_name(),
                bytes.len(),
                bytes.len() as f64 / json as f64
            );
            assert!(
                bytes.len() * 2 < json,
                "{}: {} vs {json}",
                record.type_name(),
                bytes.len()
            );
            body_total += bytes.len();
            json_total += json;
        }
        println!("{:<22} {body_total:>5} {json_total:>5}", "total");
    }

    #[test]
    fn appends_to_what_the_buffer_holds() {
        let record = sample_command();
        let mut out = vec![0xaa, 0xbb];
        encode_body(&record, &mut out);
        assert_eq!(out.get(..2), Some(&[0xaa, 0xbb][..]));
        assert_eq!(out.get(2..), Some(&body(&record)[..]));
    }

    #[test]
    fn every_cut_short_body_is_truncated() {
        for record in samples() {
            let bytes = body(&record);
            for len in 0..bytes.len() {
                let err = decode_body(&bytes[..len]).unwrap_err();
                assert!(matches!(err, BodyError::Truncated { .. }), "{len}: {err}");
            }
        }
        assert_eq!(
            decode_body(&[]).unwrap_err(),
            BodyError::Truncated { field: "tag" }
        );
    }

    #[test]
    fn trailing_bytes_and_unknown_tags_are_refused() {
        let mut bytes = body(&sample_command());
        bytes.push(0);
        assert_eq!(
            decode_body(&bytes).unwrap_err(),
            BodyError::TrailingBytes { count: 1 }
        );
        for tag in [0, 6, 0x7f, 0xff] {
            bytes[0] = tag;
            assert_eq!(
                decode_body(&bytes).unwrap_err(),
                BodyError::UnknownTag { tag }
            );
        }
    }

    // Command layout: tag 0, command_id 1..17, session_id 17..33, loop_id 33..49,
    // state 49, reason 50, handle length 51, handle 52..
    // Lifecycle layout: tag 0, flags 1, event_id 2..18, session_id 18..34, loop_id
    // 34..50, origin_execution_id 50..66, kind 66, state 67, created 68..80.

    #[test]
    fn unknown_codes_and_flags_are_named() {
        let good = body(&sample_command());
        for (at, field) in [(49, "state"), (50, "reason")] {
            for code in [0, 10, 0xff] {
                let mut bytes = good.clone();
                bytes[at] = code;
                assert_eq!(
                    decode_body(&bytes).unwrap_err(),
                    BodyError::UnknownCode { field, code }
                );
            }
        }
        let good = body(&sample_lost());
        for (at, field, code) in [(66, "kind", 6), (67, "state", 0)] {
            let mut bytes = good.clone();
            bytes[at] = code;
            assert_eq!(
                decode_body(&bytes).unwrap_err(),
                BodyError::UnknownCode { field, code }
            );
        }
        for extra in [1 << 5, 1 << 6, 1 << 7] {
            let mut bytes = good.clone();
            bytes[1] |= extra;
            let flags = bytes[1];
            assert_eq!(
                decode_body(&bytes).unwrap_err(),
                BodyError::UnknownFlags { flags }
            );
        }
    }

    #[test]
    fn lengths_are_minimal_and_checked_before_allocating() {
        let good = body(&sample_command());
        let handle = &good[52..];
        let with_len = |len: &[u8]| {
            let mut bytes = good[..51].to_vec();
            bytes.extend_from_slice(len);
            bytes.extend_from_slice(handle);
            bytes
        };
        // The handle's length spelled in two bytes instead of one.
        let len = u8::try_from(handle.len()).unwrap();
        let err = decode_body(&with_len(&[len | 0x80, 0])).unwrap_err();
        assert_eq!(
            err,
            BodyError::BadLength {
                field: "process_handle"
            }
        );
        // Over 64 bits, and eleven bytes long.
        for len in [
            &[0xff; 9].iter().chain(&[0x02]).copied().collect::<Vec<_>>()[..],
            &[0x80; 11],
        ] {
            let err = decode_body(&with_len(len)).unwrap_err();
            assert_eq!(
                err,
                BodyError::BadLength {
                    field: "process_handle"
                },
                "{len:?}"
            );
        }
        // A length far beyond the body is refused without allocating it.
        for len in [
            &[0xff, 0xff, 0xff, 0xff, 0x0f][..],
            &[0xff; 9].iter().chain(&[0x01]).copied().collect::<Vec<_>>()[..],
        ] {
            let err = decode_body(&with_len(len)).unwrap_err();
            assert_eq!(
                err,
                BodyError::Truncated {
                    field: "process_handle"
                },
                "{len:?}"
            );
        }
        // One more than there is.
        let err = decode_body(&with_len(&[len + 1])).unwrap_err();
        assert_eq!(
            err,
            BodyError::Truncated {
                field: "process_handle"
            }
        );
    }

    #[test]
    fn strings_must_be_utf8() {
        let mut bytes = body(&sample_command());
        bytes[52] = 0xff;
        assert_eq!(
            decode_body(&bytes).unwrap_err(),
            BodyError::InvalidUtf8 {
                field: "process_handle"
            }
        );
    }

    #[test]
    fn timestamps_are_exact_and_checked() {
        let good = body(&sample_lost());
        let mut bytes = good.clone();
        bytes[76..80].copy_from_slice(&1_000_000_000u32.to_be_bytes());
        assert_eq!(
            decode_body(&bytes).unwrap_err(),
            BodyError::BadTimestamp {
                field: "process_created_at"
            }
        );
        for secs in [i64::MAX, i64::MIN, Timestamp::MAX.as_second() + 1] {
            let mut bytes = good.clone();
            bytes[68..76].copy_from_slice(&secs.to_be_bytes());
            assert_eq!(
                decode_body(&bytes).unwrap_err(),
                BodyError::BadTimestamp {
                    field: "process_created_at"
                },
                "{secs}"
            );
        }
        // Every instant jiff holds survives exactly, before the epoch included.
        for t in [
            Timestamp::MAX,
            Timestamp::MIN,
            Timestamp::new(-1, -1).unwrap(),
            Timestamp::new(-1_000, 999_999_999).unwrap(),
            Timestamp::new(0, 1).unwrap(),
        ] {
            let mut out = Vec::new();
            put_time(&mut out, t);
            assert_eq!(out.len(), 12);
            let mut r = Reader { rest: &out };
            assert_eq!(r.time("t").unwrap(), t);
            assert!(r.rest.is_empty());
        }
        // And in a record: created just after the zero time, finished at the last
        // instant.
        let JournalRecord::Event(SessionEvent::Lifecycle(mut m)) = sample_lost() else {
            panic!("a lifecycle sample");
        };
        m.process_created_at = Timestamp::new(notify_types::ZERO_TIME.as_second(), 1).unwrap();
        m.process_started_at = Some(m.process_created_at);
        m.process_finished_at = Some(Timestamp::MAX);
        let record = JournalRecord::Event(SessionEvent::Lifecycle(m));
        assert_eq!(decode_canonical(&body(&record)).unwrap(), record);
    }

    #[test]
    fn invalid_records_are_refused_with_the_validation_error() {
        // A nil session: any 16 bytes are a UUID, and validation refuses this one.
        let mut bytes = body(&sample_command());
        bytes[17..33].fill(0);
        let err = decode_body(&bytes).unwrap_err();
        let BodyError::Invalid(e) = &err else {
            panic!("{err}")
        };
        assert_eq!(e.field(), Some(ValidationField::SessionId.as_str()));
        assert!(std::error::Error::source(&err).is_some());
        // A handle outside the allowed alphabet.
        let mut bytes = body(&sample_command());
        bytes[52] = b'/';
        assert!(!is_valid_handle("/ample-proc"));
        let err = decode_body(&bytes).unwrap_err();
        assert!(
            matches!(&err, BodyError::Invalid(e) if e.field() == Some("process_handle")),
            "{err}"
        );
        // A lost event without its reason.
        let mut bytes = body(&sample_lost());
        bytes[1] &= !HAS_REASON;
        let at = bytes.len() - 1 - "sample-proc".len() - 1 - "runner lost in a crash".len() - 1;
        assert_eq!(
            bytes.remove(at),
            ProcessTerminalReason::LostOnRestore.code()
        );
        let err = decode_body(&bytes).unwrap_err();
        assert!(
            matches!(&err, BodyError::Invalid(e) if e.field() == Some("state_reason")),
            "{err}"
        );
    }

    /// Up to `max` valid records one character away from `record` in its wire form
    /// (a digit of an ID or a time, a letter of a handle...), each different from it;
    /// the search starts at a position chosen by `start`.
    fn neighbours(
        record: &JournalRecord,
        start: prop::sample::Index,
        max: usize,
    ) -> Vec<JournalRecord> {
        let wire = record.encode();
        let first = start.index(wire.len());
        let mut out = Vec::new();
        for k in 0..wire.len() {
            let i = (first + k) % wire.len();
            for c in [b'1', b'8', b'b', b'e', b'x'] {
                let mut changed = wire.clone();
                changed[i] = c;
                match JournalRecord::decode(&changed) {
                    Ok(r) if r != *record => out.push(r),
                    _ => continue,
                }
                if out.len() == max {
                    return out;
                }
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn valid_records_round_trip(record in strategy::journal_record()) {
            let bytes = body(&record);
            prop_assert_eq!(decode_canonical(&bytes).unwrap(), record.clone());
            prop_assert_eq!(body(&record), bytes);
        }

        #[test]
        fn bodies_are_equal_exactly_when_records_are(
            a in strategy::journal_record(),
            b in strategy::journal_record(),
            start in any::<prop::sample::Index>(),
        ) {
            // An equal record built anew (decoded from the record's wire form, not
            // cloned) has the same body.
            let same = JournalRecord::decode(&a.encode()).unwrap();
            prop_assert_eq!(&same, &a);
            prop_assert_eq!(body(&same), body(&a));
            // Records that differ in one character of one field have different bodies.
            // (Events whose ID is derived from their other fields have no such
            // neighbour; commands and lifecycle events always do.)
            let free = matches!(
                a,
                JournalRecord::Command(_) | JournalRecord::Event(SessionEvent::Lifecycle(_))
            );
            let near = if free { neighbours(&a, start, 8) } else { Vec::new() };
            prop_assert!(!free || !near.is_empty(), "no neighbour of {:?}", a);
            for n in &near {
                prop_assert_ne!(body(n), body(&a), "{:?} and {:?}", n, a);
            }
            // And two generated records.
            prop_assert_eq!(a == b, body(&a) == body(&b));
        }

        #[test]
        fn damaged_bodies_fail_or_decode_canonically(
            record in strategy::journal_record(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
            cut in any::<prop::sample::Index>(),
            extra in prop::collection::vec(any::<u8>(), 0..3),
        ) {
            let original = body(&record);
            let mut bytes = original.clone();
            for (at, byte) in edits {
                let i = at.index(bytes.len());
                bytes[i] = byte;
            }
            // A changed body that still decodes is another record (injectivity).
            if let Ok(other) = decode_canonical(&bytes) {
                prop_assert_eq!(other == record, bytes == original);
            }
            let short = &bytes[..cut.index(bytes.len() + 1)];
            let _ = decode_canonical(short);
            bytes.extend_from_slice(&extra);
            let _ = decode_canonical(&bytes);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_canonical(&bytes);
        }
    }
}
