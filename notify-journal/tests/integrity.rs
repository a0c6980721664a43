//! Damage the redb journal's file on purpose and check that every read names it:
//! checksums, identities, gaps, index entries, the file itself and the deep verify. The
//! upgrade of a format-1 file, and verify never writing, are in `format_upgrade.rs`.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this file's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{command, key_of, open, session, three_frames, u};
use notify_journal::{
    AppendError, Corruption, EngineCheck, JournalError, JournalRead, OpenError, Problem,
    RedbJournal, RedbOptions, RedbVerifyOnOpen, replay_all,
};
use notify_testkit::tamper::{self, KEYS, LOG, POSITIONS, SESSIONS};
use redb::ReadableTable;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_is_a_checksum_mismatch_on_every_read_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = three_frames(&path).await;
    // The last byte of frame 2's body: still valid JSON-ish length, wrong bytes.
    tamper::edit_frame(&path, u(s), 2, false, |b| *b.last_mut().unwrap() ^= 0x01).unwrap();
    let j = open(&path);
    match j.replay(s, 1, 10).await {
        Err(JournalError::Corrupt {
            session,
            seq: 2,
            source: Corruption::Checksum { .. },
        }) => assert_eq!(session, s),
        other => panic!("expected a checksum mismatch at seq 2, got {other:?}"),
    }
    // The frame before it still replays; the one after is not reached past the damage.
    assert_eq!(j.replay(s, 1, 1).await.unwrap().len(), 1);
    assert_eq!(j.replay(s, 3, 10).await.unwrap().len(), 1);
    assert!(matches!(
        replay_all(&j, s).await,
        Err(JournalError::Corrupt { seq: 2, .. })
    ));
    assert!(matches!(
        j.lookup(s, key_of(s, 2)).await,
        Err(JournalError::Corrupt {
            source: Corruption::Checksum { .. },
            ..
        })
    ));
    // A retry of the damaged record is refused, never a second frame.
    match j.append(s, command(s, 2)).await {
        Err(AppendError::Corrupt {
            session,
            source: Corruption::Checksum { .. },
            ..
        }) => assert_eq!(session, s),
        other => panic!("expected AppendError::Corrupt, got {other:?}"),
    }
    assert_eq!(j.last_seq(s).await.unwrap(), 3);
    let report = j.verify(10).await.unwrap();
    assert!(!report.is_clean());
    assert_eq!(report.problem_count, 1, "{report}");
    // The header cannot be trusted, but the session's log names the frame.
    match &report.problems[0] {
        Problem::Frame {
            session,
            seq: 2,
            cause: Corruption::Checksum { .. },
        } => assert_eq!(*session, s),
        other => panic!("expected the frame named by session and seq, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resealed_but_undecodable_body_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = three_frames(&path).await;
    tamper::edit_frame(&path, u(s), 2, true, |b| {
        b.truncate(44);
        b.extend_from_slice(b"{\"type\":\"nope\"");
    })
    .unwrap();
    let j = open(&path);
    match j.replay(s, 1, 10).await {
        Err(JournalError::Corrupt {
            session,
            seq: 2,
            source: Corruption::Undecodable(_) | Corruption::Body(_),
        }) => assert_eq!(session, s),
        other => panic!("expected an undecodable frame at seq 2, got {other:?}"),
    }
    let report = j.verify(10).await.unwrap();
    assert!(
        matches!(&report.problems[..], [Problem::Frame { seq: 2, .. }]),
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_of_another_identity_is_misplaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = three_frames(&path).await;
    // Point seq 2's position at frame 3.
    tamper::with_txn(&path, |txn| {
        let mut p = txn.open_table(POSITIONS).unwrap();
        let third = p.get((u(s), 3)).unwrap().unwrap().value();
        p.insert((u(s), 2), third).unwrap();
        Ok(())
    })
    .unwrap();
    let j = open(&path);
    assert!(matches!(
        j.replay(s, 1, 10).await,
        Err(JournalError::Corrupt {
            seq: 2,
            source: Corruption::Misplaced { .. },
            ..
        })
    ));
    let report = j.verify(10).await.unwrap();
    assert!(report.problem_count >= 2, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_in_the_log_is_missing_not_a_short_answer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = three_frames(&path).await;
    tamper::with_txn(&path, |txn| {
        txn.open_table(POSITIONS)
            .unwrap()
            .remove((u(s), 2))
            .unwrap();
        Ok(())
    })
    .unwrap();
    let j = open(&path);
    common::assert_seq_2_missing(&j, s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_hit_is_confirmed_against_its_frame() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = three_frames(&path).await;
    // Key 1's entry names frame 3's position; key 2's entry names a position with no frame.
    tamper::with_txn(&path, |txn| {
        let third = txn
            .open_table(POSITIONS)
            .unwrap()
            .get((u(s), 3))
            .unwrap()
            .unwrap()
            .value();
        let mut keys = txn.open_table(KEYS).unwrap();
        keys.insert((key_of(s, 1).as_u128(), u(s)), third).unwrap();
        keys.insert((key_of(s, 2).as_u128(), u(s)), 999).unwrap();
        Ok(())
    })
    .unwrap();
    let j = open(&path);
    assert!(matches!(
        j.lookup(s, key_of(s, 1)).await,
        Err(JournalError::Corrupt {
            seq: 3,
            source: Corruption::Misplaced { .. },
            ..
        })
    ));
    assert!(matches!(
        j.lookup(s, key_of(s, 2)).await,
        Err(JournalError::Corrupt {
            source: Corruption::Inconsistent(_),
            ..
        })
    ));
    for i in [1, 2] {
        assert!(
            matches!(
                j.append(s, command(s, i)).await,
                Err(AppendError::Corrupt { .. })
            ),
            "a re-append through a bad index entry must be refused"
        );
    }
    assert_eq!(j.lookup(s, key_of(s, 3)).await.unwrap(), Some(3));
    let report = j.verify(10).await.unwrap();
    let entries = report
        .problems
        .iter()
        .filter(|p| matches!(p, Problem::IndexEntry { .. }))
        .count();
    assert_eq!(entries, 2, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_finds_a_frame_the_index_lost() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = three_frames(&path).await;
    tamper::with_txn(&path, |txn| {
        txn.open_table(KEYS)
            .unwrap()
            .remove((key_of(s, 2).as_u128(), u(s)))
            .unwrap();
        Ok(())
    })
    .unwrap();
    let j = open(&path);
    let report = j.verify(10).await.unwrap();
    assert!(
        matches!(&report.problems[..], [Problem::Unindexed { seq: 2, .. }]),
        "{report}"
    );
    assert_eq!((report.sessions, report.frames, report.keys), (1, 3, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_journal_verifies_clean_open_and_closed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let j = open(&path);
    for n in 1..=3 {
        let s = session(n);
        for i in 1..=20 {
            j.append(s, command(s, i)).await.unwrap();
        }
    }
    let report = j.verify(10).await.unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.engine, EngineCheck::NotRun);
    assert_eq!((report.sessions, report.frames, report.keys), (3, 60, 60));
    assert!(matches!(
        RedbJournal::verify_file(&path, 10),
        Err(OpenError::AlreadyOpen { .. })
    ));
    j.close();
    let report = RedbJournal::verify_file(&path, 10).unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.engine, EngineCheck::Clean);
    // The file is still a journal with everything in it.
    let j = open(&path);
    assert_eq!(j.last_seq(session(2)).await.unwrap(), 20);
}

#[test]
fn an_empty_file_is_not_a_journal_and_stays_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.redb");
    std::fs::write(&path, b"").unwrap();
    assert!(matches!(
        RedbJournal::open(&path, RedbOptions::default()),
        Err(OpenError::NotAJournal { path: p, .. }) if p == path
    ));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_cut_short_is_damaged_not_foreign() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    three_frames(&path).await;
    let full = std::fs::read(&path).unwrap();
    for len in [full.len() / 2, 4096, 600, 100, 10] {
        std::fs::write(&path, &full[..len]).unwrap();
        for verify in [RedbVerifyOnOpen::Off, RedbVerifyOnOpen::Pages] {
            match RedbJournal::open(&path, RedbOptions::default().verify_on_open(verify)) {
                Err(OpenError::Damaged { path: p, .. }) => assert_eq!(p, path),
                other => panic!("cut to {len} bytes ({verify:?}): expected Damaged, got {other:?}"),
            }
        }
    }
}

#[test]
fn stale_creation_files_of_dead_processes_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    // A pid far above any pid_max is never a live process.
    let stale = dir.path().join(".j.redb.creating-4194305-123");
    let live = dir
        .path()
        .join(format!(".j.redb.creating-{}-456", std::process::id()));
    let other = dir.path().join(".k.redb.creating-4194305-789");
    for f in [&stale, &live, &other] {
        std::fs::write(f, b"half a journal").unwrap();
    }
    open(&path).close();
    assert!(!stale.exists(), "a dead creator's staging file stays");
    assert!(live.exists(), "a live creator's staging file was removed");
    assert!(other.exists(), "another journal's staging file was removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_row_this_build_cannot_read_is_never_ignored() {
    // Opening reads no row (it never scans); every read of the session's state, and
    // every append to it, checks the row and refuses one it cannot interpret.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = three_frames(&path).await;
    tamper::with_txn(&path, |txn| {
        txn.open_table(SESSIONS)
            .unwrap()
            .insert(u(s), b"ended".as_slice())
            .unwrap();
        Ok(())
    })
    .unwrap();
    let j = open(&path);
    assert!(matches!(
        j.session_state(s).await,
        Err(JournalError::Corrupt {
            seq: 0,
            source: Corruption::Truncated { len: 5 },
            ..
        })
    ));
    assert!(matches!(
        j.replay(s, 1, 10).await,
        Err(JournalError::Corrupt { .. })
    ));
    assert!(matches!(
        j.append(s, command(s, 4)).await,
        Err(AppendError::Corrupt { .. })
    ));
    let report = j.verify(10).await.unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| matches!(p, Problem::SessionRow { session, .. } if *session == s)),
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_at_open_full_refuses_a_damaged_frame() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = three_frames(&path).await;
    tamper::edit_frame(&path, u(s), 3, false, |b| b[50] ^= 0x40).unwrap();
    let full = RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Full);
    match RedbJournal::open(&path, full) {
        Err(OpenError::Damaged { reason, .. }) => {
            assert!(reason.contains("checksum"), "{reason}");
        }
        other => panic!("expected Damaged, got {other:?}"),
    }
    // The default open takes it; the damaged frame is named when read.
    let j = open(&path);
    assert!(matches!(
        j.replay(s, 1, 10).await,
        Err(JournalError::Corrupt { seq: 3, .. })
    ));
}

/// Verify keeps at most `max_problems` of the frames too damaged to say whose they are
/// (it used to keep every one until the end), and its report is the same whatever it
/// keeps: those a position names are named by session and seq, the rest by log
/// position, the first `max_problems` of them all kept and every one counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_reports_many_unreadable_frames_the_same_whatever_it_keeps() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let j = open(&path);
    for n in 0..4 {
        let s = session(n);
        for i in 1..=10 {
            j.append(s, command(s, i)).await.unwrap();
        }
    }
    j.close();
    // 16 frames cut short (unreadable): every other one of the first 32 positions; of
    // those, every third also loses its position (no log names it).
    tamper::with_txn(&path, |txn| {
        let mut log = txn.open_table(LOG).unwrap();
        let mut positions = txn.open_table(POSITIONS).unwrap();
        for (k, pos) in (0..32u64).step_by(2).enumerate() {
            let (s, seq) = (session(pos as u128 / 10), pos % 10 + 1);
            let at = positions
                .get((s.as_uuid().as_u128(), seq))
                .unwrap()
                .unwrap()
                .value();
            log.insert(at, &[1u8, 2, 3][..]).unwrap();
            if k % 3 == 0 {
                positions.remove((s.as_uuid().as_u128(), seq)).unwrap();
            }
        }
        Ok(())
    })
    .unwrap();
    let whole = RedbJournal::verify_file(&path, 1000).unwrap();
    let unreadable = whole
        .problems
        .iter()
        .filter(|p| matches!(p, Problem::Unreadable { .. }))
        .count();
    let named = whole
        .problems
        .iter()
        .filter(|p| matches!(p, Problem::Frame { .. }))
        .count();
    assert_eq!((unreadable, named), (6, 10), "{whole}");
    for max in 0..whole.problems.len() {
        let r = RedbJournal::verify_file(&path, max).unwrap();
        assert_eq!(r.problems, whole.problems[..max].to_vec(), "keeping {max}");
        assert_eq!(r.problem_count, whole.problem_count, "keeping {max}");
    }
}

/// A retry, after the end, of a record whose index entry was lost is named as damage
/// (the session's log holds it), never refused as if it had never been journaled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hidden_key_of_an_ended_session_is_damage_not_a_new_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = three_frames(&path).await;
    let j = open(&path);
    assert_eq!(j.append(s, common::ended(s)).await.unwrap().seq, 4);
    j.close();
    tamper::with_txn(&path, |txn| {
        txn.open_table(KEYS)
            .unwrap()
            .remove((key_of(s, 2).as_u128(), u(s)))
            .unwrap();
        Ok(())
    })
    .unwrap();
    let j = open(&path);
    let err = j.append(s, command(s, 2)).await.unwrap_err();
    assert!(
        matches!(err, AppendError::Corrupt { seq: 2, .. }),
        "{err:?}"
    );
    // A key the log does not hold is still refused as ended.
    let err = j.append(s, command(s, 9)).await.unwrap_err();
    assert!(
        matches!(err, AppendError::SessionEnded { purged: false, .. }),
        "{err:?}"
    );
    j.close();
}

/// `s`'s key 2 removed from the index (its frame, seq 2, stays).
fn hide_key_2(path: &std::path::Path, s: notify_types::SessionId) {
    tamper::with_txn(path, |txn| {
        txn.open_table(KEYS)
            .unwrap()
            .remove((key_of(s, 2).as_u128(), u(s)))
            .unwrap();
        Ok(())
    })
    .unwrap();
}

/// Opened as `common::open` does (no scrub to find the damage first), with an exact
/// census bound of 4 keys.
fn open_census_4(path: &std::path::Path) -> RedbJournal {
    RedbJournal::open(
        path,
        RedbOptions::default()
            .verify_on_open(RedbVerifyOnOpen::Pages)
            .census_max_keys(4),
    )
    .unwrap()
}

/// A retry of `s`'s hidden key 2 is damage at seq 2, on the append path and the read.
async fn hidden_key_2_is_refused(j: &RedbJournal, s: notify_types::SessionId) {
    let err = j.append(s, command(s, 2)).await.unwrap_err();
    assert!(
        matches!(
            err,
            AppendError::Corrupt {
                seq: 2,
                source: Corruption::Inconsistent(_),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(matches!(
        j.lookup(s, key_of(s, 2)).await,
        Err(JournalError::Corrupt {
            seq: 2,
            source: Corruption::Inconsistent(_),
            ..
        })
    ));
    assert_eq!(j.last_seq(s).await.unwrap(), 4, "nothing appended as new");
}

/// The census's filter tier still refuses a key the index hides: the session's census
/// was demoted from the exact tier to a Bloom filter before the retry came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hidden_key_of_a_session_demoted_to_a_filter_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = three_frames(&path).await;
    hide_key_2(&path, s);
    let j = open_census_4(&path);
    let t = session(5);
    assert!(j.append(t, command(t, 1)).await.unwrap().appended);
    // Key 4's miss reads `s`'s log (3 keys, exact: 4 in all); its frame makes 5, past
    // the bound: the least recently used sessions, `t` then `s`, are demoted.
    assert!(j.append(s, command(s, 4)).await.unwrap().appended);
    // Another session past the bound on its own: demoted too, `s` stays a filter.
    let v = session(6);
    for i in 1..=5 {
        assert!(j.append(v, command(v, i)).await.unwrap().appended);
    }
    hidden_key_2_is_refused(&j, s).await;
    j.close();
}

/// The same for a session read back after a reopen straight into a filter (the exact
/// tier already full).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hidden_key_of_a_session_read_back_into_a_filter_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = three_frames(&path).await;
    hide_key_2(&path, s);
    let j = open_census_4(&path);
    // A new session fills the exact tier (4 keys, covered as written).
    let t = session(5);
    for i in 1..=4 {
        assert!(j.append(t, command(t, i)).await.unwrap().appended);
    }
    // Key 4's miss reads `s`'s log: no room left exactly, so into a filter.
    assert!(j.append(s, command(s, 4)).await.unwrap().appended);
    hidden_key_2_is_refused(&j, s).await;
    j.close();
}

/// A close stops a deep verify under way: it answers `Closed` at its next entry, and
/// the file is released without waiting for the whole check (a server shutting down
/// with a verify running from its console must not hold the file for minutes).
///
/// On the code before, the verify ran to its end and answered its report.
#[test]
fn a_close_stops_a_verify_under_way() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.redb");
    let options =
        RedbOptions::default().durability(notify_journal::RedbDurability::NonDurableForTestsOnly);
    let journal = RedbJournal::open(&path, options).unwrap();
    let rt = common::runtime();
    // Enough frames that the check lasts far longer than it takes to close.
    for s in 0..40u128 {
        let records = (0..1_000).map(|i| command(session(s + 1), i)).collect();
        rt.block_on(journal.append_all(session(s + 1), records, None))
            .unwrap();
    }
    let checking = {
        let journal = journal.clone();
        std::thread::spawn(move || {
            let started = std::time::Instant::now();
            (journal.verify_blocking(10), started.elapsed())
        })
    };
    // Closed once the check is under way (it reads the first entries at once).
    std::thread::sleep(std::time::Duration::from_millis(20));
    let closing = std::time::Instant::now();
    journal.close();
    let closed_after = closing.elapsed();
    let (answer, took) = checking.join().unwrap();
    assert!(
        matches!(answer, Err(JournalError::Closed)),
        "the verify ran on to {answer:?} in {took:?}"
    );
    println!("verify stopped after {took:?}; close took {closed_after:?}");
    // Released: the file opens again.
    drop(journal);
    assert!(RedbJournal::open(&path, RedbOptions::default()).is_ok());
}
