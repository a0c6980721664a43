//! Append, index and open semantics of `RedbJournal`.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this file's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashSet;

use common::*;
use notify_journal::{
    AppendError, AppendOutcome, JournalBackend, JournalError, JournalRead, OpenError, RedbJournal,
    RedbOptions, replay_all,
};
use notify_types::{CommandId, JournalRecord, SessionId};
use redb::TableDefinition;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Appended(u64),
    Duplicate(u64),
    Collision(u64),
}

fn outcome(r: Result<AppendOutcome, AppendError>) -> Expect {
    match r {
        Ok(AppendOutcome {
            seq,
            appended: true,
        }) => Expect::Appended(seq),
        Ok(AppendOutcome {
            seq,
            appended: false,
        }) => Expect::Duplicate(seq),
        Err(AppendError::Collision { seq, .. }) => Expect::Collision(seq),
        Err(e) => panic!("unexpected append error: {e:?}"),
    }
}

/// Appends each record in turn and compares the outcomes.
async fn check(journal: &RedbJournal, s: SessionId, steps: &[(JournalRecord, Expect)]) {
    for (i, (record, want)) in steps.iter().enumerate() {
        let got = outcome(JournalBackend::append(journal, s, record.clone()).await);
        assert_eq!(got, *want, "step {i}");
    }
}

/// Every frame decodes, seqs are 1..=n, every key once and indexed at its seq.
async fn assert_log_consistent(journal: &RedbJournal, s: SessionId) -> Vec<JournalRecord> {
    let frames = replay_all(journal, s).await.unwrap();
    let mut keys = HashSet::new();
    for (i, (seq, record)) in frames.iter().enumerate() {
        assert_eq!(*seq, i as u64 + 1, "gap or reorder in session {s}");
        assert!(
            keys.insert(record.key()),
            "key {} journaled twice",
            record.key()
        );
        assert_eq!(journal.lookup(s, record.key()).await.unwrap(), Some(*seq));
    }
    assert_eq!(journal.last_seq(s).await.unwrap(), frames.len() as u64);
    frames.into_iter().map(|(_, r)| r).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_and_collision_semantics() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir.path().join("j.redb"));
    let s = session(1);
    let (a, b) = (key_of(s, 1), key_of(s, 2));
    check(
        &j,
        s,
        &[
            (command_with(s, a, 0), Expect::Appended(1)),
            (command_with(s, a, 0), Expect::Duplicate(1)),
            (command_with(s, b, 0), Expect::Appended(2)),
            (command_with(s, a, 1), Expect::Collision(1)),
            (command_with(s, b, 7), Expect::Collision(2)),
            (command_with(s, b, 0), Expect::Duplicate(2)),
            (command(s, 3), Expect::Appended(3)),
        ],
    )
    .await;
    let log = assert_log_consistent(&j, s).await;
    assert_eq!(
        log,
        vec![command_with(s, a, 0), command_with(s, b, 0), command(s, 3)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collision_across_record_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir.path().join("j.redb"));
    let s = session(1);
    let cause = CommandId::from_uuid(key_of(s, 9));
    let event = consumed(s, cause);
    // A command whose ID equals the consumption event's ID: same key, another kind.
    let clash = command_with(s, event.key(), 0);
    check(
        &j,
        s,
        &[
            (event.clone(), Expect::Appended(1)),
            (clash.clone(), Expect::Collision(1)),
            (event, Expect::Duplicate(1)),
        ],
    )
    .await;
    let t = session(2);
    let event = consumed(t, cause);
    let clash = command_with(t, event.key(), 0);
    check(
        &j,
        t,
        &[(clash, Expect::Appended(1)), (event, Expect::Collision(1))],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_per_session() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir.path().join("j.redb"));
    let (s, t) = (session(1), session(2));
    let key = key_of(s, 1);
    check(&j, s, &[(command_with(s, key, 0), Expect::Appended(1))]).await;
    check(&j, t, &[(command_with(t, key, 0), Expect::Appended(1))]).await;
    assert_eq!(j.sessions().await.unwrap(), vec![s, t]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_and_collision_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = session(1);
    let j = open(&path);
    check(
        &j,
        s,
        &[
            (command(s, 1), Expect::Appended(1)),
            (command(s, 2), Expect::Appended(2)),
        ],
    )
    .await;
    j.close();
    drop(j);
    let j = open(&path);
    check(
        &j,
        s,
        &[
            (command(s, 2), Expect::Duplicate(2)),
            (command_with(s, key_of(s, 1), 5), Expect::Collision(1)),
            (command(s, 3), Expect::Appended(3)),
        ],
    )
    .await;
    assert_log_consistent(&j, s).await;
}

/// The writer is held inside the commit of a lone append; meanwhile the same new key is
/// appended twice (identical) and once with other bytes, plus another session's record.
/// All four land in the next batch, which must resolve them as if sequential.
#[test]
fn same_new_key_twice_in_one_batch() {
    let rt = runtime();
    let ctl = Control::new();
    let j = RedbJournal::open_with_backend(ctl.backend(), RedbOptions::default()).unwrap();
    let (s, t) = (session(1), session(2));
    let key = key_of(s, 2);

    ctl.hold();
    let first = rt.spawn(j.append(s, command(s, 1)));
    ctl.wait_held();
    let syncs_before = ctl.syncs();
    let a = rt.spawn(j.append(s, command_with(s, key, 0)));
    let b = rt.spawn(j.append(s, command_with(s, key, 0)));
    let c = rt.spawn(j.append(s, command_with(s, key, 3)));
    let d = rt.spawn(j.append(t, command(t, 1)));
    ctl.release();

    let got = rt.block_on(async {
        [
            first.await.unwrap(),
            a.await.unwrap(),
            b.await.unwrap(),
            c.await.unwrap(),
            d.await.unwrap(),
        ]
        .map(outcome)
    });
    assert_eq!(
        got,
        [
            Expect::Appended(1),
            Expect::Appended(2),
            Expect::Duplicate(2),
            Expect::Collision(2),
            Expect::Appended(1),
        ]
    );
    // The held commit's sync and exactly one more: the four were one batch.
    assert_eq!(ctl.syncs(), syncs_before + 2);
    rt.block_on(async {
        assert_log_consistent(&j, s).await;
        assert_log_consistent(&j, t).await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gap_free_under_64_concurrent_appenders_over_several_sessions() {
    const APPENDERS: u64 = 64;
    const SESSIONS: u64 = 4;
    const PER_APPENDER: u64 = 12;
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir.path().join("j.redb"));
    let mut tasks = Vec::new();
    for a in 0..APPENDERS {
        let j = j.clone();
        tasks.push(tokio::spawn(async move {
            let s = session(u128::from(a % SESSIONS));
            let mut acked = Vec::new();
            for i in 0..PER_APPENDER {
                let r = command(s, a * 1000 + i);
                let o = j.append(s, r.clone()).await.unwrap();
                assert!(o.appended);
                // Every third record is retried at once: a duplicate with the same seq.
                if i % 3 == 0 {
                    assert_eq!(
                        j.append(s, r.clone()).await.unwrap(),
                        AppendOutcome {
                            seq: o.seq,
                            appended: false
                        }
                    );
                }
                acked.push((s, r, o.seq));
            }
            acked
        }));
    }
    let mut acked = Vec::new();
    for t in tasks {
        acked.extend(t.await.unwrap());
    }
    for n in 0..SESSIONS {
        let s = session(u128::from(n));
        let log = assert_log_consistent(&j, s).await;
        assert_eq!(log.len() as u64, APPENDERS / SESSIONS * PER_APPENDER);
    }
    let frames: std::collections::HashMap<(SessionId, u64), JournalRecord> = {
        let mut m = std::collections::HashMap::new();
        for n in 0..SESSIONS {
            let s = session(u128::from(n));
            for (seq, r) in replay_all(&j, s).await.unwrap() {
                m.insert((s, seq), r);
            }
        }
        m
    };
    for (s, r, seq) in acked {
        assert_eq!(frames.get(&(s, seq)), Some(&r));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_from_seq_with_limit_and_listing() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir.path().join("j.redb"));
    let s = session(3);
    for i in 1..=10 {
        j.append(s, command(s, i)).await.unwrap();
    }
    let page = j.replay(s, 4, 3).await.unwrap();
    assert_eq!(
        page,
        vec![(4, command(s, 4)), (5, command(s, 5)), (6, command(s, 6))]
    );
    assert!(j.replay(s, 11, 5).await.unwrap().is_empty());
    assert_eq!(j.replay(s, 0, 100).await.unwrap().len(), 10);
    assert_eq!(j.last_seq(session(99)).await.unwrap(), 0);
    assert!(j.replay(session(99), 1, 10).await.unwrap().is_empty());
    assert_eq!(j.lookup(s, key_of(s, 7)).await.unwrap(), Some(7));
    assert_eq!(j.lookup(s, key_of(s, 70)).await.unwrap(), None);
    assert_eq!(j.sessions().await.unwrap(), vec![s]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_misaddressed_records_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let j = RedbJournal::open(
        dir.path().join("j.redb"),
        RedbOptions::default().max_record_bytes(64),
    )
    .unwrap();
    let s = session(1);
    let r = command(s, 1);
    let len = r.encode().len();
    assert!(matches!(
        j.append(s, r).await,
        Err(AppendError::TooLarge { len: l, max: 64 }) if l == len
    ));
    let t = session(2);
    assert!(matches!(
        j.append(t, command(s, 1)).await,
        Err(AppendError::SessionMismatch { session, record }) if session == t && record == s
    ));
    assert_eq!(j.last_seq(s).await.unwrap(), 0);
    assert_eq!(j.last_seq(t).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_journal_refuses_everything() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir.path().join("j.redb"));
    let s = session(1);
    let other = j.clone();
    j.close();
    assert!(matches!(
        other.append(s, command(s, 1)).await,
        Err(AppendError::Closed)
    ));
    assert!(matches!(other.last_seq(s).await, Err(JournalError::Closed)));
    j.close(); // idempotent
}

#[test]
fn second_opener_gets_already_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let j = open(&path);
    match RedbJournal::open(&path, RedbOptions::default()) {
        Err(OpenError::AlreadyOpen { path: p }) => assert_eq!(p, path),
        other => panic!("expected AlreadyOpen, got {other:?}"),
    }
    j.close();
    // Released on close.
    open(&path).close();
}

#[test]
fn garbage_file_is_not_a_journal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.redb");
    let garbage: Vec<u8> = (0..64 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&path, &garbage).unwrap();
    match RedbJournal::open(&path, RedbOptions::default()) {
        Err(e @ OpenError::NotAJournal { .. }) => {
            assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        }
        other => panic!("expected NotAJournal, got {other:?}"),
    }
    // Untouched.
    assert_eq!(std::fs::read(&path).unwrap(), garbage);
}

#[test]
fn foreign_redb_database_is_not_a_journal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.redb");
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(TableDefinition::<u64, u64>::new("something_else"))
            .unwrap()
            .insert(1, 2)
            .unwrap();
        txn.commit().unwrap();
    }
    assert!(matches!(
        RedbJournal::open(&path, RedbOptions::default()),
        Err(OpenError::NotAJournal { path: p, .. }) if p == path
    ));
}

const META: TableDefinition<'_, &str, u64> = TableDefinition::new("notify_journal_meta");

#[test]
fn unknown_format_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    open(&path).close();
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(META)
            .unwrap()
            .insert("format_version", 99)
            .unwrap();
        txn.commit().unwrap();
    }
    match RedbJournal::open(&path, RedbOptions::default()) {
        Err(OpenError::UnsupportedFormatVersion {
            path: p,
            found: 99,
            supported,
        }) => {
            assert_eq!(p, path);
            assert_eq!(supported, notify_journal::FORMAT_VERSION);
        }
        other => panic!("expected UnsupportedFormatVersion, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extreme_max_batch_is_clamped_not_a_dead_writer() {
    // postmortem (review): max_batch(usize::MAX) made the writer thread preallocate
    // usize::MAX requests and die, so every append answered Closed.
    let dir = tempfile::tempdir().unwrap();
    let options = RedbOptions::default().max_batch(usize::MAX);
    let j = RedbJournal::open(dir.path().join("j.redb"), options).unwrap();
    let s = session(1);
    check(
        &j,
        s,
        &[
            (command(s, 1), Expect::Appended(1)),
            (command(s, 2), Expect::Appended(2)),
        ],
    )
    .await;
}

/// A lone appender leads (`writer/lead.rs`): it commits its own batches on its own
/// thread and never wakes the writer thread, even when it pauses between appends long
/// enough for the thread to fall asleep.
#[test]
fn a_lone_appender_commits_its_own_batches() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir.path().join("j.redb"));
    let s = session(1);
    runtime().block_on(async {
        for i in 0..12 {
            // Long enough for the writer thread to stop any spin and sleep.
            std::thread::sleep(std::time::Duration::from_millis(3));
            let r = j.append(s, command(s, i)).await.unwrap();
            assert_eq!(r.seq, i + 1);
        }
    });
    let stats = j.commit_stats();
    assert_eq!((stats.commits, stats.appends), (12, 12));
    assert_eq!(
        stats.writer_wakeups, 0,
        "the lone appender woke the writer thread"
    );
}

/// Where an appender cannot lead (a current-thread runtime) or drops its append before
/// polling it, the writer thread writes it: nothing is lost or left waiting.
#[test]
fn appends_the_lead_is_handed_back_for_still_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let j = open(&path);
    let s = session(2);
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    current.block_on(async {
        for i in 0..3 {
            assert_eq!(j.append(s, command(s, i)).await.unwrap().seq, i + 1);
        }
    });
    // Queued when called; never polled.
    drop(j.append(s, command(s, 3)));
    runtime().block_on(async {
        let again = j.append(s, command(s, 3)).await.unwrap();
        assert_eq!(again.seq, 4);
        assert_eq!(j.append(s, command(s, 4)).await.unwrap().seq, 5);
        // An append queued behind one whose future is not polled yet still commits.
        let first = j.append(s, command(s, 5));
        assert_eq!(j.append(s, command(s, 6)).await.unwrap().seq, 7);
        assert_eq!(first.await.unwrap().seq, 6);
    });
    j.close();
    let j = open(&path);
    runtime().block_on(async {
        assert_eq!(assert_log_consistent(&j, s).await.len(), 7);
    });
}

/// A group queued after a lead, while the writer thread sleeps, wakes the thread.
#[test]
fn a_group_after_a_lead_commits() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir.path().join("j.redb"));
    let s = session(3);
    runtime().block_on(async {
        for i in 0..3 {
            // Long enough for the writer thread to sleep, so the append leads.
            std::thread::sleep(std::time::Duration::from_millis(3));
            assert_eq!(j.append(s, command(s, i)).await.unwrap().seq, i + 1);
        }
        let group = vec![command(s, 3), command(s, 4)];
        let outcomes = j.append_all(s, group, None).await.unwrap();
        let seqs: Vec<u64> = outcomes.iter().map(|o| o.seq).collect();
        assert_eq!(seqs, [4, 5]);
    });
}
