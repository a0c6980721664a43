//! `RedbJournal::append_with`: a record and the application's own tables in one write
//! transaction: both commit or neither, what the closure may touch, its budget, and
//! the tables read back after a restart.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use notify_journal::{
    APP_WRITE_MAX_BYTES, APP_WRITE_MAX_TIME, AppTableError, AppTxnError, JournalRead, RedbJournal,
    RedbOptions, RedbReader,
};
use notify_types::{CommandId, SessionId, Uuid};

const TABLE: &str = "app/conversation";

/// The rows of the application's table, by command key.
fn rows(j: &RedbJournal) -> Vec<(u128, String)> {
    j.read_app_tables(|t| {
        let Some(table) = t.open_table::<u128, &str>(TABLE)? else {
            return Ok::<_, AppTableError>(Vec::new());
        };
        let mut out = Vec::new();
        for entry in table.iter()? {
            let (k, v) = entry.map_err(|e| {
                AppTableError::Storage(notify_journal::StorageError::new("iter", e))
            })?;
            out.push((k.value(), v.value().to_owned()));
        }
        Ok(out)
    })
    .unwrap()
}

fn cause(i: u64) -> CommandId {
    CommandId::from_uuid(Uuid::from_u128(0xc000 + u128::from(i)))
}

/// Appends the consumption of `cause(i)` with a row for it.
async fn ack_with_row(
    j: &RedbJournal,
    s: SessionId,
    i: u64,
) -> Result<notify_journal::AppendOutcome, AppTxnError> {
    j.append_with(s, consumed(s, cause(i)), move |t| {
        let mut table = t.open_table::<u128, &str>(TABLE)?;
        table.insert(cause(i).as_uuid().as_u128(), "done")?;
        Ok(())
    })
    .await
}

#[test]
fn the_record_and_the_rows_commit_together_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    let s = session(1);
    runtime().block_on(async {
        let j = open(&path);
        for i in 0..3 {
            let out = ack_with_row(&j, s, i).await.unwrap();
            assert!(out.appended);
            assert_eq!(out.seq, i + 1);
        }
        // A retry is a duplicate: its closure does not run again.
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let again = j
            .append_with(s, consumed(s, cause(0)), move |_| {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .await
            .unwrap();
        assert!(!again.appended);
        assert_eq!(again.seq, 1);
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        // Plain appends go on beside them.
        assert!(j.append(s, command(s, 9)).await.unwrap().appended);
    });
    let j = open(&path);
    assert_eq!(rows(&j).len(), 3);
    let j2 = runtime().block_on(async { j.last_seq(s).await.unwrap() });
    assert_eq!(j2, 4);
    drop(j);
    let reader = RedbReader::open(&path).unwrap();
    let n = reader
        .read_app_tables(|t| t.open_table::<u128, &str>(TABLE)?.unwrap().len())
        .unwrap();
    assert_eq!(n, 3);
}

#[test]
fn a_failing_closure_rolls_back_its_record_alone() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir.path().join("j.redb"));
    let s = session(2);
    runtime().block_on(async {
        // Queued together (a request is queued when called): one turn, or more.
        let first = ack_with_row(&j, s, 1);
        let failing = j.append_with(s, consumed(s, cause(2)), |t| {
            let mut table = t.open_table::<u128, &str>(TABLE)?;
            table.insert(cause(2).as_uuid().as_u128(), "half")?;
            Err("the application refused".into())
        });
        let third = ack_with_row(&j, s, 3);
        let (a, b, c) = tokio::join!(first, failing, third);
        assert!(a.unwrap().appended);
        assert!(matches!(b, Err(AppTxnError::Write(e)) if e.to_string().contains("refused")));
        assert!(c.unwrap().appended);
        let keys: Vec<u128> = rows(&j).into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            vec![cause(1).as_uuid().as_u128(), cause(3).as_uuid().as_u128()]
        );
        let missing = consumed(s, cause(2)).key();
        assert_eq!(j.lookup(s, missing).await.unwrap(), None);
        // The rolled-back ack can be retried and commits then.
        assert!(ack_with_row(&j, s, 2).await.unwrap().appended);
        assert_eq!(rows(&j).len(), 3);
    });
}

#[test]
fn the_closure_cannot_open_the_journals_tables() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir.path().join("j.redb"));
    let s = session(3);
    runtime().block_on(async {
        for name in [
            "notify_log",
            "notify_keys",
            "notify_journal_meta",
            "app/",
            "conversation",
        ] {
            let out = j
                .append_with(s, consumed(s, cause(1)), move |t| {
                    t.open_table::<u64, &[u8]>(name)?;
                    Ok(())
                })
                .await;
            match out {
                Err(AppTxnError::Write(e)) => {
                    let e = e.downcast::<AppTableError>().unwrap();
                    assert!(matches!(*e, AppTableError::Name { .. }), "{name}: {e}");
                }
                other => panic!("{name}: {other:?}"),
            }
        }
        assert_eq!(j.last_seq(s).await.unwrap(), 0);
    });
}

#[test]
fn a_closure_past_its_budget_or_panicking_commits_nothing_and_the_journal_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir.path().join("j.redb"));
    let s = session(4);
    runtime().block_on(async {
        let big = vec![7u8; APP_WRITE_MAX_BYTES / 4];
        let too_much = j
            .append_with(s, consumed(s, cause(1)), move |t| {
                let mut table = t.open_table::<u64, &[u8]>("app/blobs")?;
                for k in 0..8u64 {
                    // Swallowing the error does not help: the budget is spent.
                    let _ = table.insert(k, big.as_slice());
                }
                Ok(())
            })
            .await;
        assert!(matches!(too_much, Err(AppTxnError::Write(e)) if e.to_string().contains("APP_WRITE_MAX_BYTES")));
        let slow = j
            .append_with(s, consumed(s, cause(2)), |_| {
                std::thread::sleep(APP_WRITE_MAX_TIME + std::time::Duration::from_millis(20));
                Ok(())
            })
            .await;
        assert!(matches!(slow, Err(AppTxnError::Write(e)) if e.to_string().contains("APP_WRITE_MAX_TIME")));
        let panicked = j
            .append_with(s, consumed(s, cause(3)), |_| panic!("application bug"))
            .await;
        assert!(matches!(panicked, Err(AppTxnError::Panicked(m)) if m.contains("application bug")));
        assert_eq!(j.last_seq(s).await.unwrap(), 0);
        assert!(!j.is_poisoned());
        assert!(ack_with_row(&j, s, 4).await.unwrap().appended);
        let blobs = j
            .read_app_tables(|t| Ok::<_, AppTableError>(t.open_table::<u64, &[u8]>("app/blobs")?.is_some()))
            .unwrap();
        assert!(!blobs, "the rolled-back closure's table was never created");
    });
}

#[test]
fn refused_records_do_not_run_the_closure() {
    let dir = tempfile::tempdir().unwrap();
    let j = RedbJournal::open(dir.path().join("j.redb"), RedbOptions::default()).unwrap();
    let s = session(5);
    runtime().block_on(async {
        j.append(s, ended(s)).await.unwrap();
        let out = ack_with_row(&j, s, 1).await;
        assert!(matches!(
            out,
            Err(AppTxnError::Append(
                notify_journal::AppendError::SessionEnded { .. }
            ))
        ));
        assert!(rows(&j).is_empty());
    });
}

/// Failing closures queued among honest ones: each failure reruns only the closures
/// that had succeeded in its turn, in a turn that takes no more, so every honest ack
/// commits and its closure runs at most twice (once, then once more after the one
/// failure it shared a turn with), never once per failure queued behind it.
#[test]
fn failures_among_honest_acks_rerun_each_honest_closure_at_most_once() {
    const HONEST: u64 = 5;
    let dir = tempfile::tempdir().unwrap();
    let j = open(&dir.path().join("j.redb"));
    let s = session(6);
    runtime().block_on(async {
        let runs: Vec<Arc<AtomicUsize>> =
            (0..HONEST).map(|_| Arc::new(AtomicUsize::new(0))).collect();
        // The first honest closure waits until every append is queued (a request is
        // queued when called), so the writer finds them all behind it.
        let (go, gate) = std::sync::mpsc::channel::<()>();
        let mut gate = Some(gate);
        let mut honest = Vec::new();
        let mut failing = Vec::new();
        for i in 0..HONEST {
            let counted = Arc::clone(&runs[i as usize]);
            let gate = if i == 0 { gate.take() } else { None };
            honest.push(tokio::spawn(j.append_with(
                s,
                consumed(s, cause(i)),
                move |t| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    if let Some(gate) = &gate {
                        let _ = gate.recv();
                    }
                    let mut table = t.open_table::<u128, &str>(TABLE)?;
                    table.insert(cause(i).as_uuid().as_u128(), "done")?;
                    Ok(())
                },
            )));
            let bad = 100 + i;
            failing.push(tokio::spawn(j.append_with(
                s,
                consumed(s, cause(bad)),
                move |t| {
                    if bad == 100 {
                        // One burns its time budget before failing.
                        std::thread::sleep(
                            APP_WRITE_MAX_TIME + std::time::Duration::from_millis(5),
                        );
                    }
                    let mut table = t.open_table::<u128, &str>(TABLE)?;
                    table.insert(cause(bad).as_uuid().as_u128(), "half")?;
                    Err("the application refused".into())
                },
            )));
        }
        go.send(()).unwrap();
        drop(go);
        for (i, out) in honest.into_iter().enumerate() {
            assert!(out.await.unwrap().unwrap().appended, "honest ack {i}");
        }
        for out in failing {
            let out = out.await.unwrap();
            assert!(matches!(out, Err(AppTxnError::Write(_))), "{out:?}");
        }
        for (i, n) in runs.iter().enumerate() {
            let n = n.load(Ordering::SeqCst);
            assert!((1..=2).contains(&n), "honest closure {i} ran {n} times");
        }
        let keys: Vec<u128> = rows(&j).into_iter().map(|(k, _)| k).collect();
        let want: Vec<u128> = (0..HONEST).map(|i| cause(i).as_uuid().as_u128()).collect();
        assert_eq!(keys, want);
    });
}
