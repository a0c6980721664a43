//! The default open (`RedbVerifyOnOpen::Background`): no whole-file check at open, a
//! background scrub while the journal runs, and an append path that believes no damage
//! before the scrub has seen it. Each test plants damage in a real redb file.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this file's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Duration;

use common::{command, command_with, ended, key_of, session};
use notify_journal::{
    AppendError, JournalRead, RedbJournal, RedbOptions, RedbVerifyOnOpen, ScrubState, ScrubStatus,
};
use notify_testkit::tamper::{self, LOG, POSITIONS, RETENTION, SESSIONS};
use notify_types::SessionId;
use redb::ReadableTableMetadata;

/// The default options, scrubbing as fast as it can with short pauses between passes.
fn fast() -> RedbOptions {
    RedbOptions::default()
        .scrub_pace(0)
        .scrub_interval(Duration::from_millis(5))
}

fn u(s: SessionId) -> u128 {
    s.as_uuid().as_u128()
}

/// Polls the scrub's status until `done` holds (a liveness bound, not a timing check).
fn wait_for(j: &RedbJournal, what: &str, done: impl Fn(&ScrubStatus) -> bool) -> ScrubStatus {
    for _ in 0..12_000 {
        let status = j.scrub_status();
        assert_ne!(status.state, ScrubState::Off, "no scrub runs");
        if done(&status) {
            return status;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the scrub never reached {what}: {:?}", j.scrub_status());
}

/// How many frames the log of the closed journal at `path` holds.
fn frames_in(path: &Path) -> u64 {
    let db = redb::Database::open(path).unwrap();
    let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
    txn.open_table(LOG).unwrap().len().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_open_scrubs_a_clean_file_clean_and_appends_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let j = RedbJournal::open(&path, fast()).unwrap();
    assert_ne!(
        j.scrub_status().state,
        ScrubState::Off,
        "the scrub is the default"
    );
    let (a, b) = (session(1), session(2));
    for i in 1..=50 {
        j.append(a, command(a, i)).await.unwrap();
        j.append(b, command(b, i)).await.unwrap();
    }
    j.append(b, ended(b)).await.unwrap();
    let first = wait_for(&j, "a clean pass", |s| s.clean_passes >= 1);
    // More appends while it scrubs, then passes that saw them.
    for i in 51..=100 {
        j.append(a, command(a, i)).await.unwrap();
    }
    let later = wait_for(&j, "two more clean passes", |s| {
        s.clean_passes >= first.clean_passes + 2
    });
    assert!(
        matches!(later.state, ScrubState::Scrubbing | ScrubState::Waiting),
        "{later:?}"
    );
    assert!(!j.is_poisoned());
    let outcome = j.append(a, command(a, 101)).await.unwrap();
    assert_eq!((outcome.seq, outcome.appended), (101, true));
    j.close();
    assert_eq!(j.scrub_status().state, ScrubState::Stopped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scrub_stops_on_close_mid_pass_and_releases_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = session(3);
    {
        let j = RedbJournal::open(
            &path,
            RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Off),
        )
        .unwrap();
        for i in 1..=1500 {
            j.append(s, command(s, i)).await.unwrap();
        }
        j.close();
    }
    // One entry a second: the pass sleeps for minutes after its first step.
    let j = RedbJournal::open(&path, RedbOptions::default().scrub_pace(1)).unwrap();
    wait_for(&j, "its first step", |st| {
        st.state == ScrubState::Scrubbing && st.entries >= 1024
    });
    j.close();
    assert_eq!(j.scrub_status().state, ScrubState::Stopped);
    // The scrub's hold on the database is gone with it: the file opens again at once.
    let again = RedbJournal::open(&path, RedbOptions::default()).unwrap();
    assert_eq!(again.last_seq(s).await.unwrap(), 1500);
    again.close();
}

/// Flips one byte of every copy of `marker` in the file at `path` (the journal has it
/// open: this is damage after open). Answers how many copies it found.
fn flip_on_disk(path: &Path, marker: &[u8]) -> usize {
    let bytes = std::fs::read(path).unwrap();
    let hits: Vec<usize> = bytes
        .windows(marker.len())
        .enumerate()
        .filter(|(_, w)| *w == marker)
        .map(|(i, _)| i)
        .collect();
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    for at in &hits {
        let at = (at + marker.len() / 2) as u64;
        f.seek(SeekFrom::Start(at)).unwrap();
        f.write_all(&[bytes[at as usize] ^ 0x20]).unwrap();
    }
    f.sync_all().unwrap();
    hits.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scrub_finds_damage_planted_after_open_and_poisons_appends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    // No page cache: every read of the scrub goes to the file.
    let j = RedbJournal::open(&path, fast().cache_size(0)).unwrap();
    let s = session(5);
    for i in 1..=20 {
        let variant = if i == 7 { 0x5c2b_d00d } else { 0 };
        j.append(s, command_with(s, key_of(s, i), variant))
            .await
            .unwrap();
    }
    let clean = wait_for(&j, "a clean pass", |st| st.clean_passes >= 1);
    assert!(matches!(
        clean.state,
        ScrubState::Scrubbing | ScrubState::Waiting
    ));
    // Frame 7's body names `proc-1546375181` (its variant): damage it on disk.
    assert!(flip_on_disk(&path, b"proc-1546375181") >= 1);
    let found = wait_for(&j, "the damage", |st| {
        matches!(st.state, ScrubState::Damaged(_))
    });
    let ScrubState::Damaged(detail) = &found.state else {
        unreachable!()
    };
    assert!(
        detail.contains("seq 7") || detail.contains("frame"),
        "{detail}"
    );
    assert!(j.is_poisoned());
    // Every later append is refused with the typed error, whatever its session.
    let other = session(6);
    match j.append(other, command(other, 1)).await {
        Err(AppendError::Damaged { detail }) => assert!(!detail.is_empty()),
        other => panic!("expected AppendError::Damaged, got {other:?}"),
    }
    match j.append(s, command(s, 21)).await {
        Err(AppendError::Damaged { .. }) => {}
        other => panic!("expected AppendError::Damaged, got {other:?}"),
    }
    j.close();
    // Nothing was written after the damage was found.
    assert_eq!(frames_in(&path), 20);
}

/// A session of three frames, then its end marker when `end`; the file is closed.
async fn closed_session(path: &Path, s: SessionId, end: bool) {
    let j = RedbJournal::open(path, RedbOptions::default()).unwrap();
    for i in 1..=3 {
        j.append(s, command(s, i)).await.unwrap();
    }
    if end {
        j.append(s, ended(s)).await.unwrap();
    }
    j.close();
}

/// Whether `e` is one of the typed refusals for damage.
fn is_damage(e: &AppendError) -> bool {
    matches!(e, AppendError::Corrupt { .. } | AppendError::Damaged { .. })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_session_row_never_lets_an_append_past_the_end() {
    for verify in [RedbVerifyOnOpen::Background, RedbVerifyOnOpen::Off] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.redb");
        let s = session(7);
        closed_session(&path, s, true).await;
        // The sessions table loses the row (as a damaged page would hide it).
        tamper::with_txn(&path, |txn| {
            let mut rows = txn.open_table(SESSIONS).unwrap();
            rows.remove(u(s)).unwrap();
            let mut retention = txn.open_table(RETENTION).unwrap();
            retention.retain(|_, ()| false).unwrap();
            Ok(())
        })
        .unwrap();
        let j = RedbJournal::open(&path, RedbOptions::default().verify_on_open(verify)).unwrap();
        match j.append(s, command(s, 4)).await {
            Err(e) if is_damage(&e) => {}
            other => panic!("{verify:?}: expected a refusal for damage, got {other:?}"),
        }
        j.close();
        assert_eq!(
            frames_in(&path),
            4,
            "{verify:?}: nothing written past the end"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_head_position_never_leads_to_a_frame_written_past_it() {
    // The census (which would also see it) is off: the head check stands on its own.
    for verify in [RedbVerifyOnOpen::Background, RedbVerifyOnOpen::Off] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.redb");
        let s = session(8);
        closed_session(&path, s, false).await;
        // The head's position names frame 1 (a damaged positions page).
        tamper::with_txn(&path, |txn| {
            let first = tamper::position(txn, u(s), 1)?;
            let mut positions = txn.open_table(POSITIONS).unwrap();
            positions.insert((u(s), 3), first).unwrap();
            Ok(())
        })
        .unwrap();
        let options = RedbOptions::default()
            .verify_on_open(verify)
            .confirm_misses(false);
        let j = RedbJournal::open(&path, options).unwrap();
        match j.append(s, command(s, 4)).await {
            Err(e) if is_damage(&e) => {}
            other => panic!("{verify:?}: expected a refusal for damage, got {other:?}"),
        }
        j.close();
        assert_eq!(frames_in(&path), 3, "{verify:?}: no frame written");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interval_past_what_an_instant_holds_waits_until_close() {
    // `Instant::now() + Duration::MAX` would panic: the thread would end after its
    // first pass and the status would no longer say `Waiting`.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let options = RedbOptions::default()
        .scrub_pace(0)
        .scrub_interval(Duration::MAX);
    let j = RedbJournal::open(&path, options).unwrap();
    let s = session(20);
    j.append(s, command(s, 1)).await.unwrap();
    let status = wait_for(&j, "a first pass", |st| st.clean_passes >= 1);
    assert_eq!(status.clean_passes, 1);
    // The thread is alive and waiting: a panic in its wait (seen before the fix) ends
    // it within the pause below and leaves `Failed` (earlier: `Damaged`). The pause
    // only gives a broken build time to show itself; a correct one passes however long.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(j.scrub_status().state, ScrubState::Waiting);
    assert!(!j.is_poisoned());
    j.append(s, command(s, 2)).await.unwrap();
    j.close();
    assert_eq!(j.scrub_status().state, ScrubState::Stopped);
}
