//! The invariants, checked after every step: the journal against the model, the
//! broadcast stream, and what restore reports.

use std::collections::HashSet;

use notify_journal::{JournalBackend, replay_all};
use notify_session::RestoreReport;
use notify_types::{CommandId, EventId, JournalRecord, Uuid};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tokio::sync::broadcast;

use crate::LOOPS;
use crate::real::{Real, ack, recv};
use crate::reference::{MFrame, Model};

pub(crate) fn check_report(
    report: &RestoreReport,
    real: &Real,
    model: &Model,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(report.last_seq, model.seq());
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

/// The journal invariants, the broadcast stream, and the report restore would give.
pub(crate) async fn check(real: &mut Real, model: &mut Model) -> Result<(), TestCaseError> {
    let session = model.session_id;
    let frames = replay_all(real.journal(), session).await.unwrap();
    let seqs: Vec<u64> = frames.iter().map(|(s, _)| *s).collect();
    let gap_free: Vec<u64> = (1..=frames.len() as u64).collect();
    prop_assert_eq!(seqs, gap_free, "sequences are gap-free from 1");
    prop_assert_eq!(
        real.journal().last_seq(session).await.unwrap(),
        frames.len() as u64
    );
    let mut keys = HashSet::new();
    for (seq, record) in &frames {
        prop_assert!(
            keys.insert(record.key()),
            "key {} twice, at {seq}",
            record.key()
        );
        prop_assert_eq!(record.key(), MFrame::of(record).key());
        if let JournalRecord::Command(c) = record {
            let (original, at) = &model.commands[&c.command_id()];
            prop_assert_eq!(c.notification(), original, "journaled payload at {}", seq);
            prop_assert_eq!(*at, *seq);
        }
    }
    let got: Vec<MFrame> = frames.iter().map(|(_, r)| MFrame::of(r)).collect();
    prop_assert_eq!(&got, &model.frames, "journal frames");

    // Every new event is broadcast once, in journal order; nothing else is.
    let maybe = std::mem::take(&mut model.maybe_unbroadcast);
    let new_events: Vec<Uuid> = model.frames[model.checked..]
        .iter()
        .filter(|f| !matches!(f, MFrame::Command(_)))
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
