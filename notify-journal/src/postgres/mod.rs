//! The PostgreSQL journal backend (cargo feature `postgres`), for deployments whose
//! sessions' journals must be reachable from several hosts.
//!
//! Same contract as every [`JournalBackend`]: per-session gap-free sequences from 1,
//! the idempotency index (duplicate -> original seq, different bytes or kind ->
//! collision), frame and index entry in one transaction, replay in order. Where
//! things are (one concern per file; the code map in `docs/postgres.md`):
//!
//! * this file: the public facade, [`PgJournal`] and its [`JournalBackend`] impl;
//!   `open.rs`: connect (options, migration, connections, writers), accessors,
//!   close; `append.rs`: the append path into the writers' queue;
//! * `writer/`: the group-commit writers (queue, gathering, commit and retries,
//!   the batch statement, atomic groups, failure classification);
//! * `read_conn.rs`: the shared read connection; `reads.rs`: lookup, replay,
//!   `last_seq`, the listing; `verify.rs`: the deep check; `frame.rs`: a stored
//!   frame's checksum and decoding, shared by reads, verify and the writer;
//! * `schema.rs` (tables, [`MigrationMode`], applying migrations), `migrations/`
//!   (the DDL, one numbered `.sql` file per version), `version.rs` (the version and the reconnect check), `sql.rs` (every
//!   statement), `schema_name.rs` (the schema's name, checked and quoted);
//! * `lease/`: leases (acquire and release, renewal, reads, their connections, the
//!   `LISTEN` for lease changes); `retention.rs`: session end, purge, tombstones, imported
//!   states; `stats.rs`: counts and compaction;
//! * `connect.rs`: opening connections ([`PgConnector`], the same for a companion
//!   component); `tls/`: TLS settings, conninfo keys, the
//!   mode in force, the rustls config, verifiers, refusals; `passfile.rs`:
//!   passwords; `options.rs`: [`PgOptions`]; `error.rs`: errors and sanitizing.
//!
//! * **Group commit.** Writer tasks ([`PgOptions::writers`], each with its own
//!   connection and channel) each commit, as one batch, everything queued on their
//!   channel while their last batch was in flight (a lone append commits at once).
//!   A session's appends in flight all go to the same writer (a session with none
//!   goes to the least busy writer), so the journal's own
//!   batches never wait for each other's session row locks; writers of different
//!   sessions commit in parallel.
//! * **Many processes, one session.** Every append transaction locks its sessions'
//!   rows (`SELECT ... FOR UPDATE`), then their lease rows (`FOR KEY SHARE`), before
//!   reading `last_seq` and the index, so writers on any host are totally ordered,
//!   sequences stay gap-free, and a retry from another host finds the first host's
//!   frame and deduplicates.
//! * **Fencing.** A writer may hold an epoch lease per session
//!   ([`PgJournal::acquire_lease`], [`renew_lease`](PgJournal::renew_lease),
//!   [`release_lease`](PgJournal::release_lease)). Leases live in a table of
//!   their own (`leases`, one row per session), expire by the database's clock and
//!   survive connection turnover (no advisory locks); epochs only grow. An append
//!   made while this journal holds a lease checks holder, epoch and expiry once it
//!   holds the session row and the lease row (`FOR KEY SHARE`: renewals go on
//!   beside it, a takeover waits for it), in the same transaction that would write
//!   the frame: a writer whose lease expired or was taken over gets
//!   [`AppendError::Fenced`] and writes nothing, and stays fenced until it acquires
//!   a new lease (fencing is sticky: releasing the lost lease does not lift it).
//!   Without a lease of its own, [`LeasePolicy`] decides.
//! * **No secrets in errors.** The connection string is parsed once and never
//!   echoed; driver errors become a [`StorageError`] holding the operation and the
//!   SQLSTATE only. Values are always bind parameters.
//! * **Bounded waits.** Every database operation (batch, read, lease statement,
//!   schema version check) is bounded by [`PgOptions::operation_timeout`]; a
//!   connection that timed out is dropped and replaced, so a partition yields
//!   typed errors, never a hang. A migration at connect is bounded by
//!   [`PgOptions::migration_timeout`] instead (default: none), so a large
//!   journal's migration completes.
//! * **Rolling upgrades.** Every reconnect checks the schema version; a schema a
//!   newer build migrated is refused with typed errors naming both versions
//!   ([`AppendError::SchemaTooNew`], [`JournalError::SchemaTooNew`],
//!   [`LeaseError::SchemaTooNew`](crate::LeaseError::SchemaTooNew), [`PgOpenError::SchemaTooNew`]), and an append
//!   answered with a status only a newer schema defines is `SchemaTooNew` with its
//!   outcome unknown, alone in its batch. See `docs/postgres.md`.
//! * **TLS** through rustls with libpq's modes ([`PgTls`], [`PgSslMode`]): a
//!   remote host gets `verify-full` with the system's roots unless told otherwise;
//!   plain text is the default only for Unix sockets and loopback.
//! * **One round trip per batch**: the schema's `append_batch` function does the
//!   whole batch (lock, lease check, key resolution, inserts) as one statement
//!   whose implicit transaction commits before it answers. See
//!   `docs/postgres.md`.

mod ack_in_tx;
mod append;
mod append_with;
mod connect;
mod error;
mod frame;
mod lease;
mod migrations;
mod open;
mod options;
mod passfile;
mod read_conn;
mod reads;
mod retention;
mod schema;
mod schema_name;
mod sql;
mod stats;
mod status;
mod tls;
mod verify;
mod version;
mod writer;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use notify_types::{JournalRecord, SessionId, Timestamp, Uuid};
use tokio::task::JoinHandle;

pub use ack_in_tx::PgAppendStatement;
pub use append_with::{PgAppendWithError, PgAppendedWith};
pub use connect::PgConnector;
pub use error::{PgOpenError, PgTlsRefusal};
pub use options::{LeasePolicy, PgOptions};
pub use schema::MigrationMode;
pub use stats::{PgEstimate, PgStats};
pub use tls::{PgSslMode, PgTls};
pub use version::PG_SCHEMA_VERSION;

use connect::Connector;
use lease::{LeaseChangeConn, LeaseConn, Listener};
use read_conn::{ConnSlot, ReaderSlot};
use sql::Sql;

use crate::backend::{AppendOutcome, BoxFuture, JournalBackend, JournalRead, SeqRecord};
use crate::error::{AppendError, JournalError, StorageError};
#[cfg(doc)]
use crate::lease::LeaseError;
use crate::retention::{PurgeStep, SessionState};

/// A journal stored in PostgreSQL. Implements [`JournalBackend`].
///
/// # Storage
///
/// Tables in one PostgreSQL schema ([`PgOptions::schema`], default `notify_journal`),
/// at version [`PG_SCHEMA_VERSION`] (recorded in `schema_version`; migrations run on
/// connect under an advisory lock held while migrating, or are only validated):
///
/// * `sessions(session uuid PK, last_seq, ended_at, purged_at, purge_done)`: a
///   session's head and life; once its purge began, its tombstone;
/// * `leases(session uuid PK, epoch, holder, expires_at, holder_url, ended)`: a
///   session's lease, in a row of its own so that renewing it never waits for the
///   session's appends;
/// * `frames(session, seq, key, kind, bytes, checksum, committed_at)`, primary key
///   `(session, seq)`, unique `(session, key)`: the idempotency index.
///
/// A batch locks its sessions' rows and their lease rows, checks leases, resolves keys, inserts frames
/// and advances `last_seq` in one transaction: one call of the schema's
/// `append_batch` function, sent as one statement (one round trip) whose implicit
/// transaction commits before the server answers. An append resolves after that
/// commit, so it is as durable as the server's `synchronous_commit` makes it
/// (durable with the default `on`). A batch that was sent but got no usable answer
/// (lost connection, terminated backend, [`PgOptions::operation_timeout`] exceeded)
/// is [`AppendError::CommitFailed`] (outcome unknown; retry with the same record),
/// whether or not it would have written anything; a batch that was never sent, or
/// that the server refused with an error while running it (rolled back), is
/// [`AppendError::Storage`] (nothing written). Batches run at `READ COMMITTED`
/// whatever the server's default; one that hits a serialization failure or deadlock
/// (nothing written) is retried a few times by the writer. After any other failure the next
/// batch uses a fresh connection: a PostgreSQL transaction that did not commit
/// leaves nothing behind, so a failed batch never poisons the journal. Only crashed
/// writer tasks do: a batch whose writer crashed is
/// [`AppendError::CommitFailed`], a later append to a session that still has appends
/// in flight on that writer is [`AppendError::Poisoned`] (nothing written), other
/// sessions go to the writers still running, and once every writer has crashed
/// every append gets [`AppendError::Poisoned`].
///
/// # Schema versions
///
/// [`connect`](Self::connect) migrates an older schema (bounded by
/// [`PgOptions::migration_timeout`], not the operation timeout) and refuses a newer
/// one. Every reconnect checks the version again: once a newer build has migrated
/// the schema, this handle refuses everything with typed errors naming both
/// versions ([`AppendError::SchemaTooNew`] with nothing written,
/// [`JournalError::SchemaTooNew`], [`LeaseError::SchemaTooNew`](crate::LeaseError::SchemaTooNew)). An append that a
/// newer schema's `append_batch` answered with a status this build does not know
/// committed with the rest of its batch: it alone is
/// [`AppendError::SchemaTooNew`] with `outcome_unknown` (retry it through a newer
/// build), and the batch's other appends keep their answers.
///
/// # Leases
///
/// * [`acquire_lease`](Self::acquire_lease): free, released or expired -> new epoch
///   (last + 1); already ours and live -> extended, same epoch; another writer's live
///   lease -> [`LeaseError::Held`](crate::LeaseError::Held).
/// * [`renew_lease`](Self::renew_lease): extends our live lease, same epoch;
///   [`renew_leases`](Self::renew_leases) extends all of them in one statement on
///   the renewal connection (a connection of its own) and lists the lost ones; an
///   expired or taken-over lease cannot be renewed ([`LeaseError::Lost`](crate::LeaseError::Lost)).
///   Renewals never wait for an append or an application's transaction (the
///   appends lock the lease row `FOR KEY SHARE`, which a renewal's update does not
///   conflict with); acquire and release run on a connection of their own and lock
///   the lease row `FOR UPDATE`, so a takeover waits for the appends in flight.
/// * [`release_lease`](Self::release_lease): frees our live lease; the epoch stays,
///   so the next holder's is higher. Releasing a lease that was already lost
///   (expired or taken over) is
///   [`LeaseError::Lost`](crate::LeaseError::Lost).
/// * Expiry is judged by the database's clock (`clock_timestamp()`), never ours,
///   and only once the lease row lock is held: a writer whose lease expired while
///   it waited for the row is fenced (or, renewing, has lost it).
/// * Appends to a session on which this journal acquired a lease check holder, epoch
///   and expiry under the session and lease row locks, in the transaction that writes the
///   frame; if the lease is gone they are [`AppendError::Fenced`] and write nothing,
///   and stay fenced until a lease is acquired again. Fencing is sticky: releasing
///   a lost lease answers [`LeaseError::Lost`](crate::LeaseError::Lost) and does not lift it, so a handle
///   that held a lease never falls back to writing without one.
/// * Appends to a session on which this journal holds no lease follow
///   [`LeasePolicy`]: by default they are allowed unless another writer holds a live
///   lease (then `Fenced`), so many processes can share a session; with
///   [`LeasePolicy::Required`] they are refused.
///
/// * [`JournalLeases`](crate::JournalLeases) is implemented with these, plus
///   [`orphaned_sessions`](Self::orphaned_sessions) and
///   [`lease_changes`](Self::lease_changes) (`LISTEN` on the schema's lease
///   channel; releases and lost leases are announced).
///
/// # Session end and retention
///
/// Same semantics as every backend (see [`SessionState`] and [`purge`](crate::purge)):
///
/// * The end marker is an append, so it follows the lease rules: while another writer
///   holds a live lease, this journal's end marker is [`AppendError::Fenced`]. Its
///   commit stamps the session's end time with the database's clock. After it (also
///   later in the same batch) nothing is written: an append of a key the log does not
///   hold is [`AppendError::SessionEnded`], a retry of a journaled one a duplicate or a
///   collision (schema version 5), with or without the lease.
/// * [`purge_step`](JournalBackend::purge_step) is one statement (one transaction) on
///   the read connection: an unfinished purge first, else the session that ended
///   first before the horizon, skipping sessions whose lease another holder has live.
///   Rows are taken `FOR UPDATE SKIP LOCKED`, so several purgers share the work;
///   when every unfinished purge is held elsewhere, the step waits (at most 250 ms)
///   for the first (schema version 10), so a purge does not return leaving one that
///   another step only passed over. Its
///   first step writes the tombstone with its first deletions; appends to live
///   sessions never wait for it.
/// * [`drop_tombstones`](JournalBackend::drop_tombstones) deletes finished tombstones'
///   rows, never one with a live lease.
///
/// # Testing
///
/// The crate's PostgreSQL tests, the testkit's conformance run and the bench read the
/// connection string from `NOTIFY_TEST_DATABASE_URL` (CI default:
/// `host=127.0.0.1 port=5432 user=postgres dbname=test`); the library itself reads
/// no environment (a password from `PGPASSWORD` or a password file is the caller's to
/// pass: [`PgOptions::password`], [`PgOptions::passfile`]).
///
/// # Connections
///
/// Uses one connection per group-commit writer ([`PgOptions::writers`], default
/// 3; all but the first opened on first use), a shared one for reads (pipelined),
/// one for renewals and lease reads and one for acquire and release (each opened on
/// first use), all at `READ COMMITTED` and with `lock_timeout`
/// set to the operation timeout, all over TLS as [`PgOptions::tls`] decides
/// ([`ssl_mode`](Self::ssl_mode) tells which mode is in force). A broken connection is not retried within the call
/// that meets it: that call fails with a retryable storage error, and the next call
/// opens a fresh connection (concurrent callers share one reconnect). An operation
/// that exceeds [`PgOptions::operation_timeout`] drops its connection the same way.
/// Must be created and used inside a tokio runtime.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use notify_journal::{JournalRead, PgJournal, PgOptions};
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
    lease_duration: Duration,
    /// Bounds every read, lease statement and reconnect preparation.
    op_timeout: Duration,
    /// The statements, and the schema version check of every reconnect.
    sql: Arc<Sql>,
    connector: Arc<Connector>,
    /// The read connection (never locked across an await).
    reader: Mutex<ReaderSlot>,
    /// The writers' channels (a session's appends in flight all to the same writer);
    /// `None` once closed.
    queue: Mutex<Option<Arc<writer::Senders>>>,
    writers: Mutex<Vec<JoinHandle<()>>>,
    /// The writers' shared counters, read for [`commit_stats`](Self::commit_stats).
    commit_queue: Arc<writer::Queue>,
    /// Epoch of every lease this journal acquired and has not released while it was
    /// live. An entry outlives the lease itself: a lost lease keeps fencing appends
    /// until the caller acquires anew (releasing a lost lease keeps its entry).
    leases: Mutex<HashMap<SessionId, u64>>,
    /// The sessions of `leases` whose lease is known lost (not renewed again, and
    /// reported lost once); never locked before `leases`.
    lost: Mutex<HashSet<SessionId>>,
    /// The renewal connection: renewals and lease reads (opened on first use; never
    /// locked across an await).
    lease_conn: Mutex<ConnSlot<LeaseConn>>,
    /// The change connection: acquire and release, which may wait for row locks
    /// (opened on first use; never locked across an await).
    lease_change_conn: Mutex<ConnSlot<LeaseChangeConn>>,
    /// Statements sent on the lease connections, for [`lease_round_trips`](Self::lease_round_trips).
    lease_round_trips: AtomicU64,
    /// The `LISTEN` task of [`lease_changes`](Self::lease_changes), once asked for.
    listener: Mutex<Option<Listener>>,
    closed: AtomicBool,
    /// Rows per statement of the whole-journal operations ([`PgOptions::page_rows`]).
    page_rows: i64,
    /// Statements run on the read connection, for [`read_statements`](Self::read_statements).
    read_statements: AtomicU64,
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
}

impl JournalBackend for PgJournal {
    fn append(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> BoxFuture<'_, Result<AppendOutcome, AppendError>> {
        Box::pin(crate::metrics::counted(
            crate::metrics::POSTGRES,
            self.append_inner(session, record),
        ))
    }

    fn append_all(
        &self,
        session: SessionId,
        records: Vec<JournalRecord>,
        if_head: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<AppendOutcome>, AppendError>> {
        Box::pin(async move {
            let result = self.append_all_inner(session, records, if_head).await;
            crate::metrics::record_group(crate::metrics::POSTGRES, &result);
            result
        })
    }

    fn purge_step(
        &self,
        ended_before: Timestamp,
        max_frames: usize,
    ) -> BoxFuture<'_, Result<PurgeStep, JournalError>> {
        Box::pin(self.purge_step_inner(ended_before, max_frames))
    }

    fn drop_tombstones(
        &self,
        purged_before: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<u64, JournalError>> {
        Box::pin(self.drop_tombstones_inner(purged_before, limit))
    }
}

impl JournalRead for PgJournal {
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
    ) -> BoxFuture<'_, Result<Vec<SeqRecord>, JournalError>> {
        Box::pin(self.replay_inner(session, from_seq, limit))
    }

    fn last_seq(&self, session: SessionId) -> BoxFuture<'_, Result<u64, JournalError>> {
        Box::pin(self.last_seq_inner(session))
    }

    fn sessions(&self) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>> {
        Box::pin(self.sessions_inner())
    }

    fn sessions_after(
        &self,
        after: Option<SessionId>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>> {
        Box::pin(self.sessions_after_inner(after, limit))
    }

    fn session_state(
        &self,
        session: SessionId,
    ) -> BoxFuture<'_, Result<SessionState, JournalError>> {
        Box::pin(self.session_state_inner(session))
    }
}
