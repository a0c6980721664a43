//! The contract's refusals: a record naming another session, an invalid record, one too
//! large; none of them writes anything.

use notify_journal::{AppendError, JournalBackend};
use notify_types::{CommandId, JournalRecord, LoopId, ProcessNotification, SessionId};

use super::support::{Check, CheckResult, command_of, mixed};
use crate::sample;

/// A record naming another session is refused with `SessionMismatch { session,
/// record }`, and neither session is written.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn session_mismatch_is_refused<B: JournalBackend + ?Sized>(backend: &B) -> CheckResult {
    let c = Check("session_mismatch_is_refused");
    let (target, named) = (SessionId::new(), SessionId::new());
    for record in mixed(named, 7) {
        let key = record.key();
        match backend.append(target, record).await {
            Err(AppendError::SessionMismatch { session, record }) => {
                c.eq("SessionMismatch.session", &session, &target)?;
                c.eq("SessionMismatch.record", &record, &named)?;
            }
            other => {
                return Err(c.fail(format!(
                    "append of a record for {named} to {target}: got {other:?}, want \
                     SessionMismatch"
                )));
            }
        }
        c.lookup(backend, target, key, None).await?;
        c.lookup(backend, named, key, None).await?;
    }
    c.last_seq(backend, target, 0).await?;
    c.last_seq(backend, named, 0).await?;
    let listed = c.sessions(backend).await?;
    c.ensure(
        !listed.contains(&target) && !listed.contains(&named),
        || "a refused append created a session".to_owned(),
    )
}

/// A record that would not decode (here: a consumption naming the nil loop, and a
/// command wrapping a notification with an empty handle) is refused with `Invalid`,
/// and nothing is written: a journal never makes durable a frame restore cannot read.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn invalid_record_is_refused<B: JournalBackend + ?Sized>(backend: &B) -> CheckResult {
    let c = Check("invalid_record_is_refused");
    let session = SessionId::new();
    let mut empty_handle = sample::notification(session, LoopId::new());
    empty_handle.process_handle = String::new();
    let records = [
        sample::consumed(session, LoopId::NIL, CommandId::new()),
        JournalRecord::Command(ProcessNotification::new(empty_handle)),
    ];
    for record in records {
        let key = record.key();
        match backend.append(session, record).await {
            Err(AppendError::Invalid(_)) => {}
            other => {
                return Err(c.fail(format!(
                    "append of an invalid record: got {other:?}, want Invalid"
                )));
            }
        }
        c.lookup(backend, session, key, None).await?;
    }
    c.last_seq(backend, session, 0).await
}

/// A record whose encoding is `max_record_bytes + 1` bytes is refused with
/// `TooLarge { len, max: max_record_bytes }` and nothing is written; one of exactly
/// `max_record_bytes` is not refused as too large.
///
/// `max_record_bytes` is the backend's documented cap. To reach an exact size, the
/// check pads a command's process handle, so the oversized records are not valid
/// notifications: a backend must check the size before anything that would reject
/// them otherwise. The at-the-cap record must not be answered `TooLarge`; any other
/// answer is accepted (it is never replayed).
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn too_large_is_refused<B: JournalBackend + ?Sized>(
    backend: &B,
    max_record_bytes: usize,
) -> CheckResult {
    let c = Check("too_large_is_refused");
    let s = SessionId::new();
    let sized = |len: usize| -> Option<JournalRecord> {
        let mut n = sample::notification(s, LoopId::new());
        n.process_handle = String::new();
        let base = command_of(n.clone()).encode().len();
        n.process_handle = "x".repeat(len.checked_sub(base)?);
        Some(command_of(n))
    };
    let over = max_record_bytes
        .checked_add(1)
        .and_then(sized)
        .ok_or_else(|| {
            c.fail(format!(
                "cannot build a record of {max_record_bytes} + 1 bytes"
            ))
        })?;
    c.eq(
        "oversized record length",
        &over.encode().len(),
        &(max_record_bytes + 1),
    )?;
    match backend.append(s, over.clone()).await {
        Err(AppendError::TooLarge { len, max }) => {
            c.eq("TooLarge.len", &len, &(max_record_bytes + 1))?;
            c.eq("TooLarge.max", &max, &max_record_bytes)?;
        }
        other => {
            return Err(c.fail(format!(
                "append of a {}-byte record: got {other:?}, want TooLarge",
                max_record_bytes + 1
            )));
        }
    }
    c.lookup(backend, s, over.key(), None).await?;
    c.last_seq(backend, s, 0).await?;
    if let Some(at_cap) = sized(max_record_bytes) {
        let answer = backend.append(s, at_cap).await;
        c.ensure(!matches!(answer, Err(AppendError::TooLarge { .. })), || {
            format!("a record of exactly {max_record_bytes} bytes was refused: {answer:?}")
        })?;
    }
    Ok(())
}
