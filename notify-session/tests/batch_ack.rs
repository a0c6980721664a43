//! Batch acknowledgements on a real redb file: order, nothing released before its
//! commit, a batch spanning the session's end, cancellation, and the transactional
//! form (`SessionBatch::ack_with`: the application's rows and every consumption of
//! the batch in one transaction).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod batch_support;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Waker};
use std::time::Duration;

use batch_support::{Fixture, ids, redb};
use notify_journal::{AppTableError, RedbJournal};
use notify_session::{AckError, TxAckError};
use notify_types::CommandId;

const ROWS: &str = "app/rows";

/// The application's rows: command ID -> how many times written.
fn rows(journal: &RedbJournal) -> Vec<(u128, u64)> {
    journal
        .read_app_tables(|t| {
            let Some(table) = t.open_table::<u128, u64>(ROWS)? else {
                return Ok::<_, AppTableError>(Vec::new());
            };
            Ok(table
                .iter()?
                .map(|e| {
                    let (k, v) = e.unwrap();
                    (k.value(), v.value())
                })
                .collect())
        })
        .unwrap()
}

fn one_row_each(ids: &[CommandId]) -> Vec<(u128, u64)> {
    let mut want: Vec<(u128, u64)> = ids.iter().map(|c| (c.as_uuid().as_u128(), 1)).collect();
    want.sort_unstable();
    want
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_is_kept() {
    let (_dir, journal) = redb();
    batch_support::order_is_kept(journal).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_released_before_its_commit() {
    let (_dir, journal) = redb();
    batch_support::nothing_is_released_before_its_commit(journal).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_spanning_the_end_of_this_session() {
    let (_dir, journal) = redb();
    batch_support::a_batch_spanning_the_end(journal, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_spanning_an_end_by_another_handle() {
    let (_dir, journal) = redb();
    batch_support::a_batch_spanning_the_end(journal, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_ack_released_none() {
    let (_dir, journal) = redb();
    batch_support::a_cancelled_ack_released_none(journal).await;
}

/// Cancelled once its group is queued to the writer (redb queues it when called): the
/// group commits, yet nothing was released; received again, the batch is answered
/// from the journal and every consumption stays journaled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_ack_cancelled_after_its_group_was_queued_released_none() {
    let (_dir, journal) = redb();
    let mut f = Fixture::new(journal, 4).await;
    let batch = f.batch(4).await;
    let mut ack = Box::pin(batch.ack());
    let polled = ack.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    assert!(polled.is_pending(), "answered before its commit");
    drop(ack);
    let batch = f.batch(10).await;
    assert_eq!(
        ids(&batch),
        f.notified,
        "released none: all handed back in order"
    );
    // The queued group commits whether or not its future is polled.
    let mut waited = 0;
    while f.consumed().await.len() < 4 && waited < 500 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        waited += 1;
    }
    assert_eq!(f.consumed().await, f.notified);
    batch.ack().await.unwrap();
    assert_eq!(f.consumed().await, f.notified, "journaled once");
    assert!(f.broadcast().is_empty(), "the retry found them journaled");
    assert!(f.pending().await.is_empty());
}

/// The transactional batch: a failing write commits nothing (all handed back); a
/// successful one commits the rows with every consumption; a retry that finds some
/// consumptions journaled tells the write only the new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_with_commits_the_rows_and_the_consumptions_together() {
    let (_dir, journal) = redb();
    let mut f = Fixture::new(journal.clone(), 5).await;
    let told: Arc<Mutex<Vec<Vec<CommandId>>>> = Arc::default();
    let write = |fail: bool| {
        let told = told.clone();
        move |t: &notify_journal::AppTables<'_>, new: &[&notify_types::ProcessNotification]| {
            told.lock()
                .unwrap()
                .push(new.iter().map(|n| n.command_id()).collect());
            let mut table = t.open_table::<u128, u64>(ROWS)?;
            for n in new {
                let id = n.command_id().as_uuid().as_u128();
                // Twice would show as 2.
                let times = if table.contains(id)? { 2 } else { 1 };
                table.insert(id, times)?;
            }
            if fail {
                return Err("the application refused".into());
            }
            Ok(())
        }
    };

    let mut batch = f.batch(5).await;
    let tail = batch.split_off(3);
    let err = batch.ack_with(&journal, write(true)).await.unwrap_err();
    assert!(matches!(err.error, TxAckError::Write(_)), "{err:?}");
    assert_eq!(err.returned, f.notified[..3]);
    assert!(
        rows(&journal).is_empty(),
        "the failed write committed nothing"
    );
    assert!(f.consumed().await.is_empty(), "nor any consumption");

    // The first one journaled by a plain acknowledgement whose commit went unanswered.
    drop(tail);
    let mut batch = f.batch(1).await;
    assert_eq!(ids(&batch), f.notified[..1]);
    let rest = batch.split_off(1);
    drop(rest);
    f.control
        .fail_next_append(notify_testkit::AppendFault::PersistedButFailed);
    let err = batch.ack().await.unwrap_err();
    assert!(matches!(err.error, AckError::Journal(_)), "{err:?}");

    told.lock().unwrap().clear();
    let batch = f.batch(10).await;
    assert_eq!(ids(&batch), f.notified);
    batch.ack_with(&journal, write(false)).await.unwrap();
    assert_eq!(
        told.lock().unwrap().as_slice(),
        &[f.notified[1..].to_vec()],
        "the write is told only the new ones, once"
    );
    assert_eq!(rows(&journal), one_row_each(&f.notified[1..]));
    assert_eq!(f.consumed().await, f.notified);
    assert!(f.pending().await.is_empty());
}

/// After the session ended, a transactional batch writes nothing: the journaled part
/// is acknowledged, the rest refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_with_after_the_end_writes_nothing() {
    let (_dir, journal) = redb();
    let mut f = Fixture::new(journal.clone(), 2).await;
    let batch = f.batch(2).await;
    f.session
        .end(notify_session::IfPending::Abandon)
        .await
        .unwrap();
    let err = batch
        .ack_with(&journal, |_, _| panic!("no write after the end"))
        .await
        .unwrap_err();
    assert!(
        matches!(err.error, TxAckError::Ack(AckError::SessionEnded { .. })),
        "{err:?}"
    );
    assert_eq!(err.returned, f.notified);
    assert!(rows(&journal).is_empty());
    assert!(f.consumed().await.is_empty());
}

/// On the journal itself: a refused record refuses the group and the write with it,
/// on a file other appends share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_all_with_is_one_transaction() {
    use notify_journal::{AppTxnError, AppendError};
    use notify_types::{JournalRecord, SessionId};
    let (_dir, journal) = redb();
    let session = SessionId::new();
    let loop_id = notify_types::LoopId::new();
    let records: Vec<JournalRecord> = (0..3)
        .map(|_| notify_testkit::sample::command(session, loop_id))
        .collect();
    let outcomes = journal
        .append_all_with(session, records.clone(), |t, new| {
            assert_eq!(new, [0, 1, 2]);
            t.open_table::<u64, u64>(ROWS)?.insert(1, 1)?;
            Ok(())
        })
        .await
        .unwrap();
    assert_eq!(
        outcomes.iter().map(|o| o.seq).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    // A group whose last record collides: nothing of it, nor of its write, stays.
    let mut colliding = records[1].clone();
    if let JournalRecord::Command(n) = &mut colliding {
        let mut c = n.notification().clone();
        c.process_handle = "another".into();
        *n = notify_types::ProcessNotification::new(c);
    }
    let fresh = notify_testkit::sample::command(session, loop_id);
    let err = journal
        .append_all_with(session, vec![fresh.clone(), colliding], |t, _| {
            t.open_table::<u64, u64>(ROWS)?.insert(2, 2)?;
            Ok(())
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            AppTxnError::Append(AppendError::GroupRefused { index: 1, .. })
        ),
        "{err:?}"
    );
    let written = journal
        .read_app_tables(|t| {
            let table = t.open_table::<u64, u64>(ROWS)?.unwrap();
            Ok::<_, AppTableError>(table.iter()?.count())
        })
        .unwrap();
    assert_eq!(written, 1, "the refused group's write did not run");
    let frames = notify_journal::replay_all(&journal, session).await.unwrap();
    assert_eq!(
        frames.len(),
        3,
        "the refused group's first record was taken back"
    );
    let again = journal.append_all_with(session, vec![fresh], |_, new| {
        assert_eq!(new, [0]);
        Ok(())
    });
    let again = again.await.unwrap();
    assert!(again[0].appended, "new again after the refusal");
    assert_eq!(again[0].seq, 4, "the refused group took no seq");
}

/// A headless session (no journal): a batch is released at once and broadcast; after
/// the end, a batch received before it is refused whole and nothing more is received.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_headless_batch_is_released_at_once_and_refused_after_the_end() {
    use notify_loop::LoopConfig;
    use notify_session::{IfPending, Session};
    use notify_testkit::sample::notification;
    use notify_types::{LoopId, SessionEvent, SessionId};

    let session = Session::headless(SessionId::new());
    let loop_id = LoopId::new();
    let mut consumer = session
        .register_loop(LoopConfig::new(session.id(), loop_id))
        .unwrap();
    let mut events = session.subscribe();
    let mut notified = Vec::new();
    for _ in 0..4 {
        let n = notification(session.id(), loop_id);
        notified.push(n.command_id);
        session.notify_process_completion(n).await.unwrap();
    }
    let batch = consumer.recv_many(2).await;
    assert_eq!(ids(&batch), notified[..2]);
    batch.ack().await.unwrap();
    for want in &notified[..2] {
        match events.try_recv() {
            Ok(SessionEvent::NotificationConsumed(c)) => assert_eq!(c.cause(), *want),
            other => panic!("{other:?}"),
        }
    }
    let batch = consumer.recv_many(10).await;
    assert_eq!(ids(&batch), notified[2..]);
    session.end(IfPending::Abandon).await.unwrap();
    let err = batch.ack().await.unwrap_err();
    assert!(
        matches!(err.error, AckError::SessionEnded { .. }),
        "{err:?}"
    );
    assert_eq!(err.returned, notified[2..]);
    assert!(
        consumer.recv_many(10).await.is_empty(),
        "nothing after the end"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_answer_is_refused_whole() {
    let (_dir, journal) = redb();
    batch_support::a_short_answer_is_refused_whole(journal).await;
}
