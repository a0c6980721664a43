//! Crash tests through a fault-injecting `redb::StorageBackend`: durability freezes at
//! sync N (that sync fails and the device is gone), for every N of a small workload.
//! Each crash image (only what was synced; everything written; a torn random subset of
//! the unsynced writes) is reopened from a file, and must hold every acknowledged
//! append at its seq, with gap-free, decodable, indexed logs.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this file's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::*;
use notify_journal::{AppendError, AppendOutcome, RedbJournal, RedbOptions, RedbVerifyOnOpen};
use notify_testkit::crash;
use notify_types::{JournalRecord, SessionId};

const SESSIONS: u128 = 3;
const ROUNDS: u64 = 5;

/// Per round: one new record per session, concurrently, plus a retry of the previous
/// round's first record. Stops at the first error. Returns the acknowledged appends.
fn workload(rt: &tokio::runtime::Runtime, j: &RedbJournal) -> Vec<(SessionId, JournalRecord, u64)> {
    let mut acked = Vec::new();
    for round in 0..ROUNDS {
        let mut batch: Vec<(SessionId, JournalRecord)> = (0..SESSIONS)
            .map(|n| {
                let s = session(n);
                (s, command(s, round))
            })
            .collect();
        if round > 0 {
            let s = session(0);
            batch.push((s, command(s, round - 1)));
        }
        let tasks: Vec<_> = batch
            .iter()
            .map(|(s, r)| rt.spawn(j.append(*s, r.clone())))
            .collect();
        let mut failed = false;
        for ((s, r), t) in batch.into_iter().zip(tasks) {
            match rt.block_on(t).unwrap() {
                Ok(AppendOutcome { seq, .. }) => acked.push((s, r, seq)),
                Err(AppendError::CommitFailed(_) | AppendError::Poisoned) => failed = true,
                Err(e) => panic!("unexpected error {e:?}"),
            }
        }
        if failed {
            break;
        }
    }
    acked
}

fn verify_image(
    rt: &tokio::runtime::Runtime,
    path: &Path,
    acked: &[(SessionId, JournalRecord, u64)],
) {
    let j = RedbJournal::open(
        path,
        RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Full),
    )
    .unwrap();
    let mut logs: HashMap<SessionId, Vec<(u64, JournalRecord)>> = HashMap::new();
    for n in 0..SESSIONS {
        let s = session(n);
        let frames = j.replay_blocking(s, 1, usize::MAX).unwrap();
        for (i, (seq, r)) in frames.iter().enumerate() {
            assert_eq!(*seq, i as u64 + 1, "gap in session {s}");
            assert_eq!(
                j.lookup_blocking(s, r.key()).unwrap(),
                Some(*seq),
                "index disagrees"
            );
        }
        assert_eq!(j.last_seq_blocking(s).unwrap(), frames.len() as u64);
        logs.insert(s, frames);
    }
    for (s, r, seq) in acked {
        let log = &logs[s];
        assert_eq!(
            log.get(*seq as usize - 1),
            Some(&(*seq, r.clone())),
            "acknowledged append lost or moved"
        );
        // A retry of an acknowledged record is a duplicate at its seq.
        let again = rt.block_on(j.append(*s, r.clone())).unwrap();
        assert_eq!(
            again,
            AppendOutcome {
                seq: *seq,
                appended: false
            }
        );
    }
    // The journal still takes new appends.
    let s = session(0);
    let fresh = rt.block_on(j.append(s, command(s, 999))).unwrap();
    assert_eq!(fresh.seq, logs[&s].len() as u64 + 1);
    j.close();
}

#[test]
fn every_acknowledged_append_survives_a_crash_at_every_sync() {
    sweep_every_sync(&RedbOptions::default());
}

/// The same with the log's tail folded every two frames: the crash points fall on
/// folds too (every batch's commit after the first folds what the one before left).
#[test]
fn every_acknowledged_append_survives_a_crash_at_every_sync_while_the_tail_folds() {
    sweep_every_sync(&RedbOptions::default().tail_max(2));
}

fn sweep_every_sync(options: &RedbOptions) {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();

    // Dry run: how many syncs the whole workload (open, appends, close) makes, and how
    // much of the log the tail held when it ended (before the close's fold).
    let ((acked, in_tail), total) = crash::dry_run(options, |j| {
        let acked = workload(&rt, j);
        let stats = j.stats_blocking().unwrap();
        (acked, (stats.tail, stats.frames))
    })
    .unwrap();
    assert_eq!(acked.len() as u64, ROUNDS * SESSIONS as u64 + ROUNDS - 1);
    assert!(total > ROUNDS, "expected a sync per commit, got {total}");
    if options.tail_max_value() < 8 {
        let (tail, frames) = in_tail;
        assert!(
            tail < frames,
            "nothing folded before the close: {tail} of {frames} frames in the tail"
        );
    }

    // The crash points: see `crash::sweep`. A half-created file (the crash hit while
    // the file was being created in place: the path API creates beside and links, see
    // `crash_during_creation_...`) acknowledged nothing and is skipped.
    let crash::Sweep {
        runs,
        crashes,
        images,
    } = crash::sweep(
        dir.path(),
        total,
        options,
        |j| workload(&rt, j),
        |image, acked| verify_image(&rt, &image.path, acked),
    )
    .unwrap();
    assert_eq!(images, 3 * runs);
    // postmortem: this once demanded as many crashing runs as the dry run had syncs,
    // which failed whenever a run happened to batch into fewer commits. What matters
    // is that the sweep went past the workload's last sync (the last run did not
    // crash) after crashing at every sync point before it, at least one per round.
    assert!(
        runs > crashes,
        "the sweep never got past the workload's last sync"
    );
    assert!(
        crashes >= ROUNDS,
        "only {crashes} crash points for {ROUNDS} rounds"
    );
}
