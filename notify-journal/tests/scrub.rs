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

use common::{command, command_with, ended, key_of, open_unchecked, session};
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
        let j = open_unchecked(&path);
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

/// Damages every branch page of the log's tree in the file at `path` (closed) the way a
/// damaged page would: its first and last child pointers are swapped (each page is
/// still reached once). The log's end then reads as the first leaf's end, while a
/// lookup of a position in a middle leaf still finds its entry (the routing keys are
/// intact). A log branch page is recognised by its routing keys: increasing log
/// positions in `1..=positions` (the other tables' keys are tuples led by a random
/// session or key). Answers the routing keys of each page it changed.
fn misroute_log_end(path: &Path, positions: u64) -> Vec<Vec<u64>> {
    let mut bytes = std::fs::read(path).unwrap();
    // redb's header: 9 bytes of magic, the god byte, 2 of padding, then the page size.
    let page = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let u64_at = |p: &[u8], at: usize| u64::from_le_bytes(p[at..at + 8].try_into().unwrap());
    let mut changed = Vec::new();
    let mut start = page;
    while start + page <= bytes.len() {
        let p = &bytes[start..start + page];
        // A branch page: type 2, the number of keys, 4 bytes of padding, then a checksum
        // (16 bytes) and a page number (8) per child, then the keys (fixed width: no
        // ends).
        let keys = usize::from(u16::from_le_bytes([p[2], p[3]]));
        let numbers_at = 8 + 16 * (keys + 1);
        let keys_at = numbers_at + 8 * (keys + 1);
        if p[0] == 2 && keys >= 2 && keys_at + 8 * keys <= page {
            let routing: Vec<u64> = (0..keys).map(|i| u64_at(p, keys_at + 8 * i)).collect();
            if routing[0] >= 1
                && routing[keys - 1] <= positions
                && routing.windows(2).all(|w| w[0] < w[1])
            {
                let (first, last) = (start + numbers_at, start + numbers_at + 8 * keys);
                let first_child = bytes[first..first + 8].to_vec();
                bytes.copy_within(last..last + 8, first);
                bytes[last..last + 8].copy_from_slice(&first_child);
                changed.push(routing);
            }
        }
        start += page;
    }
    std::fs::write(path, &bytes).unwrap();
    changed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_the_writer_finds_is_named_poisons_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    // Session `b`'s only frame is at log position 41, in a middle leaf; `a` fills the
    // leaves before and after it.
    let (a, b) = (session(40), session(41));
    const FRAMES: u64 = 120;
    const B_AT: u64 = 41;
    {
        let j = open_unchecked(&path);
        for i in 1..FRAMES {
            if i == B_AT {
                j.append(b, command(b, 1)).await.unwrap();
            }
            j.append(a, command(a, i)).await.unwrap();
        }
        j.close();
    }
    let changed = misroute_log_end(&path, FRAMES);
    // The live root is among them (stale copies in free pages change nothing): a root
    // whose first leaf ends before `b`'s frame and whose last leaf starts after it.
    assert!(
        changed
            .iter()
            .any(|routing| routing[0] < B_AT && B_AT <= routing[routing.len() - 1]),
        "no branch page of the log around position {B_AT}: {changed:?}"
    );
    // No scrub (it would find the damage first): only the writer's own checks run. The
    // session's head check and the key census both pass (`b`'s frame is intact); the
    // log's end reads short, so the new frame's position is one the log already holds.
    let j = open_unchecked(&path);
    match j.append(b, command(b, 2)).await {
        Err(AppendError::Corrupt {
            session,
            seq: 2,
            source,
        }) => {
            assert_eq!(session, b);
            let said = source.to_string();
            assert!(said.contains("log position"), "{said}");
            assert!(said.contains("nothing written"), "{said}");
        }
        other => panic!("expected AppendError::Corrupt from the writer, got {other:?}"),
    }
    // The journal is poisoned for damage: every later append is refused, whatever its
    // session, naming what the writer found.
    assert!(j.is_poisoned());
    for (s, i) in [(a, FRAMES), (b, 3), (session(42), 1)] {
        match j.append(s, command(s, i)).await {
            Err(AppendError::Damaged { detail }) => {
                assert!(detail.contains("the writer found"), "{detail}");
            }
            other => panic!("expected AppendError::Damaged, got {other:?}"),
        }
    }
    j.close();
    // Nothing was written: the log holds what it held, and `b` has no second frame.
    assert_eq!(frames_in(&path), FRAMES);
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
        let positions = txn.open_table(POSITIONS).unwrap();
        assert!(positions.get((u(b), 2)).unwrap().is_none());
        assert!(positions.get((u(b), 1)).unwrap().is_some());
    }
    // The full check at open refuses the file: redb's page check finds the branch
    // page's children disagree with the checksums it holds for them.
    let full = RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Full);
    match RedbJournal::open(&path, full) {
        Err(notify_journal::OpenError::Damaged { path: p, reason }) => {
            assert_eq!(p, path);
            assert!(reason.contains("corrupted"), "{reason}");
        }
        other => panic!("expected OpenError::Damaged, got {other:?}"),
    }
}

/// The gap the append path leaves to the scrub (design.md, "What this does not see in
/// O(1)"): a session's last position entry lost whole. What an append may do meanwhile
/// is bounded: the lost frame's own key is refused, never journaled twice; a new key
/// takes the lost seq in a new frame, the lost one is left where it was; the scrub's
/// next pass names it and poisons the journal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_position_lost_whole_is_bounded_until_the_scrub_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = session(50);
    closed_session(&path, s, false).await;
    tamper::with_txn(&path, |txn| {
        txn.open_table(POSITIONS)
            .unwrap()
            .remove((u(s), 3))
            .unwrap();
        Ok(())
    })
    .unwrap();
    let j = open_unchecked(&path);
    // The lost frame's retry: its index entry names a frame its log does not.
    match j.append(s, command(s, 3)).await {
        Err(AppendError::Corrupt { seq: 3, .. }) => {}
        other => panic!("expected AppendError::Corrupt at seq 3, got {other:?}"),
    }
    // A new key takes seq 3 (the gap): a new frame, the lost one kept.
    let outcome = j.append(s, command(s, 4)).await.unwrap();
    assert_eq!((outcome.seq, outcome.appended), (3, true));
    match j.append(s, command(s, 3)).await {
        Err(AppendError::Corrupt { seq: 3, .. }) => {}
        other => panic!("expected AppendError::Corrupt at seq 3, got {other:?}"),
    }
    j.close();
    assert_eq!(frames_in(&path), 4, "the lost frame is still in the log");
    // The scrub's first pass names the orphan and poisons the journal.
    let j = RedbJournal::open(&path, fast()).unwrap();
    let found = wait_for(&j, "the orphan", |st| {
        matches!(st.state, ScrubState::Damaged(_))
    });
    let ScrubState::Damaged(detail) = &found.state else {
        unreachable!()
    };
    assert!(detail.contains("no session's log reaches"), "{detail}");
    assert!(matches!(
        j.append(s, command(s, 5)).await,
        Err(AppendError::Damaged { .. })
    ));
    j.close();
}
