//! A format-2 journal file (the build before the log's tail) opens in this build: read
//! in place by the reader, upgraded by a writable open (in one transaction, cut by a
//! crash at any sync or not) with every frame, end and tombstone intact, and written
//! on through the tail afterwards.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this file's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};

use common::{command, open};
use notify_journal::{
    AppendError, JournalError, JournalRead, RedbJournal, RedbReader, SessionState, replay_all,
};
use notify_testkit::tamper;
use notify_types::{JournalRecord, SessionId};
use redb::{ReadableTableMetadata, TableHandle};

/// The fixture: a format-2 journal written by the build before format 3: three live
/// sessions, one ended and one purged (its tombstone left), every record kind; the
/// frames as `session seq canonical-json`, and the ended and purged sessions.
struct Fixture {
    path: PathBuf,
    frames: Vec<(SessionId, u64, JournalRecord)>,
    ended: (SessionId, u64),
    purged: (SessionId, u64),
}

fn fixture(dir: &Path) -> Fixture {
    let (path, frames) = common::fixture_file(dir, "format2");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let states = std::fs::read_to_string(src.join("format2.states")).unwrap();
    let state = |kind: &str| {
        states
            .lines()
            .find_map(|line| {
                let parts: Vec<&str> = line.split(' ').collect();
                (parts[1] == kind).then(|| (parts[0].parse().unwrap(), parts[2].parse().unwrap()))
            })
            .unwrap()
    };
    Fixture {
        path,
        frames,
        ended: state("ended"),
        purged: state("purged"),
    }
}

impl Fixture {
    /// The sessions with frames, in ID order.
    fn logged(&self) -> Vec<SessionId> {
        let mut sessions: Vec<SessionId> = self.frames.iter().map(|(s, ..)| *s).collect();
        sessions.sort();
        sessions.dedup();
        sessions
    }

    /// Every session the journal lists: those with frames and the purged one.
    fn listed(&self) -> Vec<SessionId> {
        let mut sessions = self.logged();
        sessions.push(self.purged.0);
        sessions.sort();
        sessions
    }

    fn log_of(&self, s: SessionId) -> Vec<(u64, JournalRecord)> {
        self.frames
            .iter()
            .filter(|(x, ..)| *x == s)
            .map(|(_, seq, r)| (*seq, r.clone()))
            .collect()
    }
}

/// The journal holds the fixture exactly: every log, every key, the end and the
/// tombstone; retries are duplicates.
async fn assert_holds(j: &RedbJournal, f: &Fixture) {
    assert_eq!(j.sessions().await.unwrap(), f.listed());
    for s in f.logged() {
        let want = f.log_of(s);
        assert_eq!(replay_all(j, s).await.unwrap(), want);
        assert_eq!(j.last_seq(s).await.unwrap(), want.len() as u64);
    }
    for (s, seq, r) in &f.frames {
        assert_eq!(j.lookup(*s, r.key()).await.unwrap(), Some(*seq));
        let again = j.append(*s, r.clone()).await.unwrap();
        assert_eq!((again.seq, again.appended), (*seq, false));
    }
    assert!(matches!(
        j.session_state(f.ended.0).await.unwrap(),
        SessionState::Ended { last_seq, .. } if last_seq == f.ended.1
    ));
    match j.session_state(f.purged.0).await.unwrap() {
        SessionState::Purged(t) => assert_eq!(t.last_seq, f.purged.1),
        other => panic!("expected the tombstone, got {other:?}"),
    }
    assert!(matches!(
        replay_all(j, f.purged.0).await,
        Err(JournalError::Purged { .. })
    ));
}

fn format_version(path: &Path) -> u64 {
    let db = redb::ReadOnlyDatabase::open(path).unwrap();
    let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
    let meta = txn.open_table(tamper::META).unwrap();
    meta.get("format_version").unwrap().unwrap().value()
}

/// The number of entries in the log's tail (`None`: no tail table).
fn tail_len(path: &Path) -> Option<u64> {
    let db = redb::ReadOnlyDatabase::open(path).unwrap();
    let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
    let has = txn
        .list_tables()
        .unwrap()
        .any(|t| t.name() == tamper::TAIL.name());
    has.then(|| txn.open_table(tamper::TAIL).unwrap().len().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_2_file_is_read_in_place_and_opens_upgraded_with_everything_intact() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture(dir.path());
    assert_eq!(f.frames.len(), 87);
    assert_eq!(format_version(&f.path), 2);
    let before = tamper::sha256_file(&f.path).unwrap();

    // The reader reads it as it is (no tail) and writes nothing.
    let reader = RedbReader::open(&f.path).unwrap();
    assert_eq!(reader.sessions_blocking().unwrap(), f.listed());
    for s in f.logged() {
        let want = f.log_of(s);
        assert_eq!(
            reader.replay_blocking(s, 1, usize::MAX).unwrap(),
            want,
            "session {s}"
        );
    }
    assert!(reader.verify_blocking(10).unwrap().is_clean());
    drop(reader);
    assert_eq!(tamper::sha256_file(&f.path).unwrap(), before);

    // A writable open upgrades it: format 3, an empty tail, everything as it was.
    let j = open(&f.path);
    let stats = j.stats_blocking().unwrap();
    assert_eq!((stats.format_version, stats.frames, stats.tail), (3, 87, 0));
    assert_holds(&j, &f).await;
    let report = j.verify(10).await.unwrap();
    assert!(report.is_clean(), "{report}");
    assert_eq!((report.frames, report.ended, report.tombstones), (87, 1, 1));

    // New frames continue each live log through the tail; the ended and the purged
    // session refuse a new key.
    let live = f.logged();
    let live: Vec<SessionId> = live.into_iter().filter(|s| *s != f.ended.0).collect();
    for s in &live {
        let head = f.log_of(*s).len() as u64;
        let next = j.append(*s, command(*s, 7_000)).await.unwrap();
        assert_eq!((next.seq, next.appended), (head + 1, true));
    }
    assert_eq!(j.stats_blocking().unwrap().tail, live.len() as u64);
    for (s, purged) in [(f.ended.0, false), (f.purged.0, true)] {
        match j.append(s, command(s, 7_000)).await {
            Err(AppendError::SessionEnded { purged: p, .. }) => assert_eq!(p, purged),
            other => panic!("expected SessionEnded, got {other:?}"),
        }
    }
    let report = j.verify(10).await.unwrap();
    assert!(report.is_clean(), "{report}");
    j.close();

    // A clean close folded the tail; the reopened journal holds it all.
    assert_eq!(format_version(&f.path), 3);
    assert_eq!(tail_len(&f.path), Some(0));
    let j = open(&f.path);
    for s in &live {
        let log = replay_all(&j, *s).await.unwrap();
        assert_eq!(log.len() as u64, f.log_of(*s).len() as u64 + 1);
        assert_eq!(log.last().unwrap().1, command(*s, 7_000));
    }
    assert!(j.verify(10).await.unwrap().is_clean());
    j.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_from_format_2_cut_by_a_crash_at_any_sync_is_format_2_or_3_whole() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture(dir.path());
    let image = std::fs::read(&f.path).unwrap();
    let crash_points = common::open_crashed_at_every_sync(&image, 20, async |j| {
        assert_holds(j, &f).await;
        assert!(j.verify(10).await.unwrap().is_clean());
    })
    .await;
    assert!(crash_points >= 1, "no crash point");
}
