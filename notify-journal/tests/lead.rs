//! A lone appender leads (`writer/lead.rs`): an append future that holds the lead but
//! is polled late or never still has its record committed, and leading never panics
//! where the caller may not block.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this file's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use notify_journal::{RedbJournal, RedbOptions};
use notify_types::SessionId;

/// Generous: the writer thread takes an unpolled leader's batch over within a few ms.
const PATIENCE: Duration = Duration::from_secs(10);

fn open_default(path: &std::path::Path) -> RedbJournal {
    RedbJournal::open(path, RedbOptions::default()).unwrap()
}

/// Waits (up to [`PATIENCE`]) until `j` holds command `i` of `s`; its seq if it does.
fn committed_within(j: &RedbJournal, s: SessionId, i: u64) -> Option<u64> {
    let started = Instant::now();
    loop {
        if let Some(seq) = j.lookup_blocking(s, key_of(s, i)).unwrap() {
            return Some(seq);
        }
        if started.elapsed() > PATIENCE {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Appends commands `0..n` of `s`, each awaited: a lone appender, so its appends lead
/// and the writer thread is left asleep (the pauses let it fall asleep first; the
/// tests' assertions hold whether or not an append leads).
async fn lone_appends(j: &RedbJournal, s: SessionId, n: u64) {
    for i in 0..n {
        std::thread::sleep(Duration::from_millis(3));
        j.append(s, command(s, i)).await.unwrap();
    }
}

#[test]
fn an_append_future_held_unpolled_is_committed_by_the_writer_thread() {
    let dir = tempfile::tempdir().unwrap();
    let j = open_default(&dir.path().join("j.redb"));
    let rt = runtime();
    let s = session(1);
    rt.block_on(lone_appends(&j, s, 5));
    // Queued (and holding the lead, if it took it) but not polled; created inside the
    // runtime, as an application would.
    let held = {
        let _entered = rt.enter();
        j.append(s, command(s, 5))
    };
    let reader = j.clone();
    let seq = rt.block_on(async move {
        tokio::task::spawn_blocking(move || committed_within(&reader, s, 5))
            .await
            .unwrap()
    });
    assert_eq!(seq, Some(6), "the held append's record was not committed");
    // Polled at last, it finds its answer.
    let outcome = rt.block_on(held).unwrap();
    assert_eq!((outcome.seq, outcome.appended), (6, true));
    // The journal goes on as before: the next lone appends lead again.
    rt.block_on(async {
        for i in 6..10 {
            let o = j.append(s, command(s, i)).await.unwrap();
            assert_eq!(o.seq, i + 1);
        }
    });
}

#[test]
fn an_append_future_forgotten_is_committed_by_the_writer_thread() {
    let dir = tempfile::tempdir().unwrap();
    let j = open_default(&dir.path().join("j.redb"));
    let rt = runtime();
    let s = session(2);
    rt.block_on(async {
        lone_appends(&j, s, 5).await;
        // Leaked: never polled, never dropped (its lead is never handed back).
        std::mem::forget(j.append(s, command(s, 5)));
    });
    let reader = j.clone();
    let seq = rt.block_on(async move {
        tokio::task::spawn_blocking(move || committed_within(&reader, s, 5))
            .await
            .unwrap()
    });
    assert_eq!(
        seq,
        Some(6),
        "the forgotten append's record was not committed"
    );
    // A lead leaked for good does not stop later appends (nor later leads).
    rt.block_on(async {
        for i in 6..10 {
            let o = j.append(s, command(s, i)).await.unwrap();
            assert_eq!(o.seq, i + 1);
        }
    });
    j.close();
}

#[test]
fn append_in_a_current_thread_runtime_with_a_multi_thread_handle_entered_does_not_panic() {
    let dir = tempfile::tempdir().unwrap();
    let j = open_default(&dir.path().join("j.redb"));
    let mt = runtime();
    let ct = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let s = session(3);
    ct.block_on(async {
        // `Handle::current()` now reports the multi-thread runtime, but this thread
        // runs the current-thread runtime, where blocking in place is refused.
        let _entered = mt.handle().enter();
        for i in 0..5 {
            let o = j.append(s, command(s, i)).await.unwrap();
            assert_eq!(o.seq, i + 1);
        }
    });
    // The same inside a `LocalSet` driven by the multi-thread runtime's `block_on`
    // (the set refuses blocking in place while it runs its tasks).
    let local = tokio::task::LocalSet::new();
    local.block_on(&mt, async {
        let j = j.clone();
        tokio::task::spawn_local(async move {
            for i in 5..10 {
                let o = j.append(s, command(s, i)).await.unwrap();
                assert_eq!(o.seq, i + 1);
            }
        })
        .await
        .unwrap();
    });
}
