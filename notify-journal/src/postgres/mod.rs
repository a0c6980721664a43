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
//!   lease checks holder, epoch and expiry after the session row lock is granted,
//!   in the same transaction that would write the frame: a writer whose lease expired or was
//!   taken over gets [`AppendError::Fenced`] and writes nothing, and stays fenced
//!   until it acquires a new lease (or releases the lost one). Without a lease of
//!   its own, [`LeasePolicy`] decides.
//! * **No secrets in errors.** The connection string is parsed once and never
//!   echoed; driver errors become a [`StorageError`] holding the operation and the
//!   SQLSTATE only. Values are always bind parameters.
//! * **Bounded waits.** Every database operation (batch, read, lease statement,
//!   connect-time migration) is bounded by [`PgOptions::operation_timeout`]; a
//!   connection that timed out is dropped and replaced, so a partition yields
//!   typed errors, never a hang.
//! * TLS is not supported yet (`NoTls`): use it on a trusted network or a local
//!   socket / tunnel.

mod connect;
mod error;
mod options;
mod schema;
mod writer;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use notify_types::{JournalRecord, SessionId, Uuid};
use tokio::sync::{OnceCell, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_postgres::{Client, Row, Statement};

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

/// How many times `acquire_lease` retries when the lease it found held was freed
/// before it could be reported.
const ACQUIRE_ATTEMPTS: usize = 3;

/// A reconnect of the read connection, shared by every caller that needs it.
type PendingReader = Arc<OnceCell<Result<Arc<ReaderConn>, StorageError>>>;

/// The read connection, and the reconnect in progress if it broke.
#[derive(Default)]
struct ReaderSlot {
    current: Option<Arc<ReaderConn>>,
    pending: Option<PendingReader>,
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
    async fn prepare_within(
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
/// failure before it is [`AppendError::Storage`] (nothing written). A batch that
/// takes longer than [`PgOptions::operation_timeout`] fails the same way (by
/// whether `COMMIT` had been sent). Batches run at `READ COMMITTED` whatever the
/// server's default; one that hits a serialization failure or deadlock (nothing
/// written) is retried a few times by the writer. After any other failure the next
/// batch uses a fresh connection: a PostgreSQL transaction that did not commit
/// leaves nothing behind, so a failed batch never poisons the journal. Only a
/// crashed writer task does: later appends get [`AppendError::Poisoned`].
///
/// # Leases
///
/// * [`acquire_lease`](Self::acquire_lease): free, released or expired -> new epoch
///   (last + 1); already ours and live -> extended, same epoch; another writer's live
///   lease -> [`LeaseError::Held`].
/// * [`renew_lease`](Self::renew_lease): extends our live lease, same epoch; an
///   expired or taken-over lease cannot be renewed ([`LeaseError::Lost`]).
/// * [`release_lease`](Self::release_lease): frees it; the epoch stays, so the next
///   holder's is higher. Releasing a lease that was already lost is
///   [`LeaseError::Lost`].
/// * Expiry is judged by the database's clock (`clock_timestamp()`), never ours,
///   and only once the session row lock is held: a writer whose lease expired while
///   it waited for the row is fenced (or, renewing, has lost it).
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
/// lease statements (pipelined), both at `READ COMMITTED` and with `lock_timeout`
/// set to the operation timeout. A broken connection is not retried within the call
/// that meets it: that call fails with a retryable storage error, and the next call
/// opens a fresh connection (concurrent callers share one reconnect). An operation
/// that exceeds [`PgOptions::operation_timeout`] drops its connection the same way.
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
    /// Bounds every read, lease statement and reconnect preparation.
    op_timeout: Duration,
    sql: Arc<Sql>,
    connector: Arc<Connector>,
    /// The read connection (never locked across an await).
    reader: Mutex<ReaderSlot>,
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

fn timed_out(op: &str, after: Duration) -> StorageError {
    StorageError::msg(format!("postgres: {op} timed out after {after:?}"))
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
    /// storage failure while migrating (including a schema check or migration,
    /// or the wait for another opener's migration lock, exceeding the operation
    /// timeout). Never waits longer than two connect timeouts plus three
    /// operation timeouts.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the connection; a migration in progress rolls
    /// back.
    pub async fn connect(conninfo: &str, options: PgOptions) -> Result<Self, PgOpenError> {
        options.check()?;
        let op_timeout = options.operation_timeout;
        let connector = Arc::new(Connector::new(
            conninfo,
            options.connect_timeout,
            op_timeout,
        )?);
        let sql = Arc::new(Sql::new(&options.schema));

        let mut write_client = connector
            .connect()
            .await
            .map_err(connect::ConnectFailure::into_open_error)?;
        // `lock_timeout` (set on the connection) bounds the migration lock wait; this
        // bounds everything else.
        tokio::time::timeout(
            op_timeout,
            schema::migrate(&mut write_client, &options.schema, options.migration),
        )
        .await
        .map_err(|_| PgOpenError::Storage(timed_out("schema check or migration", op_timeout)))??;
        let read_client = connector
            .connect()
            .await
            .map_err(connect::ConnectFailure::into_open_error)?;
        let reader = ReaderConn::prepare_within(op_timeout, read_client, &sql)
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
            op_timeout,
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
            op_timeout,
            sql,
            connector,
            reader: Mutex::new(ReaderSlot {
                current: Some(Arc::new(reader)),
                pending: None,
            }),
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
    /// answered, and closes both connections. Later calls get `Closed` errors. Each
    /// batch still queued is bounded by the operation timeout, so this returns even
    /// when the database stopped answering.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the journal is closed from the first poll; dropping the future
    /// only skips waiting for the writer to finish.
    pub async fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        drop(lock(&self.queue).take());
        let task = lock(&self.writer).take();
        if let Some(task) = task
            && let Err(e) = task.await
        {
            // A writer that failed to join has nothing left to answer.
            tracing::error!(error = %e, "journal writer task failed");
        }
        let mut slot = lock(&self.reader);
        slot.current = None;
        slot.pending = None;
    }

    /// The read connection, reopened if it broke. Concurrent callers that find it
    /// broken share one reconnect (bounded by the connect and operation timeouts)
    /// and its outcome.
    async fn reader(&self) -> Result<Arc<ReaderConn>, ReadFailure> {
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
    async fn read<T, F, Fut>(&self, op: &'static str, f: F) -> Result<T, ReadFailure>
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

    /// Acquires this journal's lease on `session` for the configured lease duration.
    ///
    /// A free, released or expired lease is taken with a new epoch (one more than
    /// the last one handed out); a live lease this journal already holds is extended
    /// under its current epoch. Appends made from now on check the lease.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Held`] if another writer holds a live lease. Its epoch is read
    /// by a second statement right after the refused one; should the lease be freed
    /// in between, acquiring is retried (three times); if the lease keeps changing
    /// hands that fast, `Held` may report one that is no longer live: retry. [`LeaseError::Storage`] (also after the operation
    /// timeout; retrying is safe) or [`LeaseError::Closed`].
    ///
    /// # Cancel safety
    ///
    /// If dropped, the lease may have been taken in the database without this
    /// journal knowing; acquiring again returns it.
    pub async fn acquire_lease(&self, session: SessionId) -> Result<PgLease, LeaseError> {
        let s = *session.as_uuid();
        let (holder, lease_ms) = (self.holder, self.lease_ms);
        let mut held = 0;
        for _ in 0..ACQUIRE_ATTEMPTS {
            let row = self
                .read("acquire lease", |c| async move {
                    c.client
                        .query_opt(&c.acquire, &[&s, &holder, &lease_ms])
                        .await
                })
                .await?;
            if let Some(row) = row {
                let epoch = row
                    .try_get::<_, i64>(0)
                    .map_err(|e| LeaseError::Storage(sanitize("acquire lease", &e)))
                    .and_then(|v| seq_u64(v).map_err(LeaseError::Storage))?;
                lock(&self.leases).insert(session, epoch);
                return Ok(PgLease { session, epoch });
            }
            let info = self.lease_info(session).await?;
            held = info.epoch;
            if info.live {
                break;
            }
        }
        Err(LeaseError::Held {
            session,
            epoch: held,
        })
    }

    /// Extends this journal's live lease on `session` by the lease duration, under
    /// the same epoch.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Lost`] if this journal holds no lease on the session, or it
    /// expired (judged once the session row lock is held) or was taken over
    /// (appends stay fenced: acquire a new lease); [`LeaseError::Storage`] (also
    /// after the operation timeout; retrying is safe) or [`LeaseError::Closed`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the lease is either extended or not.
    pub async fn renew_lease(&self, session: SessionId) -> Result<PgLease, LeaseError> {
        let Some(epoch) = lock(&self.leases).get(&session).copied() else {
            return Err(LeaseError::Lost { session });
        };
        let epoch_i = i64::try_from(epoch).map_err(|_| LeaseError::Lost { session })?;
        let s = *session.as_uuid();
        let (holder, lease_ms) = (self.holder, self.lease_ms);
        let row = self
            .read("renew lease", |c| async move {
                c.client
                    .query_opt(&c.renew, &[&s, &holder, &epoch_i, &lease_ms])
                    .await
            })
            .await?;
        let renewed_by = match row {
            Some(row) => row
                .try_get::<_, Option<Uuid>>(0)
                .map_err(|e| LeaseError::Storage(sanitize("renew lease", &e)))?,
            None => None,
        };
        if renewed_by == Some(self.holder) {
            Ok(PgLease { session, epoch })
        } else {
            Err(LeaseError::Lost { session })
        }
    }

    /// Gives up this journal's lease on `session` and stops checking it: later
    /// appends behave as if it had never been acquired. The epoch is kept, so the
    /// next lease on the session has a higher one. Releasing when this journal holds
    /// no lease on the session is not an error.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Lost`] if the lease had already been taken over (a higher epoch,
    /// or another holder): every append made since it was lost was fenced. A release
    /// retried after an earlier attempt committed unseen is not an error. The lease is
    /// forgotten all the same (appends no longer check it), as the caller asked.
    /// An expired lease nobody took over is released normally.
    /// [`LeaseError::Storage`] (also after the operation timeout; the lease is still
    /// considered held; retry) or [`LeaseError::Closed`].
    ///
    /// # Cancel safety
    ///
    /// If dropped, the lease may or may not be released; it expires anyway.
    pub async fn release_lease(&self, session: SessionId) -> Result<(), LeaseError> {
        let Some(epoch) = lock(&self.leases).get(&session).copied() else {
            return Ok(());
        };
        let forget = || {
            let mut leases = lock(&self.leases);
            if leases.get(&session) == Some(&epoch) {
                leases.remove(&session);
            }
        };
        let Ok(epoch_i) = i64::try_from(epoch) else {
            forget();
            return Err(LeaseError::Lost { session });
        };
        let s = *session.as_uuid();
        let holder = self.holder;
        let released = self
            .read("release lease", |c| async move {
                c.client.execute(&c.release, &[&s, &holder, &epoch_i]).await
            })
            .await?;
        forget();
        if released == 0 {
            // A retried release whose first attempt did commit (its answer was lost to
            // a timeout or a broken connection) matches nothing either: the lease is
            // still at our epoch with no holder. Only a higher epoch, or another
            // holder, means it was lost.
            let info = self.lease_info(session).await?;
            if info.epoch == epoch && info.holder.is_none() {
                return Ok(());
            }
            return Err(LeaseError::Lost { session });
        }
        Ok(())
    }

    /// The session's lease as the database sees it now.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Storage`] (also after the operation timeout) or
    /// [`LeaseError::Closed`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    pub async fn lease_info(&self, session: SessionId) -> Result<PgLeaseInfo, LeaseError> {
        let s = *session.as_uuid();
        let row = self
            .read("read lease", |c| async move {
                c.client.query_opt(&c.lease_info, &[&s]).await
            })
            .await?;
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
        queue.send(req).await.map_err(|_| self.writer_gone())?;
        drop(queue);
        // The writer answers every request it took; if it vanished mid-batch the
        // outcome is unknown.
        answer.await.map_err(|_| {
            AppendError::CommitFailed(StorageError::msg("postgres: journal writer stopped"))
        })?
    }

    /// The error for an append the writer task can no longer take: `Closed` after
    /// [`close`](Self::close), else the task crashed and the journal is
    /// [`AppendError::Poisoned`] (reopen it).
    fn writer_gone(&self) -> AppendError {
        if self.closed.load(Ordering::SeqCst) {
            AppendError::Closed
        } else {
            tracing::error!("journal writer task ended unexpectedly");
            AppendError::Poisoned
        }
    }

    async fn lookup_inner(
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

    async fn last_seq_inner(&self, session: SessionId) -> Result<u64, JournalError> {
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

    async fn sessions_inner(&self) -> Result<Vec<SessionId>, JournalError> {
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
