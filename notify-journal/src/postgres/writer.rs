//! The group-commit writer: one task owns the write connection and commits every
//! append waiting in its channel in one transaction: one call of the schema's
//! `append_batch` function, sent as one statement outside any explicit transaction,
//! so the whole batch (lease check, key resolution, frame inserts, `last_seq`,
//! commit) costs one round trip. An atomic group ([`Job::Group`]) is committed on its
//! own, after the batch gathered before it: one explicit transaction around one
//! `append_batch` call, committed only if every record of the group was taken.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use notify_types::{SessionId, Uuid};
use tokio::sync::{Mutex as AsyncMutex, Notify, mpsc, oneshot};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Statement};

use super::connect::Connector;
use super::error::sanitize;
use super::schema::{PG_SCHEMA_VERSION, SchemaGuard, Sql, VersionCheck};
use crate::backend::AppendOutcome;
use crate::error::{AppendError, Corruption, StorageError};
use crate::metrics::POSTGRES;
use crate::stats::CommitStats;

/// One append waiting for its batch.
pub(crate) struct AppendReq {
    pub(crate) session: Uuid,
    pub(crate) key: Uuid,
    pub(crate) kind: &'static str,
    pub(crate) bytes: Vec<u8>,
    /// [`frame_checksum`](crate::integrity::frame_checksum) of `bytes`, as PostgreSQL's `int4`.
    pub(crate) checksum: i32,
    /// The epoch of this journal's lease on the session when the append was made;
    /// `None` when it held none.
    pub(crate) epoch: Option<u64>,
    pub(crate) reply: oneshot::Sender<Result<AppendOutcome, AppendError>>,
}

/// An atomic group of appends to one session
/// ([`JournalBackend::append_all`](crate::JournalBackend::append_all)).
pub(crate) struct GroupReq {
    pub(crate) session: SessionId,
    /// In order; each answered through its own `reply`, all alike when the group is
    /// refused or fails.
    pub(crate) requests: Vec<AppendReq>,
    /// The head the group expects to find (its first new frame at `if_head + 1`).
    pub(crate) if_head: Option<u64>,
}

/// What the writers' channel carries.
pub(crate) enum Job {
    /// An append, committed in a batch with others.
    One(AppendReq),
    /// An atomic group, committed in a transaction of its own.
    Group(GroupReq),
}

/// The write connection with its prepared statement.
struct WriterConn {
    client: Client,
    append_batch: Statement,
    /// A stored frame by session and key: a collision's stored row is checked against
    /// its checksum before it is believed.
    stored: Statement,
}

impl WriterConn {
    async fn prepare(
        client: Client,
        sql: &Sql,
        idle_timeout_ms: u64,
    ) -> Result<Self, StorageError> {
        // If this process stalls inside a batch (a paused or partitioned host), the
        // server aborts the transaction and frees the session rows, so a takeover
        // does not wait on the stalled writer; the stalled batch then fails.
        // Generic plans: `append_batch`'s statements are planned once per connection
        // instead of for every batch (custom plans cost more than they save here).
        client
            .batch_execute(&format!(
                "SET idle_in_transaction_session_timeout = {idle_timeout_ms};
                 SET plan_cache_mode = force_generic_plan"
            ))
            .await
            .map_err(|e| sanitize("configure session", &e))?;
        let append_batch = client
            .prepare(&sql.append_batch)
            .await
            .map_err(|e| sanitize("prepare", &e))?;
        let stored = client
            .prepare(&sql.stored)
            .await
            .map_err(|e| sanitize("prepare", &e))?;
        Ok(Self {
            client,
            append_batch,
            stored,
        })
    }
}

/// The writers' shared queue, and how many of them have a batch in flight.
pub(crate) struct Queue {
    rx: AsyncMutex<mpsc::Receiver<Job>>,
    in_flight: AtomicUsize,
    done: Notify,
    /// How many writers share the queue.
    writers: usize,
    /// Successful batches, for [`CommitStats`].
    commits: AtomicU64,
    /// Appends answered by successful batches, for [`CommitStats`].
    committed_appends: AtomicU64,
}

impl Queue {
    pub(crate) fn new(rx: mpsc::Receiver<Job>, writers: usize) -> Self {
        Self {
            writers,
            rx: AsyncMutex::new(rx),
            in_flight: AtomicUsize::new(0),
            done: Notify::new(),
            commits: AtomicU64::new(0),
            committed_appends: AtomicU64::new(0),
        }
    }

    /// The commit counters of every writer on this queue.
    pub(crate) fn stats(&self) -> CommitStats {
        CommitStats {
            commits: self.commits.load(Ordering::Relaxed),
            appends: self.committed_appends.load(Ordering::Relaxed),
            writer_wakeups: 0,
        }
    }
}

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

/// How often a batch that failed with a serialization failure or a deadlock
/// (SQLSTATE 40001, 40P01: rolled back, nothing written) is retried before its
/// appends get the error.
const TRANSIENT_RETRIES: u32 = 4;

/// How a batch failed.
enum Failure {
    /// The batch was not sent, or the server reported an error while running it:
    /// its transaction rolled back, nothing was written. `transient`: a
    /// serialization failure or deadlock, worth retrying at once on the same
    /// connection; any other failure drops the connection.
    Before {
        error: StorageError,
        transient: bool,
    },
    /// The batch was sent but its answer never came or made no sense (lost
    /// connection, terminated backend, timeout): whether it committed is unknown.
    Commit(StorageError),
    /// The batch was not sent: the schema is at this newer version (a newer build
    /// migrated it), so this build writes nothing more.
    SchemaTooNew(u32),
}

impl Failure {
    fn msg(text: &'static str) -> Self {
        Self::Before {
            error: StorageError::msg(text),
            transient: false,
        }
    }
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

    /// Commits one atomic group in a transaction of its own, retrying it (bounded)
    /// after a serialization failure or deadlock. Answers what every record of the
    /// group is told: its outcome, or the group's refusal or failure.
    async fn commit_group(&mut self, group: &GroupReq, queue: &Queue) -> GroupAnswer {
        let started = Instant::now();
        let mut retries = 0;
        loop {
            let failure = match self.attempt_group(group).await {
                Ok(Ok(outcomes)) => {
                    queue.commits.fetch_add(1, Ordering::Relaxed);
                    queue
                        .committed_appends
                        .fetch_add(outcomes.len() as u64, Ordering::Relaxed);
                    crate::metrics::committed(POSTGRES, outcomes.len(), started.elapsed());
                    return GroupAnswer::Committed(outcomes);
                }
                // Rolled back: nothing of the group was written.
                Ok(Err(refusal)) => return GroupAnswer::Refused(refusal),
                Err(failure) => failure,
            };
            // Whatever failed, the connection was inside a transaction: never reuse it
            // (the server rolls back what did not commit when it goes).
            self.conn = None;
            match failure {
                Failure::Before { error, transient } => {
                    if transient && retries < TRANSIENT_RETRIES {
                        retries += 1;
                        tracing::debug!(error = %error, retries, "journal group retried");
                        continue;
                    }
                    tracing::warn!(error = %error, "journal group rolled back");
                    crate::metrics::commit_failed(POSTGRES);
                    return GroupAnswer::Refused(AppendError::Storage(error));
                }
                Failure::Commit(error) => {
                    tracing::warn!(error = %error, "journal group commit failed; outcome unknown");
                    crate::metrics::commit_failed(POSTGRES);
                    return GroupAnswer::Refused(AppendError::CommitFailed(error));
                }
                Failure::SchemaTooNew(found) => {
                    tracing::warn!(
                        found,
                        supported = PG_SCHEMA_VERSION,
                        "journal schema is newer than this build; appends refused"
                    );
                    // Refused before anything was sent: nothing of the group written.
                    return GroupAnswer::Refused(AppendError::SchemaTooNew {
                        found,
                        supported: PG_SCHEMA_VERSION,
                        outcome_unknown: false,
                    });
                }
            }
        }
    }

    /// One try at an atomic group within the operation timeout: the group's own
    /// answer (committed, or refused and rolled back), or how it failed.
    async fn attempt_group(
        &mut self,
        group: &GroupReq,
    ) -> Result<Result<Vec<AppendOutcome>, AppendError>, Failure> {
        self.connected().await?;
        let Some(conn) = self.conn.as_mut() else {
            return Err(Failure::msg("postgres: no write connection"));
        };
        let mut commit_sent = false;
        let run = transact_group(conn, &self.sql.guard, self.holder, group, &mut commit_sent);
        match tokio::time::timeout(self.op_timeout, run).await {
            Ok(result) => result,
            Err(_) => {
                let error = StorageError::msg(format!(
                    "postgres: journal group timed out after {:?}",
                    self.op_timeout
                ));
                // Before its COMMIT was sent the transaction cannot have committed.
                Err(if commit_sent {
                    Failure::Commit(error)
                } else {
                    Failure::Before {
                        error,
                        transient: false,
                    }
                })
            }
        }
    }

    /// Commits one batch, retrying it (bounded) after a serialization failure or
    /// deadlock; answers every append of the batch.
    async fn commit(
        &mut self,
        batch: &[AppendReq],
        queue: &Queue,
    ) -> Vec<Result<AppendOutcome, AppendError>> {
        let started = Instant::now();
        let mut retries = 0;
        loop {
            match self.attempt(batch).await {
                Ok(results) => {
                    queue.commits.fetch_add(1, Ordering::Relaxed);
                    queue
                        .committed_appends
                        .fetch_add(batch.len() as u64, Ordering::Relaxed);
                    crate::metrics::committed(POSTGRES, batch.len(), started.elapsed());
                    return results;
                }
                Err(Failure::Before { error, transient }) => {
                    if transient && retries < TRANSIENT_RETRIES {
                        retries += 1;
                        tracing::debug!(error = %error, retries, "journal batch retried");
                        continue;
                    }
                    tracing::warn!(error = %error, "journal batch rolled back");
                    crate::metrics::commit_failed(POSTGRES);
                    if !transient {
                        // The connection may be broken (terminated backend, aborted
                        // idle transaction, timeout): never reuse it.
                        self.conn = None;
                    }
                    return batch
                        .iter()
                        .map(|_| Err(AppendError::Storage(error.clone())))
                        .collect();
                }
                Err(Failure::Commit(error)) => {
                    tracing::warn!(error = %error, "journal commit failed; outcome unknown");
                    crate::metrics::commit_failed(POSTGRES);
                    self.conn = None;
                    return batch
                        .iter()
                        .map(|_| Err(AppendError::CommitFailed(error.clone())))
                        .collect();
                }
                Err(Failure::SchemaTooNew(found)) => {
                    tracing::warn!(
                        found,
                        supported = PG_SCHEMA_VERSION,
                        "journal schema is newer than this build; appends refused"
                    );
                    return batch
                        .iter()
                        .map(|_| {
                            Err(AppendError::SchemaTooNew {
                                found,
                                supported: PG_SCHEMA_VERSION,
                                outcome_unknown: false,
                            })
                        })
                        .collect();
                }
            }
        }
    }

    /// One try at a batch, on the current connection or a fresh one, within the
    /// operation timeout.
    async fn attempt(
        &mut self,
        batch: &[AppendReq],
    ) -> Result<Vec<Result<AppendOutcome, AppendError>>, Failure> {
        self.connected().await?;
        let Some(conn) = self.conn.as_mut() else {
            return Err(Failure::msg("postgres: no write connection"));
        };
        let guard = &self.sql.guard;
        match tokio::time::timeout(self.op_timeout, transact(conn, guard, self.holder, batch)).await
        {
            Ok(result) => result,
            Err(_) => {
                // The connection is stuck (partition, stalled server): abandon it.
                // The batch was sent as one statement that commits by itself, so
                // whether it committed is unknown.
                self.conn = None;
                Err(Failure::Commit(StorageError::msg(format!(
                    "postgres: journal batch timed out after {:?}",
                    self.op_timeout
                ))))
            }
        }
    }

    /// Makes sure there is a usable write connection (a fresh one, prepared, if the
    /// last one was dropped or closed), refusing once the schema was found newer.
    async fn connected(&mut self) -> Result<(), Failure> {
        // A schema found newer stays newer: nothing more is sent.
        if let Some(found) = self.sql.guard.newer() {
            self.conn = None;
            return Err(Failure::SchemaTooNew(found));
        }
        if self.conn.as_ref().is_none_or(|c| c.client.is_closed()) {
            self.conn = None;
            let client = self
                .connector
                .connect()
                .await
                .map_err(|e| Failure::Before {
                    error: e.into_storage(),
                    transient: false,
                })?;
            // Every reconnect checks the schema version first: a newer build may
            // have migrated it since this journal connected.
            let checked = tokio::time::timeout(self.op_timeout, self.sql.guard.check(&client))
                .await
                .unwrap_or_else(|_| {
                    Err(VersionCheck::Failed(StorageError::msg(format!(
                        "postgres: schema check timed out after {:?}",
                        self.op_timeout
                    ))))
                });
            match checked {
                Ok(()) => {}
                Err(VersionCheck::TooNew(found)) => return Err(Failure::SchemaTooNew(found)),
                Err(VersionCheck::Failed(error)) => {
                    return Err(Failure::Before {
                        error,
                        transient: false,
                    });
                }
            }
            let conn = prepare_within(self.op_timeout, client, &self.sql, self.idle_timeout_ms)
                .await
                .map_err(|error| Failure::Before {
                    error,
                    transient: false,
                })?;
            self.conn = Some(conn);
        }
        Ok(())
    }
}

/// Prepares a write connection within `op_timeout`.
async fn prepare_within(
    op_timeout: Duration,
    client: Client,
    sql: &Sql,
    idle_timeout_ms: u64,
) -> Result<WriterConn, StorageError> {
    tokio::time::timeout(
        op_timeout,
        WriterConn::prepare(client, sql, idle_timeout_ms),
    )
    .await
    .map_err(|_| {
        StorageError::msg(format!(
            "postgres: preparing the write connection timed out after {op_timeout:?}"
        ))
    })?
}

/// SQLSTATE classes that the server raises while executing a statement, before
/// its implicit transaction commits: the batch was rolled back, nothing written.
/// Any other failure (a lost connection, a terminated backend, a server crash,
/// errors of classes 08, 57, 58, XX, ...) leaves the outcome unknown.
const ROLLED_BACK_CLASSES: &[&str] = &["22", "23", "25", "40", "42", "54", "55", "P0"];

/// Classifies a failure of the batch statement.
fn classify(e: &tokio_postgres::Error) -> Failure {
    let error = sanitize("journal batch", e);
    match e.code() {
        Some(c) if ROLLED_BACK_CLASSES.contains(&c.code().get(..2).unwrap_or_default()) => {
            Failure::Before {
                error,
                transient: *c == SqlState::T_R_SERIALIZATION_FAILURE
                    || *c == SqlState::T_R_DEADLOCK_DETECTED,
            }
        }
        _ => Failure::Commit(error),
    }
}

fn to_u64(v: i64) -> Result<u64, Failure> {
    u64::try_from(v).map_err(|_| Failure::Commit(StorageError::msg("postgres: negative sequence")))
}

/// The batch's status codes from `append_batch` (see `migrations.rs`). A code
/// never changes meaning in a later schema version; a later version may add codes,
/// which this build answers as [`AppendError::SchemaTooNew`] (see [`transact`]).
const APPENDED: i16 = 0;
const DUPLICATE: i16 = 1;
const COLLISION: i16 = 2;
const FENCED: i16 = 3;
const DAMAGED: i16 = 4;
const ENDED: i16 = 5;
const PURGED: i16 = 6;

/// A collision as the batch answered it, unless the stored row's bytes fail their
/// checksum: then the row was changed behind the journal's back, and the append is
/// refused as damage, never judged against damaged bytes. (Collisions are rare; this
/// costs one more round trip each. If the row cannot be read, the collision stands.)
async fn judge_collision(conn: &WriterConn, req: &AppendReq, seq: u64) -> AppendError {
    let collision = AppendError::Collision { key: req.key, seq };
    let Ok(Some(row)) = conn
        .client
        .query_opt(&conn.stored, &[&req.session, &req.key])
        .await
    else {
        return collision;
    };
    let (Ok(bytes), Ok(checksum)) = (row.try_get::<_, &[u8]>(1), row.try_get::<_, Option<i32>>(2))
    else {
        return collision;
    };
    let session = SessionId::from_uuid(req.session);
    match super::reader::decode_row(session, seq, bytes, checksum) {
        Err(crate::JournalError::Corrupt { source, .. }) => AppendError::Corrupt {
            session,
            seq,
            source,
        },
        _ => collision,
    }
}

/// What every record of an atomic group is told.
enum GroupAnswer {
    /// Committed: each record's outcome, in order.
    Committed(Vec<AppendOutcome>),
    /// Refused or failed as a whole.
    Refused(AppendError),
}

impl GroupAnswer {
    /// The answer of the group's record at `index`.
    fn of(&self, index: usize) -> Result<AppendOutcome, AppendError> {
        match self {
            Self::Committed(outcomes) => outcomes.get(index).copied().ok_or_else(|| {
                AppendError::CommitFailed(StorageError::msg(
                    "postgres: journal group answered the wrong number of rows",
                ))
            }),
            Self::Refused(e) => Err(e.clone()),
        }
    }
}

/// An atomic group: `BEGIN`, one `append_batch` call with the group's records, then
/// `COMMIT` if every record was taken (appended or a duplicate) and the head was the
/// expected one, else `ROLLBACK` and the refusal naming the first refused record.
/// `commit_sent` is set just before the `COMMIT` goes out: until then a failure
/// leaves nothing written.
async fn transact_group(
    conn: &mut WriterConn,
    guard: &SchemaGuard,
    me: Uuid,
    group: &GroupReq,
    commit_sent: &mut bool,
) -> Result<Result<Vec<AppendOutcome>, AppendError>, Failure> {
    // Until the COMMIT is sent, nothing can have committed, whatever the failure.
    let rolled_back = |failure: Failure| match failure {
        Failure::Commit(error) => Failure::Before {
            error,
            transient: false,
        },
        before => before,
    };
    conn.client
        .batch_execute("BEGIN")
        .await
        .map_err(|e| rolled_back(classify(&e)))?;
    let results = transact(conn, guard, me, &group.requests)
        .await
        .map_err(rolled_back)?;
    let mut outcomes = Vec::with_capacity(results.len());
    let mut refusal = None;
    for (index, result) in results.into_iter().enumerate() {
        match result {
            Ok(outcome) => outcomes.push(outcome),
            Err(e) => {
                refusal = Some(AppendError::GroupRefused {
                    index,
                    source: Box::new(rolled_back_refusal(e)),
                });
                break;
            }
        }
    }
    if refusal.is_none()
        && let Some(expected) = group.if_head
        && let Some(first) = outcomes.iter().find(|o| o.appended)
        && first.seq != expected.saturating_add(1)
    {
        refusal = Some(AppendError::HeadMoved {
            session: group.session,
            expected,
            found: first.seq - 1,
        });
    }
    if let Some(refusal) = refusal {
        conn.client
            .batch_execute("ROLLBACK")
            .await
            .map_err(|e| rolled_back(classify(&e)))?;
        return Ok(Err(refusal));
    }
    *commit_sent = true;
    conn.client
        .batch_execute("COMMIT")
        .await
        .map_err(|e| classify(&e))?;
    Ok(Ok(outcomes))
}

/// A record's refusal inside a group's transaction, which is then rolled back: nothing
/// of the group was written, whatever a one-statement batch's answer would have meant
/// (an unknown status there may have committed; here the `ROLLBACK` follows).
fn rolled_back_refusal(e: AppendError) -> AppendError {
    match e {
        AppendError::SchemaTooNew {
            found, supported, ..
        } => AppendError::SchemaTooNew {
            found,
            supported,
            outcome_unknown: false,
        },
        AppendError::CommitFailed(error) => AppendError::Storage(error),
        other => other,
    }
}

/// One batch, one statement: `append_batch` in the statement's implicit
/// `READ COMMITTED` transaction (one round trip: Bind, Execute, Sync; the rows
/// arrive after the commit). Its answer is one row per append, in order.
///
/// A status this build does not know comes from a newer schema's `append_batch` (a
/// newer build migrated the schema while this one was connected): the batch did
/// commit, so that append may have been written. It is answered, alone, with
/// [`AppendError::SchemaTooNew`] (`outcome_unknown`) naming the version read back;
/// the other appends keep their answers (codes never change meaning), and the
/// journal refuses everything from then on.
async fn transact(
    conn: &mut WriterConn,
    guard: &SchemaGuard,
    me: Uuid,
    batch: &[AppendReq],
) -> Result<Vec<Result<AppendOutcome, AppendError>>, Failure> {
    let mut sessions = Vec::with_capacity(batch.len());
    let mut keys = Vec::with_capacity(batch.len());
    let mut kinds = Vec::with_capacity(batch.len());
    let mut bytes: Vec<&[u8]> = Vec::with_capacity(batch.len());
    let mut epochs: Vec<Option<i64>> = Vec::with_capacity(batch.len());
    let mut checksums: Vec<i32> = Vec::with_capacity(batch.len());
    for req in batch {
        checksums.push(req.checksum);
        sessions.push(req.session);
        keys.push(req.key);
        kinds.push(req.kind);
        bytes.push(&req.bytes);
        // An epoch beyond i64 cannot match any stored one: fenced, as it should be.
        epochs.push(req.epoch.map(|e| i64::try_from(e).unwrap_or(-1)));
    }
    let rows = conn
        .client
        .query(
            &conn.append_batch,
            &[&me, &sessions, &keys, &kinds, &bytes, &epochs, &checksums],
        )
        .await
        .map_err(|e| classify(&e))?;
    if rows.len() != batch.len() {
        // Committed, but the answer does not fit the batch: unknown per append.
        return Err(Failure::Commit(StorageError::msg(
            "postgres: journal batch answered the wrong number of rows",
        )));
    }
    let mut out = Vec::with_capacity(batch.len());
    // The schema version behind an unknown status, read once per batch.
    let mut newer: Option<Result<u32, StorageError>> = None;
    for (req, row) in batch.iter().zip(&rows) {
        let read = || -> Result<(i16, i64), tokio_postgres::Error> {
            Ok((row.try_get(0)?, row.try_get(1)?))
        };
        let (status, seq) = read().map_err(|e| Failure::Commit(sanitize("journal batch", &e)))?;
        out.push(match status {
            APPENDED => Ok(AppendOutcome {
                seq: to_u64(seq)?,
                appended: true,
            }),
            DUPLICATE => Ok(AppendOutcome {
                seq: to_u64(seq)?,
                appended: false,
            }),
            COLLISION => Err(judge_collision(conn, req, to_u64(seq)?).await),
            FENCED => Err(AppendError::Fenced {
                session: SessionId::from_uuid(req.session),
            }),
            ENDED | PURGED => Err(AppendError::SessionEnded {
                session: SessionId::from_uuid(req.session),
                purged: status == PURGED,
            }),
            DAMAGED => Err(AppendError::Corrupt {
                session: SessionId::from_uuid(req.session),
                seq: to_u64(seq)?,
                source: Corruption::Inconsistent(
                    "the stored frame's bytes and its checksum disagree".to_owned(),
                ),
            }),
            unknown => {
                if newer.is_none() {
                    newer = Some(match guard.check(&conn.client).await {
                        Err(VersionCheck::TooNew(found)) => Ok(found),
                        Err(VersionCheck::Failed(e)) => Err(e),
                        Ok(()) => Err(StorageError::msg(format!(
                            "postgres: journal batch answered status {unknown}, unknown \
                             to schema version {PG_SCHEMA_VERSION}, which the database \
                             still records"
                        ))),
                    });
                }
                match &newer {
                    Some(Ok(found)) => Err(AppendError::SchemaTooNew {
                        found: *found,
                        supported: PG_SCHEMA_VERSION,
                        outcome_unknown: true,
                    }),
                    // Committed, answered in a way no known version defines: this
                    // append's outcome is unknown (the others' answers stand).
                    Some(Err(e)) => Err(AppendError::CommitFailed(e.clone())),
                    None => Err(AppendError::CommitFailed(StorageError::msg(
                        "postgres: journal batch answered an unknown status",
                    ))),
                }
            }
        });
    }
    Ok(out)
}
