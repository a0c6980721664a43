//! The shared read connection (reads and lease statements) and the journal's reads.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use notify_types::{SessionId, Uuid};
use tokio::sync::OnceCell;
use tokio_postgres::{Client, Row, Statement};

use super::connect;
use super::error::{LeaseError, sanitize};
use super::schema::Sql;
use super::{PgJournal, lock, seq_u64, timed_out};
use crate::backend::Frame;
use crate::error::{JournalError, StorageError};

/// A reconnect of the read connection, shared by every caller that needs it.
type PendingReader = Arc<OnceCell<Result<Arc<ReaderConn>, StorageError>>>;

/// The read connection, and the reconnect in progress if it broke.
#[derive(Default)]
pub(super) struct ReaderSlot {
    pub(super) current: Option<Arc<ReaderConn>>,
    pub(super) pending: Option<PendingReader>,
}

/// The read connection's prepared statements.
pub(super) struct ReaderConn {
    pub(super) client: Client,
    pub(super) lookup: Statement,
    pub(super) replay: Statement,
    pub(super) last_seq: Statement,
    pub(super) sessions: Statement,
    pub(super) acquire: Statement,
    pub(super) renew: Statement,
    pub(super) release: Statement,
    pub(super) lease_info: Statement,
}

impl ReaderConn {
    pub(super) async fn prepare_within(
        op_timeout: Duration,
        client: Client,
        sql: &Sql,
    ) -> Result<Self, StorageError> {
        tokio::time::timeout(op_timeout, Self::prepare(client, sql))
            .await
            .map_err(|_| timed_out("preparing the read connection", op_timeout))?
    }

    async fn prepare(client: Client, sql: &Sql) -> Result<Self, StorageError> {
        let p = |q: &str| {
            let q = q.to_owned();
            let c = &client;
            async move { c.prepare(&q).await.map_err(|e| sanitize("prepare", &e)) }
        };
        let lookup = p(&sql.lookup).await?;
        let replay = p(&sql.replay).await?;
        let last_seq = p(&sql.last_seq).await?;
        let sessions = p(&sql.sessions).await?;
        let acquire = p(&sql.acquire).await?;
        let renew = p(&sql.renew).await?;
        let release = p(&sql.release).await?;
        let lease_info = p(&sql.lease_info).await?;
        Ok(Self {
            client,
            lookup,
            replay,
            last_seq,
            sessions,
            acquire,
            renew,
            release,
            lease_info,
        })
    }
}

impl PgJournal {
    /// The read connection, reopened if it broke. Concurrent callers that find it
    /// broken share one reconnect (bounded by the connect and operation timeouts)
    /// and its outcome.
    pub(super) async fn reader(&self) -> Result<Arc<ReaderConn>, ReadFailure> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(ReadFailure::Closed);
        }
        let pending = {
            let mut slot = lock(&self.reader);
            if let Some(conn) = slot.current.as_ref().filter(|c| !c.client.is_closed()) {
                return Ok(Arc::clone(conn));
            }
            slot.current = None;
            Arc::clone(slot.pending.get_or_insert_with(Default::default))
        };
        let result = pending
            .get_or_init(|| async {
                let client = self
                    .connector
                    .connect()
                    .await
                    .map_err(connect::ConnectFailure::into_storage)?;
                ReaderConn::prepare_within(self.op_timeout, client, &self.sql)
                    .await
                    .map(Arc::new)
            })
            .await
            .clone();
        let mut slot = lock(&self.reader);
        if slot
            .pending
            .as_ref()
            .is_some_and(|p| Arc::ptr_eq(p, &pending))
        {
            // The first to get here publishes the outcome; a failure is not kept,
            // so the next call tries again.
            slot.pending = None;
            if let Ok(conn) = &result
                && !self.closed.load(Ordering::SeqCst)
            {
                slot.current = Some(Arc::clone(conn));
            }
        }
        result.map_err(ReadFailure::Storage)
    }

    /// Runs one statement on the read connection within the operation timeout. On
    /// expiry the connection is dropped (the next call reconnects).
    pub(super) async fn read<T, F, Fut>(&self, op: &'static str, f: F) -> Result<T, ReadFailure>
    where
        F: FnOnce(Arc<ReaderConn>) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let conn = self.reader().await?;
        match tokio::time::timeout(self.op_timeout, f(Arc::clone(&conn))).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(ReadFailure::Storage(sanitize(op, &e))),
            Err(_) => {
                let mut slot = lock(&self.reader);
                if slot.current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &conn)) {
                    slot.current = None;
                }
                Err(ReadFailure::Storage(timed_out(op, self.op_timeout)))
            }
        }
    }

    pub(super) async fn lookup_inner(
        &self,
        session: SessionId,
        key: Uuid,
    ) -> Result<Option<u64>, JournalError> {
        let s = *session.as_uuid();
        let row = self
            .read("lookup", |c| async move {
                c.client.query_opt(&c.lookup, &[&s, &key]).await
            })
            .await?;
        match row {
            None => Ok(None),
            Some(row) => {
                let seq: i64 = row
                    .try_get(0)
                    .map_err(|e| JournalError::Storage(sanitize("lookup", &e)))?;
                Ok(Some(seq_u64(seq).map_err(JournalError::Storage)?))
            }
        }
    }

    pub(super) async fn replay_inner(
        &self,
        session: SessionId,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<Frame>, JournalError> {
        // A start beyond any storable sequence has no frames; a huge limit is "all".
        let Ok(from) = i64::try_from(from_seq) else {
            return Ok(Vec::new());
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let s = *session.as_uuid();
        let rows: Vec<Row> = self
            .read("replay", |c| async move {
                c.client.query(&c.replay, &[&s, &from, &limit]).await
            })
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let seq: i64 = row
                .try_get(0)
                .map_err(|e| JournalError::Storage(sanitize("replay", &e)))?;
            let seq = seq_u64(seq).map_err(JournalError::Storage)?;
            let bytes: &[u8] = row
                .try_get(1)
                .map_err(|e| JournalError::Storage(sanitize("replay", &e)))?;
            out.push(crate::decode_frame(session, seq, bytes)?);
        }
        Ok(out)
    }

    pub(super) async fn last_seq_inner(&self, session: SessionId) -> Result<u64, JournalError> {
        let s = *session.as_uuid();
        let row = self
            .read("last seq", |c| async move {
                c.client.query_opt(&c.last_seq, &[&s]).await
            })
            .await?;
        match row {
            None => Ok(0),
            Some(row) => {
                let seq: i64 = row
                    .try_get(0)
                    .map_err(|e| JournalError::Storage(sanitize("last seq", &e)))?;
                seq_u64(seq).map_err(JournalError::Storage)
            }
        }
    }

    pub(super) async fn sessions_inner(&self) -> Result<Vec<SessionId>, JournalError> {
        let rows: Vec<Row> = self
            .read("list sessions", |c| async move {
                c.client.query(&c.sessions, &[]).await
            })
            .await?;
        rows.iter()
            .map(|row| {
                row.try_get::<_, Uuid>(0)
                    .map(SessionId::from_uuid)
                    .map_err(|e| JournalError::Storage(sanitize("list sessions", &e)))
            })
            .collect()
    }
}

/// Why the read connection is not available.
pub(super) enum ReadFailure {
    Closed,
    Storage(StorageError),
}

impl From<ReadFailure> for JournalError {
    fn from(f: ReadFailure) -> Self {
        match f {
            ReadFailure::Closed => Self::Closed,
            ReadFailure::Storage(e) => Self::Storage(e),
        }
    }
}

impl From<ReadFailure> for LeaseError {
    fn from(f: ReadFailure) -> Self {
        match f {
            ReadFailure::Closed => Self::Closed,
            ReadFailure::Storage(e) => Self::Storage(e),
        }
    }
}
