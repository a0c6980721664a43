//! The group-commit writer: one task owns the write connection and commits every
//! append waiting in its channel in one transaction.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use notify_types::{SessionId, Uuid};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, IsolationLevel, Row, Statement};

use super::connect::Connector;
use super::error::sanitize;
use super::schema::Sql;
use crate::backend::AppendOutcome;
use crate::error::{AppendError, StorageError};

/// One append waiting for its batch.
pub(crate) struct AppendReq {
    pub(crate) session: Uuid,
    pub(crate) key: Uuid,
    pub(crate) kind: &'static str,
    pub(crate) bytes: Vec<u8>,
    /// The epoch of this journal's lease on the session when the append was made;
    /// `None` when it held none.
    pub(crate) epoch: Option<u64>,
    pub(crate) reply: oneshot::Sender<Result<AppendOutcome, AppendError>>,
}

/// The write connection with its prepared statements.
struct WriterConn {
    client: Client,
    ensure_sessions: Statement,
    lock_sessions: Statement,
    read_sessions: Statement,
    find_keys: Statement,
    insert_frames: Statement,
    set_last_seq: Statement,
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
        client
            .batch_execute(&format!(
                "SET idle_in_transaction_session_timeout = {idle_timeout_ms}"
            ))
            .await
            .map_err(|e| sanitize("configure session", &e))?;
        let prep = |q: &str| {
            let q = q.to_owned();
            let c = &client;
            async move { c.prepare(&q).await.map_err(|e| sanitize("prepare", &e)) }
        };
        let ensure_sessions = prep(&sql.ensure_sessions).await?;
        let lock_sessions = prep(&sql.lock_sessions).await?;
        let read_sessions = prep(&sql.read_sessions).await?;
        let find_keys = prep(&sql.find_keys).await?;
        let insert_frames = prep(&sql.insert_frames).await?;
        let set_last_seq = prep(&sql.set_last_seq).await?;
        Ok(Self {
            client,
            ensure_sessions,
            lock_sessions,
            read_sessions,
            find_keys,
            insert_frames,
            set_last_seq,
        })
    }
}

/// The writer task's state.
pub(crate) struct Writer {
    connector: Arc<Connector>,
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

/// How a batch transaction failed.
enum Failure {
    /// Before `COMMIT` was sent: the transaction rolled back, nothing was written.
    /// `transient`: a serialization failure or deadlock, worth retrying at once on
    /// the same connection; any other failure drops the connection.
    Before {
        error: StorageError,
        transient: bool,
    },
    /// `COMMIT` itself failed: the outcome is unknown.
    Commit(StorageError),
}

impl Failure {
    fn msg(text: &'static str) -> Self {
        Self::Before {
            error: StorageError::msg(text),
            transient: false,
        }
    }
}

fn before(op: &'static str) -> impl Fn(tokio_postgres::Error) -> Failure {
    move |e| Failure::Before {
        error: sanitize(op, &e),
        transient: matches!(
            e.code(),
            Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
        ),
    }
}

/// A session row as locked by the batch.
struct SessionRow {
    last_seq: u64,
    epoch: u64,
    holder: Option<Uuid>,
    live: bool,
}

impl Writer {
    pub(crate) async fn new(
        connector: Arc<Connector>,
        sql: Arc<Sql>,
        holder: Uuid,
        max_batch: usize,
        idle_timeout_ms: u64,
        op_timeout: Duration,
        client: Client,
    ) -> Result<Self, StorageError> {
        let conn = prepare_within(op_timeout, client, &sql, idle_timeout_ms).await?;
        Ok(Self {
            connector,
            sql,
            holder,
            max_batch,
            idle_timeout_ms,
            op_timeout,
            conn: Some(conn),
        })
    }

    /// Runs until every sender is gone, committing one batch per loop.
    pub(crate) async fn run(mut self, mut rx: mpsc::Receiver<AppendReq>) {
        // Not preallocated: `max_batch` is an upper bound, batches are usually small.
        let mut batch = Vec::new();
        while let Some(first) = rx.recv().await {
            batch.push(first);
            // A lone append commits at once; whatever queued meanwhile joins it.
            while batch.len() < self.max_batch {
                match rx.try_recv() {
                    Ok(req) => batch.push(req),
                    Err(_) => break,
                }
            }
            let results = self.commit(&batch).await;
            for (req, result) in batch.drain(..).zip(results) {
                // The caller may have gone away (dropped its future); that is normal.
                let _ = req.reply.send(result);
            }
        }
    }

    /// Commits one batch, retrying it (bounded) after a serialization failure or
    /// deadlock; answers every append of the batch.
    async fn commit(&mut self, batch: &[AppendReq]) -> Vec<Result<AppendOutcome, AppendError>> {
        let mut retries = 0;
        loop {
            match self.attempt(batch).await {
                Ok(results) => return results,
                Err(Failure::Before { error, transient }) => {
                    if transient && retries < TRANSIENT_RETRIES {
                        retries += 1;
                        tracing::debug!(error = %error, retries, "journal batch retried");
                        continue;
                    }
                    tracing::warn!(error = %error, "journal batch rolled back");
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
                    self.conn = None;
                    return batch
                        .iter()
                        .map(|_| Err(AppendError::CommitFailed(error.clone())))
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
            let conn = prepare_within(self.op_timeout, client, &self.sql, self.idle_timeout_ms)
                .await
                .map_err(|error| Failure::Before {
                    error,
                    transient: false,
                })?;
            self.conn = Some(conn);
        }
        let Some(conn) = self.conn.as_mut() else {
            return Err(Failure::msg("postgres: no write connection"));
        };
        let commit_sent = AtomicBool::new(false);
        match tokio::time::timeout(
            self.op_timeout,
            transact(conn, self.holder, batch, &commit_sent),
        )
        .await
        {
            Ok(result) => result,
            Err(_) => {
                // The connection is stuck (partition, stalled server): abandon it.
                // The server rolls the transaction back when it notices.
                self.conn = None;
                let error = StorageError::msg(format!(
                    "postgres: journal batch timed out after {:?}",
                    self.op_timeout
                ));
                if commit_sent.load(Ordering::SeqCst) {
                    Err(Failure::Commit(error))
                } else {
                    Err(Failure::Before {
                        error,
                        transient: false,
                    })
                }
            }
        }
    }
}

/// Polls both futures to completion concurrently (so their statements are
/// pipelined on one connection, sent in order), returning both results.
async fn join<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    let mut a = std::pin::pin!(a);
    let mut b = std::pin::pin!(b);
    let mut ra = None;
    let mut rb = None;
    std::future::poll_fn(|cx| {
        if ra.is_none()
            && let std::task::Poll::Ready(v) = a.as_mut().poll(cx)
        {
            ra = Some(v);
        }
        if rb.is_none()
            && let std::task::Poll::Ready(v) = b.as_mut().poll(cx)
        {
            rb = Some(v);
        }
        match (ra.take(), rb.take()) {
            (Some(x), Some(y)) => std::task::Poll::Ready((x, y)),
            (x, y) => {
                ra = x;
                rb = y;
                std::task::Poll::Pending
            }
        }
    })
    .await
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

fn fenced(epoch: Option<u64>, row: &SessionRow, me: Uuid) -> bool {
    match epoch {
        // Our lease, exactly: same holder, same epoch, not expired by the DB clock.
        Some(e) => !(row.live && row.holder == Some(me) && row.epoch == e),
        // No lease of ours: refused only while someone else holds a live lease.
        None => row.live && row.holder.is_some_and(|h| h != me),
    }
}

type SessionFields = (Uuid, i64, i64, Option<Uuid>, bool);

fn read_session(row: &Row) -> Result<SessionFields, tokio_postgres::Error> {
    Ok((
        row.try_get(0)?,
        row.try_get(1)?,
        row.try_get(2)?,
        row.try_get(3)?,
        row.try_get(4)?,
    ))
}

fn read_frame(row: &Row) -> Result<(Uuid, Uuid, i64, &str, &[u8]), tokio_postgres::Error> {
    Ok((
        row.try_get(0)?,
        row.try_get(1)?,
        row.try_get(2)?,
        row.try_get(3)?,
        row.try_get(4)?,
    ))
}

fn to_u64(v: i64) -> Result<u64, Failure> {
    u64::try_from(v).map_err(|_| Failure::msg("postgres: negative sequence"))
}

fn to_i64(v: u64) -> Result<i64, Failure> {
    i64::try_from(v).map_err(|_| Failure::msg("postgres: sequence overflow"))
}

/// One batch, one `READ COMMITTED` transaction. Statements take whole-batch arrays,
/// so a batch costs the same round trips whatever its size. `commit_sent` is set
/// just before `COMMIT` is sent.
async fn transact(
    conn: &mut WriterConn,
    me: Uuid,
    batch: &[AppendReq],
    commit_sent: &AtomicBool,
) -> Result<Vec<Result<AppendOutcome, AppendError>>, Failure> {
    let mut sessions: Vec<Uuid> = batch.iter().map(|r| r.session).collect();
    sessions.sort_unstable();
    sessions.dedup();

    let tx = conn
        .client
        .build_transaction()
        .isolation_level(IsolationLevel::ReadCommitted)
        .start()
        .await
        .map_err(before("begin"))?;
    tx.execute(&conn.ensure_sessions, &[&sessions])
        .await
        .map_err(before("register sessions"))?;
    // Locks every session row of the batch until commit: writers of a session, in
    // any process, are serialized here, and a lease cannot change under us. The rows
    // are read by the next statement (pipelined: no extra round trip), so the lease
    // expiry is judged by the clock after the lock was granted.
    let (locked, rows) = join(
        tx.query(&conn.lock_sessions, &[&sessions]),
        tx.query(&conn.read_sessions, &[&sessions]),
    )
    .await;
    locked.map_err(before("lock sessions"))?;
    let rows = rows.map_err(before("read sessions"))?;
    let mut state = HashMap::with_capacity(rows.len());
    for row in &rows {
        let (session, last_seq, epoch, holder, live) =
            read_session(row).map_err(before("read session"))?;
        state.insert(
            session,
            SessionRow {
                last_seq: to_u64(last_seq)?,
                epoch: to_u64(epoch)?,
                holder,
                live,
            },
        );
    }
    let mut is_fenced = Vec::with_capacity(batch.len());
    for req in batch {
        let row = state
            .get(&req.session)
            .ok_or_else(|| Failure::msg("postgres: session row missing after insert"))?;
        is_fenced.push(fenced(req.epoch, row, me));
    }

    let (q_sessions, q_keys): (Vec<Uuid>, Vec<Uuid>) = batch
        .iter()
        .zip(&is_fenced)
        .filter(|(_, f)| !**f)
        .map(|(r, _)| (r.session, r.key))
        .unzip();
    let existing = if q_keys.is_empty() {
        Vec::new()
    } else {
        tx.query(&conn.find_keys, &[&q_sessions, &q_keys])
            .await
            .map_err(before("look up keys"))?
    };
    // (session, key) -> (seq, kind, bytes): committed frames, then this batch's.
    let mut known: HashMap<(Uuid, Uuid), (u64, &str, &[u8])> = HashMap::new();
    for row in &existing {
        let (s, k, seq, kind, bytes) = read_frame(row).map_err(before("read frame"))?;
        known.insert((s, k), (to_u64(seq)?, kind, bytes));
    }

    let mut out = Vec::with_capacity(batch.len());
    let mut n_session = Vec::new();
    let mut n_seq = Vec::new();
    let mut n_key = Vec::new();
    let mut n_kind = Vec::new();
    let mut n_bytes: Vec<&[u8]> = Vec::new();
    for (req, fenced) in batch.iter().zip(&is_fenced) {
        if *fenced {
            out.push(Err(AppendError::Fenced {
                session: SessionId::from_uuid(req.session),
            }));
            continue;
        }
        if let Some(&(seq, kind, bytes)) = known.get(&(req.session, req.key)) {
            out.push(if kind == req.kind && bytes == req.bytes.as_slice() {
                Ok(AppendOutcome {
                    seq,
                    appended: false,
                })
            } else {
                Err(AppendError::Collision { key: req.key, seq })
            });
            continue;
        }
        let Some(row) = state.get_mut(&req.session) else {
            return Err(Failure::msg("postgres: session row missing after insert"));
        };
        row.last_seq += 1;
        let seq = row.last_seq;
        known.insert((req.session, req.key), (seq, req.kind, &req.bytes));
        n_session.push(req.session);
        n_seq.push(to_i64(seq)?);
        n_key.push(req.key);
        n_kind.push(req.kind);
        n_bytes.push(&req.bytes);
        out.push(Ok(AppendOutcome {
            seq,
            appended: true,
        }));
    }
    if n_key.is_empty() {
        // Nothing written: a failed commit here loses nothing.
        commit_sent.store(false, Ordering::SeqCst);
        tx.commit().await.map_err(before("commit"))?;
        return Ok(out);
    }
    tx.execute(
        &conn.insert_frames,
        &[&n_session, &n_seq, &n_key, &n_kind, &n_bytes],
    )
    .await
    .map_err(before("insert frames"))?;
    let mut u_session = n_session.clone();
    u_session.sort_unstable();
    u_session.dedup();
    let mut u_seq = Vec::with_capacity(u_session.len());
    for s in &u_session {
        let row = state
            .get(s)
            .ok_or_else(|| Failure::msg("postgres: session row missing after insert"))?;
        u_seq.push(to_i64(row.last_seq)?);
    }
    tx.execute(&conn.set_last_seq, &[&u_session, &u_seq])
        .await
        .map_err(before("advance sequences"))?;
    commit_sent.store(true, Ordering::SeqCst);
    tx.commit()
        .await
        .map_err(|e| Failure::Commit(sanitize("commit", &e)))?;
    Ok(out)
}
