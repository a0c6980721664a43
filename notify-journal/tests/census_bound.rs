//! The key census past its bound: sessions written round robin whose keys outgrow
//! `RedbOptions::census_max_keys` are not read again, whole, on every append. The
//! frames the census reads are counted by `notify_journal_census_frames_read_total`,
//! read back from a recorder installed for the whole process.
//!
//! The recorder is global: it is installed once, and the tests of this binary take
//! turns (`TURN`), so that each figure, a difference of the counter, is its own.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this file's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{command, session};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use notify_journal::{JournalRead, RedbJournal, RedbOptions};
use std::sync::OnceLock;

/// The recorder's snapshotter, installed on first use.
fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this binary");
        snapshotter
    })
}

/// Held by each test for its whole run: the counter is shared.
/// What the census charges against its bound for each session it holds, in keys
/// (`census/lru.rs`, `SESSION_KEYS`).
const SESSION_COST: usize = 20;

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn frames_read(snapshotter: &Snapshotter) -> u64 {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .find_map(|(key, _, _, value)| {
            let (_, key) = key.into_parts();
            match value {
                DebugValue::Counter(n)
                    if key.name() == "notify_journal_census_frames_read_total" =>
                {
                    Some(n)
                }
                _ => None,
            }
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_outgrowing_the_census_bound_are_not_read_again_per_append() {
    let _turn = TURN.lock().await;
    let snapshotter = snapshotter();
    let start = frames_read(snapshotter);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    // 16 sessions × 48 keys = 768 keys, three times the 256 keys the exact bound holds
    // besides the sessions' own cost (each session held is charged as 20 keys).
    const SESSIONS: u128 = 16;
    const PER_SESSION: u64 = 48;
    const BOUND: usize = 256 + SESSION_COST * SESSIONS as usize;
    let options = RedbOptions::default().census_max_keys(BOUND);
    let j = RedbJournal::open(&path, options.clone()).unwrap();
    // One append at a time, round robin: each its own batch, each a miss to confirm.
    for i in 1..=PER_SESSION {
        for s in 1..=SESSIONS {
            let s = session(s);
            assert!(j.append(s, command(s, i)).await.unwrap().appended);
        }
    }
    let keys = u64::try_from(SESSIONS).unwrap() * PER_SESSION;
    let read = frames_read(snapshotter) - start;
    eprintln!("census frames read: {read} for {keys} keys");
    // Forgetting the least recently used sessions read a session's whole log on nearly
    // every append (thousands of frames here); the census may read each session again
    // about once per doubling of its log, so at most a small multiple of the keys.
    assert!(
        read <= 2 * keys,
        "the census read {read} frames to confirm {keys} misses"
    );
    // Retries are still answered from the index, and the census still confirms misses.
    let s = session(3);
    assert!(!j.append(s, command(s, 7)).await.unwrap().appended);
    assert_eq!(j.last_seq(s).await.unwrap(), PER_SESSION);
    j.close();

    // Reopened, every session's first miss reads its log once (the bound still holds).
    let before = frames_read(snapshotter);
    let j = RedbJournal::open(&path, options).unwrap();
    for s in 1..=SESSIONS {
        let s = session(s);
        assert!(
            j.append(s, command(s, PER_SESSION + 1))
                .await
                .unwrap()
                .appended
        );
    }
    let reread = frames_read(snapshotter) - before;
    assert_eq!(reread, keys, "each session's log read once after open");
    j.close();
}

/// One session over about twice the bound, then written alternately with another:
/// its filter, read back at twice the room, once outgrew the filters' whole budget, so
/// every batch that ended on the other session forgot it and its next append read its
/// whole log again (about 60,000 frames for these 100 appends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_past_twice_the_bound_is_not_read_again_when_another_is_written() {
    let _turn = TURN.lock().await;
    let snapshotter = snapshotter();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    // 256 keys besides the two sessions' own cost.
    const BOUND: usize = 256 + 2 * SESSION_COST;
    const FIRST: u64 = 600;
    let j = RedbJournal::open(&path, RedbOptions::default().census_max_keys(BOUND)).unwrap();
    let (a, b) = (session(1), session(2));
    for i in 1..=FIRST {
        assert!(j.append(a, command(a, i)).await.unwrap().appended);
    }
    let before = frames_read(snapshotter);
    for i in 1..=50 {
        assert!(j.append(a, command(a, FIRST + i)).await.unwrap().appended);
        assert!(j.append(b, command(b, i)).await.unwrap().appended);
    }
    let read = frames_read(snapshotter) - before;
    eprintln!("census frames read: {read} for 100 alternating appends");
    // Covered throughout: only frames whose tag matches a key the filter may hold (a
    // false positive, about one in a few hundred here) are read; less than one reading
    // of the session's log in all.
    assert!(
        read < FIRST,
        "the census read {read} frames to confirm 100 misses"
    );
    // Retries are still answered from the index.
    assert!(!j.append(a, command(a, 7)).await.unwrap().appended);
    assert_eq!(j.last_seq(a).await.unwrap(), FIRST + 50);
    j.close();
}
