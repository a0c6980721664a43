//! Effectively once on PostgreSQL, with real processes: a consumer that, for each
//! notification, inserts a row into its own table and appends the acknowledgement in
//! the same transaction on its own connection (a third through
//! `SessionReceived::ack_in_pg`, a third through the handed-out statement of
//! `pg_ack_statement` run by a plain tokio-postgres client, standing in for another
//! driver, a third through `ack_in_pg_with`, which runs the transaction itself,
//! pipelined), while a notifier keeps notifying; killed with SIGKILL at random points over
//! and over, each kill proven to land mid-work. Afterwards the table holds exactly one
//! row per notification the journal records as consumed: none twice, none missing. A
//! final phase restores: what it hands back is exactly what was journaled and not
//! consumed; drained, the table holds one row per journaled notification.
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
use notify_session::{PgAck, PgAcked, Session, SessionConsumer, SessionReceived, restore};
use notify_testkit::kill;
use notify_testkit::postgres::database_url;
use notify_types::{CommandId, ProcessCompletionNotification, Uuid};
use txack_kill_support::{
    Fixed, assert_drained_to_one_row_each, assert_exactly_once, at_least_once, child_runtime,
    journaled, kill_rounds, restored_for_the_final_drain, restored_with_a_notifier, say_acked,
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
                consume_plain(&app, &insert, received).await;
            } else {
                consume_tx(&mut app, &journal, &insert, received, i % 3).await;
            }
            say_acked(id.as_u128());
        }
    });
}

/// The transactional consumer, by `path`: 0, the handed-out statement run by the
/// plain client as another driver would; 1, `ack_in_pg`; each the acknowledgement
/// first, then its row only if it says to write, in one transaction. 2,
/// `ack_in_pg_with`: the transaction run by the acknowledgement, the row's `INSERT`
/// pipelined with it (rolled back if the consumption was journaled already).
async fn consume_tx(
    app: &mut tokio_postgres::Client,
    journal: &PgJournal,
    insert: &str,
    received: SessionReceived,
    path: u64,
) {
    let id = *received.command_id().as_uuid();
    if path == 2 {
        let acked = received
            .ack_in_pg_with(journal, app, async |c| c.execute(insert, &[&id]).await)
            .await
            .unwrap();
        assert!(
            matches!(acked, PgAcked::Committed(1) | PgAcked::AlreadyConsumed),
            "{acked:?}"
        );
        return;
    }
    let tx = app.transaction().await.unwrap();
    let ack = if path == 0 {
        let statement = received.pg_ack_statement(journal).unwrap();
        let st = statement.statement().clone();
        let row = tx.query_one(&st.sql, &st.params()).await.unwrap();
        statement.answer(row.get(0), row.get(1)).await.unwrap()
    } else {
        received.ack_in_pg(journal, &tx).await.unwrap()
    };
    if let PgAck::Write(pending) = ack {
        tx.execute(insert, &[&id]).await.unwrap();
        tx.commit().await.unwrap();
        pending.committed().await.unwrap();
    }
}

/// The plain consumer: its row committed on its own, then a plain ack.
async fn consume_plain(app: &tokio_postgres::Client, insert: &str, received: SessionReceived) {
    let id = *received.command_id().as_uuid();
    app.execute(insert, &[&id]).await.unwrap();
    received.ack().await.unwrap();
}

/// The application's rows in `schema`.
async fn rows(admin: &tokio_postgres::Client, schema: &str) -> Vec<u128> {
    admin
        .query(&format!("SELECT command FROM \"{schema}\".app_rows"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, Uuid>(0).as_u128())
        .collect()
}

/// What one story left: what the children acknowledged, what the journal records as
/// consumed and the rows, after the kills; then, after the final drain, the
/// notifications journaled and the rows.
struct Story {
    acked: HashSet<u128>,
    consumed: HashSet<u128>,
    rows: Vec<u128>,
    notified: HashSet<u128>,
    rows_after_drain: Vec<u128>,
}

/// Runs `kills` killed children in a fresh schema, then the final phase: restore hands
/// back exactly what was journaled and not consumed, and the mode's consumer drains it.
async fn story(url: &str, mode: &str, kills: u64) -> Story {
    let mut seed = kill::seed("NOTIFY_TXACK_PG_KILL_SEED");
    let schema = format!("txack_kill_{mode}_{}", Uuid::new_v4().simple());
    let mut admin = client(url).await;
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
    let journal = Arc::new(journal(url, &schema).await);
    let (_, consumed) = journaled(journal.as_ref(), fixed().session).await;
    let rows_after_kills = rows(&admin, &schema).await;

    let (session, mut consumer, left, notified) =
        restored_for_the_final_drain(fixed(), Arc::clone(&journal)).await;
    let insert = format!("INSERT INTO \"{schema}\".app_rows (command) VALUES ($1)");
    for i in 0..left {
        let received = consumer.recv().await.unwrap();
        if mode == "plain" {
            consume_plain(&admin, &insert, received).await;
        } else {
            consume_tx(
                &mut admin,
                &journal,
                &insert,
                received,
                u64::try_from(i % 3).unwrap(),
            )
            .await;
        }
    }
    drop((consumer, session));
    let rows_after_drain = rows(&admin, &schema).await;
    if mode != "plain" {
        assert_drained_to_one_row_each(journal.as_ref(), fixed(), &notified, &rows_after_drain)
            .await;
    }
    journal.close().await;
    admin
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
    Story {
        acked,
        consumed,
        rows: rows_after_kills,
        notified,
        rows_after_drain,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_acks_leave_exactly_one_row_per_consumed_notification_across_sigkills() {
    let Some(url) = harness_url() else {
        return;
    };
    let story = story(&url, "tx", TX_KILLS).await;
    assert_exactly_once(&story.acked, &story.consumed, &story.rows);
    eprintln!(
        "postgres transactional ack: {TX_KILLS} kills, {} consumed, {} rows, 0 duplicates; \
         after the final drain {} journaled, {} rows",
        story.consumed.len(),
        story.rows.len(),
        story.notified.len(),
        story.rows_after_drain.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_acks_after_a_separate_write_allow_duplicates_across_sigkills() {
    let Some(url) = harness_url() else {
        return;
    };
    let story = story(&url, "plain", PLAIN_KILLS).await;
    let duplicates = at_least_once(&story.acked, &story.consumed, &story.rows);
    // Drained, every journaled notification has its row (at least once).
    at_least_once(&story.notified, &story.notified, &story.rows_after_drain);
    eprintln!(
        "postgres plain ack after a separate write: {PLAIN_KILLS} kills, {} consumed, {} rows, \
         {duplicates} duplicate rows (at-least-once)",
        story.consumed.len(),
        story.rows.len()
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
    let PgAck::Write(pending) = received.ack_in_pg(&journal, &tx).await.unwrap() else {
        panic!("a new consumption answered AlreadyConsumed");
    };
    tx.execute(&insert, &[n.command_id.as_uuid()])
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    drop(pending);
    let received = consumer.recv().await.unwrap();
    assert_eq!(received.command_id(), n.command_id, "handed again");
    let report = restore(fixed().session, journal.as_ref()).await.unwrap();
    assert_eq!(report.pending_count(), 1, "nothing acknowledged");

    let tx = app.transaction().await.unwrap();
    let PgAck::Write(pending) = received.ack_in_pg(&journal, &tx).await.unwrap() else {
        panic!("a rolled-back consumption answered AlreadyConsumed");
    };
    tx.execute(&insert, &[n.command_id.as_uuid()])
        .await
        .unwrap();
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

/// A handed-out statement dropped unanswered, or answered with a refusal, releases
/// nothing: the notification is handed to the consumer again, and nothing is
/// acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_or_refused_statement_keeps_the_notification() {
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
    drop(received.pg_ack_statement(&journal).unwrap());
    let received = tokio::time::timeout(Duration::from_secs(60), consumer.recv())
        .await
        .expect("handed again")
        .unwrap();
    assert_eq!(received.command_id(), n.command_id, "handed again");

    // Answered with an error row: refused, handed again.
    let statement = received.pg_ack_statement(&journal).unwrap();
    assert!(statement.answer(i16::MAX, -1).await.is_err());
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
