//! The PostgreSQL journal backend (cargo feature `postgres`), for deployments whose
//! sessions' journals must be reachable from several hosts.
//!
//! Same contract as every [`JournalBackend`]: per-session gap-free sequences from 1,
//! the idempotency index (duplicate -> original seq, different bytes or kind ->
//! collision), frame and index entry in one transaction, replay in order. Storage
//! layout and migrations: see `schema.rs`.
//!
//! * **Group commit.** One writer task owns a connection and commits every append
//!   queued meanwhile in one transaction (a lone append commits at once).
//! * **Many processes, one session.** Every append transaction locks its sessions'
//!   rows (`SELECT ... FOR UPDATE`) before reading `last_seq` and the index, so
//!   writers on any host are totally ordered, sequences stay gap-free, and a retry
//!   from another host finds the first host's frame and deduplicates.
//! * **Fencing.** A writer may hold an epoch lease per session
//!   ([`PgJournal::acquire_lease`], [`renew_lease`](PgJournal::renew_lease),
//!   [`release_lease`](PgJournal::release_lease)). Leases live in the `sessions`
//!   row, expire by the database's clock and survive connection turnover (no
//!   advisory locks); epochs only grow. An append made while this journal holds a
//!   lease checks holder, epoch and expiry under the same row lock, in the same
//!   transaction that would write the frame: a writer whose lease expired or was
//!   taken over gets [`AppendError::Fenced`] and writes nothing, and stays fenced
//!   until it acquires a new lease (or releases the lost one). Without a lease of
//!   its own, [`LeasePolicy`] decides.
//! * **No secrets in errors.** The connection string is parsed once and never
//!   echoed; driver errors become a [`StorageError`] holding the operation and the
//!   SQLSTATE only. Values are always bind parameters.
//! * TLS is not supported yet (`NoTls`): use it on a trusted network or a local
//!   socket / tunnel.

mod connect;
mod error;
mod options;
mod schema;
mod writer;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use notify_types::{JournalRecord, SessionId, Uuid};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_postgres::{Client, Statement};

pub use error::{LeaseError, PgOpenError};
pub use options::{LeasePolicy, MigrationMode, PgOptions};
pub use schema::PG_SCHEMA_VERSION;

use connect::Connector;
use error::sanitize;
use schema::Sql;
use writer::{AppendReq, Writer};

use crate::backend::{AppendOutcome, BoxFuture, Frame, JournalBackend};
use crate::error::{AppendError, JournalError, StorageError};

/// How many appends may wait for the writer before `append` waits for room.
const QUEUE: usize = 8192;

/// A lease this journal holds on a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PgLease {
    session: SessionId,
    epoch: u64,
}

impl PgLease {
    /// The leased session.
    #[must_use]
    pub fn session(&self) -> SessionId {
        self.session
    }

    /// The lease's epoch: it grows by one each time the lease changes hands or is
    /// acquired again after expiring or being released.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
}

/// A session's lease as the database sees it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PgLeaseInfo {
    epoch: u64,
    holder: Option<Uuid>,
    live: bool,
}

impl PgLeaseInfo {
    /// The latest epoch handed out (0: never leased).
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The holder's identity ([`PgJournal::holder_id`]), if the lease has not been
    /// released (it may have expired).
    #[must_use]
    pub fn holder(&self) -> Option<Uuid> {
        self.holder
    }

    /// Whether the lease is held and unexpired by the database's clock.
    #[must_use]
    pub fn is_live(&self) -> bool {
        self.live
    }
}

/// The read connection's prepared statements.
struct ReaderConn {
    client: Client,
    lookup: Statement,
    replay: Statement,
    last_seq: Statement,
    sessions: Statement,
    acquire: Statement,
    renew: Statement,
    release: Statement,
    lease_info: Statement,
}

impl ReaderConn {
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

/// A journal stored in PostgreSQL. Implements [`JournalBackend`].
///
/// # Storage
///
/// Tables in one PostgreSQL schema ([`PgOptions::schema`], default `notify_journal`),
/// at version [`PG_SCHEMA_VERSION`] (recorded in `schema_version`; migrations run on
/// connect under a transaction-scoped advisory lock, or are only validated):
///
/// * `sessions(session uuid PK, last_seq, lease_epoch, lease_holder, lease_expires_at)`;
/// * `frames(session, seq, key, kind, bytes, committed_at)`, primary key
///   `(session, seq)`, unique `(session, key)`: the idempotency index.
///
/// A batch locks its sessions' rows, checks leases, resolves keys, inserts frames
/// and advances `last_seq` in one transaction. An append resolves after `COMMIT`
/// returns, so it is as durable as the server's `synchronous_commit` makes it
/// (durable with the default `on`). A failed `COMMIT` is
/// [`AppendError::CommitFailed`] (outcome unknown; retry with the same record); a
/// failure before it is [`AppendError::Storage`] (nothing written). Either way the
/// next batch uses a fresh connection if the old one broke: a PostgreSQL
/// transaction that did not commit leaves nothing behind, so the journal is never
/// poisoned.
///
/// # Leases
///
/// * [`acquire_lease`](Self::acquire_lease): free, released or expired -> new epoch
///   (last + 1); already ours and live -> extended, same epoch; another writer's live
///   lease -> [`LeaseError::Held`].
/// * [`renew_lease`](Self::renew_lease): extends our live lease, same epoch; an
///   expired or taken-over lease cannot be renewed ([`LeaseError::Lost`]).
/// * [`release_lease`](Self::release_lease): frees it; the epoch stays, so the next
///   holder's is higher.
/// * Expiry is judged by the database's clock (`clock_timestamp()`), never ours.
/// * Appends to a session on which this journal acquired a lease check holder, epoch
///   and expiry under the session row lock, in the transaction that writes the
///   frame; if the lease is gone they are [`AppendError::Fenced`] and write nothing,
///   and stay fenced until the lease is acquired again or released.
/// * Appends to a session on which this journal holds no lease follow
///   [`LeasePolicy`]: by default they are allowed unless another writer holds a live
///   lease (then `Fenced`), so many processes can share a session; with
///   [`LeasePolicy::Required`] they are refused.
///
/// # Testing
///
/// The crate's PostgreSQL tests, the testkit's conformance run and the bench read the
/// connection string from `NOTIFY_TEST_DATABASE_URL` (CI default:
/// `host=127.0.0.1 port=5432 user=postgres dbname=test`); the library itself reads
/// no environment.
///
/// # Connections
///
/// Uses two connections: the group-commit writer's and a shared one for reads and
/// lease statements (pipelined). Either is reopened transparently after it breaks.
/// Must be created and used inside a tokio runtime.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use notify_journal::{JournalBackend, PgJournal, PgOptions};
/// use notify_types::SessionId;
///
/// let journal = PgJournal::connect("host=db.internal user=notify dbname=notify", PgOptions::default()).await?;
/// let session = SessionId::new();
/// let lease = journal.acquire_lease(session).await?; // optional: fences stale writers
/// assert!(journal.last_seq(session).await? == 0 && lease.epoch() >= 1);
/// journal.close().await;
/// # Ok(()) }
/// ```
pub struct PgJournal {
    /// Identifies this journal as a lease holder (fresh per `connect`).
    holder: Uuid,
    policy: LeasePolicy,
    max_record_bytes: usize,
    /// Lease duration in milliseconds, as bound to the lease statements.
    lease_ms: f64,
    sql: Arc<Sql>,
    connector: Arc<Connector>,
    /// The read connection; a tokio mutex because reconnecting awaits under it.
    reader: tokio::sync::Mutex<Option<Arc<ReaderConn>>>,
    /// The writer's queue; `None` once closed.
    queue: Mutex<Option<mpsc::Sender<AppendReq>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// Epoch of every lease this journal acquired and has not released. An entry
    /// outlives the lease itself: a lost lease keeps fencing appends until the
    /// caller acquires anew or releases it.
    leases: Mutex<HashMap<SessionId, u64>>,
    closed: AtomicBool,
}

impl std::fmt::Debug for PgJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgJournal")
            .field("holder", &self.holder)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded maps stay consistent even if a holder panicked.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn seq_u64(v: i64) -> Result<u64, StorageError> {
    u64::try_from(v).map_err(|_| StorageError::msg("postgres: negative sequence or epoch"))
}

impl PgJournal {
    /// Connects to the server described by `conninfo` (a libpq-style key/value string
    /// or a `postgresql://` URL), applies or validates the schema (see
    /// [`MigrationMode`]) and starts the group-commit writer.
    ///
    /// # Errors
    ///
    /// [`PgOpenError`]: a bad connection string or option, an unreachable server
    /// (after at most the connect timeout), a schema newer than
    /// [`PG_SCHEMA_VERSION`], an outdated schema in validate-only mode, or a
    /// storage failure while migrating.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the connection; a migration in progress rolls
    /// back.
    pub async fn connect(conninfo: &str, options: PgOptions) -> Result<Self, PgOpenError> {
        options.check()?;
        let connector = Arc::new(Connector::new(conninfo, options.connect_timeout)?);
        let sql = Arc::new(Sql::new(&options.schema));

        let mut write_client = connector
            .connect()
            .await
            .map_err(connect::ConnectFailure::into_open_error)?;
        schema::migrate(&mut write_client, &options.schema, options.migration).await?;
        let read_client = connector
            .connect()
            .await
            .map_err(connect::ConnectFailure::into_open_error)?;
        let reader = ReaderConn::prepare(read_client, &sql)
            .await
            .map_err(PgOpenError::Storage)?;

        let holder = Uuid::now_v7();
        let writer = Writer::new(
            Arc::clone(&connector),
            Arc::clone(&sql),
            holder,
            options.max_batch,
            // At least the lease, so a stall long enough to lose the lease also
            // frees the rows; never below 5 s, so a busy host is not aborted.
            u64::try_from(
                options
                    .lease_duration
                    .max(Duration::from_secs(5))
                    .as_millis(),
            )
            .unwrap_or(u64::MAX),
            write_client,
        )
        .await
        .map_err(PgOpenError::Storage)?;
        let (tx, rx) = mpsc::channel(QUEUE);
        let task = tokio::spawn(writer.run(rx));

        Ok(Self {
            holder,
            policy: options.lease_policy,
            max_record_bytes: options.max_record_bytes,
            lease_ms: options.lease_duration.as_secs_f64() * 1000.0,
            sql,
            connector,
            reader: tokio::sync::Mutex::new(Some(Arc::new(reader))),
            queue: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(task)),
            leases: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
        })
    }

    /// This journal's identity as a lease holder (fresh for every `connect`).
    #[must_use]
    pub fn holder_id(&self) -> Uuid {
        self.holder
    }

    /// The largest encoded record this journal accepts (see
    /// [`PgOptions::max_record_bytes`]).
    #[must_use]
    pub fn max_record_bytes(&self) -> usize {
        self.max_record_bytes
    }

    /// Stops accepting appends, waits until every append already queued has been
    /// answered, and closes both connections. Later calls get `Closed` errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the journal is closed from the first poll; dropping the future
    /// only skips waiting for the writer to finish.
    pub async fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        drop(lock(&self.queue).take());
        let task = lock(&self.writer).take();
        if let Some(task) = task {
            // A writer that failed to join has nothing left to answer.
            let _ = task.await;
        }
        *self.reader.lock().await = None;
    }

    /// The read connection, reopened if it broke.
    async fn reader(&self) -> Result<Arc<ReaderConn>, ReadFailure> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(ReadFailure::Closed);
        }
        let mut guard = self.reader.lock().await;
        if let Some(conn) = guard.as_ref().filter(|c| !c.client.is_closed()) {
            return Ok(Arc::clone(conn));
        }
        let client = self
            .connector
            .connect()
            .await
            .map_err(|e| ReadFailure::Storage(e.into_storage()))?;
        let conn = Arc::new(
            ReaderConn::prepare(client, &self.sql)
                .await
                .map_err(ReadFailure::Storage)?,
        );
        *guard = Some(Arc::clone(&conn));
        Ok(conn)
    }

    /// Acquires this journal's lease on `session` for the configured lease duration.
    ///
    /// A free, released or expired lease is taken with a new epoch (one more than
    /// the last one handed out); a live lease this journal already holds is extended
    /// under its current epoch. Appends made from now on check the lease.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Held`] if another writer holds a live lease;
    /// [`LeaseError::Storage`] (retrying is safe) or [`LeaseError::Closed`].
    ///
    /// # Cancel safety
    ///
    /// If dropped, the lease may have been taken in the database without this
    /// journal knowing; acquiring again returns it.
    pub async fn acquire_lease(&self, session: SessionId) -> Result<PgLease, LeaseError> {
        let conn = self.reader().await?;
        let row = conn
            .client
            .query_opt(
                &conn.acquire,
                &[session.as_uuid(), &self.holder, &self.lease_ms],
            )
            .await
            .map_err(|e| LeaseError::Storage(sanitize("acquire lease", &e)))?;
        match row {
            Some(row) => {
                let epoch = row
                    .try_get::<_, i64>(0)
                    .map_err(|e| LeaseError::Storage(sanitize("acquire lease", &e)))
                    .and_then(|v| seq_u64(v).map_err(LeaseError::Storage))?;
                lock(&self.leases).insert(session, epoch);
                Ok(PgLease { session, epoch })
            }
            None => {
                let info = self.lease_info(session).await?;
                Err(LeaseError::Held {
                    session,
                    epoch: info.epoch,
                })
            }
        }
    }

    /// Extends this journal's live lease on `session` by the lease duration, under
    /// the same epoch.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Lost`] if this journal holds no lease on the session, or it
    /// expired or was taken over (appends stay fenced: acquire a new lease);
    /// [`LeaseError::Storage`] (retrying is safe) or [`LeaseError::Closed`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the lease is either extended or not.
    pub async fn renew_lease(&self, session: SessionId) -> Result<PgLease, LeaseError> {
        let Some(epoch) = lock(&self.leases).get(&session).copied() else {
            return Err(LeaseError::Lost { session });
        };
        let conn = self.reader().await?;
        let epoch_i = i64::try_from(epoch).map_err(|_| LeaseError::Lost { session })?;
        let row = conn
            .client
            .query_opt(
                &conn.renew,
                &[session.as_uuid(), &self.holder, &epoch_i, &self.lease_ms],
            )
            .await
            .map_err(|e| LeaseError::Storage(sanitize("renew lease", &e)))?;
        match row {
            Some(_) => Ok(PgLease { session, epoch }),
            None => Err(LeaseError::Lost { session }),
        }
    }

    /// Gives up this journal's lease on `session` (if it still holds it) and stops
    /// checking it: later appends behave as if it had never been acquired. The
    /// epoch is kept, so the next lease on the session has a higher one. Releasing a
    /// lease that is not held is not an error.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Storage`] (the lease is still considered held; retry) or
    /// [`LeaseError::Closed`].
    ///
    /// # Cancel safety
    ///
    /// If dropped, the lease may or may not be released; it expires anyway.
    pub async fn release_lease(&self, session: SessionId) -> Result<(), LeaseError> {
        let Some(epoch) = lock(&self.leases).get(&session).copied() else {
            return Ok(());
        };
        let conn = self.reader().await?;
        let epoch_i = i64::try_from(epoch).map_err(|_| LeaseError::Lost { session })?;
        conn.client
            .execute(&conn.release, &[session.as_uuid(), &self.holder, &epoch_i])
            .await
            .map_err(|e| LeaseError::Storage(sanitize("release lease", &e)))?;
        let mut leases = lock(&self.leases);
        if leases.get(&session) == Some(&epoch) {
            leases.remove(&session);
        }
        Ok(())
    }

    /// The session's lease as the database sees it now.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Storage`] or [`LeaseError::Closed`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    pub async fn lease_info(&self, session: SessionId) -> Result<PgLeaseInfo, LeaseError> {
        let conn = self.reader().await?;
        let row = conn
            .client
            .query_opt(&conn.lease_info, &[session.as_uuid()])
            .await
            .map_err(|e| LeaseError::Storage(sanitize("read lease", &e)))?;
        let Some(row) = row else {
            return Ok(PgLeaseInfo {
                epoch: 0,
                holder: None,
                live: false,
            });
        };
        let read = || -> Result<(i64, Option<Uuid>, bool), tokio_postgres::Error> {
            Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
        };
        let (epoch, holder, live) =
            read().map_err(|e| LeaseError::Storage(sanitize("read lease", &e)))?;
        Ok(PgLeaseInfo {
            epoch: seq_u64(epoch).map_err(LeaseError::Storage)?,
            holder,
            live,
        })
    }

    async fn append_inner(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> Result<AppendOutcome, AppendError> {
        let bytes = crate::encode_for_append(session, &record, self.max_record_bytes)?;
        let epoch = lock(&self.leases).get(&session).copied();
        if epoch.is_none() && self.policy == LeasePolicy::Required {
            return Err(AppendError::Fenced { session });
        }
        let Some(queue) = lock(&self.queue).clone() else {
            return Err(AppendError::Closed);
        };
        let (reply, answer) = oneshot::channel();
        let req = AppendReq {
            session: *session.as_uuid(),
            key: record.key(),
            kind: record.type_name(),
            bytes,
            epoch,
            reply,
        };
        queue.send(req).await.map_err(|_| AppendError::Closed)?;
        drop(queue);
        // The writer answers every request it took; if it vanished mid-batch the
        // outcome is unknown.
        answer.await.map_err(|_| {
            AppendError::CommitFailed(StorageError::msg("postgres: journal writer stopped"))
        })?
    }

    async fn lookup_inner(
        &self,
        session: SessionId,
        key: Uuid,
    ) -> Result<Option<u64>, JournalError> {
        let conn = self.reader().await?;
        let row = conn
            .client
            .query_opt(&conn.lookup, &[session.as_uuid(), &key])
            .await
            .map_err(|e| JournalError::Storage(sanitize("lookup", &e)))?;
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

    async fn replay_inner(
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
        let conn = self.reader().await?;
        let rows = conn
            .client
            .query(&conn.replay, &[session.as_uuid(), &from, &limit])
            .await
            .map_err(|e| JournalError::Storage(sanitize("replay", &e)))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let seq: i64 = row
                .try_get(0)
                .map_err(|e| JournalError::Storage(sanitize("replay", &e)))?;
            let seq = seq_u64(seq).map_err(JournalError::Storage)?;
            let bytes: &[u8] = row
                .try_get(1)
                .map_err(|e| JournalError::Storage(sanitize("replay", &e)))?;
            let record = JournalRecord::decode(bytes).map_err(|source| JournalError::Corrupt {
                session,
                seq,
                source,
            })?;
            out.push((seq, record));
        }
        Ok(out)
    }

    async fn last_seq_inner(&self, session: SessionId) -> Result<u64, JournalError> {
        let conn = self.reader().await?;
        let row = conn
            .client
            .query_opt(&conn.last_seq, &[session.as_uuid()])
            .await
            .map_err(|e| JournalError::Storage(sanitize("last seq", &e)))?;
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

    async fn sessions_inner(&self) -> Result<Vec<SessionId>, JournalError> {
        let conn = self.reader().await?;
        let rows = conn
            .client
            .query(&conn.sessions, &[])
            .await
            .map_err(|e| JournalError::Storage(sanitize("list sessions", &e)))?;
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
enum ReadFailure {
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

impl JournalBackend for PgJournal {
    fn append(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> BoxFuture<'_, Result<AppendOutcome, AppendError>> {
        Box::pin(self.append_inner(session, record))
    }

    fn lookup(
        &self,
        session: SessionId,
        key: Uuid,
    ) -> BoxFuture<'_, Result<Option<u64>, JournalError>> {
        Box::pin(self.lookup_inner(session, key))
    }

    fn replay(
        &self,
        session: SessionId,
        from_seq: u64,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<Frame>, JournalError>> {
        Box::pin(self.replay_inner(session, from_seq, limit))
    }

    fn last_seq(&self, session: SessionId) -> BoxFuture<'_, Result<u64, JournalError>> {
        Box::pin(self.last_seq_inner(session))
    }

    fn sessions(&self) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>> {
        Box::pin(self.sessions_inner())
    }
}
