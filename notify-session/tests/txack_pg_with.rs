//! `SessionReceived::ack_in_pg_with` on a real PostgreSQL: the acknowledgement runs the
//! whole transaction on the application's connection, `BEGIN`, the consumption and
//! the application's first statement pipelined, then `COMMIT` or `ROLLBACK`.
//!
//! * committed: the row and the consumption together, the notification released;
//! * a failing write: its statement, already run, is rolled back with the consumption
//!   (had it reached the server ahead of `BEGIN` it would have committed on its own),
//!   and the notification comes back;
//! * a consumption journaled earlier: the retry's write runs but is rolled back
//!   (`AlreadyConsumed`), so the application's row is not doubled;
//! * a dropped acknowledgement: its transaction is rolled back before anything else
//!   runs on the connection;
//! * 64 consumers over 8 sessions while the supervisors keep notifying: every row
//!   once, nothing left pending.
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use notify_journal::{JournalBackend, PgJournal, PgOptions};
use notify_loop::LoopConfig;
use notify_session::{PgAcked, Session, SessionConsumer, SessionReceived, TxAckError, restore};
use notify_testkit::postgres::database_url;
use notify_testkit::sample;
use notify_types::{
    CommandId, JournalRecord, LoopId, NotificationConsumed, SessionEvent, SessionId, Uuid,
};

/// A journal in a schema of its own, the application's table beside it, and a
/// connection for the test's own reads.
struct Db {
    url: String,
    schema: String,
    journal: Arc<PgJournal>,
    admin: tokio_postgres::Client,
}

impl Db {
    async fn new(test: &str) -> Option<Self> {
        let url = database_url(test)?;
        let schema = format!("txack_with_{}", Uuid::new_v4().simple());
        let journal = Arc::new(
            PgJournal::connect(&url, PgOptions::default().schema(&schema))
                .await
                .unwrap(),
        );
        let admin = Self::connect(&url).await;
        admin
            .batch_execute(&format!(
                "CREATE TABLE \"{schema}\".conversation (command uuid PRIMARY KEY, line text NOT NULL)"
            ))
            .await
            .unwrap();
        Some(Self {
            url,
            schema,
            journal,
            admin,
        })
    }

    async fn connect(url: &str) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
    }

    /// The application's connection, its `INSERT` prepared once.
    async fn app(&self) -> (tokio_postgres::Client, tokio_postgres::Statement) {
        let client = Self::connect(&self.url).await;
        let insert = client
            .prepare(&format!(
                "INSERT INTO \"{}\".conversation (command, line) VALUES ($1, 'build exited')",
                self.schema
            ))
            .await
            .unwrap();
        (client, insert)
    }

    async fn rows(&self, client: &tokio_postgres::Client) -> i64 {
        client
            .query_one(
                &format!("SELECT count(*) FROM \"{}\".conversation", self.schema),
                &[],
            )
            .await
            .unwrap()
            .get(0)
    }

    async fn drop_schema(self) {
        self.journal.close().await;
        self.admin
            .batch_execute(&format!("DROP SCHEMA \"{}\" CASCADE", self.schema))
            .await
            .unwrap();
    }
}

async fn pending(db: &Db, session: &Session) -> usize {
    restore(session.id(), db.journal.as_ref())
        .await
        .unwrap()
        .pending_count()
}

/// Acknowledges `received` with the application's row (its command) written in the
/// same transaction.
async fn ack_with_row(
    db: &Db,
    app: &mut tokio_postgres::Client,
    insert: &tokio_postgres::Statement,
    received: SessionReceived,
) -> Result<PgAcked<u64>, TxAckError> {
    let id = *received.command_id().as_uuid();
    received
        .ack_in_pg_with(&db.journal, app, async |c| c.execute(insert, &[&id]).await)
        .await
}

/// A session of one loop holding one notification (`command`), and the application's
/// connection.
struct One {
    db: Db,
    session: Session,
    consumer: SessionConsumer,
    command: CommandId,
    loop_id: LoopId,
    app: tokio_postgres::Client,
    insert: tokio_postgres::Statement,
}

impl One {
    async fn new() -> Option<Self> {
        let db = Db::new("txack_pg_with").await?;
        let (session_id, loop_id) = (SessionId::new(), LoopId::new());
        let session = Session::new(session_id, Arc::clone(&db.journal));
        let consumer = session
            .register_loop(LoopConfig::new(session_id, loop_id))
            .unwrap();
        let n = sample::notification(session_id, loop_id);
        let command = n.command_id;
        session.notify_process_completion(n).await.unwrap();
        let (app, insert) = db.app().await;
        Some(Self {
            db,
            session,
            consumer,
            command,
            loop_id,
            app,
            insert,
        })
    }

    async fn pending(&self) -> usize {
        pending(&self.db, &self.session).await
    }

    async fn rows(&self) -> i64 {
        self.db.rows(&self.db.admin).await
    }

    /// The notification comes back; acknowledged again on the same connection, it
    /// commits: one row, nothing pending. Then the schema is dropped.
    async fn handed_back_and_committed(mut self) {
        let received = tokio::time::timeout(Duration::from_secs(10), self.consumer.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(received.command_id(), self.command, "handed back");
        let acked = ack_with_row(&self.db, &mut self.app, &self.insert, received)
            .await
            .unwrap();
        assert!(matches!(acked, PgAcked::Committed(1)), "{acked:?}");
        assert_eq!(self.rows().await, 1);
        assert_eq!(self.pending().await, 0);
        self.finish().await;
    }

    async fn finish(self) {
        drop((self.consumer, self.session));
        self.db.drop_schema().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumption_and_the_row_commit_together() {
    let Some(mut one) = One::new().await else {
        return;
    };
    let received = one.consumer.recv().await.unwrap();
    assert_eq!(received.command_id(), one.command);
    let acked = ack_with_row(&one.db, &mut one.app, &one.insert, received)
        .await
        .unwrap();
    assert!(matches!(acked, PgAcked::Committed(1)), "{acked:?}");
    assert_eq!(one.rows().await, 1);
    assert_eq!(one.pending().await, 0, "the consumption committed");
    one.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_write_rolls_back_its_statements_and_the_consumption() {
    let Some(mut one) = One::new().await else {
        return;
    };
    let received = one.consumer.recv().await.unwrap();
    let (id, insert) = (*received.command_id().as_uuid(), &one.insert);
    // The INSERT runs, then the application refuses: both must roll back.
    let err = received
        .ack_in_pg_with(&one.db.journal, &mut one.app, async |c| {
            c.execute(insert, &[&id]).await?;
            Err::<(), Box<dyn std::error::Error + Send + Sync>>("the application refused".into())
        })
        .await
        .unwrap_err();
    assert!(matches!(err, TxAckError::Write(_)), "{err:?}");
    assert_eq!(
        one.rows().await,
        0,
        "the write's INSERT committed outside the acknowledgement's transaction"
    );
    assert_eq!(one.pending().await, 1, "nothing was journaled");
    one.handed_back_and_committed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumption_journaled_earlier_rolls_back_the_retrys_write() {
    let Some(mut one) = One::new().await else {
        return;
    };
    let received = one.consumer.recv().await.unwrap();
    // An earlier transaction committed the consumption (and, in the application, its
    // row, which this table leaves out so that a second one can be counted).
    let event = SessionEvent::NotificationConsumed(NotificationConsumed::new(
        one.session.id(),
        one.loop_id,
        one.command,
    ));
    let outcome = one
        .db
        .journal
        .append(one.session.id(), JournalRecord::from(event))
        .await
        .unwrap();
    assert!(outcome.appended);
    let (id, insert) = (*received.command_id().as_uuid(), &one.insert);
    let ran = std::sync::atomic::AtomicBool::new(false);
    let acked = received
        .ack_in_pg_with(&one.db.journal, &mut one.app, async |c| {
            ran.store(true, std::sync::atomic::Ordering::SeqCst);
            c.execute(insert, &[&id]).await
        })
        .await
        .unwrap();
    assert!(matches!(acked, PgAcked::AlreadyConsumed), "{acked:?}");
    assert!(
        ran.load(std::sync::atomic::Ordering::SeqCst),
        "the write ran (pipelined with the consumption)"
    );
    assert_eq!(
        one.rows().await,
        0,
        "the retry's row committed beside the earlier one"
    );
    assert_eq!(one.pending().await, 0);
    one.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_acknowledgement_rolls_back_before_the_connection_is_used_again() {
    let Some(mut one) = One::new().await else {
        return;
    };
    let received = one.consumer.recv().await.unwrap();
    let (id, insert) = (*received.command_id().as_uuid(), &one.insert);
    let (inserted_tx, inserted) = tokio::sync::oneshot::channel();
    let ack = received.ack_in_pg_with(&one.db.journal, &mut one.app, async |c| {
        let n = c.execute(insert, &[&id]).await?;
        let _ = inserted_tx.send(());
        // Never returns: the acknowledgement is dropped here, inside its transaction.
        std::future::pending::<()>().await;
        Ok::<u64, tokio_postgres::Error>(n)
    });
    tokio::select! {
        _ = ack => panic!("the acknowledgement finished"),
        _ = inserted => {}
    }
    // The same connection: had the transaction stayed open, this read would run in
    // it and count its uncommitted row.
    assert_eq!(
        one.db.rows(&one.app).await,
        0,
        "the dropped transaction was not rolled back"
    );
    // Inside the open transaction, its INSERT would have assigned it an ID.
    let in_tx: bool = one
        .app
        .query_one("SELECT pg_current_xact_id_if_assigned() IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    assert!(!in_tx, "the connection is still inside a transaction");
    assert_eq!(one.pending().await, 1, "nothing was journaled");
    one.handed_back_and_committed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_consumers_over_eight_sessions_under_traffic_write_each_row_once() {
    const SESSIONS: usize = 8;
    const LOOPS: usize = 64;
    const PER_LOOP: usize = 25;
    let Some(db) = Db::new("txack_pg_with").await else {
        return;
    };
    let db = Arc::new(db);
    let sessions: Vec<Session> = (0..SESSIONS)
        .map(|_| Session::new(SessionId::new(), Arc::clone(&db.journal)))
        .collect();
    let mut tasks = Vec::new();
    for i in 0..LOOPS {
        let session = sessions[i % SESSIONS].clone();
        let loop_id = LoopId::new();
        let mut consumer = session
            .register_loop(LoopConfig::new(session.id(), loop_id))
            .unwrap();
        // The supervisor keeps notifying while the consumer acknowledges.
        let notifier = session.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..PER_LOOP {
                notifier
                    .notify_process_completion(sample::notification(notifier.id(), loop_id))
                    .await
                    .unwrap();
            }
        }));
        let db = Arc::clone(&db);
        tasks.push(tokio::spawn(async move {
            let (mut app, insert) = db.app().await;
            for _ in 0..PER_LOOP {
                let received = consumer.recv().await.unwrap();
                let acked = ack_with_row(&db, &mut app, &insert, received)
                    .await
                    .unwrap();
                assert!(matches!(acked, PgAcked::Committed(1)), "{acked:?}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let distinct: i64 = db
        .admin
        .query_one(
            &format!(
                "SELECT count(DISTINCT command) FROM \"{}\".conversation",
                db.schema
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(db.rows(&db.admin).await, (LOOPS * PER_LOOP) as i64);
    assert_eq!(distinct, (LOOPS * PER_LOOP) as i64);
    for session in &sessions {
        assert_eq!(
            pending(&db, session).await,
            0,
            "{} has pending",
            session.id()
        );
    }
    drop(sessions);
    let Ok(db) = Arc::try_unwrap(db) else {
        panic!("a task still holds the database");
    };
    db.drop_schema().await;
}
