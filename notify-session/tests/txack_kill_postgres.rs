//! Effectively once on PostgreSQL, with real processes: a consumer that, for each
//! notification, inserts a row into its own table and appends the acknowledgement in
//! the same transaction on its own connection (half through
//! `SessionReceived::ack_in_pg`, half through the handed-out statement of
//! `pg_ack_statement` run by a plain tokio-postgres client, standing in for another
//! driver), while a notifier keeps notifying; killed with SIGKILL at random points over
//! and over. Afterwards the table holds exactly one row per notification the journal
//! records as consumed: none twice, none missing.
//!
//! The same consumer with a plain `ack` after a separate committed insert shows the
//! duplicates at-least-once allows: printed, not a failure.
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default).
//! Set `NOTIFY_TXACK_PG_KILL_SEED` to replay a run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use notify_journal::{PgJournal, PgOptions, replay_all};
use notify_loop::LoopConfig;
use notify_session::{Session, restore};
use notify_testkit::kill::{self, xorshift as next};
use notify_testkit::postgres::database_url;
use notify_types::{
    CommandId, JournalRecord, LoopId, NotifyError, ProcessCompletionNotification,
    ProcessLifecycleState, ProcessTerminalReason, SessionEvent, SessionId, Uuid,
};

const CHILD_SCHEMA: &str = "NOTIFY_TXACK_PG_CHILD_SCHEMA";
const CHILD_MODE: &str = "NOTIFY_TXACK_PG_CHILD_MODE";
const TX_KILLS: u64 = 200;
const PLAIN_KILLS: u64 = 20;

fn session_id() -> SessionId {
    SessionId::from_uuid(Uuid::from_u128(0x7b_0000_0000_0000_0000_0000_0000_0001))
}

fn loop_id() -> LoopId {
    LoopId::from_uuid(Uuid::from_u128(0x7b_0000_0000_0000_0000_0000_0000_0002))
}

fn notification(id: CommandId) -> ProcessCompletionNotification {
    ProcessCompletionNotification {
        command_id: id,
        session_id: session_id(),
        loop_id: loop_id(),
        process_handle: format!("job-{id}"),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }
}

async fn client(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// The child: restore, then notify and consume until killed. Prints `ACK <id>` once an
/// acknowledgement returned.
#[test]
fn txack_pg_kill_child() {
    let (Ok(schema), Ok(mode)) = (std::env::var(CHILD_SCHEMA), std::env::var(CHILD_MODE)) else {
        return;
    };
    let Some(url) = database_url("txack_pg_kill_child") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let journal = std::sync::Arc::new(
            PgJournal::connect(&url, PgOptions::default().schema(&schema))
                .await
                .unwrap(),
        );
        let mut report = restore(session_id(), journal.as_ref()).await.unwrap();
        let session = Session::new(session_id(), journal.clone());
        let mut consumer = session
            .register_loop(
                LoopConfig::new(session_id(), loop_id()).seed(report.take_pending(loop_id())),
            )
            .unwrap();
        let notifier = session.clone();
        tokio::spawn(async move {
            loop {
                let n = notification(CommandId::new());
                while let Err(NotifyError::DeliveryStopped { .. }) =
                    notifier.notify_process_completion(n.clone()).await
                {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        });
        let mut app = client(&url).await;
        let insert = format!("INSERT INTO \"{schema}\".app_rows (command) VALUES ($1)");
        let mut i = 0u64;
        while let Some(received) = consumer.recv().await {
            let id = *received.command_id().as_uuid();
            i += 1;
            if mode == "plain" {
                app.execute(&insert, &[&id]).await.unwrap();
                received.ack().await.unwrap();
            } else {
                let tx = app.transaction().await.unwrap();
                tx.execute(&insert, &[&id]).await.unwrap();
                let pending = if i.is_multiple_of(2) {
                    received.ack_in_pg(&journal, &tx).await.unwrap()
                } else {
                    // Another driver's path: the statement and its parameters.
                    let mut pending = received.pg_ack_statement(&journal).unwrap();
                    let st = pending.statement().unwrap().clone();
                    let row = tx.query_one(&st.sql, &st.params()).await.unwrap();
                    pending.answer(row.get(0), row.get(1)).unwrap();
                    pending
                };
                tx.commit().await.unwrap();
                pending.committed().await.unwrap();
            }
            kill::say(&format!("ACK {}", id.as_u128())).unwrap();
        }
    });
}

async fn journaled(journal: &PgJournal) -> (HashSet<u128>, HashSet<u128>) {
    let mut notified = HashSet::new();
    let mut consumed = HashSet::new();
    for (_, record) in replay_all(journal, session_id()).await.unwrap() {
        match record {
            JournalRecord::Command(n) => {
                notified.insert(n.command_id().as_uuid().as_u128());
            }
            JournalRecord::Event(SessionEvent::NotificationConsumed(c)) => {
                assert!(consumed.insert(c.cause().as_uuid().as_u128()));
            }
            _ => {}
        }
    }
    (notified, consumed)
}

/// Runs `kills` killed children in a fresh schema; what the journal and the table
/// hold afterwards, and what the children acknowledged.
async fn story(url: &str, mode: &str, kills: u64) -> (HashSet<u128>, HashSet<u128>, Vec<u128>) {
    let mut seed = kill::seed("NOTIFY_TXACK_PG_KILL_SEED");
    let schema = format!("txack_kill_{mode}_{}", Uuid::new_v4().simple());
    let admin = client(url).await;
    // The journal's tables first (the connect migrates), then the application's.
    PgJournal::connect(url, PgOptions::default().schema(&schema))
        .await
        .unwrap()
        .close()
        .await;
    admin
        .batch_execute(&format!(
            "CREATE TABLE \"{schema}\".app_rows (n bigserial PRIMARY KEY, command uuid NOT NULL)"
        ))
        .await
        .unwrap();
    let child_schema = schema.clone();
    let child_mode = mode.to_owned();
    let acked = tokio::task::spawn_blocking(move || {
        let mut acked = HashSet::new();
        for _ in 0..kills {
            let wanted = next(&mut seed) % 12;
            let lines = kill::run_and_kill(
                "txack_pg_kill_child",
                [
                    (CHILD_SCHEMA, child_schema.as_str()),
                    (CHILD_MODE, child_mode.as_str()),
                ],
                &["ACK "],
                wanted,
            )
            .unwrap();
            for line in lines {
                acked.insert(line["ACK ".len()..].parse::<u128>().unwrap());
            }
        }
        acked
    })
    .await
    .unwrap();
    let journal = PgJournal::connect(url, PgOptions::default().schema(&schema))
        .await
        .unwrap();
    let (_, consumed) = journaled(&journal).await;
    journal.close().await;
    let rows: Vec<u128> = admin
        .query(&format!("SELECT command FROM \"{schema}\".app_rows"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, Uuid>(0).as_u128())
        .collect();
    admin
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
    (acked, consumed, rows)
}

fn counts(rows: &[u128]) -> HashMap<u128, usize> {
    let mut counts = HashMap::new();
    for id in rows {
        *counts.entry(*id).or_insert(0) += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_acks_leave_exactly_one_row_per_consumed_notification_across_sigkills() {
    if std::env::var_os(CHILD_SCHEMA).is_some() {
        return;
    }
    let Some(url) = database_url("txack_kill_postgres") else {
        return;
    };
    let (acked, consumed, rows) = story(&url, "tx", TX_KILLS).await;
    let counts = counts(&rows);
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "rows written twice: {twice:?}");
    let with_rows: HashSet<u128> = counts.keys().copied().collect();
    assert_eq!(with_rows, consumed, "rows and consumptions differ");
    assert!(acked.is_subset(&consumed));
    assert!(!consumed.is_empty());
    eprintln!(
        "postgres transactional ack: {TX_KILLS} kills, {} consumed, {} rows, 0 duplicates",
        consumed.len(),
        rows.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_acks_after_a_separate_write_allow_duplicates_across_sigkills() {
    if std::env::var_os(CHILD_SCHEMA).is_some() {
        return;
    }
    let Some(url) = database_url("txack_kill_postgres") else {
        return;
    };
    let (acked, consumed, rows) = story(&url, "plain", PLAIN_KILLS).await;
    let counts = counts(&rows);
    let duplicates: usize = counts.values().map(|n| n - 1).sum();
    assert!(consumed.iter().all(|id| counts.contains_key(id)));
    assert!(acked.is_subset(&consumed));
    eprintln!(
        "postgres plain ack after a separate write: {PLAIN_KILLS} kills, {} consumed, {} rows, \
         {duplicates} duplicate rows (at-least-once)",
        consumed.len(),
        rows.len()
    );
}

/// Through the session, without kills: a rolled-back transaction acknowledges nothing
/// and the notification is handed again; a committed one releases it, and restore
/// never hands it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_transaction_keeps_the_notification_and_a_committed_one_releases_it() {
    if std::env::var_os(CHILD_SCHEMA).is_some() {
        return;
    }
    let Some(url) = database_url("txack_kill_postgres") else {
        return;
    };
    let schema = format!("txack_session_{}", Uuid::new_v4().simple());
    let journal = std::sync::Arc::new(
        PgJournal::connect(&url, PgOptions::default().schema(&schema))
            .await
            .unwrap(),
    );
    let mut app = client(&url).await;
    app.batch_execute(&format!(
        "CREATE TABLE \"{schema}\".conversation (command uuid PRIMARY KEY)"
    ))
    .await
    .unwrap();
    let insert = format!("INSERT INTO \"{schema}\".conversation VALUES ($1)");
    let session = Session::new(session_id(), journal.clone());
    let mut consumer = session
        .register_loop(LoopConfig::new(session_id(), loop_id()))
        .unwrap();
    let n = notification(CommandId::new());
    session.notify_process_completion(n.clone()).await.unwrap();

    let received = consumer.recv().await.unwrap();
    let tx = app.transaction().await.unwrap();
    tx.execute(&insert, &[n.command_id.as_uuid()])
        .await
        .unwrap();
    let pending = received.ack_in_pg(&journal, &tx).await.unwrap();
    tx.rollback().await.unwrap();
    drop(pending);
    let received = consumer.recv().await.unwrap();
    assert_eq!(received.command_id(), n.command_id, "handed again");
    let report = restore(session_id(), journal.as_ref()).await.unwrap();
    assert_eq!(report.pending_count(), 1, "nothing acknowledged");

    let tx = app.transaction().await.unwrap();
    tx.execute(&insert, &[n.command_id.as_uuid()])
        .await
        .unwrap();
    let pending = received.ack_in_pg(&journal, &tx).await.unwrap();
    tx.commit().await.unwrap();
    pending.committed().await.unwrap();
    let report = restore(session_id(), journal.as_ref()).await.unwrap();
    assert_eq!(report.pending_count(), 0, "acknowledged");
    let rows: i64 = app
        .query_one(
            &format!("SELECT count(*) FROM \"{schema}\".conversation"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
    drop((consumer, session));
    journal.close().await;
    app.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

/// A handed-out statement whose successful row was never recorded (not answered, or
/// answered with an error) is not released by `committed`: the notification stays
/// held and is handed to the consumer again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_without_a_recorded_outcome_keeps_the_notification() {
    if std::env::var_os(CHILD_SCHEMA).is_some() {
        return;
    }
    let Some(url) = database_url("txack_kill_postgres") else {
        return;
    };
    let schema = format!("txack_unanswered_{}", Uuid::new_v4().simple());
    let journal = std::sync::Arc::new(
        PgJournal::connect(&url, PgOptions::default().schema(&schema))
            .await
            .unwrap(),
    );
    let session = Session::new(session_id(), journal.clone());
    let mut consumer = session
        .register_loop(LoopConfig::new(session_id(), loop_id()))
        .unwrap();
    let n = notification(CommandId::new());
    session.notify_process_completion(n.clone()).await.unwrap();

    // Never answered.
    let received = consumer.recv().await.unwrap();
    let pending = received.pg_ack_statement(&journal).unwrap();
    let err = pending.committed().await.unwrap_err();
    assert!(
        matches!(
            err,
            notify_session::TxAckError::Ack(notify_session::AckError::NotAnswered { .. })
        ),
        "{err:?}"
    );
    let received = tokio::time::timeout(Duration::from_secs(60), consumer.recv())
        .await
        .expect("handed again")
        .unwrap();
    assert_eq!(received.command_id(), n.command_id, "handed again");

    // Answered with an error row: still not releasable.
    let mut pending = received.pg_ack_statement(&journal).unwrap();
    assert!(pending.answer(i16::MAX, -1).is_err());
    let err = pending.committed().await.unwrap_err();
    assert!(
        matches!(
            err,
            notify_session::TxAckError::Ack(notify_session::AckError::NotAnswered { .. })
        ),
        "{err:?}"
    );
    let received = tokio::time::timeout(Duration::from_secs(60), consumer.recv())
        .await
        .expect("handed again")
        .unwrap();
    assert_eq!(received.command_id(), n.command_id, "handed again");
    let report = restore(session_id(), journal.as_ref()).await.unwrap();
    assert_eq!(report.pending_count(), 1, "nothing acknowledged");
    drop((received, consumer, session));
    journal.close().await;
    let app = client(&url).await;
    app.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}
