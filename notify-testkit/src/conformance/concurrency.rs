//! The contract under concurrent appends: gap-free sequences, one winner per key.

use std::collections::BTreeMap;

use notify_journal::{AppendError, AppendOutcome, BoxFuture, JournalBackend, replay_all};
use notify_types::{JournalRecord, LoopId, SessionId, Uuid};

use super::support::{Check, CheckResult, altered, command_of, join_all, mixed};
use crate::sample;

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
