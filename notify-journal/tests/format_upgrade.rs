//! The upgrade of a format-1 redb journal file: every frame intact, completed after a
//! crash at any sync, never bricking a file (damage is refused before anything is
//! written), and a verify of a file that never writes it.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this file's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use common::{command, open, session, three_frames};
use notify_journal::{
    Corruption, EngineCheck, JournalRead, OpenError, Problem, RedbJournal, RedbOptions, replay_all,
};
use notify_testkit::tamper::{self, KEYS, LOG, POSITIONS, SESSIONS};
use notify_types::{JournalRecord, SessionId};

// ---- format 1 ----

/// The fixture: a format-1 journal written by the build before format 2 (three
/// sessions, every record kind), and `session seq canonical-json` of each frame.
fn fixture(dir: &Path) -> (std::path::PathBuf, Vec<(SessionId, u64, JournalRecord)>) {
    common::fixture_file(dir, "format1")
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
    // Upgraded for good: reopening finds the current format (3), nothing of format 1
    // left.
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
        let meta = txn.open_table(tamper::META).unwrap();
        assert_eq!(meta.get("format_version").unwrap().unwrap().value(), 3);
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
    let crash_points = common::open_crashed_at_every_sync(&image, 100, async |j| {
        assert_holds(j, &expected).await;
    })
    .await;
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
    match RedbJournal::open(&path, RedbOptions::default()) {
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
    assert_eq!(format_version(&path), 3);
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
        match RedbJournal::open(&path, RedbOptions::default()) {
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
        if let Ok(j) = RedbJournal::open_with_backend(control.backend(), RedbOptions::default()) {
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
    match RedbJournal::open(&path, RedbOptions::default()) {
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
