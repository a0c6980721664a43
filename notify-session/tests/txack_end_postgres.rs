//! Transactional acknowledgements on PostgreSQL racing `Session::end`: two
//! acknowledgements in one application transaction, with an end waiting for the
//! session's journal row between them, neither deadlock nor lose an answer: both
//! consumptions commit before the end, which abandons nothing.
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use notify_journal::{PgJournal, PgOptions, replay_all};
use notify_loop::LoopConfig;
use notify_session::{IfPending, PgAck, Session};
use notify_testkit::postgres::database_url;
use notify_types::{
    CommandId, JournalRecord, LoopId, ProcessCompletionNotification, ProcessLifecycleState,
    ProcessTerminalReason, SessionEvent, SessionId, Uuid,
};

/// How long a step may take before the test calls it a hang (not a speed claim: a
/// deadlock never ends, a working run takes milliseconds).
const HANG: Duration = Duration::from_secs(30);

async fn client(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

fn notification(session: SessionId, loop_id: LoopId) -> ProcessCompletionNotification {
    let command_id = CommandId::new();
    ProcessCompletionNotification {
        command_id,
        session_id: session,
        loop_id,
        process_handle: format!("job-{command_id}"),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }
}

/// A acknowledges one notification in its transaction (the session's row is locked
/// until A commits); B's `end` then waits for that row; A acknowledges a second
/// notification in the same transaction. The second acknowledgement must not wait for
/// the end (which waits for A): it is written in A's transaction, A commits, and the
/// end goes on. (When the second acknowledgement waited for the end gate, only the
/// journal's statement timeout broke the deadlock, failing the end.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_acks_in_one_transaction_with_an_end_waiting_between_them_do_not_deadlock() {
    let Some(url) = database_url("txack_end_postgres") else {
        return;
    };
    let schema = format!("txack_end_{}", Uuid::new_v4().simple());
    let journal = Arc::new(
        PgJournal::connect(&url, PgOptions::default().schema(&schema))
            .await
            .unwrap(),
    );
    let session_id = SessionId::new();
    let loop_id = LoopId::new();
    let session = Arc::new(Session::new(session_id, journal.clone()));
    let mut consumer = session
        .register_loop(LoopConfig::new(session_id, loop_id))
        .unwrap();
    for _ in 0..2 {
        session
            .notify_process_completion(notification(session_id, loop_id))
            .await
            .unwrap();
    }
    let r1 = consumer.recv().await.unwrap();
    let r2 = consumer.recv().await.unwrap();

    let mut app = client(&url).await;
    let watcher = client(&url).await;
    let tx = app.transaction().await.unwrap();
    let app_pid: i32 = tx
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let (c1, c2) = (r1.command_id(), r2.command_id());
    let PgAck::Write(first) = r1.ack_in_pg(&journal, &tx).await.unwrap() else {
        panic!("a new consumption answered AlreadyConsumed");
    };

    let ending = {
        let session = Arc::clone(&session);
        tokio::spawn(async move { session.end(IfPending::Abandon).await })
    };
    // Until the end waits for the row A holds (it holds the end gate by then).
    let waiting = async {
        loop {
            let blocked: i64 = watcher
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE $1 = ANY(pg_blocking_pids(pid))",
                    &[&app_pid],
                )
                .await
                .unwrap()
                .get(0);
            if blocked > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(HANG, waiting)
        .await
        .expect("the end never waited for the row");

    let second = tokio::time::timeout(HANG, r2.ack_in_pg(&journal, &tx))
        .await
        .expect("deadlock: the second acknowledgement waits for the end, which waits for it")
        .unwrap();
    let PgAck::Write(second) = second else {
        panic!("a new consumption answered AlreadyConsumed");
    };
    tx.commit().await.unwrap();
    let ended = tokio::time::timeout(HANG, ending)
        .await
        .expect("the end never finished")
        .unwrap()
        .unwrap();
    // Both were journaled before the end; releasing after it is answered either way.
    let _ = first.committed().await;
    let _ = second.committed().await;
    // What the test is about: both acknowledgements committed in A's transaction,
    // before the end, so the end found nothing to abandon and its marker comes after
    // both consumptions. (Restore's pending count of an ended session is zero
    // whatever happened, so it would not tell.)
    assert!(ended.abandoned.is_empty(), "{:?}", ended.abandoned);
    let frames = replay_all(journal.as_ref(), session_id).await.unwrap();
    let mut consumed = Vec::new();
    let mut abandoned = Vec::new();
    for (_, record) in &frames {
        match record {
            JournalRecord::Event(SessionEvent::NotificationConsumed(c)) => {
                consumed.push(c.cause());
            }
            JournalRecord::Event(SessionEvent::NotificationAbandoned(a)) => {
                abandoned.push(a.cause());
            }
            _ => {}
        }
    }
    assert_eq!(consumed, vec![c1, c2], "both consumed, in A's transaction");
    assert!(abandoned.is_empty(), "abandoned: {abandoned:?}");
    assert!(
        matches!(
            frames.last(),
            Some((seq, JournalRecord::Event(SessionEvent::SessionEnded(_)))) if *seq == ended.seq
        ),
        "the end marker is the last frame"
    );

    drop((consumer, session));
    journal.close().await;
    app.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}
