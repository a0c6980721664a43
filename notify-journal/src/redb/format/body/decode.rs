//! Decoding a body, accepting only the canonical body of a valid record.

use notify_types::{
    CommandId, EventId, ExecutionId, JournalRecord, LoopId, NotificationAbandoned,
    NotificationConsumed, ProcessCompletionNotification, ProcessLifecycleKind,
    ProcessLifecycleMetadata, ProcessLifecycleState, ProcessNotification, ProcessTerminalReason,
    SessionEnded, SessionEvent, SessionId, Timestamp, Uuid,
};

use super::error::BodyError;
use super::layout::*;

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
pub(super) struct Reader<'a> {
    pub(super) rest: &'a [u8],
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

    pub(super) fn time(&mut self, field: &'static str) -> Result<Timestamp, BodyError> {
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
