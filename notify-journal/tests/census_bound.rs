//! The key census past its bound: sessions written round robin whose keys outgrow
//! `RedbOptions::census_max_keys` are not read again, whole, on every append. The
//! frames the census reads are counted by `notify_journal_census_frames_read_total`,
//! read back from a recorder installed for the whole process.
//!
//! One test in this binary: the recorder is global, so nothing else may record
//! meanwhile, and the figure is this test's alone.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this file's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{command, session};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use notify_journal::{JournalRead, RedbJournal, RedbOptions};

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
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this binary");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    // 16 sessions × 48 keys = 768 keys, three times the exact bound of 256.
    const SESSIONS: u128 = 16;
    const PER_SESSION: u64 = 48;
    const BOUND: usize = 256;
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
    let read = frames_read(&snapshotter);
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
    let before = frames_read(&snapshotter);
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
    let reread = frames_read(&snapshotter) - before;
    assert_eq!(reread, keys, "each session's log read once after open");
    j.close();
}
