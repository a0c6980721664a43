//! The log's tail (format 3): frames whose place in their session's log is still in the
//! tail, keyed by log position, are read, looked up and appended after like folded
//! ones; folds keep every frame; and damage to the tail is named, never read past.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this file's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{command, open, session, three_frames};
use notify_journal::{
    AppendError, Corruption, JournalError, JournalRead, Problem, PurgeStep, RedbJournal,
    RedbOptions, replay_all,
};
use notify_testkit::tamper::{self, POSITIONS, TAIL};
use notify_types::{SessionId, Timestamp};

fn u(s: SessionId) -> u128 {
    s.as_uuid().as_u128()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_in_the_tail_read_and_append_as_folded_ones_and_a_fold_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    // Folds at 5 frames: 40 appends over 4 sessions fold several times.
    let j = RedbJournal::open(&path, RedbOptions::default().tail_max(5)).unwrap();
    let sessions: Vec<SessionId> = (1..=4).map(session).collect();
    for i in 1..=10 {
        for s in &sessions {
            let o = j.append(*s, command(*s, i)).await.unwrap();
            assert_eq!((o.seq, o.appended), (i, true));
        }
        // Some frames are in the tail, some folded, at every point.
        let tail = j.stats_blocking().unwrap().tail;
        assert!(tail <= 5 + 4, "the tail holds {tail}");
    }
    for s in &sessions {
        let log = replay_all(&j, *s).await.unwrap();
        assert_eq!(log.len(), 10);
        for (seq, r) in &log {
            assert_eq!(*r, command(*s, *seq));
            assert_eq!(j.lookup(*s, r.key()).await.unwrap(), Some(*seq));
        }
        // A retry is a duplicate wherever its frame's place is.
        let again = j.append(*s, command(*s, 3)).await.unwrap();
        assert_eq!((again.seq, again.appended), (3, false));
        assert_eq!(j.last_seq(*s).await.unwrap(), 10);
    }
    // A session only in the tail is listed.
    let fresh = session(9);
    j.append(fresh, command(fresh, 1)).await.unwrap();
    assert!(j.stats_blocking().unwrap().tail > 0);
    assert!(j.sessions().await.unwrap().contains(&fresh));
    let report = j.verify(10).await.unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.frames, 41);
    j.close();
    // A clean close folded it all.
    let j = open(&path);
    assert_eq!(j.stats_blocking().unwrap().tail, 0);
    assert!(j.verify(10).await.unwrap().is_clean());
    assert_eq!(replay_all(&j, fresh).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_step_folds_the_tail_first_and_purges_a_log_partly_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = session(4);
    {
        let j = open(&path);
        common::ended_session(&j, s, 5).await;
        j.close();
    }
    // Its last three frames (the end marker among them) back in the tail.
    tamper::unfold(&path, u(s), 4).unwrap();
    let j = open(&path);
    assert_eq!(j.stats_blocking().unwrap().tail, 3);
    assert_eq!(replay_all(&j, s).await.unwrap().len(), 6);
    let later = common::later();
    let mut steps = 0;
    loop {
        let step = j.purge_step(later, 100).await.unwrap();
        if step == PurgeStep::IDLE {
            break;
        }
        steps += 1;
    }
    assert!(steps >= 1);
    assert_eq!(j.stats_blocking().unwrap().tail, 0);
    assert_eq!(j.stats_blocking().unwrap().frames, 0);
    assert!(matches!(
        replay_all(&j, s).await,
        Err(JournalError::Purged { .. })
    ));
    assert!(j.verify(10).await.unwrap().is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tail_entry_naming_another_frame_is_misplaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = three_frames(&path).await;
    tamper::unfold(&path, u(s), 2).unwrap();
    // The tail entry of frame 3 names seq 2: two tail entries say seq 2, none seq 3.
    tamper::with_txn(&path, |txn| {
        let third = tamper::position(txn, u(s), 3)?;
        txn.open_table(TAIL)
            .unwrap()
            .insert(third, (u(s), 2))
            .unwrap();
        Ok(())
    })
    .unwrap();
    let j = open(&path);
    match j.replay(s, 1, 10).await {
        Err(JournalError::Corrupt { .. }) => {}
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let report = j.verify(10).await.unwrap();
    assert!(!report.is_clean(), "{report}");
    assert!(
        report
            .problems
            .iter()
            .any(|p| matches!(p, Problem::Orphan { .. } | Problem::Frame { .. })),
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_tail_entry_is_a_gap_not_a_short_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = three_frames(&path).await;
    tamper::unfold(&path, u(s), 2).unwrap();
    tamper::with_txn(&path, |txn| {
        let second = tamper::position(txn, u(s), 2)?;
        txn.open_table(TAIL).unwrap().remove(second).unwrap();
        Ok(())
    })
    .unwrap();
    let j = open(&path);
    common::assert_seq_2_missing(&j, s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fold_that_finds_a_seq_already_positioned_writes_nothing_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = three_frames(&path).await;
    tamper::unfold(&path, u(s), 3).unwrap();
    // Seq 3 both in the tail and (naming frame 1) in the positions table.
    tamper::with_txn(&path, |txn| {
        let first = tamper::position(txn, u(s), 1)?;
        txn.open_table(POSITIONS)
            .unwrap()
            .insert((u(s), 3), first)
            .unwrap();
        Ok(())
    })
    .unwrap();
    // No scrub: the fold must find the damage itself.
    let j = common::open_unchecked(&path);
    // A chore folds first: the fold finds the entry there and refuses.
    let later = common::later();
    match j.purge_step(later, 10).await {
        Err(JournalError::Storage(e)) => {
            assert!(e.to_string().contains("already there"), "{e}");
        }
        other => panic!("expected the fold to refuse, got {other:?}"),
    }
    // Appends are refused as for damage found, naming it.
    match j.append(s, command(s, 4)).await {
        Err(AppendError::Damaged { detail }) => {
            assert!(detail.contains("already there"), "{detail}")
        }
        other => panic!("expected Damaged, got {other:?}"),
    }
    // Verify names the seq placed twice, and no gap after it.
    let report = j.verify(10).await.unwrap();
    assert!(
        report.problems.iter().any(|p| matches!(
            p,
            Problem::Frame { seq: 3, cause: Corruption::Inconsistent(why), .. } if why.contains("twice")
        )),
        "{report}"
    );
    assert!(
        !report
            .problems
            .iter()
            .any(|p| matches!(p, Problem::Gap { .. })),
        "{report}"
    );
    j.close();
    // Nothing was folded: the close does not fold through a poisoned handle.
    tamper::with_txn(&path, |txn| {
        let tail = txn.open_table(TAIL).unwrap();
        assert_eq!(redb::ReadableTableMetadata::len(&tail).unwrap(), 1);
        let first = tamper::position(txn, u(s), 1)?;
        let positions = txn.open_table(POSITIONS).unwrap();
        assert_eq!(
            redb::ReadableTable::get(&positions, (u(s), 3))
                .unwrap()
                .map(|g| g.value()),
            Some(first)
        );
        Ok(())
    })
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_import_writes_nothing_though_the_tail_was_folded_in_its_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let j = open(&path);
    // A live session with frames in the tail, and one the file does not know.
    let live = session(1);
    j.append(live, command(live, 1)).await.unwrap();
    assert_eq!(j.stats_blocking().unwrap().tail, 1);
    let unknown = session(2);
    let at = Timestamp::from_second(1_700_000_000).unwrap();
    let tombstone = notify_journal::SessionState::Purged(notify_journal::Tombstone {
        ended_at: at,
        purged_at: at,
        last_seq: 3,
        frames: 3,
    });
    let ended = notify_journal::SessionState::Ended {
        ended_at: at,
        last_seq: 9,
    };
    // The second state conflicts (the live session did not end at 9): all refused.
    match j
        .import_states(vec![(unknown, tombstone), (live, ended)])
        .await
    {
        Err(notify_journal::ImportStateError::Conflict { .. }) => {}
        other => panic!("expected Conflict, got {other:?}"),
    }
    // Nothing of it was written: the unknown session is still unknown (and takes
    // appends), and the tail is as it was.
    assert_eq!(
        j.session_state(unknown).await.unwrap(),
        notify_journal::SessionState::Live
    );
    assert_eq!(j.stats_blocking().unwrap().tail, 1);
    let o = j.append(unknown, command(unknown, 1)).await.unwrap();
    assert_eq!((o.seq, o.appended), (1, true));
    assert!(j.verify(10).await.unwrap().is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_appends_alone_fold_the_tail_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let j = RedbJournal::open(&path, RedbOptions::default().tail_max(4)).unwrap();
    let s = session(1);
    for i in 1..=30 {
        let o = j
            .append_with(s, command(s, i), move |t| {
                let mut table = t.open_table::<u64, u64>("app/seen")?;
                table.insert(i, i)?;
                Ok(())
            })
            .await
            .unwrap();
        assert_eq!((o.seq, o.appended), (i, true));
        // Bounded by tail_max and one turn's appends, whatever else runs.
        let tail = j.stats_blocking().unwrap().tail;
        assert!(
            tail <= 4 + 1,
            "the tail holds {tail} after {i} transactional appends"
        );
    }
    assert_eq!(replay_all(&j, s).await.unwrap().len(), 30);
    assert!(j.verify(10).await.unwrap().is_clean());
}
