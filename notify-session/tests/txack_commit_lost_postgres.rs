//! A transactional acknowledgement on PostgreSQL whose `COMMIT` committed but whose
//! answer never reached the application: the consumer is told its commit failed, drops
//! the acknowledgement (the notification is handed again) and runs the same code once
//! more. The consumption is already journaled, so the second round must write no
//! second row: the application learns it before it writes, on both step-by-step paths
//! (`ack_in_pg`, and the handed-out statement of `pg_ack_statement`); with
//! `ack_in_pg_with`, whose write is pipelined with the consumption and so runs, the
//! second round is rolled back.
//!
//! The answer is lost by a TCP proxy on 127.0.0.1 between the application's client and
//! the server: it forwards everything until the client sends `COMMIT`, waits for the
//! server's `CommandComplete` of it (so the commit happened), drops what the server
//! answered since, and closes the connection.
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use notify_journal::{PgJournal, PgOptions};
use notify_loop::LoopConfig;
use notify_session::{PgAck, PgAcked, Session, SessionReceived, restore};
use notify_testkit::postgres::database_url;
use notify_types::{
    CommandId, LoopId, ProcessCompletionNotification, ProcessLifecycleState, ProcessTerminalReason,
    SessionId, Uuid,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A proxy to the database that loses the answer to the first `COMMIT` it forwards.
struct LosingProxy {
    addr: std::net::SocketAddr,
    /// Answers to `COMMIT` it dropped (at most one).
    lost: Arc<AtomicUsize>,
}

impl LosingProxy {
    async fn start(upstream: (String, u16)) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let lost = Arc::new(AtomicUsize::new(0));
        let armed = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let counter = Arc::clone(&lost);
        tokio::spawn(async move {
            loop {
                let (client, _) = listener.accept().await.unwrap();
                let server = TcpStream::connect((upstream.0.as_str(), upstream.1))
                    .await
                    .unwrap();
                tokio::spawn(pump(
                    client,
                    server,
                    Arc::clone(&armed),
                    Arc::clone(&counter),
                ));
            }
        });
        Self { addr, lost }
    }

    /// A client of `config`'s database through the proxy.
    async fn client(&self, config: &tokio_postgres::Config) -> tokio_postgres::Client {
        let stream = TcpStream::connect(self.addr).await.unwrap();
        let (client, conn) = config
            .connect_raw(stream, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
    }
}

/// Forwards both ways; once `armed` and the client sent `COMMIT`, holds back what the
/// server answers until it says `COMMIT` (committed), then drops it and closes both
/// sides.
async fn pump(
    client: TcpStream,
    server: TcpStream,
    armed: Arc<std::sync::atomic::AtomicBool>,
    lost: Arc<AtomicUsize>,
) {
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    let commit_sent = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sent = Arc::clone(&commit_sent);
    let up = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match client_rx.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            // The simple query `COMMIT` of `Transaction::commit`.
            if buf[..n].windows(7).any(|w| w == b"COMMIT\0") && armed.swap(false, Ordering::SeqCst)
            {
                sent.store(true, Ordering::SeqCst);
            }
            if server_tx.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    });
    let mut buf = vec![0u8; 64 * 1024];
    // What the server answered since the COMMIT was sent (held back from the client).
    let mut held = Vec::new();
    loop {
        let n = match server_rx.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if commit_sent.load(Ordering::SeqCst) {
            held.extend_from_slice(&buf[..n]);
            // CommandComplete `COMMIT`: it committed. The client never learns.
            if held.windows(7).any(|w| w == b"COMMIT\0") {
                lost.fetch_add(1, Ordering::SeqCst);
                break;
            }
            continue;
        }
        if client_tx.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    up.abort();
    let _ = client_tx.shutdown().await;
}

/// How the consumer acknowledges.
#[derive(Clone, Copy, Debug)]
enum Path {
    AckInPg,
    Statement,
    AckInPgWith,
}

/// The consumer's code for one notification: the acknowledgement first, then, only if
/// it says to write, the row, in one transaction on `app`. Whether it wrote; `Err` when
/// the commit's answer did not come back.
async fn consume(
    app: &mut tokio_postgres::Client,
    journal: &PgJournal,
    insert: &str,
    received: SessionReceived,
    path: Path,
) -> Result<bool, Box<dyn std::error::Error>> {
    let id = *received.command_id().as_uuid();
    if let Path::AckInPgWith = path {
        let acked = received
            .ack_in_pg_with(journal, app, async |c| c.execute(insert, &[&id]).await)
            .await?;
        return Ok(matches!(acked, PgAcked::Committed(1)));
    }
    let tx = app.transaction().await?;
    let ack = match path {
        Path::AckInPg => received.ack_in_pg(journal, &tx).await.unwrap(),
        Path::Statement => {
            let statement = received.pg_ack_statement(journal).unwrap();
            let st = statement.statement().clone();
            let row = tx.query_one(&st.sql, &st.params()).await?;
            statement.answer(row.get(0), row.get(1)).await.unwrap()
        }
        Path::AckInPgWith => return Err("ack_in_pg_with is answered above".into()),
    };
    match ack {
        PgAck::Write(pending) => {
            tx.execute(insert, &[&id]).await?;
            tx.commit().await?;
            pending.committed().await.unwrap();
            Ok(true)
        }
        PgAck::AlreadyConsumed => Ok(false),
    }
}

async fn commit_answer_lost_then_retried(path: Path) {
    let Some(url) = database_url("txack_commit_lost_postgres") else {
        return;
    };
    let config: tokio_postgres::Config = url.parse().unwrap();
    let upstream = match (config.get_hosts().first(), config.get_ports().first()) {
        (Some(tokio_postgres::config::Host::Tcp(host)), port) => {
            (host.clone(), port.copied().unwrap_or(5432))
        }
        other => panic!("the proxy needs a TCP database address, got {other:?}"),
    };
    let schema = format!("txack_lost_{}", Uuid::new_v4().simple());
    let journal = Arc::new(
        PgJournal::connect(&url, PgOptions::default().schema(&schema))
            .await
            .unwrap(),
    );
    let (admin, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    admin
        .batch_execute(&format!(
            "CREATE TABLE \"{schema}\".conversation (n bigserial PRIMARY KEY, command uuid NOT NULL)"
        ))
        .await
        .unwrap();
    let insert = format!("INSERT INTO \"{schema}\".conversation (command) VALUES ($1)");

    let (session_id, loop_id) = (SessionId::new(), LoopId::new());
    let session = Session::new(session_id, Arc::clone(&journal));
    let mut consumer = session
        .register_loop(LoopConfig::new(session_id, loop_id))
        .unwrap();
    let command_id = CommandId::new();
    session
        .notify_process_completion(ProcessCompletionNotification {
            command_id,
            session_id,
            loop_id,
            process_handle: "build-42".into(),
            state: ProcessLifecycleState::Exited,
            reason: ProcessTerminalReason::Exited,
        })
        .await
        .unwrap();

    // First round, through the proxy: the commit happens, its answer is lost.
    let proxy = LosingProxy::start(upstream).await;
    let mut app = proxy.client(&config).await;
    let received = consumer.recv().await.unwrap();
    let first = consume(&mut app, &journal, &insert, received, path).await;
    assert!(
        first.is_err(),
        "{path:?}: the commit's answer reached the consumer"
    );
    assert_eq!(proxy.lost.load(Ordering::SeqCst), 1, "the fault fired");
    let report = restore(session_id, journal.as_ref()).await.unwrap();
    assert_eq!(report.pending_count(), 0, "the lost commit committed");

    // Second round, on a new connection: the same code, the same notification.
    let (mut app, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let received = consumer.recv().await.unwrap();
    assert_eq!(received.command_id(), command_id, "handed again");
    let wrote = consume(&mut app, &journal, &insert, received, path)
        .await
        .unwrap();
    assert!(
        !wrote,
        "{path:?}: answered Write for a consumption committed earlier"
    );
    let rows: i64 = admin
        .query_one(
            &format!("SELECT count(*) FROM \"{schema}\".conversation WHERE command = $1"),
            &[command_id.as_uuid()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        rows, 1,
        "{path:?}: the application's row was written {rows} times"
    );

    drop((consumer, session));
    journal.close().await;
    admin
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_in_pg_after_a_lost_commit_answer_writes_the_row_once() {
    commit_answer_lost_then_retried(Path::AckInPg).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_statement_after_a_lost_commit_answer_writes_the_row_once() {
    commit_answer_lost_then_retried(Path::Statement).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_in_pg_with_after_a_lost_commit_answer_writes_the_row_once() {
    commit_answer_lost_then_retried(Path::AckInPgWith).await;
}
