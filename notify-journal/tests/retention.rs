//! Session end, purge and tombstones in the redb journal: what each state answers,
//! purge steps, tombstone drops and persistence across reopen. Damaged rows are in
//! `retention_damage.rs`; the space a steady state uses, offline compaction and large
//! tombstone drops in `retention_steady.rs`.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this file's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use common::{command, command_with, earlier, ended, ended_session, key_of, later, open, session};
use notify_journal::{
    AppendError, AppendOutcome, JournalError, JournalRead, PurgeStep, RedbJournal, SessionState,
    purge, purge_with, replay_all,
};
use notify_testkit::tamper::{self, RETENTION, SESSIONS};
use notify_types::Timestamp;
use redb::ReadableTableMetadata;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_session_refuses_appends_and_keeps_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir.path().join("j.redb"));
    let s = session(1);
    let before = Timestamp::now();
    let last = ended_session(&j, s, 3).await;
    let after = Timestamp::now();
    match j.session_state(s).await.unwrap() {
        SessionState::Ended { ended_at, last_seq } => {
            assert_eq!(last_seq, last);
            assert!(before <= ended_at && ended_at <= after, "{ended_at}");
        }
        other => panic!("expected Ended, got {other:?}"),
    }
    // A new record is refused; a retry of an old one is a duplicate (the index is
    // asked before the end); the end again is a duplicate.
    assert!(matches!(
        j.append(s, command(s, 9)).await,
        Err(AppendError::SessionEnded { session, purged: false }) if session == s
    ));
    assert_eq!(
        j.append(s, command(s, 1)).await.unwrap(),
        AppendOutcome {
            seq: 1,
            appended: false
        }
    );
    assert_eq!(
        j.append(s, ended(s)).await.unwrap(),
        AppendOutcome {
            seq: last,
            appended: false
        }
    );
    assert_eq!(replay_all(&j, s).await.unwrap().len() as u64, last);
    assert_eq!(j.lookup(s, key_of(s, 2)).await.unwrap(), Some(2));
    assert_eq!(j.last_seq(s).await.unwrap(), last);
    // Another session is untouched.
    let other = session(2);
    assert_eq!(j.session_state(other).await.unwrap(), SessionState::Live);
    assert_eq!(j.append(other, command(other, 1)).await.unwrap().seq, 1);
    // The end survives a reopen.
    let path = j.path().to_path_buf();
    j.close();
    let j = open(&path);
    assert!(j.session_state_blocking(s).unwrap().is_ended());
    assert!(matches!(
        j.append(s, command(s, 10)).await,
        Err(AppendError::SessionEnded { purged: false, .. })
    ));
    let report = j.verify(10).await.unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!((report.ended, report.tombstones), (1, 0));
}

/// Appends queued behind the end marker resolve as after its commit: new keys are
/// refused, while a retry of the key journaled before it is a duplicate and other bytes
/// under that key a collision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_queued_behind_the_end_marker_in_one_batch_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir.path().join("j.redb"));
    let s = session(1);
    j.append(s, command(s, 0)).await.unwrap();
    // All queued at once (the request is queued when `append` is called): the end
    // and everything behind it resolve in queue order, as if sequential.
    let mut futures = vec![
        j.append(s, ended(s)),
        j.append(s, command(s, 0)),
        j.append(s, command_with(s, key_of(s, 0), 1)),
    ];
    futures.extend((1..=20).map(|i| j.append(s, command(s, i))));
    let mut results = Vec::new();
    for f in futures {
        results.push(f.await);
    }
    assert_eq!(results[0].as_ref().unwrap().seq, 2);
    assert_eq!(
        results[1].as_ref().unwrap(),
        &AppendOutcome {
            seq: 1,
            appended: false
        }
    );
    assert!(matches!(
        results[2],
        Err(AppendError::Collision { seq: 1, .. })
    ));
    for r in &results[3..] {
        assert!(matches!(
            r,
            Err(AppendError::SessionEnded { purged: false, .. })
        ));
    }
    assert_eq!(j.last_seq(s).await.unwrap(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_steps_leave_a_tombstone_and_never_a_partial_log() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir.path().join("j.redb"));
    let (s, live) = (session(1), session(2));
    let last = ended_session(&j, s, 6).await;
    for i in 1..=3 {
        j.append(live, command(live, i)).await.unwrap();
    }
    let ended_at = match j.session_state(s).await.unwrap() {
        SessionState::Ended { ended_at, .. } => ended_at,
        other => panic!("{other:?}"),
    };
    // Not due yet.
    assert_eq!(j.purge_step(earlier(), 2).await.unwrap(), PurgeStep::IDLE);
    assert!(!j.session_state(s).await.unwrap().is_purged());

    let first = j.purge_step(later(), 3).await.unwrap();
    assert_eq!(
        first,
        PurgeStep {
            session: Some(s),
            frames_removed: 3,
            finished: false
        }
    );
    // Half purged: only the tombstone is answered.
    let tombstone = match j.session_state(s).await.unwrap() {
        SessionState::Purged(t) => t,
        other => panic!("expected Purged, got {other:?}"),
    };
    assert_eq!(
        (tombstone.ended_at, tombstone.last_seq, tombstone.frames),
        (ended_at, last, last)
    );
    assert!(
        matches!(j.replay(s, 1, 100).await, Err(JournalError::Purged { session }) if session == s)
    );
    assert!(matches!(
        j.replay(s, 5, 100).await,
        Err(JournalError::Purged { .. })
    ));
    assert!(matches!(
        j.lookup(s, key_of(s, 5)).await,
        Err(JournalError::Purged { .. })
    ));
    assert_eq!(j.last_seq(s).await.unwrap(), last);
    for r in [ended(s), command(s, 5), command(s, 100)] {
        assert!(matches!(
            j.append(s, r).await,
            Err(AppendError::SessionEnded { purged: true, .. })
        ));
    }
    let mid = j.verify(10).await.unwrap();
    assert!(mid.is_clean(), "{mid}");
    assert_eq!((mid.ended, mid.tombstones, mid.frames), (0, 1, 4 + 3));

    // An unfinished purge is finished first, whatever the horizon.
    let second = j.purge_step(earlier(), 3).await.unwrap();
    assert_eq!(
        second,
        PurgeStep {
            session: Some(s),
            frames_removed: 3,
            finished: false
        }
    );
    let third = j.purge_step(earlier(), 3).await.unwrap();
    assert_eq!(
        third,
        PurgeStep {
            session: Some(s),
            frames_removed: 1,
            finished: true
        }
    );
    assert_eq!(j.purge_step(later(), 3).await.unwrap(), PurgeStep::IDLE);
    assert_eq!(
        j.session_state(s).await.unwrap(),
        SessionState::Purged(tombstone)
    );
    assert_eq!(j.sessions().await.unwrap(), vec![s, live]);
    assert_eq!(j.sessions_after(Some(s), 10).await.unwrap(), vec![live]);
    assert_eq!(j.sessions_after(None, 1).await.unwrap(), vec![s]);
    // The live session is whole and still takes appends.
    assert_eq!(replay_all(&j, live).await.unwrap().len(), 3);
    assert_eq!(j.append(live, command(live, 4)).await.unwrap().seq, 4);
    let done = j.verify(10).await.unwrap();
    assert!(done.is_clean(), "{done}");
    assert_eq!(
        (done.sessions, done.tombstones, done.frames, done.keys),
        (1, 1, 4, 4)
    );

    // The tombstone survives a reopen, and a verify of the closed file.
    let path = j.path().to_path_buf();
    j.close();
    let file = RedbJournal::verify_file(&path, 10).unwrap();
    assert!(file.is_clean(), "{file}");
    let j = open(&path);
    assert_eq!(
        j.session_state_blocking(s).unwrap(),
        SessionState::Purged(tombstone)
    );
    assert!(matches!(
        j.append(s, command(s, 1)).await,
        Err(AppendError::SessionEnded { purged: true, .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oldest_end_is_purged_first_and_purge_reports_totals() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir.path().join("j.redb"));
    // Ended in the order 3, 1, 2 (IDs in another order).
    let order = [session(3), session(1), session(2)];
    for s in order {
        ended_session(&j, s, 4).await;
    }
    let mut named = Vec::new();
    let report = purge_with(&j, later(), 2, |step, _| {
        if named.last() != step.session.as_ref() {
            named.extend(step.session);
        }
    })
    .await
    .unwrap();
    assert_eq!(named, order);
    assert_eq!((report.sessions, report.frames, report.steps), (3, 15, 9));
    assert_eq!(purge(&j, later(), 2).await.unwrap().steps, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tombstones_drop_only_after_their_purge_finished_and_the_session_is_new_again() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir.path().join("j.redb"));
    let (done, half, live) = (session(1), session(2), session(3));
    ended_session(&j, done, 2).await;
    j.append(live, command(live, 1)).await.unwrap();
    purge(&j, later(), 10).await.unwrap();
    ended_session(&j, half, 4).await;
    assert!(j.purge_step(later(), 1).await.unwrap().session == Some(half));
    // Too recent, then only the finished one.
    assert_eq!(j.drop_tombstones(earlier(), 10).await.unwrap(), 0);
    assert_eq!(j.drop_tombstones(later(), 0).await.unwrap(), 0);
    assert_eq!(j.drop_tombstones(later(), 10).await.unwrap(), 1);
    assert_eq!(j.session_state(done).await.unwrap(), SessionState::Live);
    assert!(j.session_state(half).await.unwrap().is_purged());
    assert_eq!(j.sessions().await.unwrap(), vec![half, live]);
    // Unknown again: a late append starts a new log at seq 1.
    assert_eq!(j.last_seq(done).await.unwrap(), 0);
    assert!(j.replay(done, 1, 10).await.unwrap().is_empty());
    assert_eq!(j.append(done, command(done, 1)).await.unwrap().seq, 1);
    let report = j.verify(10).await.unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.tombstones, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purging_a_large_session_in_small_steps_keeps_every_live_append() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir.path().join("j.redb"));
    let (big, live) = (session(1), session(2));
    ended_session(&j, big, 200).await;
    // Purge and append at the same time: each step is its own transaction between
    // batches.
    let purger = {
        let j = j.clone();
        tokio::spawn(async move { purge(&j, later(), 7).await })
    };
    for i in 1..=100 {
        assert_eq!(j.append(live, command(live, i)).await.unwrap().seq, i);
    }
    let report = purger.await.unwrap().unwrap();
    assert_eq!((report.sessions, report.frames), (1, 201));
    assert_eq!(report.steps, 201u64.div_ceil(7));
    assert_eq!(replay_all(&j, live).await.unwrap().len(), 100);
    let v = j.verify(10).await.unwrap();
    assert!(v.is_clean(), "{v}");
    assert_eq!((v.frames, v.keys, v.tombstones), (100, 100, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_build_refuses_a_file_with_ended_sessions() {
    // Builds before session ends refuse a format-2 file whose `notify_sessions` has a
    // row (OpenError::UnsupportedContent): ending a session writes one.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let j = open(&path);
    let s = session(1);
    j.append(s, command(s, 1)).await.unwrap();
    j.close();
    let rows = |path: &Path| {
        let db = redb::Database::open(path).unwrap();
        let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
        let n = txn.open_table(SESSIONS).unwrap().len().unwrap();
        let r = txn.open_table(RETENTION).unwrap().len().unwrap();
        (n, r)
    };
    assert_eq!(rows(&path), (0, 0), "a live journal's rows stay empty");
    let j = open(&path);
    j.append(s, ended(s)).await.unwrap();
    j.close();
    assert_eq!(rows(&path), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_without_the_retention_table_opens_and_gains_it_on_the_first_end() {
    // A file laid out by a build before session ends has no `notify_retention`.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = session(1);
    let j = open(&path);
    j.append(s, command(s, 1)).await.unwrap();
    j.close();
    tamper::with_txn(&path, |txn| {
        assert!(txn.delete_table(RETENTION).unwrap());
        Ok(())
    })
    .unwrap();
    let j = open(&path);
    let clean = j.verify(10).await.unwrap();
    assert!(clean.is_clean(), "{clean}");
    assert_eq!(j.purge_step(later(), 10).await.unwrap(), PurgeStep::IDLE);
    assert_eq!(j.drop_tombstones(later(), 10).await.unwrap(), 0);
    j.append(s, ended(s)).await.unwrap();
    assert_eq!(purge(&j, later(), 10).await.unwrap().sessions, 1);
    let v = j.verify(10).await.unwrap();
    assert!(v.is_clean(), "{v}");
}
