//! The group-commit writers: each task owns a write connection and a channel of its
//! own, which carries every append to the sessions routed to it, and commits what
//! gathered there as one batch in one transaction: one
//! call of the schema's `append_batch` function, sent as one statement outside any
//! explicit transaction, so the whole batch (lease check, key resolution, frame
//! inserts, `last_seq`, commit) costs one round trip. An atomic group
//! ([`Job::Group`]) is committed on its own, after the batch gathered before it:
//! one explicit transaction around one `append_batch` call, committed only if every
//! record of the group was taken.
//!
//! One concern per file: what the channels carry, the routing and the counters (`queue.rs`),
//! the writer task and its gathering (here), committing with retries and reconnects
//! (`commit.rs`), the write connection (`conn.rs`), the batch statement and its
//! answer (`batch.rs`), atomic groups (`group.rs`), and what a failure means
//! (`failure.rs`).

mod batch;
mod commit;
mod conn;
mod failure;
mod group;
mod queue;

use std::sync::Arc;
use std::time::Duration;

use notify_types::Uuid;
use tokio::sync::mpsc;
use tokio_postgres::Client;

use crate::error::StorageError;
use crate::postgres::connect::Connector;
use crate::postgres::sql::Sql;
use conn::{WriterConn, prepare_within};

pub(crate) use queue::{AppendReq, GroupReq, Job, Queue, Senders};

/// The writer task's state.
pub(crate) struct Writer {
    connector: Arc<Connector>,
    /// The statements, and the schema version check of every reconnect.
    sql: Arc<Sql>,
    /// This journal's lease-holder identity.
    holder: Uuid,
    max_batch: usize,
    /// `idle_in_transaction_session_timeout` of the write connection, in ms.
    idle_timeout_ms: u64,
    /// Bounds each batch transaction and each statement preparation.
    op_timeout: Duration,
    /// `None` after a failure that may have broken the connection: the next batch
    /// reconnects (a PostgreSQL transaction that did not commit left nothing behind,
    /// so a fresh connection is a full recovery, unlike a broken redb handle).
    conn: Option<WriterConn>,
}

impl Writer {
    /// A writer on `client` (its statements prepared now), or, without one, a
    /// writer that connects for its first batch.
    pub(crate) async fn new(
        connector: Arc<Connector>,
        sql: Arc<Sql>,
        holder: Uuid,
        max_batch: usize,
        idle_timeout_ms: u64,
        op_timeout: Duration,
        client: Option<Client>,
    ) -> Result<Self, StorageError> {
        let conn = match client {
            Some(client) => Some(prepare_within(op_timeout, client, &sql, idle_timeout_ms).await?),
            None => None,
        };
        Ok(Self {
            connector,
            sql,
            holder,
            max_batch,
            idle_timeout_ms,
            op_timeout,
            conn,
        })
    }

    /// Runs until every sender is gone, committing one batch per loop: the first
    /// append that arrives and whatever queued on this writer's channel meanwhile (at
    /// most `max_batch`), i.e. everything that arrived while its last batch was in
    /// flight. While a session has appends in flight they all come to one writer
    /// ([`Senders::route`]), so this writer's batch never waits for another writer's
    /// lock on a session row. An atomic group
    /// ends the gathering: the batch gathered before it commits first, then the group
    /// on its own.
    pub(crate) async fn run(mut self, mut rx: mpsc::Receiver<Job>, queue: Arc<Queue>) {
        // Not preallocated: `max_batch` is an upper bound, batches are usually small.
        let mut batch = Vec::new();
        loop {
            let mut group = None;
            let Some(first) = rx.recv().await else {
                return;
            };
            match first {
                Job::One(req) => batch.push(req),
                Job::Group(g) => group = Some(g),
            }
            while group.is_none() && batch.len() < self.max_batch {
                match rx.try_recv() {
                    Ok(Job::One(req)) => batch.push(req),
                    Ok(Job::Group(g)) => group = Some(g),
                    Err(_) => break,
                }
            }
            if !batch.is_empty() {
                let results = self.commit(&batch, &queue).await;
                for (req, result) in batch.drain(..).zip(results) {
                    // The caller may have gone away (dropped its future); that is normal.
                    let _ = req.reply.send(result);
                }
            }
            if let Some(group) = group {
                let answer = self.commit_group(&group, &queue).await;
                for (index, req) in group.requests.into_iter().enumerate() {
                    let _ = req.reply.send(answer.of(index));
                }
            }
        }
    }
}
