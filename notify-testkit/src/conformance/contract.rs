//! The contract every backend keeps: sequences, deduplication, collisions, replay,
//! lookups, listings, refusals and concurrency.

use std::collections::{BTreeMap, BTreeSet};

use notify_journal::{AppendError, AppendOutcome, BoxFuture, JournalBackend, replay_all};
use notify_types::{
    CommandId, EventId, JournalRecord, LoopId, ProcessCompletionNotification, ProcessLifecycleKind,
    ProcessNotification, SessionEvent, SessionId, Uuid,
};

use super::support::{Check, CheckResult, altered, command_of, commands, join_all, mixed};
use crate::sample;

/// An unknown session is empty; appends to a fresh session get seqs 1, 2, 3, … and
/// replay returns exactly the appended records (one of every kind) in order.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn sequences_start_at_one_and_are_gap_free<B: JournalBackend + ?Sized>(
    backend: &B,
) -> CheckResult {
    let c = Check("sequences_start_at_one_and_are_gap_free");
    let s = SessionId::new();
    c.last_seq(backend, s, 0).await?;
    c.replay_equals(backend, s, &[]).await?;
    c.lookup(backend, s, Uuid::now_v7(), None).await?;
    let records = mixed(s, 12);
    for (seq, record) in (1..).zip(&records) {
        c.append_new(backend, s, record, seq).await?;
        c.last_seq(backend, s, seq).await?;
    }
    c.replay_equals(backend, s, &records).await
}

/// Appends interleaved across sessions number each session's frames independently.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn interleaved_sessions_are_independent<B: JournalBackend + ?Sized>(
    backend: &B,
) -> CheckResult {
    let c = Check("interleaved_sessions_are_independent");
    let sessions: Vec<SessionId> = (0..3).map(|_| SessionId::new()).collect();
    let records: Vec<Vec<JournalRecord>> = sessions.iter().map(|&s| mixed(s, 5)).collect();
    for seq in 1..=5u64 {
        for (s, recs) in sessions.iter().zip(&records) {
            let record = recs
                .get(seq as usize - 1)
                .ok_or_else(|| c.fail("test bug: too few records"))?;
            c.append_new(backend, *s, record, seq).await?;
        }
    }
    for (s, recs) in sessions.iter().zip(&records) {
        c.last_seq(backend, *s, 5).await?;
        c.replay_equals(backend, *s, recs).await?;
    }
    Ok(())
}

/// Re-appending an identical record (of any kind, at any later time) returns the
/// original seq with `appended: false` and writes nothing.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn duplicate_returns_original_seq<B: JournalBackend + ?Sized>(
    backend: &B,
) -> CheckResult {
    let c = Check("duplicate_returns_original_seq");
    let s = SessionId::new();
    let records = mixed(s, 7);
    for (seq, record) in (1..).zip(&records) {
        c.append_new(backend, s, record, seq).await?;
    }
    for (seq, record) in (1u64..=7)
        .zip(&records)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        c.append_duplicate(backend, s, record, seq).await?;
        c.append_duplicate(backend, s, record, seq).await?;
    }
    c.last_seq(backend, s, 7).await?;
    c.replay_equals(backend, s, &records).await?;
    let next = sample::command(s, LoopId::new());
    c.append_new(backend, s, &next, 8).await
}

/// The same key with a different record of the same kind (a command with another
/// outcome; a lifecycle event with another state) is a collision carrying the original
/// seq; nothing is written and the original still deduplicates.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn collision_same_kind_different_payload<B: JournalBackend + ?Sized>(
    backend: &B,
) -> CheckResult {
    let c = Check("collision_same_kind_different_payload");
    let s = SessionId::new();
    let loop_id = LoopId::new();
    let n = sample::notification(s, loop_id);
    let original = command_of(n.clone());
    let forged = command_of(altered(&n));
    let filler = sample::command(s, loop_id);
    let started = sample::lifecycle(s, loop_id, ProcessLifecycleKind::Started);
    let event = JournalRecord::Event(SessionEvent::Lifecycle(started.clone()));
    let other_event = JournalRecord::Event(SessionEvent::Lifecycle(
        notify_types::ProcessLifecycleMetadata {
            process_handle: "another-proc".into(),
            ..started
        },
    ));
    c.append_new(backend, s, &original, 1).await?;
    c.append_new(backend, s, &filler, 2).await?;
    c.append_new(backend, s, &event, 3).await?;
    c.append_collision(backend, s, &forged, 1).await?;
    c.append_collision(backend, s, &other_event, 3).await?;
    c.last_seq(backend, s, 3).await?;
    c.replay_equals(backend, s, &[original.clone(), filler, event.clone()])
        .await?;
    c.append_duplicate(backend, s, &original, 1).await?;
    c.append_duplicate(backend, s, &event, 3).await?;
    c.lookup(backend, s, forged.key(), Some(1)).await
}

/// A command and an event sharing one UUID as key collide, in either order.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn collision_across_record_kinds<B: JournalBackend + ?Sized>(backend: &B) -> CheckResult {
    let c = Check("collision_across_record_kinds");
    for command_first in [true, false] {
        let s = SessionId::new();
        let loop_id = LoopId::new();
        let n = sample::notification(s, loop_id);
        let key = *n.command_id.as_uuid();
        let command = command_of(n);
        let mut meta = sample::lifecycle(s, loop_id, ProcessLifecycleKind::Completed);
        meta.event_id = EventId::from_uuid(key);
        let event = JournalRecord::Event(SessionEvent::Lifecycle(meta));
        let (first, second) = if command_first {
            (command, event)
        } else {
            (event, command)
        };
        c.append_new(backend, s, &first, 1).await?;
        c.append_collision(backend, s, &second, 1).await?;
        c.last_seq(backend, s, 1).await?;
        c.replay_equals(backend, s, std::slice::from_ref(&first))
            .await?;
    }
    Ok(())
}

/// The idempotency index is per session: a key journaled in one session is unknown to
/// another, and the other may journal its own record under it.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn keys_are_scoped_per_session<B: JournalBackend + ?Sized>(backend: &B) -> CheckResult {
    let c = Check("keys_are_scoped_per_session");
    let (s1, s2) = (SessionId::new(), SessionId::new());
    let n1 = sample::notification(s1, LoopId::new());
    let key = *n1.command_id.as_uuid();
    let n2 = ProcessCompletionNotification {
        session_id: s2,
        ..n1.clone()
    };
    c.append_new(backend, s1, &command_of(n1), 1).await?;
    c.lookup(backend, s2, key, None).await?;
    c.append_new(backend, s2, &command_of(n2), 1).await?;
    c.lookup(backend, s1, key, Some(1)).await?;
    c.lookup(backend, s2, key, Some(1)).await
}

/// `replay(session, from, limit)` returns the frames with seq `>= from`, in order, at
/// most `limit` of them (none for a limit of 0 or a start past the end; from 0 reads
/// like from 1).
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn replay_from_seq_and_limit<B: JournalBackend + ?Sized>(backend: &B) -> CheckResult {
    let c = Check("replay_from_seq_and_limit");
    let s = SessionId::new();
    let records = mixed(s, 10);
    for (seq, record) in (1..).zip(&records) {
        c.append_new(backend, s, record, seq).await?;
    }
    let cases: [(u64, usize, std::ops::Range<u64>); 8] = [
        (1, 100, 1..11),
        (0, 100, 1..11),
        (4, 3, 4..7),
        (1, 1, 1..2),
        (9, 100, 9..11),
        (10, 1, 10..11),
        (11, 100, 11..11),
        (3, 0, 3..3),
    ];
    for (from, limit, want) in cases {
        let what = format!("replay({s}, {from}, {limit})");
        let got = c.ok(&what, backend.replay(s, from, limit).await)?;
        let want: Vec<(u64, JournalRecord)> = want
            .filter_map(|seq| {
                records
                    .get(seq as usize - 1)
                    .map(|record| (seq, record.clone()))
            })
            .collect();
        c.eq(&what, &got, &want)?;
    }
    Ok(())
}

/// [`replay_all`] reads a session longer than its page (4096 frames) completely and
/// in order.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn replay_all_pages_through_everything<B: JournalBackend + ?Sized>(
    backend: &B,
) -> CheckResult {
    const FRAMES: usize = 4096 + 7;
    const BATCH: usize = 256;
    let c = Check("replay_all_pages_through_everything");
    let s = SessionId::new();
    let records = commands(s, FRAMES);
    let mut outcomes = Vec::with_capacity(FRAMES);
    for chunk in records.chunks(BATCH) {
        let futures = chunk
            .iter()
            .map(|record| backend.append(s, record.clone()))
            .collect();
        outcomes.extend(join_all(futures).await);
    }
    let mut seq_of: BTreeMap<Uuid, u64> = BTreeMap::new();
    for (record, outcome) in records.iter().zip(outcomes) {
        let outcome = c.ok("append", outcome)?;
        c.ensure(outcome.appended, || format!("{outcome:?} for a new key"))?;
        seq_of.insert(record.key(), outcome.seq);
    }
    c.last_seq(backend, s, FRAMES as u64).await?;
    let frames = c.ok("replay_all", replay_all(backend, s).await)?;
    c.eq("frame count", &frames.len(), &FRAMES)?;
    for ((seq, record), want_seq) in frames.iter().zip(1u64..) {
        c.eq("frame seq", seq, &want_seq)?;
        c.eq(
            "seq the append reported for this frame's key",
            &seq_of.get(&record.key()),
            &Some(seq),
        )?;
    }
    Ok(())
}

/// `lookup` answers the seq of every journaled key, and `None` for unknown keys and
/// unknown sessions.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn lookup_reports_journaled_keys<B: JournalBackend + ?Sized>(backend: &B) -> CheckResult {
    let c = Check("lookup_reports_journaled_keys");
    let s = SessionId::new();
    let records = mixed(s, 7);
    for (seq, record) in (1..).zip(&records) {
        c.lookup(backend, s, record.key(), None).await?;
        c.append_new(backend, s, record, seq).await?;
    }
    for (seq, record) in (1..).zip(&records) {
        c.lookup(backend, s, record.key(), Some(seq)).await?;
        c.lookup(backend, SessionId::new(), record.key(), None)
            .await?;
    }
    c.lookup(backend, s, Uuid::now_v7(), None).await
}

/// `last_seq` is 0 for an empty session, follows new frames, and does not move on a
/// duplicate or a refused append.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn last_seq_tracks_appends<B: JournalBackend + ?Sized>(backend: &B) -> CheckResult {
    let c = Check("last_seq_tracks_appends");
    let s = SessionId::new();
    let loop_id = LoopId::new();
    c.last_seq(backend, s, 0).await?;
    let n = sample::notification(s, loop_id);
    let first = command_of(n.clone());
    c.append_new(backend, s, &first, 1).await?;
    c.last_seq(backend, s, 1).await?;
    c.append_duplicate(backend, s, &first, 1).await?;
    c.last_seq(backend, s, 1).await?;
    c.append_collision(backend, s, &command_of(altered(&n)), 1)
        .await?;
    c.last_seq(backend, s, 1).await?;
    let foreign = sample::command(SessionId::new(), loop_id);
    let refused = backend.append(s, foreign).await;
    c.ensure(
        matches!(refused, Err(AppendError::SessionMismatch { .. })),
        || format!("append of another session's record: got {refused:?}"),
    )?;
    c.last_seq(backend, s, 1).await?;
    c.append_new(backend, s, &sample::command(s, loop_id), 2)
        .await?;
    c.last_seq(backend, s, 2).await
}

/// `sessions()` lists (in strictly ascending ID order) every session with a frame, and
/// no session whose appends were all refused.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn sessions_lists_sessions_with_frames<B: JournalBackend + ?Sized>(
    backend: &B,
) -> CheckResult {
    let c = Check("sessions_lists_sessions_with_frames");
    let with_frames: Vec<SessionId> = (0..3).map(|_| SessionId::new()).collect();
    let empty = SessionId::new();
    let refused = SessionId::new();
    for &s in &with_frames {
        c.append_new(backend, s, &sample::command(s, LoopId::new()), 1)
            .await?;
    }
    let mismatch = backend
        .append(refused, sample::command(empty, LoopId::new()))
        .await;
    c.ensure(
        matches!(mismatch, Err(AppendError::SessionMismatch { .. })),
        || format!("append of another session's record: got {mismatch:?}"),
    )?;
    let listed: BTreeSet<SessionId> = c.sessions(backend).await?.into_iter().collect();
    for s in &with_frames {
        c.ensure(listed.contains(s), || {
            format!("sessions() misses {s}, which has a frame")
        })?;
    }
    for s in [empty, refused] {
        c.ensure(!listed.contains(&s), || {
            format!("sessions() lists {s}, which has no frame")
        })?;
    }
    Ok(())
}

/// `sessions_after` pages through the sessions: every page is at most `limit` long,
/// in strictly ascending ID order and above its `after`, pages join up without
/// repeating, and every session with a frame is on some page.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn sessions_page_through_every_session<B: JournalBackend + ?Sized>(
    backend: &B,
) -> CheckResult {
    let c = Check("sessions_page_through_every_session");
    let mine: Vec<SessionId> = (0..5).map(|_| SessionId::new()).collect();
    for &s in &mine {
        c.append_new(backend, s, &sample::command(s, LoopId::new()), 1)
            .await?;
    }
    for limit in [1, 2, 3, 1000] {
        let mut seen: Vec<SessionId> = Vec::new();
        let mut after = None;
        loop {
            let what = format!("sessions_after({after:?}, {limit})");
            let page = c.ok(&what, backend.sessions_after(after, limit).await)?;
            c.ensure(page.len() <= limit, || {
                format!("{what}: {} sessions", page.len())
            })?;
            c.ensure(
                page.windows(2).all(|w| w[0] < w[1])
                    && after.is_none_or(|a| page.iter().all(|s| *s > a)),
                || format!("{what}: not ascending above `after`: {page:?}"),
            )?;
            let Some(last) = page.last().copied() else {
                break;
            };
            seen.extend(page);
            after = Some(last);
        }
        for s in &mine {
            c.ensure(seen.contains(s), || {
                format!("paging by {limit} misses {s}, which has a frame")
            })?;
        }
    }
    Ok(())
}

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

/// 64 concurrent appends over 4 sessions (each then re-appended) end gap-free: every
/// session holds seqs 1..=16, exactly one frame per key, at the seq its append
/// reported, and every re-append reported that same seq.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn concurrent_appends_are_gap_free<B: JournalBackend + ?Sized>(
    backend: &B,
) -> CheckResult {
    const SESSIONS: usize = 4;
    const PER_SESSION: usize = 16;
    let c = Check("concurrent_appends_are_gap_free");
    let sessions: Vec<SessionId> = (0..SESSIONS).map(|_| SessionId::new()).collect();
    let mut work: Vec<(SessionId, JournalRecord)> = Vec::new();
    for i in 0..PER_SESSION {
        for &s in &sessions {
            let record = mixed(s, i + 1).pop().ok_or_else(|| c.fail("test bug"))?;
            work.push((s, record));
        }
    }
    type Pair = (
        Result<AppendOutcome, AppendError>,
        Result<AppendOutcome, AppendError>,
    );
    let futures: Vec<BoxFuture<'_, Pair>> = work
        .iter()
        .map(|(s, record)| {
            let (s, record) = (*s, record.clone());
            Box::pin(async move {
                let first = backend.append(s, record.clone()).await;
                let again = backend.append(s, record).await;
                (first, again)
            }) as BoxFuture<'_, Pair>
        })
        .collect();
    let results = join_all(futures).await;
    let mut reported: BTreeMap<(SessionId, Uuid), u64> = BTreeMap::new();
    for ((s, record), (first, again)) in work.iter().zip(results) {
        let first = c.ok("concurrent append", first)?;
        let again = c.ok("concurrent re-append", again)?;
        c.ensure(first.appended, || format!("{first:?} for a new key"))?;
        c.eq(
            "re-append",
            &again,
            &AppendOutcome {
                seq: first.seq,
                appended: false,
            },
        )?;
        reported.insert((*s, record.key()), first.seq);
    }
    for &s in &sessions {
        c.last_seq(backend, s, PER_SESSION as u64).await?;
        let frames = c.ok("replay_all", replay_all(backend, s).await)?;
        let seqs: Vec<u64> = frames.iter().map(|(seq, _)| *seq).collect();
        c.eq(
            "frame seqs",
            &seqs,
            &(1..=PER_SESSION as u64).collect::<Vec<_>>(),
        )?;
        for (seq, record) in &frames {
            c.eq(
                "seq reported for the frame's key",
                &reported.get(&(s, record.key())),
                &Some(seq),
            )?;
            c.lookup(backend, s, record.key(), Some(*seq)).await?;
        }
        let want: BTreeMap<Uuid, JournalRecord> = work
            .iter()
            .filter(|(ws, _)| *ws == s)
            .map(|(_, r)| (r.key(), r.clone()))
            .collect();
        let got: BTreeMap<Uuid, JournalRecord> =
            frames.into_iter().map(|(_, r)| (r.key(), r)).collect();
        c.eq("records journaled in session", &got, &want)?;
    }
    Ok(())
}

/// 16 concurrent appends of the same new record resolve as if sequential: exactly one
/// `appended: true`, every answer at seq 1, one frame.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn concurrent_same_key_resolves_once<B: JournalBackend + ?Sized>(
    backend: &B,
) -> CheckResult {
    let c = Check("concurrent_same_key_resolves_once");
    let s = SessionId::new();
    let record = sample::command(s, LoopId::new());
    let futures = (0..16).map(|_| backend.append(s, record.clone())).collect();
    let mut appended = 0;
    for outcome in join_all(futures).await {
        let outcome = c.ok("concurrent append of one record", outcome)?;
        c.eq("seq", &outcome.seq, &1)?;
        appended += usize::from(outcome.appended);
    }
    c.eq("number of appends that wrote a frame", &appended, &1)?;
    c.last_seq(backend, s, 1).await?;
    c.replay_equals(backend, s, &[record]).await
}

/// 16 concurrent appends under one new key, half with one payload and half with
/// another: exactly one writes a frame; the others answer a duplicate (same payload as
/// the winner) or a collision at seq 1 (the other payload).
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn concurrent_conflicting_payloads_resolve_to_one_winner<B: JournalBackend + ?Sized>(
    backend: &B,
) -> CheckResult {
    let c = Check("concurrent_conflicting_payloads_resolve_to_one_winner");
    let s = SessionId::new();
    let n = sample::notification(s, LoopId::new());
    let key = *n.command_id.as_uuid();
    let payloads = [command_of(n.clone()), command_of(altered(&n))];
    let sent: Vec<&JournalRecord> = payloads.iter().cycle().take(16).collect();
    let futures = sent
        .iter()
        .map(|record| backend.append(s, (*record).clone()))
        .collect();
    let results = join_all(futures).await;
    let frames = c.ok("replay_all", replay_all(backend, s).await)?;
    let winner = match frames.as_slice() {
        [(1, record)] => record,
        other => return Err(c.fail(format!("want exactly one frame at seq 1, got {other:?}"))),
    };
    let mut appended = 0;
    for (record, result) in sent.iter().zip(results) {
        match result {
            Ok(AppendOutcome {
                seq: 1,
                appended: a,
            }) if *record == winner => {
                appended += usize::from(a);
            }
            Err(AppendError::Collision { key: k, seq: 1 }) if *record != winner && k == key => {}
            other => {
                return Err(c.fail(format!(
                    "append of {} payload: got {other:?}",
                    if *record == winner {
                        "the winning"
                    } else {
                        "the losing"
                    }
                )));
            }
        }
    }
    c.eq("number of appends that wrote a frame", &appended, &1)
}
