//! Damage the redb journal's file on purpose and check that every read names it:
//! checksums, identities, gaps, index entries, the file itself, the deep verify, and the
//! upgrade of a format-1 file.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this file's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use common::{command, key_of, open, session};
use notify_journal::{
    AppendError, Corruption, EngineCheck, JournalError, JournalOptions, JournalRead, OpenError,
    Problem, RedbJournal, VerifyOnOpen, replay_all,
};
use notify_testkit::tamper::{self, KEYS, LOG, POSITIONS, SESSIONS};
use notify_types::{JournalRecord, SessionId};
use redb::ReadableTable;

async fn three_frames(path: &Path) -> SessionId {
    let s = session(4);
    let j = open(path);
    for i in 1..=3 {
        j.append(s, command(s, i)).await.unwrap();
    }
    j.close();
    s
}

fn u(s: SessionId) -> u128 {
    s.as_uuid().as_u128()
}

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
    for from in [0, 1, 2] {
        match j.replay(s, from, 10).await {
            Err(JournalError::Corrupt {
                seq: 2,
                source: Corruption::Missing,
                ..
            }) => {}
            other => panic!("replay from {from}: expected seq 2 missing, got {other:?}"),
        }
    }
    // A page that ends before the head is short, not complete.
    assert!(matches!(j.replay(s, 1, 1).await.map(|p| p.len()), Ok(1)));
    let report = j.verify(10).await.unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| matches!(p, Problem::Gap { seq: 2, .. })),
        "{report}"
    );
    assert!(
        report
            .problems
            .iter()
            .any(|p| matches!(p, Problem::Orphan { .. })),
        "{report}"
    );
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
        RedbJournal::open(&path, JournalOptions::default()),
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
        for verify in [VerifyOnOpen::Off, VerifyOnOpen::Pages] {
            match RedbJournal::open(&path, JournalOptions::default().verify_on_open(verify)) {
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
    let full = JournalOptions::default().verify_on_open(VerifyOnOpen::Full);
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

// ---- format 1 ----

/// The fixture: a format-1 journal written by the build before format 2 (three
/// sessions, every record kind), and `session seq canonical-json` of each frame.
fn fixture(dir: &Path) -> (std::path::PathBuf, Vec<(SessionId, u64, JournalRecord)>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let path = dir.join("format1.redb");
    std::fs::copy(src.join("format1.redb"), &path).unwrap();
    let expected = std::fs::read_to_string(src.join("format1.expected"))
        .unwrap()
        .lines()
        .map(|line| {
            let mut parts = line.splitn(3, ' ');
            let s: SessionId = parts.next().unwrap().parse().unwrap();
            let seq: u64 = parts.next().unwrap().parse().unwrap();
            let record = JournalRecord::decode(parts.next().unwrap().as_bytes()).unwrap();
            (s, seq, record)
        })
        .collect();
    (path, expected)
}

async fn assert_holds(j: &RedbJournal, expected: &[(SessionId, u64, JournalRecord)]) {
    let mut sessions: Vec<SessionId> = expected.iter().map(|(s, ..)| *s).collect();
    sessions.sort();
    sessions.dedup();
    assert_eq!(j.sessions().await.unwrap(), sessions);
    for s in &sessions {
        let want: Vec<(u64, JournalRecord)> = expected
            .iter()
            .filter(|(x, ..)| x == s)
            .map(|(_, seq, r)| (*seq, r.clone()))
            .collect();
        assert_eq!(replay_all(j, *s).await.unwrap(), want);
        assert_eq!(j.last_seq(*s).await.unwrap(), want.len() as u64);
    }
    for (s, seq, r) in expected {
        assert_eq!(j.lookup(*s, r.key()).await.unwrap(), Some(*seq));
        let again = j.append(*s, r.clone()).await.unwrap();
        assert_eq!((again.seq, again.appended), (*seq, false));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_1_file_opens_upgraded_with_every_frame_intact() {
    let dir = tempfile::tempdir().unwrap();
    let (path, expected) = fixture(dir.path());
    assert_eq!(expected.len(), 77);
    let j = open(&path);
    assert_holds(&j, &expected).await;
    let report = j.verify(10).await.unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.frames, 77);
    j.close();
    // Upgraded for good: reopening finds format 2, nothing of format 1 left.
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
        let meta = txn.open_table(tamper::META).unwrap();
        assert_eq!(meta.get("format_version").unwrap().unwrap().value(), 2);
        assert!(meta.get("upgrading_from").unwrap().is_none());
        let names: Vec<String> = txn
            .list_tables()
            .unwrap()
            .map(|t| redb::TableHandle::name(&t).to_owned())
            .collect();
        assert!(
            !names.iter().any(|n| n.starts_with("notify_journal_frames")),
            "{names:?}"
        );
        assert_eq!(
            redb::ReadableTableMetadata::len(&txn.open_table(LOG).unwrap()).unwrap(),
            77
        );
    }
    let j = open(&path);
    assert_holds(&j, &expected).await;
    // New appends continue each log.
    let (s, ..) = expected[0];
    let next = j.append(s, command(s, 1000)).await.unwrap();
    assert_eq!(
        next.seq,
        expected.iter().filter(|(x, ..)| *x == s).count() as u64 + 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_cut_by_a_crash_at_any_sync_completes_on_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let (path, expected) = fixture(dir.path());
    let image = std::fs::read(&path).unwrap();
    let mut crash_points = 0;
    for crash_at in 1.. {
        let control = common::Control::from_image(image.clone());
        control.crash_at_sync(crash_at);
        let outcome = RedbJournal::open_with_backend(control.backend(), JournalOptions::default());
        let finished = outcome.is_ok() && !control.crashed();
        if let Ok(j) = outcome {
            j.close();
        }
        for after_crash in [control.durable_image(), control.torn_image(crash_at)] {
            let again = common::Control::from_image(after_crash);
            let j = RedbJournal::open_with_backend(again.backend(), JournalOptions::default())
                .unwrap_or_else(|e| panic!("crash at sync {crash_at}: reopen failed: {e}"));
            assert_holds(&j, &expected).await;
            j.close();
        }
        if finished {
            break;
        }
        crash_points += 1;
        assert!(crash_at < 100, "the upgrade never finished");
    }
    assert!(crash_points >= 2, "only {crash_points} crash points");
}

#[test]
fn verify_file_leaves_an_empty_redb_database_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.redb");
    drop(redb::Database::create(&path).unwrap());
    assert!(matches!(
        RedbJournal::verify_file(&path, 10),
        Err(OpenError::NotAJournal { .. })
    ));
    let db = redb::Database::open(&path).unwrap();
    let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
    assert_eq!(
        txn.list_tables().unwrap().count(),
        0,
        "verify laid out a journal"
    );
}

#[test]
fn a_format_1_table_missing_mid_upgrade_is_damage_not_completion() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = fixture(dir.path());
    // What a crash after the first upgrade step looks like, with one old table lost.
    tamper::with_txn(&path, |txn| {
        let mut meta = txn.open_table(tamper::META).unwrap();
        meta.insert("format_version", 2).unwrap();
        meta.insert("upgrading_from", 1).unwrap();
        txn.open_table(LOG).unwrap();
        txn.open_table(POSITIONS).unwrap();
        txn.open_table(KEYS).unwrap();
        txn.open_table(SESSIONS).unwrap();
        drop(meta);
        txn.delete_table(redb::TableDefinition::<u128, u64>::new(
            "notify_journal_heads",
        ))
        .unwrap();
        Ok(())
    })
    .unwrap();
    match RedbJournal::open(&path, JournalOptions::default()) {
        Err(OpenError::Damaged { reason, .. }) => {
            assert!(reason.contains("mid-upgrade"), "{reason}")
        }
        other => panic!("expected Damaged, got {other:?}"),
    }
}

// ---- an upgrade never bricks a file; verify never writes ----

/// 5 sessions of 1,000 format-1 frames each, in `(session, seq)` order: frame 4,500 is
/// seq 500 of the fifth session.
fn five_thousand_frames() -> Vec<(SessionId, u64, JournalRecord)> {
    (1..=5)
        .flat_map(|n| {
            let s = session(n);
            (1..=1000).map(move |seq| (s, seq, command(s, seq)))
        })
        .collect()
}

fn table_names(path: &Path) -> Vec<String> {
    let db = redb::ReadOnlyDatabase::open(path).unwrap();
    let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
    let mut names: Vec<String> = txn
        .list_tables()
        .unwrap()
        .map(|t| redb::TableHandle::name(&t).to_owned())
        .collect();
    names.sort();
    names
}

fn format_version(path: &Path) -> u64 {
    let db = redb::ReadOnlyDatabase::open(path).unwrap();
    let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
    let meta = txn.open_table(tamper::META).unwrap();
    meta.get("format_version").unwrap().unwrap().value()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_1_file_of_5000_frames_upgrades_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("format1.redb");
    let frames = five_thousand_frames();
    tamper::write_format_1(&path, &frames).unwrap();
    // Laid out as the format-1 build's own file is.
    let fixture_dir = tempfile::tempdir().unwrap();
    let (fixture_path, _) = fixture(fixture_dir.path());
    assert_eq!(table_names(&path), table_names(&fixture_path));
    let j = open(&path);
    assert_holds(&j, &frames).await;
    let report = j.verify(10).await.unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.frames, 5000);
    j.close();
    assert_eq!(format_version(&path), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_1_file_with_a_damaged_frame_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("format1.redb");
    let frames = five_thousand_frames();
    tamper::write_format_1(&path, &frames).unwrap();
    let (s, seq, _) = &frames[4499];
    assert_eq!((*s, *seq), (session(5), 500));
    tamper::replace_format_1_frame(&path, *s, *seq, br#"{"type":"ProcessNotification""#).unwrap();
    let before = tamper::sha256_file(&path).unwrap();

    for _ in 0..2 {
        match RedbJournal::open(&path, JournalOptions::default()) {
            Err(e @ OpenError::UpgradeRefused { .. }) => {
                let text = e.to_string();
                let OpenError::UpgradeRefused {
                    problems,
                    problem_count,
                    ..
                } = e
                else {
                    unreachable!()
                };
                assert_eq!(problem_count, 1, "{problems:?}");
                assert!(
                    matches!(
                        &problems[0],
                        Problem::Frame { session: ps, seq: 500, cause: Corruption::Undecodable(_) }
                            if ps == s
                    ),
                    "{problems:?}"
                );
                assert!(text.contains(&format!("session {s} seq 500")), "{text}");
                assert!(text.contains("nothing was written"), "{text}");
            }
            Err(other) => panic!("expected UpgradeRefused, got {other}"),
            Ok(_) => panic!("a damaged format-1 file was opened"),
        }
        assert_eq!(
            tamper::sha256_file(&path).unwrap(),
            before,
            "the refused open changed the file"
        );
    }
    // Still format 1, nothing moved: every other frame is where it was.
    assert_eq!(format_version(&path), 1);
    assert!(matches!(
        notify_journal::RedbReader::open(&path),
        Err(OpenError::NeedsWritableOpen { .. })
    ));
    // Verify lists the very frame and writes nothing either.
    let report = RedbJournal::verify_file(&path, 10).unwrap();
    assert_eq!(report.frames, 5000);
    assert_eq!(report.problem_count, 1, "{report}");
    assert!(
        matches!(&report.problems[0], Problem::Frame { session: ps, seq: 500, .. } if ps == s),
        "{report}"
    );
    assert_eq!(tamper::sha256_file(&path).unwrap(), before);
    // Once the frame is mended (from a backup, say), the file upgrades whole.
    tamper::replace_format_1_frame(&path, *s, *seq, &frames[4499].2.encode()).unwrap();
    let j = open(&path);
    assert_holds(&j, &frames).await;
    j.close();
}

#[test]
fn a_format_1_file_damaged_mid_upgrade_is_refused_and_left_as_it_was() {
    // A crash after the first step (4,096 frames moved) of a 5,000-frame file, then
    // damage to a frame not yet moved.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("format1.redb");
    let frames = five_thousand_frames();
    tamper::write_format_1(&path, &frames).unwrap();
    let image = std::fs::read(&path).unwrap();
    let mut mid_upgrade = None;
    for crash_at in 1..100 {
        let control = common::Control::from_image(image.clone());
        control.crash_at_sync(crash_at);
        if let Ok(j) = RedbJournal::open_with_backend(control.backend(), JournalOptions::default())
        {
            j.close();
        }
        let durable = control.durable_image();
        std::fs::write(&path, &durable).unwrap();
        // Clean it (redb's recovery) without the journal's open.
        drop(redb::Database::open(&path).unwrap());
        let db = redb::ReadOnlyDatabase::open(&path).unwrap();
        let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
        let upgrading = txn
            .open_table(tamper::META)
            .unwrap()
            .get("upgrading_from")
            .unwrap()
            .is_some();
        let moved = txn
            .open_table(LOG)
            .map(|t| redb::ReadableTableMetadata::len(&t).unwrap())
            .unwrap_or(0);
        if upgrading && moved == 4096 {
            mid_upgrade = Some(crash_at);
            break;
        }
    }
    assert!(mid_upgrade.is_some(), "no crash point between the steps");
    // Seq 950 of the fifth session: frame 4,950, not moved yet.
    tamper::replace_format_1_frame(&path, session(5), 950, b"not json").unwrap();
    let before = tamper::sha256_file(&path).unwrap();
    match RedbJournal::open(&path, JournalOptions::default()) {
        Err(OpenError::UpgradeRefused { problems, .. }) => assert!(
            matches!(&problems[0], Problem::Frame { session: s, seq: 950, .. } if *s == session(5)),
            "{problems:?}"
        ),
        Err(other) => panic!("expected UpgradeRefused, got {other}"),
        Ok(_) => panic!("a damaged file was opened"),
    }
    assert_eq!(tamper::sha256_file(&path).unwrap(), before);
    let report = RedbJournal::verify_file(&path, 10).unwrap();
    assert_eq!(report.problem_count, 1, "{report}");
    assert_eq!(tamper::sha256_file(&path).unwrap(), before);
}

#[test]
fn verify_file_never_writes_a_format_1_file() {
    let dir = tempfile::tempdir().unwrap();
    let (path, expected) = fixture(dir.path());
    let before = tamper::sha256_file(&path).unwrap();
    let report = RedbJournal::verify_file(&path, 10).unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.engine, EngineCheck::Clean);
    assert_eq!(report.frames, expected.len() as u64);
    assert_eq!(
        tamper::sha256_file(&path).unwrap(),
        before,
        "verify_file changed a format-1 file"
    );
    assert_eq!(format_version(&path), 1);
}

const HOLDER_PATH: &str = "NOTIFY_JOURNAL_TEST_HOLDER_PATH";

/// The child of `verify_file_never_writes_a_file_left_unclean_by_sigkill`: opens the
/// journal, appends, says so, and holds the file until it is killed. In a normal test
/// run (no child variable) it does nothing.
#[test]
fn verify_file_holder_child() {
    let Ok(path) = std::env::var(HOLDER_PATH) else {
        return;
    };
    let j = open(Path::new(&path));
    let s = session(9);
    common::runtime().block_on(async {
        for i in 1..=20 {
            j.append(s, command(s, i)).await.unwrap();
        }
    });
    println!("HELD");
    loop {
        std::thread::sleep(std::time::Duration::from_secs(60));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_file_never_writes_a_file_left_unclean_by_sigkill() {
    if std::env::var(HOLDER_PATH).is_ok() {
        return;
    }
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.redb");
    three_frames(&path).await;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "verify_file_holder_child", "--nocapture"])
        .env(HOLDER_PATH, &path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let held = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line == "HELD");
    assert!(held, "the child never held the file");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // Left unclean: a read-only open refuses it.
    assert!(matches!(
        notify_journal::RedbReader::open(&path),
        Err(OpenError::NeedsWritableOpen { .. })
    ));
    let before = tamper::sha256_file(&path).unwrap();
    let report = RedbJournal::verify_file(&path, 10).unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.engine, EngineCheck::Clean);
    assert_eq!(report.frames, 3 + 20);
    assert_eq!(
        tamper::sha256_file(&path).unwrap(),
        before,
        "verify_file wrote to a file left unclean"
    );
    // Still unclean; the application's open recovers it with everything acknowledged.
    assert!(matches!(
        notify_journal::RedbReader::open(&path),
        Err(OpenError::NeedsWritableOpen { .. })
    ));
    let j = open(&path);
    assert_eq!(j.last_seq(session(9)).await.unwrap(), 20);
    j.close();
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
