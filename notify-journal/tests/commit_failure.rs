//! An injected commit failure fails its whole batch with `CommitFailed`, poisons the
//! handle, and a retry of the same records after reopening ends as appended or
//! duplicate: never lost, never doubled.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this file's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashSet;

use common::*;
use notify_journal::{AppendError, AppendOutcome, RedbJournal, RedbOptions};

#[test]
fn failed_commit_fails_the_batch_poisons_and_retries_are_safe() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let ctl = Control::new();
    let j = RedbJournal::open_with_backend(ctl.backend(), RedbOptions::default()).unwrap();
    let (s, t) = (session(1), session(2));
    let r0 = command(s, 0);
    let first0 = rt.block_on(j.append(s, r0.clone())).unwrap();

    // Hold a lone commit at its sync, queue a batch behind it, and make the batch's
    // sync fail.
    ctl.hold();
    let lone = rt.spawn(j.append(s, command(s, 1)));
    ctl.wait_held();
    ctl.crash_at_sync(ctl.syncs() + 2);
    let batch = vec![
        (s, command(s, 2)),
        (t, command(t, 1)),
        (s, command(s, 2)), // same new key again, in the same batch
        (s, r0.clone()),    // an already committed record
    ];
    let tasks: Vec<_> = batch
        .iter()
        .map(|(s, r)| rt.spawn(j.append(*s, r.clone())))
        .collect();
    ctl.release();

    let lone = rt.block_on(lone).unwrap().unwrap();
    assert_eq!(
        lone,
        AppendOutcome {
            seq: 2,
            appended: true
        }
    );
    for task in tasks {
        let got = rt.block_on(task).unwrap();
        assert!(matches!(got, Err(AppendError::CommitFailed(_))), "{got:?}");
        assert!(got.unwrap_err().is_retryable());
    }
    // Never again through this handle.
    assert!(j.is_poisoned());
    assert!(matches!(
        rt.block_on(j.append(s, command(s, 3))),
        Err(AppendError::Poisoned)
    ));
    j.close();
    drop(j);

    // Whatever reached the disk, reopening and retrying converges.
    for (kind, image) in [
        ("durable", ctl.durable_image()),
        ("volatile", ctl.volatile_image()),
        ("torn", ctl.torn_image(42)),
    ] {
        let path = dir.path().join(format!("{kind}.redb"));
        std::fs::write(&path, image).unwrap();
        let j = RedbJournal::open(&path, RedbOptions::default()).unwrap();
        let mut retried = Vec::new();
        for (session, r) in &batch {
            let o = rt.block_on(j.append(*session, r.clone())).unwrap();
            retried.push(o);
        }
        assert_eq!(retried[0].seq, 3, "{kind}");
        assert_eq!(retried[1].seq, 1, "{kind}");
        assert_eq!(
            retried[2],
            AppendOutcome {
                seq: 3,
                appended: false
            },
            "{kind}"
        );
        assert_eq!(
            retried[3],
            AppendOutcome {
                seq: first0.seq,
                appended: false
            }
        );
        for session in [s, t] {
            let frames = j.replay_blocking(session, 1, usize::MAX).unwrap();
            let mut keys = HashSet::new();
            for (i, (seq, r)) in frames.iter().enumerate() {
                assert_eq!(*seq, i as u64 + 1);
                assert!(keys.insert(r.key()), "doubled after retry ({kind})");
            }
        }
        assert_eq!(j.last_seq_blocking(s).unwrap(), 3);
        j.close();
    }
}
