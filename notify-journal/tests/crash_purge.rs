//! Crash images at every sync of session ends and purge steps, through the
//! fault-injecting `redb::StorageBackend` (see `crash_backend.rs`): durability freezes at
//! sync N, for every N of a workload that fills three sessions, ends two, purges them one
//! frame per step and drops their tombstones. Each image (only what was synced;
//! everything written; a torn subset of the unsynced writes) is reopened from a file and
//! must hold the live session whole, each ended session whole or tombstoned with its
//! right last seq (never a partial log answered), pass the deep verify, and let a
//! further purge finish.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this file's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::*;
use notify_journal::{
    AppendError, JournalError, RedbJournal, RedbOptions, RedbVerifyOnOpen, SessionState, purge,
    replay_all,
};
use notify_testkit::crash;
use notify_types::{JournalRecord, SessionId};

const FILL: u64 = 3;

/// What the workload was told before the crash.
#[derive(Debug, Default)]
struct Acked {
    /// (session, record, seq) of every acknowledged append.
    appends: Vec<(SessionId, JournalRecord, u64)>,
    /// Sessions whose end was acknowledged, with its seq.
    ends: HashMap<SessionId, u64>,
    /// Sessions whose purge step finishing them was acknowledged.
    purged: Vec<SessionId>,
    /// Whether the workload asked for the tombstone drop (it may have committed
    /// without its answer).
    drop_attempted: bool,
    /// Whether the tombstone drop was acknowledged.
    dropped: bool,
}

/// The errors a crashed device gives; any other answer is a wrong one.
fn is_crash_error(e: &AppendError) -> bool {
    matches!(
        e,
        AppendError::CommitFailed(_) | AppendError::Poisoned | AppendError::Storage(_)
    )
}

fn sessions() -> (SessionId, [SessionId; 2]) {
    (session(0), [session(1), session(2)])
}

/// Stops at the first error of a crashed device (the device is gone); any other error
/// fails the test.
fn workload(rt: &tokio::runtime::Runtime, j: &RedbJournal) -> Acked {
    let mut acked = Acked::default();
    let (live, ending) = sessions();
    let all = [live, ending[0], ending[1]];
    for i in 1..=FILL {
        let tasks: Vec<_> = all
            .iter()
            .map(|s| (*s, rt.spawn(j.append(*s, command(*s, i)))))
            .collect();
        for (s, t) in tasks {
            match rt.block_on(t).unwrap() {
                Ok(o) => acked.appends.push((s, command(s, i), o.seq)),
                Err(
                    AppendError::CommitFailed(_) | AppendError::Poisoned | AppendError::Storage(_),
                ) => {
                    return acked;
                }
                Err(e) => panic!("unexpected error {e:?}"),
            }
        }
    }
    for s in ending {
        match rt.block_on(j.append(s, ended(s))) {
            Ok(o) => {
                acked.ends.insert(s, o.seq);
            }
            Err(AppendError::CommitFailed(_) | AppendError::Poisoned | AppendError::Storage(_)) => {
                return acked;
            }
            Err(e) => panic!("unexpected error {e:?}"),
        }
    }
    let mut i = FILL;
    loop {
        // A live append between steps, as in production.
        i += 1;
        match rt.block_on(j.append(live, command(live, i))) {
            Ok(o) => acked.appends.push((live, command(live, i), o.seq)),
            Err(e) if is_crash_error(&e) => return acked,
            Err(e) => panic!("unexpected error {e:?} from a live append between purge steps"),
        }
        match rt.block_on(j.purge_step(later(), 1)) {
            Ok(step) => match step.session {
                None => break,
                Some(s) if step.finished => acked.purged.push(s),
                Some(_) => {}
            },
            Err(JournalError::Storage(_)) => return acked,
            Err(e) => panic!("unexpected error {e:?}"),
        }
    }
    acked.drop_attempted = true;
    match rt.block_on(j.drop_tombstones(later(), 10)) {
        Ok(n) => {
            assert_eq!(n, 2);
            acked.dropped = true;
        }
        Err(JournalError::Storage(_)) => {}
        Err(e) => panic!("unexpected error {e:?}"),
    }
    acked
}

/// What an image held of the ended sessions, for the tally.
#[derive(Debug, Default)]
struct Seen {
    whole: u64,
    tombstoned: u64,
    mid_purge: u64,
    dropped: u64,
}

fn verify_image(rt: &tokio::runtime::Runtime, path: &Path, acked: &Acked, seen: &mut Seen) {
    let j = RedbJournal::open(
        path,
        RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Full),
    )
    .unwrap();
    let report = j.verify_blocking(10).unwrap();
    assert!(report.is_clean(), "{report}");
    let (live, ending) = sessions();
    let mut logs: HashMap<SessionId, Vec<(u64, JournalRecord)>> = HashMap::new();
    // The live session: whole.
    assert_eq!(j.session_state_blocking(live).unwrap(), SessionState::Live);
    logs.insert(live, rt.block_on(replay_all(&j, live)).unwrap());
    for s in ending {
        let end = acked.ends.get(&s).copied();
        match j.session_state_blocking(s).unwrap() {
            SessionState::Live => {
                let log = rt.block_on(replay_all(&j, s)).unwrap();
                if log.is_empty() && end.is_some() {
                    // Its purge finished and its tombstone was dropped (the drop may
                    // have committed without its answer): unknown again. Only a drop
                    // the workload asked for may do that; anything else is a crash
                    // that wiped an acknowledged end (and a purged session's tombstone).
                    assert!(
                        acked.drop_attempted,
                        "an acknowledged end was lost: the session came back unknown, \
                         but no tombstone drop was ever asked for"
                    );
                    assert!(
                        acked.purged.contains(&s),
                        "dropped before its purge finished"
                    );
                    seen.dropped += 1;
                    assert_eq!(j.last_seq_blocking(s).unwrap(), 0);
                } else {
                    assert!(!acked.dropped, "a dropped tombstone came back");
                    assert_eq!(end, None, "an acknowledged end was lost");
                    logs.insert(s, log);
                }
            }
            SessionState::Ended { last_seq, .. } => {
                seen.whole += 1;
                assert!(!acked.purged.contains(&s), "an acknowledged purge was lost");
                let log = rt.block_on(replay_all(&j, s)).unwrap();
                assert_eq!(last_seq, FILL + 1);
                assert_eq!(log.len() as u64, last_seq, "an ended log not whole");
                assert_eq!(log.last().map(|f| &f.1), Some(&ended(s)));
                logs.insert(s, log);
            }
            SessionState::Purged(t) => {
                seen.tombstoned += 1;
                assert!(
                    !acked.dropped,
                    "an acknowledged tombstone drop was lost: the tombstone came back"
                );
                assert_eq!((t.last_seq, t.frames), (FILL + 1, FILL + 1));
                assert!(matches!(
                    j.replay_blocking(s, 1, 100),
                    Err(JournalError::Purged { .. })
                ));
                assert_eq!(j.last_seq_blocking(s).unwrap(), FILL + 1);
                if !acked.purged.contains(&s) {
                    seen.mid_purge += 1;
                }
            }
            other => panic!("unexpected state {other:?}"),
        }
    }
    for (s, r, seq) in &acked.appends {
        if let Some(log) = logs.get(s) {
            assert_eq!(
                log.get(*seq as usize - 1),
                Some(&(*seq, r.clone())),
                "acknowledged append lost or moved"
            );
        }
    }
    // A further purge finishes whatever the crash interrupted.
    rt.block_on(purge(&j, later(), 1)).unwrap();
    for s in ending {
        let state = j.session_state_blocking(s).unwrap();
        assert!(
            state.is_purged() || state == SessionState::Live,
            "{state:?}"
        );
    }
    let report = j.verify_blocking(10).unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.ended, 0);
    j.close();
}

#[test]
fn ends_and_purges_survive_a_crash_at_every_sync() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();

    // Dry run: how many syncs the whole workload makes.
    let (acked, total) = crash::dry_run(&RedbOptions::default(), |j| workload(&rt, j)).unwrap();
    assert!(acked.dropped, "the dry run did not complete");
    assert_eq!(acked.purged.len(), 2);

    let mut seen = Seen::default();
    let crash::Sweep {
        runs,
        crashes,
        images,
    } = crash::sweep(
        dir.path(),
        total,
        &RedbOptions::default(),
        |j| workload(&rt, j),
        |image, acked| {
            // The workload stops early only on a crashed device's errors.
            assert!(
                acked.dropped || image.crashed,
                "the workload stopped at sync {} without a crash: {acked:?}",
                image.crash_at
            );
            verify_image(&rt, &image.path, acked, &mut seen);
        },
    )
    .unwrap();
    eprintln!(
        "{total} syncs in the workload; {runs} runs, {crashes} crashed, {images} images: \
         ended sessions found whole {}, tombstoned {} (mid-purge, unacknowledged {}), dropped {}",
        seen.whole, seen.tombstoned, seen.mid_purge, seen.dropped
    );
    assert!(
        runs > crashes,
        "the sweep never got past the workload's last sync"
    );
    assert!(seen.whole > 0 && seen.tombstoned > 0 && seen.mid_purge > 0 && seen.dropped > 0);
}
