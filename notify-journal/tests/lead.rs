//! A lone appender leads (`writer/lead.rs`): leading never panics where the caller
//! may not block. (A lead held unpolled or leaked, a closure queued behind a lead, a
//! runtime of one worker: the unit tests in `writer/lead.rs`, which see whether a lead
//! was taken.)

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this file's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use notify_journal::{RedbJournal, RedbOptions};

fn open_default(path: &std::path::Path) -> RedbJournal {
    RedbJournal::open(path, RedbOptions::default()).unwrap()
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
