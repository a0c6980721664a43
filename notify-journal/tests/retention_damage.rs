//! Damaged retention rows and frames in the redb journal: named as corruption on every
//! read, never believed, and stopping a purge before it writes; closed journals refuse
//! purges.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this file's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use common::{command, ended, ended_session, key_of, later, open, session, u};
use notify_journal::{
    AppendError, Corruption, JournalError, JournalRead, Problem, RedbJournal, SessionState,
};
use notify_testkit::tamper::{self, RETENTION, SESSIONS};
use notify_types::SessionId;
use redb::ReadableTable;

/// Rewrites the row of `s` with `edit`, resealing its checksum when `reseal`.
fn edit_row(path: &Path, s: SessionId, reseal: bool, edit: impl FnOnce(&mut Vec<u8>)) {
    tamper::with_txn(path, |txn| {
        let mut t = txn.open_table(SESSIONS).unwrap();
        let mut row = t.get(u(s)).unwrap().unwrap().value().to_vec();
        edit(&mut row);
        if reseal {
            let crc = crc32c::crc32c(&row[4..]);
            row[..4].copy_from_slice(&crc.to_be_bytes());
        }
        t.insert(u(s), row.as_slice()).unwrap();
        Ok(())
    })
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_row_is_corrupt_everywhere_and_never_believed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let (s, live) = (session(1), session(2));
    let j = open(&path);
    ended_session(&j, s, 2).await;
    j.append(live, command(live, 1)).await.unwrap();
    j.close();
    edit_row(&path, s, false, |row| row[60] ^= 0x10);
    let j = open(&path);
    let checksum = |e: &JournalError| matches!(e, JournalError::Corrupt { session, source: Corruption::Checksum { .. }, .. } if *session == s);
    assert!(checksum(&j.session_state(s).await.unwrap_err()));
    assert!(checksum(&j.replay(s, 1, 10).await.unwrap_err()));
    assert!(checksum(&j.lookup(s, key_of(s, 1)).await.unwrap_err()));
    assert!(checksum(&j.last_seq(s).await.unwrap_err()));
    assert!(matches!(
        j.append(s, command(s, 7)).await,
        Err(AppendError::Corrupt {
            source: Corruption::Checksum { .. },
            ..
        })
    ));
    // The purge does not remove what it cannot account for; appends elsewhere go on.
    assert!(matches!(
        j.purge_step(later(), 10).await,
        Err(JournalError::Corrupt { session, .. }) if session == s
    ));
    assert!(!j.is_poisoned());
    assert_eq!(j.append(live, command(live, 2)).await.unwrap().seq, 2);
    let v = j.verify(10).await.unwrap();
    assert_eq!(v.problem_count, 1, "{v}");
    assert!(matches!(&v.problems[0], Problem::SessionRow { session, .. } if *session == s));
    j.close();

    // A row sealed with a later version is refused the same way (a newer build's).
    edit_row(&path, s, false, |row| row[60] ^= 0x10);
    edit_row(&path, s, true, |row| row[4] = 9);
    let j = open(&path);
    match j.session_state(s).await {
        Err(JournalError::Corrupt {
            source: Corruption::Inconsistent(m),
            ..
        }) => assert!(m.contains("newer build"), "{m}"),
        other => panic!("expected the row refused, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_rows_that_disagree_with_the_log_or_the_retention_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let (a, b) = (session(1), session(2));
    let j = open(&path);
    ended_session(&j, a, 2).await;
    ended_session(&j, b, 2).await;
    j.close();
    // a's row says it ended at seq 2 (resealed: the checksum cannot see it); b's
    // retention entry is gone.
    edit_row(&path, a, true, |row| {
        row[54..62].copy_from_slice(&2u64.to_be_bytes());
        row[62..70].copy_from_slice(&2u64.to_be_bytes());
    });
    tamper::with_txn(&path, |txn| {
        let mut t = txn.open_table(RETENTION).unwrap();
        let keys: Vec<_> = t
            .iter()
            .unwrap()
            .map(|e| e.unwrap().0.value())
            .filter(|k| k.2 == u(b))
            .collect();
        assert_eq!(keys.len(), 1);
        t.remove(keys[0]).unwrap();
        Ok(())
    })
    .unwrap();
    let report = RedbJournal::verify_file(&path, 10).unwrap();
    let rows: Vec<SessionId> = report
        .problems
        .iter()
        .filter_map(|p| match p {
            Problem::SessionRow { session, .. } => Some(*session),
            _ => None,
        })
        .collect();
    assert!(rows.contains(&a) && rows.contains(&b), "{report}");
    // a is the oldest end: its purge finds the log longer than the row says and
    // refuses rather than guess.
    let j = open(&path);
    assert!(matches!(
        j.purge_step(later(), 10).await,
        Err(JournalError::Corrupt { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_row_of_an_ended_session_is_corrupt_not_a_fresh_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = session(1);
    let j = open(&path);
    ended_session(&j, s, 2).await;
    j.close();
    tamper::with_txn(&path, |txn| {
        txn.open_table(SESSIONS).unwrap().remove(u(s)).unwrap();
        Ok(())
    })
    .unwrap();
    let j = open(&path);
    assert!(matches!(
        j.append(s, ended(s)).await,
        Err(AppendError::Corrupt {
            seq: 3,
            source: Corruption::Inconsistent(_),
            ..
        })
    ));
    let v = j.verify(10).await.unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| matches!(p, Problem::SessionRow { session, .. } if *session == s)),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_frame_stops_the_purge_without_writing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = session(1);
    let j = open(&path);
    ended_session(&j, s, 4).await;
    j.close();
    tamper::edit_frame(&path, u(s), 2, false, |b| b[30] ^= 1).unwrap();
    let j = open(&path);
    assert!(matches!(
        j.purge_step(later(), 10).await,
        Err(JournalError::Corrupt {
            seq: 2,
            source: Corruption::Checksum { .. },
            ..
        })
    ));
    // Nothing of the step was written: the session is still only ended.
    assert!(matches!(
        j.session_state(s).await.unwrap(),
        SessionState::Ended { .. }
    ));
    assert!(!j.is_poisoned());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_journals_refuse_purges() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir.path().join("j.redb"));
    j.close();
    assert!(matches!(
        j.purge_step(later(), 1).await,
        Err(JournalError::Closed)
    ));
    assert!(matches!(
        j.drop_tombstones(later(), 1).await,
        Err(JournalError::Closed)
    ));
    assert!(matches!(
        j.session_state(session(1)).await,
        Err(JournalError::Closed)
    ));
}
