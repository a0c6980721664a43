//! The hosts' consumers: one per session's loop. A plain consumer acks what it
//! receives, several acks in flight at once; a transactional one (a third of the
//! sessions, [`transactional`]) appends the consumption (`ack_in_pg`) and, unless an
//! earlier transaction already committed it, writes an application row in the same
//! transaction of its own, so that "consumed exactly once" is checked against the
//! application's rows too.
//!
//! Each logs `DELIVER` when it receives a notification, `ACKED` once the ack
//! committed, and `ACKREFUSED` when the ack was refused because this host no longer
//! holds the session's lease.

use std::sync::Arc;
use std::time::Duration;

use notify_journal::{AppendError, PgJournal};
use notify_session::{AckError, PgAck, SessionConsumer, SessionReceived, TxAckError};
use notify_types::SessionId;
use tokio::sync::Semaphore;

use super::log::{Event, EventLog};

/// How many plain acks one session's consumer has in flight at once.
const ACKS_IN_FLIGHT: usize = 16;

/// Whether `session`'s consumer acks transactionally (every host agrees: it is a
/// property of the ID; the parent picks IDs so that a third of the sessions are).
pub(crate) fn transactional(session: SessionId) -> bool {
    session.as_uuid().as_u128().is_multiple_of(3)
}

/// What a consumer needs besides its loop.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub(crate) log: Arc<EventLog>,
    pub(crate) journal: Arc<PgJournal>,
    pub(crate) url: String,
    pub(crate) schema: String,
    pub(crate) lease: Duration,
}

/// The application's table: one row per notification a transactional consumer
/// consumed (no unique constraint: a second row is what the check looks for).
pub(crate) fn app_table(schema: &str) -> String {
    format!("\"{schema}\".app_rows")
}

/// Runs `consumer` for `session`, placed here under `epoch` (`None`: this host
/// could not confirm the epoch, and logs nothing for this placement).
pub(crate) fn spawn(ctx: Ctx, consumer: SessionConsumer, session: SessionId, epoch: Option<u64>) {
    if transactional(session) {
        tokio::spawn(in_transactions(ctx, consumer, session, epoch));
    } else {
        tokio::spawn(plain(ctx.log, consumer, session, epoch));
    }
}

/// Whether `e` refuses an ack because this host no longer holds the lease.
fn fenced(e: &AckError) -> bool {
    matches!(
        e,
        AckError::NotOwner { .. } | AckError::Journal(AppendError::Fenced { .. })
    )
}

fn log_if(log: &EventLog, epoch: Option<u64>, event: impl FnOnce(u64) -> Event) {
    if let Some(epoch) = epoch {
        log.log(&event(epoch));
    }
}

async fn plain(
    log: Arc<EventLog>,
    mut consumer: SessionConsumer,
    session: SessionId,
    epoch: Option<u64>,
) {
    let acks = Arc::new(Semaphore::new(ACKS_IN_FLIGHT));
    while let Some(got) = consumer.recv().await {
        let command = got.command_id();
        log_if(&log, epoch, |epoch| Event::Deliver {
            session,
            epoch,
            command,
        });
        let permit = Arc::clone(&acks).acquire_owned().await.unwrap();
        let log = Arc::clone(&log);
        tokio::spawn(async move {
            match got.ack().await {
                Ok(()) => log_if(&log, epoch, |epoch| Event::Acked {
                    session,
                    epoch,
                    command,
                }),
                Err(e) if fenced(&e) => log.log(&Event::AckRefused { session }),
                // Handed to the consumer again.
                Err(_) => {}
            }
            drop(permit);
        });
    }
}

/// Why a transactional ack did not commit.
enum NotAcked {
    /// Refused: this host no longer holds the lease.
    Fenced,
    /// The application's connection failed: connect again.
    Connection,
    /// Anything else (handed to the consumer again).
    Other,
}

async fn in_transactions(
    ctx: Ctx,
    mut consumer: SessionConsumer,
    session: SessionId,
    epoch: Option<u64>,
) {
    let insert = format!(
        "INSERT INTO {} (command, session) VALUES ($1, $2)",
        app_table(&ctx.schema)
    );
    let mut app = connect(&ctx).await;
    while let Some(got) = consumer.recv().await {
        let command = got.command_id();
        log_if(&ctx.log, epoch, |epoch| Event::Deliver {
            session,
            epoch,
            command,
        });
        match ack_in_tx(&mut app, &insert, &ctx.journal, session, got).await {
            Ok(()) => log_if(&ctx.log, epoch, |epoch| Event::Acked {
                session,
                epoch,
                command,
            }),
            Err(NotAcked::Fenced) => ctx.log.log(&Event::AckRefused { session }),
            Err(NotAcked::Connection) => app = connect(&ctx).await,
            Err(NotAcked::Other) => {}
        }
    }
}

/// The application's write and the ack, committed together.
async fn ack_in_tx(
    app: &mut tokio_postgres::Client,
    insert: &str,
    journal: &PgJournal,
    session: SessionId,
    got: SessionReceived,
) -> Result<(), NotAcked> {
    let command = *got.command_id().as_uuid();
    let session = *session.as_uuid();
    let tx = app.transaction().await.map_err(|_| NotAcked::Connection)?;
    // The consumption first: it answers whether to write the row.
    let pending = match got.ack_in_pg(journal, &tx).await {
        Ok(PgAck::Write(pending)) => pending,
        // Committed earlier with its row: write nothing.
        Ok(PgAck::AlreadyConsumed) => return Ok(()),
        Err(TxAckError::Ack(e)) if fenced(&e) => return Err(NotAcked::Fenced),
        Err(_) => return Err(NotAcked::Other),
    };
    tx.execute(insert, &[&command, &session])
        .await
        .map_err(|_| NotAcked::Connection)?;
    // On a failed commit, dropping `pending` hands the notification back.
    tx.commit().await.map_err(|_| NotAcked::Connection)?;
    match pending.committed().await {
        // The loop exited meanwhile: the consumption is journaled all the same.
        Ok(()) | Err(TxAckError::Ack(AckError::LoopExited(_))) => Ok(()),
        Err(_) => Err(NotAcked::Other),
    }
}

/// The application's own connection, as a careful application sets it up: a
/// transaction left idle (its host stopped) ends after a lease, freeing the
/// session's journal row for the host that adopts it.
async fn connect(ctx: &Ctx) -> tokio_postgres::Client {
    loop {
        match tokio_postgres::connect(&ctx.url, tokio_postgres::NoTls).await {
            Ok((client, conn)) => {
                tokio::spawn(conn);
                let set = format!(
                    "SET idle_in_transaction_session_timeout = {}",
                    ctx.lease.as_millis()
                );
                if client.batch_execute(&set).await.is_ok() {
                    return client;
                }
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
