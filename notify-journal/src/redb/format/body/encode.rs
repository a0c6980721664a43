//! Encoding a record as its body.

use notify_types::{JournalRecord, SessionEvent, Timestamp, Uuid};

use super::layout::*;

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

pub(super) fn put_time(out: &mut Vec<u8>, t: Timestamp) {
    let nanos = t.as_nanosecond();
    let secs = nanos.div_euclid(NANOS_PER_SECOND);
    let sub = nanos.rem_euclid(NANOS_PER_SECOND);
    // ok: jiff's range is about ±2.5e11 seconds, far inside i64; `sub` is below 1e9.
    out.extend_from_slice(&(secs as i64).to_be_bytes());
    out.extend_from_slice(&(sub as u32).to_be_bytes());
}
