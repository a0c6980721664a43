//! The shared read connection: its prepared statements, the reconnect that
//! concurrent callers share ([`Prepared`], [`ConnSlot`]: also used by the lease
//! connections, `lease/conn.rs`), and running one bounded statement on it
//! ([`PgJournal::read`]).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::OnceCell;
use tokio_postgres::{Client, Statement};

use super::error::sanitize;
use super::sql::Sql;
use super::version::{PG_SCHEMA_VERSION, VersionCheck};
use super::{PgJournal, lock, timed_out};
use crate::error::{JournalError, StorageError};
use crate::lease::LeaseError;

/// A reconnect of a connection, shared by every caller that needs it.
type Pending<C> = Arc<OnceCell<Result<Arc<C>, ReadFailure>>>;

/// A connection with its prepared statements: the read connection ([`ReaderConn`])
/// or the lease connections (`lease/conn.rs`).
pub(super) trait Prepared: Sized + Send + Sync + 'static {
    /// Prepares the connection's statements on a freshly opened `client`.
    fn prepare(
        client: Client,
        sql: &Sql,
    ) -> impl Future<Output = Result<Self, StorageError>> + Send;

    /// The connection.
    fn client(&self) -> &Client;
}

/// A connection, and the reconnect in progress if it broke (or was never opened).
pub(super) struct ConnSlot<C> {
    pub(super) current: Option<Arc<C>>,
    pub(super) pending: Option<Pending<C>>,
}

impl<C> Default for ConnSlot<C> {
    fn default() -> Self {
        Self {
            current: None,
            pending: None,
        }
    }
}

/// The read connection's slot.
pub(super) type ReaderSlot = ConnSlot<ReaderConn>;

/// The read connection's prepared statements.
pub(super) struct ReaderConn {
    pub(super) client: Client,
    pub(super) lookup: Statement,
    pub(super) replay: Statement,
    pub(super) last_seq: Statement,
    pub(super) orphans: Statement,
    pub(super) verify_frames: Statement,
    pub(super) verify_heads: Statement,
    pub(super) sessions_after: Statement,
    pub(super) sessions_first: Statement,
    pub(super) session_state: Statement,
    pub(super) purge_step: Statement,
    pub(super) drop_tombstones: Statement,
}

/// Prepares a connection's statements within the operation timeout.
pub(super) async fn prepare_within<C: Prepared>(
    op_timeout: Duration,
    client: Client,
    sql: &Sql,
) -> Result<C, StorageError> {
    tokio::time::timeout(op_timeout, C::prepare(client, sql))
        .await
        .map_err(|_| timed_out("preparing a connection", op_timeout))?
}

impl Prepared for ReaderConn {
    fn client(&self) -> &Client {
        &self.client
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
        let orphans = p(&sql.orphans).await?;
        let verify_frames = p(&sql.verify_frames).await?;
        let verify_heads = p(&sql.verify_heads).await?;
        let sessions_after = p(&sql.sessions_after).await?;
        let sessions_first = p(&sql.sessions_first).await?;
        let session_state = p(&sql.session_state).await?;
        let purge_step = p(&sql.purge_step).await?;
        let drop_tombstones = p(&sql.drop_tombstones).await?;
        Ok(Self {
            client,
            lookup,
            replay,
            last_seq,
            orphans,
            verify_frames,
            verify_heads,
            sessions_after,
            sessions_first,
            session_state,
            purge_step,
            drop_tombstones,
        })
    }
}

impl PgJournal {
    /// The connection in `slot`, opened if it broke or was never opened.
    /// Concurrent callers that find it broken share one reconnect (bounded by the
    /// connect and operation timeouts) and its outcome.
    pub(super) async fn connection<C: Prepared>(
        &self,
        slot: &std::sync::Mutex<ConnSlot<C>>,
    ) -> Result<Arc<C>, ReadFailure> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(ReadFailure::Closed);
        }
        // A schema found newer stays newer: nothing more is read.
        if let Some(found) = self.sql.guard.newer() {
            return Err(ReadFailure::SchemaTooNew(found));
        }
        let pending = {
            let mut slot = lock(slot);
            if let Some(conn) = slot.current.as_ref().filter(|c| !c.client().is_closed()) {
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
                    .map_err(|e| ReadFailure::Storage(e.into_storage()))?;
                // Every reconnect checks the schema version first: a newer build
                // may have migrated it since this journal connected.
                match tokio::time::timeout(self.op_timeout, self.sql.guard.check(&client)).await {
                    Err(_) => {
                        return Err(ReadFailure::Storage(timed_out(
                            "schema check",
                            self.op_timeout,
                        )));
                    }
                    Ok(Err(VersionCheck::TooNew(found))) => {
                        return Err(ReadFailure::SchemaTooNew(found));
                    }
                    Ok(Err(VersionCheck::Failed(e))) => return Err(ReadFailure::Storage(e)),
                    Ok(Ok(())) => {}
                }
                prepare_within::<C>(self.op_timeout, client, &self.sql)
                    .await
                    .map(Arc::new)
                    .map_err(ReadFailure::Storage)
            })
            .await
            .clone();
        let mut slot = lock(slot);
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
        result
    }

    /// Runs one statement on the read connection within the operation timeout. On
    /// expiry the connection is dropped (the next call reconnects).
    pub(super) async fn read<T, F, Fut>(&self, op: &'static str, f: F) -> Result<T, ReadFailure>
    where
        F: FnOnce(Arc<ReaderConn>) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        self.run_on(&self.reader, &self.read_statements, op, f)
            .await
    }

    /// Runs one statement on the connection in `slot` within the operation timeout,
    /// counting it in `sent` once the connection is there. On expiry the connection
    /// is dropped (the next call reconnects).
    pub(super) async fn run_on<C, T, F, Fut>(
        &self,
        slot: &std::sync::Mutex<ConnSlot<C>>,
        sent: &std::sync::atomic::AtomicU64,
        op: &'static str,
        f: F,
    ) -> Result<T, ReadFailure>
    where
        C: Prepared,
        F: FnOnce(Arc<C>) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let conn = self.connection(slot).await?;
        sent.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout(self.op_timeout, f(Arc::clone(&conn))).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(ReadFailure::Storage(sanitize(op, &e))),
            Err(_) => {
                let mut slot = lock(slot);
                if slot.current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &conn)) {
                    slot.current = None;
                }
                Err(ReadFailure::Storage(timed_out(op, self.op_timeout)))
            }
        }
    }
}

/// Why the read connection is not available.
#[derive(Clone)]
pub(super) enum ReadFailure {
    Closed,
    Storage(StorageError),
    /// The schema is at this newer version (a newer build migrated it).
    SchemaTooNew(u32),
}

impl From<ReadFailure> for JournalError {
    fn from(f: ReadFailure) -> Self {
        match f {
            ReadFailure::Closed => Self::Closed,
            ReadFailure::Storage(e) => Self::Storage(e),
            ReadFailure::SchemaTooNew(found) => Self::SchemaTooNew {
                found,
                supported: PG_SCHEMA_VERSION,
            },
        }
    }
}

impl From<ReadFailure> for LeaseError {
    fn from(f: ReadFailure) -> Self {
        match f {
            ReadFailure::Closed => Self::Closed,
            ReadFailure::Storage(e) => Self::Storage(e),
            ReadFailure::SchemaTooNew(found) => Self::SchemaTooNew {
                found,
                supported: PG_SCHEMA_VERSION,
            },
        }
    }
}
