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

mod txack_kill_support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use notify_journal::{PgJournal, PgOptions};
use notify_loop::LoopConfig;
use notify_session::{Session, SessionConsumer, restore};
use notify_testkit::kill;
use notify_testkit::postgres::database_url;
use notify_types::{CommandId, ProcessCompletionNotification, Uuid};
use txack_kill_support::{
    Fixed, assert_exactly_once, at_least_once, child_runtime, journaled, kill_rounds,
    restored_with_a_notifier, say_acked,
};

const CHILD_SCHEMA: &str = "NOTIFY_TXACK_PG_CHILD_SCHEMA";
const CHILD_MODE: &str = "NOTIFY_TXACK_PG_CHILD_MODE";
const TX_KILLS: u64 = 200;
const PLAIN_KILLS: u64 = 20;

/// The session and loop every child run restores.
fn fixed() -> Fixed {
    Fixed::new(0x7b)
}

async fn client(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// The journal on `schema` (created and migrated by the connect).
async fn journal(url: &str, schema: &str) -> PgJournal {
    PgJournal::connect(url, PgOptions::default().schema(schema))
        .await
        .unwrap()
}

/// The database for a test the harness runs; `None` (the test returns at once) in a
/// child run, or when there is no database to test against.
fn harness_url() -> Option<String> {
    if std::env::var_os(CHILD_SCHEMA).is_some() {
        return None;
    }
    database_url("txack_kill_postgres")
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
    child_runtime().block_on(async move {
        let journal = Arc::new(journal(&url, &schema).await);
        let (_session, mut consumer) = restored_with_a_notifier(fixed(), journal.clone()).await;
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
            say_acked(id.as_u128());
        }
    });
}

/// Runs `kills` killed children in a fresh schema; what the children acknowledged,
/// what the journal records as consumed, and the table's rows afterwards.
async fn story(url: &str, mode: &str, kills: u64) -> (HashSet<u128>, HashSet<u128>, Vec<u128>) {
    let mut seed = kill::seed("NOTIFY_TXACK_PG_KILL_SEED");
    let schema = format!("txack_kill_{mode}_{}", Uuid::new_v4().simple());
    let admin = client(url).await;
    // The journal's tables first (the connect migrates), then the application's.
    journal(url, &schema).await.close().await;
    admin
        .batch_execute(&format!(
            "CREATE TABLE \"{schema}\".app_rows (n bigserial PRIMARY KEY, command uuid NOT NULL)"
        ))
        .await
        .unwrap();
    let child_schema = schema.clone();
    let child_mode = mode.to_owned();
    let acked = tokio::task::spawn_blocking(move || {
        kill_rounds(
            "txack_pg_kill_child",
            [
                (CHILD_SCHEMA, child_schema.as_str()),
                (CHILD_MODE, child_mode.as_str()),
            ],
            kills,
            &mut seed,
        )
    })
    .await
    .unwrap();
    let journal = journal(url, &schema).await;
    let (_, consumed) = journaled(&journal, fixed().session).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_acks_leave_exactly_one_row_per_consumed_notification_across_sigkills() {
    let Some(url) = harness_url() else {
        return;
    };
    let (acked, consumed, rows) = story(&url, "tx", TX_KILLS).await;
    assert_exactly_once(&acked, &consumed, &rows);
    eprintln!(
        "postgres transactional ack: {TX_KILLS} kills, {} consumed, {} rows, 0 duplicates",
        consumed.len(),
        rows.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_acks_after_a_separate_write_allow_duplicates_across_sigkills() {
    let Some(url) = harness_url() else {
        return;
    };
    let (acked, consumed, rows) = story(&url, "plain", PLAIN_KILLS).await;
    let duplicates = at_least_once(&acked, &consumed, &rows);
    eprintln!(
        "postgres plain ack after a separate write: {PLAIN_KILLS} kills, {} consumed, {} rows, \
         {duplicates} duplicate rows (at-least-once)",
        consumed.len(),
        rows.len()
    );
}

/// One notification, notified through the fixed session (no kills) on a fresh schema
/// `TAG_…` and waiting in its loop's consumer.
struct NotifiedOnce {
    schema: String,
    journal: Arc<PgJournal>,
    session: Session,
    consumer: SessionConsumer,
    n: ProcessCompletionNotification,
}

async fn notified_once(url: &str, tag: &str) -> NotifiedOnce {
    let schema = format!("{tag}_{}", Uuid::new_v4().simple());
    let journal = Arc::new(journal(url, &schema).await);
    let session = Session::new(fixed().session, journal.clone());
    let consumer = session
        .register_loop(LoopConfig::new(fixed().session, fixed().loop_id))
        .unwrap();
    let n = fixed().notification(CommandId::new());
    session.notify_process_completion(n.clone()).await.unwrap();
    NotifiedOnce {
        schema,
        journal,
        session,
        consumer,
        n,
    }
}

/// Through the session, without kills: a rolled-back transaction acknowledges nothing
/// and the notification is handed again; a committed one releases it, and restore
/// never hands it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_transaction_keeps_the_notification_and_a_committed_one_releases_it() {
    let Some(url) = harness_url() else {
        return;
    };
    let NotifiedOnce {
        schema,
        journal,
        session,
        mut consumer,
        n,
    } = notified_once(&url, "txack_session").await;
    let mut app = client(&url).await;
    app.batch_execute(&format!(
        "CREATE TABLE \"{schema}\".conversation (command uuid PRIMARY KEY)"
    ))
    .await
    .unwrap();
    let insert = format!("INSERT INTO \"{schema}\".conversation VALUES ($1)");

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
    let report = restore(fixed().session, journal.as_ref()).await.unwrap();
    assert_eq!(report.pending_count(), 1, "nothing acknowledged");

    let tx = app.transaction().await.unwrap();
    tx.execute(&insert, &[n.command_id.as_uuid()])
        .await
        .unwrap();
    let pending = received.ack_in_pg(&journal, &tx).await.unwrap();
    tx.commit().await.unwrap();
    pending.committed().await.unwrap();
    let report = restore(fixed().session, journal.as_ref()).await.unwrap();
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
    let Some(url) = harness_url() else {
        return;
    };
    let NotifiedOnce {
        schema,
        journal,
        session,
        mut consumer,
        n,
    } = notified_once(&url, "txack_unanswered").await;

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
    let report = restore(fixed().session, journal.as_ref()).await.unwrap();
    assert_eq!(report.pending_count(), 1, "nothing acknowledged");
    drop((received, consumer, session));
    journal.close().await;
    let app = client(&url).await;
    app.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}
