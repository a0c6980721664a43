//! The invariants, checked after every step: the journal against the model (every
//! session in it: the current one, the retired ones and the neighbours), the broadcast
//! stream, and what restore reports.

use std::collections::{BTreeSet, HashSet};

use notify_journal::{JournalBackend, JournalError, SeqRecord, SessionState, replay_all};
use notify_session::RestoreReport;
use notify_types::{CommandId, EventId, JournalRecord, SessionId, Uuid};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tokio::sync::broadcast;

use crate::LOOPS;
use crate::real::{Real, ack, recv};
use crate::reference::{MFrame, MState, Model};

/// Restore's report against the model: for a live session, its pending notifications
/// and orphans; for an ended or purged one, that state and nothing to redeliver.
pub(crate) fn check_report(
    report: &RestoreReport,
    real: &Real,
    model: &Model,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(report.last_seq, model.seq());
    check_state(report.state, model.state, model.seq())?;
    if model.state != MState::Live {
        prop_assert_eq!(report.pending_count(), 0, "pending after the end");
        prop_assert!(report.orphans.is_empty(), "orphans after the end");
        return Ok(());
    }
    for &loop_id in &model.loop_ids {
        let got: Vec<CommandId> = report
            .pending
            .get(&loop_id)
            .map(|p| p.iter().map(|c| c.command_id()).collect())
            .unwrap_or_default();
        prop_assert_eq!(
            got.clone(),
            model.pending(loop_id),
            "pending of {}",
            loop_id
        );
        for id in got {
            prop_assert!(!real.acked.contains(&id), "acknowledged {id} pending");
        }
    }
    prop_assert!(
        report.pending.keys().all(|l| model.loop_ids.contains(l)),
        "pending for an unknown loop"
    );
    let orphans: Vec<EventId> = report.orphans.iter().map(|m| m.event_id).collect();
    prop_assert_eq!(orphans, model.orphans());
    Ok(())
}

/// A session state the journal (or restore) answered, against the model's, for a
/// session of `frames` frames.
fn check_state(got: SessionState, want: MState, frames: u64) -> Result<(), TestCaseError> {
    let agree = match (want, got) {
        (MState::Live | MState::Forgotten, SessionState::Live) => true,
        (MState::Ended, SessionState::Ended { last_seq, .. }) => last_seq == frames,
        (MState::Purged, SessionState::Purged(t)) => t.last_seq == frames && t.frames == frames,
        _ => false,
    };
    prop_assert!(
        agree,
        "session state {:?}, model {:?} with {} frames",
        got,
        want,
        frames
    );
    Ok(())
}

/// One session's log against the model's frames, by its state: a live or ended log
/// replays exactly, gap-free from 1, one frame per key; a purged one answers
/// `Purged` to every read and keeps its last seq; a forgotten one is empty. Returns the
/// frames replayed.
async fn check_log(
    journal: &dyn JournalBackend,
    session: SessionId,
    want: &[MFrame],
    state: MState,
) -> Result<Vec<SeqRecord>, TestCaseError> {
    let len = want.len() as u64;
    let got_state = journal.session_state(session).await.unwrap();
    check_state(got_state, state, len)?;
    let last = journal.last_seq(session).await.unwrap();
    match state {
        MState::Forgotten => {
            prop_assert_eq!(last, 0, "a forgotten session's last seq");
            prop_assert_eq!(replay_all(journal, session).await.unwrap(), vec![]);
            return Ok(Vec::new());
        }
        MState::Purged => {
            prop_assert_eq!(last, len, "a purged session keeps its last seq");
            let replayed = replay_all(journal, session).await;
            prop_assert!(
                matches!(replayed, Err(JournalError::Purged { session: s }) if s == session),
                "replay of a purged session: {:?}",
                replayed
            );
            for key in want.iter().map(|f| f.key()).take(2) {
                let found = journal.lookup(session, key).await;
                prop_assert!(
                    matches!(found, Err(JournalError::Purged { session: s }) if s == session),
                    "lookup in a purged session: {:?}",
                    found
                );
            }
            return Ok(Vec::new());
        }
        MState::Live | MState::Ended => {}
    }
    let frames = replay_all(journal, session).await.unwrap();
    let seqs: Vec<u64> = frames.iter().map(|(s, _)| *s).collect();
    let gap_free: Vec<u64> = (1..=len).collect();
    prop_assert_eq!(seqs, gap_free, "sequences are gap-free from 1");
    prop_assert_eq!(last, len);
    let mut keys = HashSet::new();
    for (seq, record) in &frames {
        prop_assert!(
            keys.insert(record.key()),
            "key {} twice, at {seq}",
            record.key()
        );
        prop_assert_eq!(record.key(), MFrame::of(record).key());
    }
    let got: Vec<MFrame> = frames.iter().map(|(_, r)| MFrame::of(r)).collect();
    prop_assert_eq!(&got, want, "journal frames");
    Ok(frames)
}

/// The journal invariants for every session of the case, and the broadcast stream.
pub(crate) async fn check(real: &mut Real, model: &mut Model) -> Result<(), TestCaseError> {
    let journal = real.journal();
    let frames = check_log(journal, model.session_id, &model.frames, model.state).await?;
    for (seq, record) in &frames {
        if let JournalRecord::Command(c) = record {
            let (original, at) = &model.commands[&c.command_id()];
            prop_assert_eq!(c.notification(), original, "journaled payload at {}", seq);
            prop_assert_eq!(*at, *seq);
        }
    }
    for r in &model.retired {
        check_log(journal, r.session_id, &r.frames, r.state).await?;
    }
    // Purges never touch a live session.
    for &(session, frames) in &model.neighbours {
        prop_assert_eq!(
            journal.session_state(session).await.unwrap(),
            SessionState::Live
        );
        prop_assert_eq!(journal.last_seq(session).await.unwrap(), frames);
    }
    // The journal lists every session with a frame or a tombstone, and no other.
    let listed: BTreeSet<SessionId> = journal.sessions().await.unwrap().into_iter().collect();
    let current = (!model.frames.is_empty()).then_some(model.session_id);
    let retired = model
        .retired
        .iter()
        .filter(|r| r.state != MState::Forgotten)
        .map(|r| r.session_id);
    let neighbours = model.neighbours.iter().map(|&(s, _)| s);
    let known: BTreeSet<SessionId> = current
        .into_iter()
        .chain(retired)
        .chain(neighbours)
        .collect();
    prop_assert_eq!(listed, known, "sessions listed");

    // Every new event is broadcast once, in journal order; nothing else is (commands
    // are not events, and abandonments are journaled by the end without a broadcast).
    let maybe = std::mem::take(&mut model.maybe_unbroadcast);
    let new_events: Vec<Uuid> = model.frames[model.checked..]
        .iter()
        .filter(|f| !matches!(f, MFrame::Command(_) | MFrame::Abandoned(_)))
        .map(|f| f.key())
        .collect();
    let mut broadcast = Vec::new();
    loop {
        match real.events.try_recv() {
            Ok(e) => broadcast.push(*e.event_id().as_uuid()),
            Err(broadcast::error::TryRecvError::Empty) => break,
            Err(e) => prop_assert!(false, "event stream: {e}"),
        }
    }
    let new_events: Vec<Uuid> = if maybe.is_empty() {
        new_events
    } else {
        // A cancelled publisher may have journaled without broadcasting.
        let seen: HashSet<Uuid> = broadcast.iter().copied().collect();
        new_events
            .into_iter()
            .filter(|k| !maybe.contains(k) || seen.contains(k))
            .collect()
    };
    prop_assert_eq!(broadcast, new_events, "broadcast events");
    model.checked = model.frames.len();
    Ok(())
}

/// Drains every loop: what is left must be exactly the model's, then nothing.
pub(crate) async fn finish(real: &mut Real, model: &mut Model) -> Result<(), TestCaseError> {
    for lp in 0..LOOPS {
        if let Some(received) = real.held[lp].take() {
            drop(received);
            model.loops[lp].held = None;
        }
        prop_assert!(real.fx.session.shutdown_loop(model.loop_ids[lp]).await);
        model.loops[lp].closed = true;
        while let Some(received) = recv(real, model, lp).await? {
            ack(real, model, lp, received).await?;
        }
        prop_assert!(model.loops[lp].live.is_empty());
    }
    check(real, model).await?;
    let report = notify_session::restore(model.session_id, real.journal())
        .await
        .unwrap();
    check_report(&report, real, model)
}
