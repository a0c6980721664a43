//! `SessionStatus::pending` (notifications handed to a hosted session's loops and not
//! yet acknowledged) stays exact on every path that releases a notification: a plain
//! `ack` (also one whose consumption an earlier, cancelled call journaled), `ack_with`
//! on redb, `ack_in_pg`, the handed-out statement of `pg_ack_statement` and
//! `ack_in_pg_with` on PostgreSQL (also after an earlier transaction committed the
//! consumption), the abandonment of an end, a stop, and a loop removed while it held
//! some; and under traffic (many appenders, one consumer per loop) it ends where
//! restore does.
//!
//! The PostgreSQL test needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the
//! local default).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod host_support;

use std::sync::Arc;
use std::time::Duration;

use host_support::{
    OneLoop, OneSession, notification, one_session, opening_host, started, stop_of,
};
use notify_journal::{
    JournalBackend, JournalLeases, PgJournal, PgOptions, RedbJournal, RedbOptions,
};
use notify_loop::LoopConfig;
use notify_session::{AckError, IfPending, PgAck, PgAcked, SessionHost, restore};
use notify_testkit::MemoryJournal;
use notify_testkit::postgres::database_url;
use notify_types::{
    CommandId, JournalRecord, LoopId, NotificationConsumed, NotifyError, SessionEvent, SessionId,
    Uuid,
};

/// Long enough that no renewal round (which gives up an ended session) runs while a
/// test reads the status of a session it just ended.
const LEASE: Duration = Duration::from_secs(120);

/// What the host reports pending for `id` (which it must serve).
fn pending<J: JournalLeases + 'static>(host: &SessionHost<J>, id: SessionId) -> u64 {
    host.status()
        .sessions
        .iter()
        .find(|s| s.session == id)
        .unwrap_or_else(|| panic!("{id} is not served"))
        .pending
}

/// Journals the consumption of `command` directly, as an acknowledgement whose future
/// was dropped after its append committed leaves it.
async fn journal_consumption(
    journal: &(impl JournalBackend + ?Sized),
    session: SessionId,
    loop_id: LoopId,
    command: CommandId,
) {
    let event =
        SessionEvent::NotificationConsumed(NotificationConsumed::new(session, loop_id, command));
    let outcome = journal
        .append(session, JournalRecord::from(event))
        .await
        .unwrap();
    assert!(outcome.appended);
}

#[tokio::test]
async fn plain_acks_a_retried_ack_and_the_end_keep_the_count_exact() {
    let journal = Arc::new(MemoryJournal::new().with_lease_duration(LEASE));
    let OneSession {
        host,
        id,
        loop_id,
        session,
        mut consumer,
        seen: _seen,
    } = one_session(Arc::clone(&journal), |h| h, 6).await;
    assert_eq!(pending(&host, id), 6);

    consumer.recv().await.unwrap().ack().await.unwrap();
    assert_eq!(pending(&host, id), 5, "a plain ack");

    // An ack whose earlier call journaled the consumption, then was cancelled: the
    // retry finds it journaled and releases the notification.
    let received = consumer.recv().await.unwrap();
    journal_consumption(journal.as_ref(), id, loop_id, received.command_id()).await;
    received.ack().await.unwrap();
    assert_eq!(pending(&host, id), 4, "a retried ack");

    // The end abandons the rest, one of them held by the consumer: nothing is pending.
    let held = consumer.recv().await.unwrap();
    let ended = session.end(IfPending::Abandon).await.unwrap();
    assert_eq!(ended.abandoned.len(), 4);
    assert_eq!(pending(&host, id), 0, "abandoned by the end");
    assert!(matches!(
        held.ack().await,
        Err(AckError::SessionEnded { .. })
    ));
    assert_eq!(pending(&host, id), 0, "an ack refused after the end");
    host.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_removed_loop_is_counted_until_its_consumer_acknowledges_what_it_held() {
    let journal = Arc::new(MemoryJournal::new().with_lease_duration(LEASE));
    let (app, mut seen) = OneLoop::new(LoopId::new());
    let host = opening_host(Arc::clone(&journal), |h| h.app(app)).await;
    let id = SessionId::new();
    let session = host.open(id).await.unwrap();
    let _first = started(&mut seen).await;
    let loop_id = LoopId::new();
    let mut consumer = session.register_loop(LoopConfig::new(id, loop_id)).unwrap();
    for _ in 0..2 {
        session
            .notify_process_completion(notification(id, loop_id))
            .await
            .unwrap();
    }
    assert!(session.remove_loop(loop_id).await);
    assert_eq!(pending(&host, id), 2, "still to be acknowledged");
    consumer.recv().await.unwrap().ack().await.unwrap();
    assert_eq!(pending(&host, id), 1);
    consumer.recv().await.unwrap().ack().await.unwrap();
    assert_eq!(pending(&host, id), 0);
    assert!(consumer.recv().await.is_none());
    host.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_stopped_session_reopened_counts_what_restore_finds() {
    let journal = Arc::new(MemoryJournal::new().with_lease_duration(LEASE));
    let OneSession {
        host,
        id,
        mut consumer,
        mut seen,
        session: _session,
        ..
    } = one_session(Arc::clone(&journal), |h| h, 3).await;
    consumer.recv().await.unwrap().ack().await.unwrap();
    let held = consumer.recv().await.unwrap();
    assert_eq!(pending(&host, id), 2);

    // Stopped here: the session is no longer served (nor counted); an ack of what the
    // consumer held is refused and releases nothing.
    host.release(id).await.unwrap();
    stop_of(&mut seen, id).await;
    assert!(host.status().sessions.is_empty());
    assert!(matches!(held.ack().await, Err(AckError::NotOwner { .. })));

    // Opened again: what restore hands back, exactly.
    host.open(id).await.unwrap();
    let (_, seeded, mut consumer) = started(&mut seen).await;
    let report = restore(id, journal.as_ref()).await.unwrap();
    assert_eq!((seeded, report.pending_count()), (2, 2));
    assert_eq!(pending(&host, id), 2);
    consumer.recv().await.unwrap().ack().await.unwrap();
    assert_eq!(pending(&host, id), 1);
    host.shutdown().await.unwrap();
}

/// Eight appenders notify four loops of one hosted session while each loop's consumer
/// acknowledges everything (plain acks): once the appenders stop and the consumers
/// drained, the host reports nothing pending, as restore does; sampled on the way, the
/// count never exceeds what was accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_traffic_the_count_ends_where_restore_does() {
    const APPENDERS: usize = 8;
    const LOOPS: usize = 4;
    const EACH: usize = 500;
    let journal = Arc::new(MemoryJournal::new().with_lease_duration(LEASE));
    let OneSession {
        host,
        id,
        loop_id: first,
        session,
        consumer,
        seen: _seen,
    } = one_session(Arc::clone(&journal), |h| h, 0).await;
    let mut consumers = vec![consumer];
    let mut loops = vec![first];
    for _ in 1..LOOPS {
        let loop_id = LoopId::new();
        consumers.push(
            session
                .register_loop(LoopConfig::new(id, loop_id).capacity(1_000_000))
                .unwrap(),
        );
        loops.push(loop_id);
    }
    let acking: Vec<_> = consumers
        .into_iter()
        .map(|mut c| {
            tokio::spawn(async move {
                let mut n = 0usize;
                while let Some(received) = c.recv().await {
                    received.ack().await.unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    let appenders: Vec<_> = (0..APPENDERS)
        .map(|a| {
            let session = session.clone();
            let loop_id = loops[a % LOOPS];
            tokio::spawn(async move {
                for _ in 0..EACH {
                    let n = notification(id, loop_id);
                    loop {
                        match session.notify_process_completion(n.clone()).await {
                            Ok(_) => break,
                            Err(NotifyError::DeliveryStopped { .. }) => {
                                tokio::time::sleep(Duration::from_millis(1)).await;
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            })
        })
        .collect();
    let total = (APPENDERS * EACH) as u64;
    let mut samples = 0;
    while !appenders.iter().all(tokio::task::JoinHandle::is_finished) {
        assert!(pending(&host, id) <= total);
        samples += 1;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    for a in appenders {
        a.await.unwrap();
    }
    // Until the consumers have drained what was accepted (bounded: a hang fails).
    let drained = async {
        while restore(id, journal.as_ref()).await.unwrap().pending_count() > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(host_support::WAIT, drained)
        .await
        .expect("the consumers never drained the session");
    assert_eq!(pending(&host, id), 0, "restore finds nothing pending");
    session.end(IfPending::Refuse).await.unwrap();
    let acked: usize = futures_join(acking).await;
    assert_eq!(acked as u64, total);
    eprintln!("{total} notifications, {samples} samples of the status on the way");
    host.shutdown().await.unwrap();
}

/// Joins the consumers, summing what they acknowledged.
async fn futures_join(handles: Vec<tokio::task::JoinHandle<usize>>) -> usize {
    let mut sum = 0;
    for h in handles {
        sum += h.await.unwrap();
    }
    sum
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_with_keeps_the_count_exact() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Arc::new(
        RedbJournal::open(dir.path().join("notify.redb"), RedbOptions::default()).unwrap(),
    );
    let mut one = one_session(Arc::clone(&journal), |h| h, 4).await;
    let (id, loop_id) = (one.id, one.loop_id);
    assert_eq!(pending(&one.host, id), 4);
    let write = |id: u128| {
        move |t: &notify_journal::AppTables<'_>| {
            t.open_table::<u128, u64>("app/rows")?.insert(id, 1)?;
            Ok(())
        }
    };
    let received = one.consumer.recv().await.unwrap();
    let key = received.command_id().as_uuid().as_u128();
    received.ack_with(&journal, write(key)).await.unwrap();
    assert_eq!(pending(&one.host, id), 3, "ack_with");

    // Committed by an earlier, cancelled call: the retry writes nothing and releases.
    let received = one.consumer.recv().await.unwrap();
    journal_consumption(journal.as_ref(), id, loop_id, received.command_id()).await;
    let key = received.command_id().as_uuid().as_u128();
    received.ack_with(&journal, write(key)).await.unwrap();
    assert_eq!(
        pending(&one.host, id),
        2,
        "ack_with of a journaled consumption"
    );
    one.host.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_acknowledgements_keep_the_count_exact() {
    let Some(url) = database_url("txack_pending") else {
        return;
    };
    let schema = format!("txack_pending_{}", Uuid::new_v4().simple());
    let journal = Arc::new(
        PgJournal::connect(
            &url,
            PgOptions::default().schema(&schema).lease_duration(LEASE),
        )
        .await
        .unwrap(),
    );
    let (mut app, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut one = one_session(Arc::clone(&journal), |h| h, 6).await;
    let (id, loop_id) = (one.id, one.loop_id);
    assert_eq!(pending(&one.host, id), 6);

    // ack_in_pg, committed.
    let received = one.consumer.recv().await.unwrap();
    let tx = app.transaction().await.unwrap();
    let PgAck::Write(acked) = received.ack_in_pg(&journal, &tx).await.unwrap() else {
        panic!("a new consumption answered AlreadyConsumed");
    };
    assert_eq!(pending(&one.host, id), 6, "not released before the commit");
    tx.commit().await.unwrap();
    acked.committed().await.unwrap();
    assert_eq!(pending(&one.host, id), 5, "ack_in_pg");

    // The handed-out statement, answered, committed.
    let received = one.consumer.recv().await.unwrap();
    let tx = app.transaction().await.unwrap();
    let statement = received.pg_ack_statement(&journal).unwrap();
    let st = statement.statement().clone();
    let row = tx.query_one(&st.sql, &st.params()).await.unwrap();
    let PgAck::Write(acked) = statement.answer(row.get(0), row.get(1)).await.unwrap() else {
        panic!("a new consumption answered AlreadyConsumed");
    };
    tx.commit().await.unwrap();
    acked.committed().await.unwrap();
    assert_eq!(pending(&one.host, id), 4, "pg_ack_statement");

    // ack_in_pg_with, committed; then of a consumption journaled earlier.
    let received = one.consumer.recv().await.unwrap();
    let acked = received
        .ack_in_pg_with(&journal, &mut app, async |c| {
            c.execute("SELECT 1", &[]).await
        })
        .await
        .unwrap();
    assert!(matches!(acked, PgAcked::Committed(_)), "{acked:?}");
    assert_eq!(pending(&one.host, id), 3, "ack_in_pg_with");
    let received = one.consumer.recv().await.unwrap();
    journal_consumption(journal.as_ref(), id, loop_id, received.command_id()).await;
    let acked = received
        .ack_in_pg_with(&journal, &mut app, async |c| {
            c.execute("SELECT 1", &[]).await
        })
        .await
        .unwrap();
    assert!(matches!(acked, PgAcked::AlreadyConsumed), "{acked:?}");
    assert_eq!(
        pending(&one.host, id),
        2,
        "ack_in_pg_with of a journaled consumption"
    );

    // Committed by an earlier transaction whose answer was lost: released at once,
    // on both paths.
    let received = one.consumer.recv().await.unwrap();
    journal_consumption(journal.as_ref(), id, loop_id, received.command_id()).await;
    let tx = app.transaction().await.unwrap();
    let ack = received.ack_in_pg(&journal, &tx).await.unwrap();
    assert!(matches!(ack, PgAck::AlreadyConsumed), "{ack:?}");
    tx.rollback().await.unwrap();
    assert_eq!(
        pending(&one.host, id),
        1,
        "ack_in_pg of a journaled consumption"
    );
    let received = one.consumer.recv().await.unwrap();
    journal_consumption(journal.as_ref(), id, loop_id, received.command_id()).await;
    let tx = app.transaction().await.unwrap();
    let statement = received.pg_ack_statement(&journal).unwrap();
    let st = statement.statement().clone();
    let row = tx.query_one(&st.sql, &st.params()).await.unwrap();
    let ack = statement.answer(row.get(0), row.get(1)).await.unwrap();
    assert!(matches!(ack, PgAck::AlreadyConsumed), "{ack:?}");
    tx.rollback().await.unwrap();
    assert_eq!(
        pending(&one.host, id),
        0,
        "the statement of a journaled consumption"
    );

    one.host.shutdown().await.unwrap();
    journal.close().await;
    app.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}
