//! The group-commit writers: each task owns a write connection; they share one
//! queue and take turns gathering a batch, which commits in one transaction: one
//! call of the schema's `append_batch` function, sent as one statement outside any
//! explicit transaction, so the whole batch (lease check, key resolution, frame
//! inserts, `last_seq`, commit) costs one round trip. An atomic group
//! ([`Job::Group`]) is committed on its own, after the batch gathered before it:
//! one explicit transaction around one `append_batch` call, committed only if every
//! record of the group was taken.
//!
//! One concern per file: what the queue carries and the queue itself (`queue.rs`),
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
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

use notify_types::Uuid;
use tokio_postgres::Client;

use crate::error::StorageError;
use crate::postgres::connect::Connector;
use crate::postgres::sql::Sql;
use conn::{WriterConn, prepare_within};

pub(crate) use queue::{AppendReq, GroupReq, Job, Queue};

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

    /// Runs until every sender is gone, committing one batch per loop. Writers
    /// share `queue`; one at a time gathers a batch: the first append that arrives
    /// and whatever queued meanwhile; then, if every other writer has a batch in
    /// flight, everything that arrives until one of those commits (or the batch is
    /// full). A lone append commits at once; a busy journal keeps several commits
    /// in flight while the next batch grows. An atomic group ends the gathering: the
    /// batch gathered before it commits first, then the group on its own.
    pub(crate) async fn run(mut self, queue: Arc<Queue>) {
        // Not preallocated: `max_batch` is an upper bound, batches are usually small.
        let mut batch = Vec::new();
        loop {
            let mut group = None;
            {
                let mut rx = queue.rx.lock().await;
                let Some(first) = rx.recv().await else {
                    return;
                };
                match first {
                    Job::One(req) => batch.push(req),
                    Job::Group(g) => group = Some(g),
                }
                'gather: while group.is_none() {
                    while batch.len() < self.max_batch {
                        match rx.try_recv() {
                            Ok(Job::One(req)) => batch.push(req),
                            Ok(Job::Group(g)) => {
                                group = Some(g);
                                break 'gather;
                            }
                            Err(_) => break,
                        }
                    }
                    if batch.len() >= self.max_batch {
                        break;
                    }
                    // Registered before the check, so a commit that finishes after it
                    // wakes us (`notify_waiters` keeps no permit for later).
                    let mut done = std::pin::pin!(queue.done.notified());
                    done.as_mut().enable();
                    // Commit now if nothing is in flight, or another writer is free.
                    let in_flight = queue.in_flight.load(Ordering::SeqCst);
                    if in_flight == 0 || in_flight + 1 < queue.writers {
                        break;
                    }
                    let mut next = std::pin::pin!(rx.recv());
                    let arrived = std::future::poll_fn(|cx| {
                        if done.as_mut().poll(cx).is_ready() {
                            return Poll::Ready(None);
                        }
                        next.as_mut().poll(cx).map(Some)
                    })
                    .await;
                    match arrived {
                        Some(Some(Job::One(req))) => batch.push(req),
                        Some(Some(Job::Group(g))) => group = Some(g),
                        // A commit finished, or every sender is gone.
                        Some(None) | None => break,
                    }
                }
            }
            if !batch.is_empty() {
                queue.in_flight.fetch_add(1, Ordering::SeqCst);
                let results = self.commit(&batch, &queue).await;
                queue.in_flight.fetch_sub(1, Ordering::SeqCst);
                queue.done.notify_waiters();
                for (req, result) in batch.drain(..).zip(results) {
                    // The caller may have gone away (dropped its future); that is normal.
                    let _ = req.reply.send(result);
                }
            }
            if let Some(group) = group {
                queue.in_flight.fetch_add(1, Ordering::SeqCst);
                let answer = self.commit_group(&group, &queue).await;
                queue.in_flight.fetch_sub(1, Ordering::SeqCst);
                queue.done.notify_waiters();
                for (index, req) in group.requests.into_iter().enumerate() {
                    let _ = req.reply.send(answer.of(index));
                }
            }
        }
    }
}
