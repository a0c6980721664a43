//! Retention at scale in the redb journal: under a steady state of ends and purges the
//! file stops growing and compaction shrinks it; large tombstone drops run in steps.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this file's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{command, ended, later, open, session};
use notify_journal::{
    AppendError, JournalRead, OpenError, RedbJournal, SessionState, purge, replay_all,
};
use notify_types::SessionId;

/// Appends `from..=to` to `s`, all queued at once (a few batches).
async fn fill(j: &RedbJournal, s: SessionId, from: u64, to: u64) {
    let futures: Vec<_> = (from..=to).map(|i| j.append(s, command(s, i))).collect();
    for f in futures {
        f.await.unwrap();
    }
}

/// Cycle `n` of a steady state: session `n` starts, session `n - 1` gets a few more
/// appends, session `n - 2` ends; everything ended is purged and its tombstone dropped.
/// Three sessions are live at any time and the volume of live data stays the same.
async fn cycle(j: &RedbJournal, n: u128) {
    let s = session(n);
    fill(j, s, 1, 10).await;
    if n >= 1 {
        fill(j, session(n - 1), 11, 20).await;
    }
    if n >= 2 {
        let old = session(n - 2);
        j.append(old, ended(old)).await.unwrap();
    }
    purge(j, later(), 8).await.unwrap();
    j.drop_tombstones(later(), 100).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_steady_state_the_file_stops_growing_and_compaction_shrinks_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    // Durable commits, as in production: redb reuses a freed page only once no
    // durable state names it.
    let j = open(&path);
    let len = || std::fs::metadata(&path).unwrap().len();
    // A large session, ended and purged, leaves its pages free. The cycles below write
    // twice its frames: without reuse, the file would grow well past this peak.
    let big = session(1 << 40);
    fill(&j, big, 1, 2500).await;
    j.append(big, ended(big)).await.unwrap();
    let peak = len();
    purge(&j, later(), 500).await.unwrap();
    let mut all = 0;
    for n in 0..50 {
        cycle(&j, n).await;
        all = all.max(len());
    }
    let mut warm = 0;
    for n in 50..100 {
        cycle(&j, n).await;
        warm = warm.max(len());
    }
    all = all.max(warm);
    let mut steady = 0;
    for n in 100..250 {
        cycle(&j, n).await;
        steady = steady.max(len());
    }
    all = all.max(steady);
    // How the file's length settles varies with when redb gives back its free tail, so
    // only the bound is asserted; the plateau is printed.
    eprintln!(
        "peak {peak}; largest in cycles 0..250: {all}; in cycles 50..100: {warm}; in cycles 100..250: {steady}"
    );
    assert!(
        all <= peak,
        "the file grew past the big session's peak ({peak} -> {all}): freed pages are not reused"
    );
    // The two sessions not yet ended are whole; the rest are gone.
    let live: Vec<SessionId> = (248..250).map(session).collect();
    assert_eq!(j.sessions().await.unwrap(), live);
    j.close();

    let closed = len();
    let report = RedbJournal::compact_file(&path).unwrap();
    eprintln!("{report:?}");
    assert_eq!(report.bytes_before, closed);
    assert!(
        report.bytes_after < report.bytes_before,
        "compaction gave nothing back: {report:?}"
    );
    assert_eq!(report.bytes_after, len());
    // Still the same journal.
    let j = open(&path);
    assert_eq!(j.sessions_blocking().unwrap(), live);
    assert_eq!(replay_all(&j, session(248)).await.unwrap().len(), 20);
    let v = j.verify(10).await.unwrap();
    assert!(v.is_clean(), "{v}");
}

#[test]
fn compacting_refuses_what_is_not_a_journal() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(
        RedbJournal::compact_file(&empty),
        Err(OpenError::NotAJournal { .. })
    ));
    let foreign = dir.path().join("foreign");
    std::fs::write(&foreign, b"not a redb file at all, not even close").unwrap();
    assert!(matches!(
        RedbJournal::compact_file(&foreign),
        Err(OpenError::NotAJournal { .. })
    ));
    let path = dir.path().join("j.redb");
    let j = open(&path);
    assert!(matches!(
        RedbJournal::compact_file(&path),
        Err(OpenError::AlreadyOpen { .. })
    ));
    j.close();
    assert!(RedbJournal::compact_file(&path).is_ok());
}

/// A drop of many tombstones runs as many steps, each a chore of its own queued behind
/// whatever else came meanwhile. Issued back to back (each queued at the call): a drop
/// of all 400 tombstones in steps of 2 (200 transactions), an append to the session of
/// the youngest tombstone (the last a drop reaches), and a second drop of all. The
/// append is answered before the first drop ends: refused as purged. The two drops
/// take turns step by step and share the tombstones, answering totals that add up.
/// (Were a drop one transaction, the first would drop all 400 before anything else ran:
/// the second would find none, and the append would start a new log.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_tombstone_drop_runs_in_steps_with_appends_between_them() {
    const N: u128 = 400;
    let dir = tempfile::tempdir().unwrap();
    let options = notify_journal::RedbOptions::default()
        .durability(notify_journal::RedbDurability::NonDurableForTestsOnly)
        .drop_step(2);
    let j = RedbJournal::open(dir.path().join("j.redb"), options).unwrap();
    // Ended one after the other, so purged (and dropped) in this order.
    for n in 0..N {
        let s = session(n);
        j.append(s, ended(s)).await.unwrap();
    }
    let report = purge(&j, later(), 10).await.unwrap();
    assert_eq!(report.sessions, N as u64);
    let youngest = session(N - 1);

    let first = j.drop_tombstones(later(), usize::MAX);
    let append = j.append(youngest, command(youngest, 1));
    let second = j.drop_tombstones(later(), usize::MAX);
    match append.await {
        Err(AppendError::SessionEnded {
            session,
            purged: true,
        }) if session == youngest => {}
        other => panic!(
            "the append issued during the drop waited for all of it, not for one step: {other:?}"
        ),
    }
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    assert!(
        first > 0 && second > 0,
        "the drops did not take turns: {first} and {second}"
    );
    assert_eq!(first + second, N as u64);
    assert_eq!(j.session_state(youngest).await.unwrap(), SessionState::Live);
    assert!(j.sessions().await.unwrap().is_empty());
    assert_eq!(j.drop_tombstones(later(), usize::MAX).await.unwrap(), 0);
    assert_eq!(
        j.append(youngest, command(youngest, 1)).await.unwrap().seq,
        1
    );
    let v = j.verify(10).await.unwrap();
    assert!(v.is_clean(), "{v}");
    assert_eq!((v.frames, v.tombstones), (1, 0));
}

/// A drop stops at `limit`, at whatever step boundary, and answers exactly what it
/// dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stepped_tombstone_drop_stops_at_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let options = notify_journal::RedbOptions::default()
        .durability(notify_journal::RedbDurability::NonDurableForTestsOnly)
        .drop_step(3);
    let j = RedbJournal::open(dir.path().join("j.redb"), options).unwrap();
    for n in 0..10 {
        let s = session(n);
        j.append(s, ended(s)).await.unwrap();
    }
    purge(&j, later(), 10).await.unwrap();
    // 7 = two full steps and one of 1; then 3 = one full step that finds just 3; then 0.
    assert_eq!(j.drop_tombstones(later(), 7).await.unwrap(), 7);
    assert_eq!(j.sessions().await.unwrap().len(), 3);
    assert_eq!(j.drop_tombstones(later(), 100).await.unwrap(), 3);
    assert_eq!(j.drop_tombstones(later(), 100).await.unwrap(), 0);
    assert!(j.sessions().await.unwrap().is_empty());
}
