//! Opening a [`PgJournal`] (options checked, connections opened, the schema
//! migrated or validated, the writers started), what a handle reports about itself,
//! and closing it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify_types::Uuid;

use super::connect::{self, Connector, PgConnector};
use super::error::PgOpenError;
use super::options::PgOptions;
use super::read_conn::{ConnSlot, ReaderConn, ReaderSlot, prepare_within};
use super::schema;
use super::sql::Sql;
use super::tls::PgSslMode;
use super::writer::{self, Writer};
use super::{PgJournal, lock};
use crate::stats::CommitStats;

/// How many appends may wait for each writer before `append` waits for room.
const QUEUE: usize = 8192;

impl PgJournal {
    /// Connects to the server described by `conninfo` (a libpq-style key/value string
    /// or a `postgresql://` URL), applies or validates the schema (see
    /// [`MigrationMode`](super::MigrationMode)) and starts the group-commit writer.
    ///
    /// # Errors
    ///
    /// [`PgOpenError`]: a bad connection string or option, an unreachable server
    /// (after at most the connect timeout), a schema newer than
    /// [`PG_SCHEMA_VERSION`](super::PG_SCHEMA_VERSION), an outdated schema in
    /// validate-only mode, or a storage failure while checking or migrating (the
    /// version check exceeding the operation timeout, a migration exceeding the
    /// migration timeout, a lock wait on the journal's tables exceeding the
    /// operation timeout). Without
    /// pending migrations, never waits longer than two connect timeouts plus three
    /// operation timeouts; a migration (and the wait for another opener's) adds
    /// at most [`PgOptions::migration_timeout`], without limit by default.
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
            options.tls.as_ref(),
            options.connect_timeout,
            op_timeout,
            (
                options.password.as_ref().map(|p| p.0.as_str()),
                options.passfile.as_deref(),
            ),
        )?);
        let sql = Arc::new(Sql::new(&options.schema));

        let mut write_client = connector
            .connect()
            .await
            .map_err(connect::ConnectFailure::into_open_error)?;
        // The version check is bounded by the operation timeout, a migration by the
        // migration timeout (see `schema::migrate`).
        schema::migrate(
            &mut write_client,
            &options.schema,
            options.migration,
            op_timeout,
            options.migration_timeout,
        )
        .await?;

        let read_client = connector
            .connect()
            .await
            .map_err(connect::ConnectFailure::into_open_error)?;
        let reader = prepare_within::<ReaderConn>(op_timeout, read_client, &sql)
            .await
            .map_err(PgOpenError::Storage)?;

        let holder = Uuid::now_v7();
        // At least the lease, so a stall long enough to lose the lease also frees the
        // rows; never below 5 s, so a busy host is not aborted.
        let idle_ms = u64::try_from(
            options
                .lease_duration
                .max(Duration::from_secs(5))
                .as_millis(),
        )
        .unwrap_or(u64::MAX);
        let (senders, receivers) = writer::Senders::new(options.writers, QUEUE);
        let queue = Arc::new(writer::Queue::new());
        let mut tasks = Vec::with_capacity(options.writers);
        // The first writer uses the connection that migrated; the others connect
        // when they first get a batch.
        let mut client = Some(write_client);
        for rx in receivers {
            let writer = Writer::new(
                Arc::clone(&connector),
                Arc::clone(&sql),
                holder,
                options.max_batch,
                idle_ms,
                op_timeout,
                client.take(),
            )
            .await
            .map_err(PgOpenError::Storage)?;
            tasks.push(tokio::spawn(writer.run(rx, Arc::clone(&queue))));
        }

        Ok(Self {
            holder,
            policy: options.lease_policy,
            max_record_bytes: options.max_record_bytes,
            lease_ms: options.lease_duration.as_secs_f64() * 1000.0,
            lease_duration: options.lease_duration,
            op_timeout,
            sql,
            connector,
            reader: Mutex::new(ReaderSlot {
                current: Some(Arc::new(reader)),
                pending: None,
            }),
            queue: Mutex::new(Some(Arc::new(senders))),
            writers: Mutex::new(tasks),
            commit_queue: queue,
            leases: Mutex::new(HashMap::new()),
            lost: Mutex::new(HashSet::new()),
            lease_conn: Mutex::new(ConnSlot::default()),
            lease_change_conn: Mutex::new(ConnSlot::default()),
            lease_round_trips: AtomicU64::new(0),
            listener: Mutex::new(None),
            closed: AtomicBool::new(false),
            page_rows: i64::try_from(options.page_rows).unwrap_or(i64::MAX),
            read_statements: AtomicU64::new(0),
        })
    }

    /// How many statements this journal has run on its read connection since
    /// [`connect`](Self::connect): reads, lease statements, purge steps and tombstone
    /// drops, each counted once whatever it returned. A diagnostic figure: with
    /// [`PgOptions::page_rows`] it shows how many bounded statements a whole-journal
    /// operation took.
    #[must_use]
    pub fn read_statements(&self) -> u64 {
        self.read_statements.load(Ordering::Relaxed)
    }

    /// The TLS mode its connections use (see [`PgOptions::tls`]).
    #[must_use]
    pub fn ssl_mode(&self) -> PgSslMode {
        self.connector.mode()
    }

    /// A connector that opens connections exactly as this journal opens its own
    /// (server, credentials, TLS, connect timeout, session setup), for a component
    /// that keeps its own connection beside the journal: see [`PgConnector`].
    #[must_use]
    pub fn connector(&self) -> PgConnector {
        PgConnector::new(Arc::clone(&self.connector))
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

    /// Group-commit counters since connect, over all of its writers: `appends /
    /// commits` is the mean batch size (`writer_wakeups` is always 0).
    #[must_use]
    pub fn commit_stats(&self) -> CommitStats {
        self.commit_queue.stats()
    }

    /// Stops accepting appends, waits until every append already queued has been
    /// answered, and closes its connections (writers, reads, the two lease connections, `LISTEN`). Later calls get `Closed` errors. Each
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
        let tasks = std::mem::take(&mut *lock(&self.writers));
        for task in tasks {
            if let Err(e) = task.await {
                // A writer that failed to join has nothing left to answer.
                tracing::error!(error = %e, "journal writer task failed");
            }
        }
        let mut slot = lock(&self.reader);
        slot.current = None;
        slot.pending = None;
        drop(slot);
        let mut slot = lock(&self.lease_conn);
        slot.current = None;
        slot.pending = None;
        drop(slot);
        let mut slot = lock(&self.lease_change_conn);
        slot.current = None;
        slot.pending = None;
        drop(slot);
        // Stops the listening task; its connection closes with it.
        drop(lock(&self.listener).take());
    }
}
