//! The contract every backend keeps: sequences, deduplication, collisions, replay,
//! lookups and listings. Refusals and concurrency are in `refusals.rs` and
//! `concurrency.rs`.

use std::collections::{BTreeMap, BTreeSet};

use notify_journal::{AppendError, JournalBackend, replay_all};
use notify_types::{
    EventId, JournalRecord, LoopId, ProcessCompletionNotification, ProcessLifecycleKind,
    SessionEvent, SessionId, Uuid,
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
