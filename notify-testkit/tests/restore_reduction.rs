//! `restore` reads a log page by page and keeps only what can still matter. This
//! compares it with the plain whole-log reading it replaced, over generated logs in
//! which handles are reused, processes complete before and after their last event, and
//! consumptions arrive in any order.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, HashMap, HashSet};

use notify_journal::JournalBackend;
use notify_session::{RestoreReport, restore};
use notify_testkit::{FaultyJournal, MemoryJournal, sample};
use notify_types::{
    CommandId, EventId, ExecutionId, JournalRecord, LoopId, NotificationConsumed,
    ProcessLifecycleKind, ProcessLifecycleMetadata, ProcessLifecycleState, ProcessNotification,
    ProcessTerminalReason, SessionEvent, SessionId, Timestamp,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// A lifecycle event of incarnation `inc` (of 6; 0 and 4, 1 and 5 share a loop and
    /// a handle).
    Event { inc: usize, kind: usize },
    /// A completion command under loop `l`, handle `h` (restore's own lost-on-restore
    /// completion when `lost`).
    Complete { l: usize, h: usize, lost: bool },
    /// The consumption of the `nth` command journaled so far.
    Consume { nth: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..6usize, 0..5usize).prop_map(|(inc, kind)| Op::Event { inc, kind }),
        2 => (0..2usize, 0..2usize, any::<bool>()).prop_map(|(l, h, lost)| Op::Complete { l, h, lost }),
        2 => (0..64usize).prop_map(|nth| Op::Consume { nth }),
    ]
}

fn records(session: SessionId, ops: &[Op]) -> Vec<JournalRecord> {
    let loops = [LoopId::new(), LoopId::new()];
    let handles = ["alpha", "beta"];
    // Incarnation i: loop i % 2, handle (i / 2) % 2, its own origin and creation time.
    let incarnations: Vec<(LoopId, &str, ExecutionId, Timestamp)> = (0..6)
        .map(|i| {
            (
                loops[i % 2],
                handles[(i / 2) % 2],
                ExecutionId::new(),
                Timestamp::constant(1_699_999_000 + i as i64, 0),
            )
        })
        .collect();
    let mut commands: Vec<CommandId> = Vec::new();
    let mut consumed: HashSet<CommandId> = HashSet::new();
    let mut out = Vec::new();
    for op in ops {
        match op {
            Op::Event { inc, kind } => {
                let (loop_id, handle, origin, created) = incarnations[*inc];
                let kind = ProcessLifecycleKind::ALL[*kind];
                let m = ProcessLifecycleMetadata {
                    event_id: EventId::new(),
                    process_handle: handle.to_owned(),
                    origin_execution_id: origin,
                    process_created_at: created,
                    ..sample::lifecycle(session, loop_id, kind)
                };
                out.push(JournalRecord::Event(SessionEvent::Lifecycle(m)));
            }
            Op::Complete { l, h, lost } => {
                let mut n = sample::notification(session, loops[*l]);
                n.process_handle = handles[*h].to_owned();
                if *lost {
                    n.state = ProcessLifecycleState::LostOnRestore;
                    n.reason = ProcessTerminalReason::LostOnRestore;
                }
                commands.push(n.command_id);
                out.push(JournalRecord::Command(ProcessNotification::new(n)));
            }
            Op::Consume { nth } => {
                if commands.is_empty() {
                    continue;
                }
                let cause = commands[nth % commands.len()];
                if consumed.insert(cause) {
                    let loop_id = loops[0];
                    out.push(JournalRecord::Event(SessionEvent::NotificationConsumed(
                        NotificationConsumed::new(session, loop_id, cause),
                    )));
                }
            }
        }
    }
    out
}

/// The whole-log reading restore used before it streamed (kept verbatim as the oracle).
fn reference(frames: Vec<(u64, JournalRecord)>) -> RestoreReport {
    type Inc = (LoopId, String, ExecutionId, Timestamp);
    let of = |m: &ProcessLifecycleMetadata| -> Inc {
        (
            m.loop_id,
            m.process_handle.clone(),
            m.origin_execution_id,
            m.process_created_at,
        )
    };
    let mut commands: Vec<ProcessNotification> = Vec::new();
    let mut consumed: HashSet<CommandId> = HashSet::new();
    let mut last_event: HashMap<Inc, (u64, ProcessLifecycleMetadata)> = HashMap::new();
    let mut current: HashMap<(LoopId, String), Inc> = HashMap::new();
    let mut completed: HashSet<Inc> = HashSet::new();
    let mut last_seq = 0;
    for (seq, record) in frames {
        last_seq = seq;
        match record {
            JournalRecord::Command(c) => {
                let n = c.notification();
                if n.state != ProcessLifecycleState::LostOnRestore
                    && let Some(process) = current.get(&(n.loop_id, n.process_handle.clone()))
                {
                    completed.insert(process.clone());
                }
                commands.push(c);
            }
            JournalRecord::Event(SessionEvent::NotificationConsumed(c)) => {
                consumed.insert(c.cause());
            }
            JournalRecord::Event(SessionEvent::NotificationAbandoned(a)) => {
                consumed.insert(a.cause());
            }
            // The generated logs never end their session (restore of an ended session
            // is checked elsewhere).
            JournalRecord::Event(SessionEvent::SessionEnded(_)) => {}
            JournalRecord::Event(SessionEvent::Lifecycle(m)) => {
                let process = of(&m);
                completed.remove(&process);
                current.insert((m.loop_id, m.process_handle.clone()), process.clone());
                last_event.insert(process, (seq, m));
            }
        }
    }
    let mut pending: BTreeMap<LoopId, Vec<ProcessNotification>> = BTreeMap::new();
    for c in commands
        .into_iter()
        .filter(|c| !consumed.contains(&c.command_id()))
    {
        pending.entry(c.loop_id()).or_default().push(c);
    }
    let mut orphans: Vec<(u64, ProcessLifecycleMetadata)> = last_event
        .into_iter()
        .filter(|(process, (_, m))| !m.is_terminal() && !completed.contains(process))
        .map(|(_, last)| last)
        .collect();
    orphans.sort_by_key(|(seq, _)| *seq);
    RestoreReport {
        pending,
        orphans: orphans.into_iter().map(|(_, m)| m).collect(),
        last_seq,
        state: notify_journal::SessionState::Live,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn streaming_restore_reports_what_the_whole_log_says(ops in proptest::collection::vec(op(), 0..200)) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let session = SessionId::new();
        let journal = MemoryJournal::new();
        let mut frames = Vec::new();
        for r in records(session, &ops) {
            let seq = rt.block_on(journal.append(session, r.clone())).unwrap().seq;
            frames.push((seq, r));
        }
        let got = rt.block_on(restore(session, &journal)).unwrap();
        prop_assert_eq!(got, reference(frames));
    }
}

#[test]
fn a_long_log_is_restored_across_many_pages() {
    // Well over one page of restore's reads, with pending ones at both ends.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let session = SessionId::new();
    let journal = MemoryJournal::new();
    let loop_id = LoopId::new();
    let mut frames = Vec::new();
    for i in 0..3000 {
        let cmd = sample::command(session, loop_id);
        let cause = CommandId::from_uuid(cmd.key());
        let mut batch = vec![cmd];
        if i % 500 != 0 {
            batch.push(sample::consumed(session, loop_id, cause));
        }
        for r in batch {
            let seq = rt.block_on(journal.append(session, r.clone())).unwrap().seq;
            frames.push((seq, r));
        }
    }
    // Restore reads through a wrapper that counts its reads: the log must take more
    // than one page (a restore that read it whole in one call would hold it all).
    let counted = FaultyJournal::new(journal.clone());
    let got = rt.block_on(restore(session, &counted)).unwrap();
    assert_eq!(got.pending_count(), 6);
    assert_eq!(got, reference(frames));
    let replays = counted.control().stats().replays;
    assert!(
        replays >= 2,
        "the {} frames were read in {replays} page(s): restore did not page",
        got.last_seq
    );
}
