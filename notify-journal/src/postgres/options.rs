//! Options of the PostgreSQL journal.

use std::path::PathBuf;
use std::time::Duration;

use super::error::PgOpenError;
use super::schema::MigrationMode;
use super::schema_name::valid_schema_name;
use super::tls::PgTls;

/// The largest accepted [`PgOptions::max_batch`].
pub(crate) const PG_MAX_BATCH_LIMIT: usize = 65_536;

/// The longest accepted [`PgOptions::lease_duration`]: the largest value PostgreSQL's
/// `idle_in_transaction_session_timeout` accepts (`i32::MAX` ms, about 24.8 days),
/// which the write connection sets from the lease duration.
pub(crate) const PG_MAX_LEASE_DURATION: Duration = Duration::from_millis(i32::MAX as u64);

/// The default [`PgOptions::operation_timeout`].
pub(crate) const PG_DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether appends need a lease held by this journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LeasePolicy {
    /// Appends to a session on which this journal holds no lease are allowed while
    /// no other writer holds a live lease on it; several such writers may append to
    /// one session at once (the session row lock orders them). A live lease held by
    /// another writer fences them. Appends to a session this journal acquired a
    /// lease on always check that lease. The default: it is what the journal backend
    /// trait promises to callers that know nothing of leases.
    #[default]
    Optional,
    /// Every append needs a live lease acquired by this journal; others are
    /// [`AppendError::Fenced`](crate::AppendError::Fenced) without touching the
    /// database. For single-writer deployments that want stale-writer fencing on
    /// every write.
    Required,
}

/// The default [`PgOptions::page_rows`].
pub(crate) const PG_DEFAULT_PAGE_ROWS: usize = 1024;

/// Options of [`PgJournal::connect`](super::PgJournal::connect).
#[derive(Debug, Clone)]
pub struct PgOptions {
    pub(crate) schema: String,
    pub(crate) migration: MigrationMode,
    pub(crate) connect_timeout: Duration,
    pub(crate) operation_timeout: Duration,
    pub(crate) migration_timeout: Option<Duration>,
    pub(crate) lease_duration: Duration,
    pub(crate) lease_policy: LeasePolicy,
    pub(crate) max_batch: usize,
    pub(crate) writers: usize,
    pub(crate) max_record_bytes: usize,
    pub(crate) tls: Option<PgTls>,
    pub(crate) password: Option<Secret>,
    pub(crate) passfile: Option<PathBuf>,
    pub(crate) page_rows: usize,
}

/// A password: never printed (`Debug` shows that there is one, not what it is).
#[derive(Clone)]
pub(crate) struct Secret(pub(crate) String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            schema: "notify_journal".to_owned(),
            migration: MigrationMode::Apply,
            connect_timeout: Duration::from_secs(5),
            operation_timeout: PG_DEFAULT_OPERATION_TIMEOUT,
            migration_timeout: None,
            lease_duration: Duration::from_secs(30),
            lease_policy: LeasePolicy::Optional,
            max_batch: 1024,
            writers: 3,
            max_record_bytes: crate::integrity::DEFAULT_MAX_RECORD_BYTES,
            tls: None,
            password: None,
            passfile: None,
            page_rows: PG_DEFAULT_PAGE_ROWS,
        }
    }
}

impl PgOptions {
    /// The PostgreSQL schema holding the journal's tables (default
    /// `notify_journal`). Must match `[a-z_][a-z0-9_]{0,62}` and must not start with
    /// `pg_` (reserved by PostgreSQL); checked at connect. Reserved words such as
    /// `select` are fine: the name is always quoted.
    #[must_use]
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Apply migrations (default) or only validate the schema version.
    #[must_use]
    pub fn migration(mut self, mode: MigrationMode) -> Self {
        self.migration = mode;
        self
    }

    /// How long a connection attempt (TCP and startup handshake) may take before
    /// it fails with [`PgOpenError::ConnectTimeout`] (default 5 s; also used when
    /// the journal reconnects after losing a connection).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one database operation may take before it fails (default 10 s): a
    /// batch transaction, a read, a lease statement, the schema version check at
    /// connect and at every reconnect, and preparing statements after a reconnect.
    /// Migrations are bounded by [`migration_timeout`](Self::migration_timeout)
    /// instead (their lock waits on the journal's tables by this one). On expiry the connection is dropped (the next call opens a
    /// fresh one) and the call fails with a storage error: for an append,
    /// [`AppendError::Storage`](crate::AppendError::Storage) if its batch had not
    /// sent `COMMIT` yet (nothing written), else
    /// [`AppendError::CommitFailed`](crate::AppendError::CommitFailed) (outcome
    /// unknown; retry with the same record). It also bounds lock waits on the server
    /// (`lock_timeout`) and sets TCP keepalives and `tcp_user_timeout` unless the
    /// connection string set them, so a silent network partition is noticed. A batch
    /// that waits for another writer's session row lock counts against it.
    #[must_use]
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// How long the schema migration at [`connect`](super::PgJournal::connect) may
    /// run (default `None`: no limit), when the schema is older than this build.
    /// A migration rewrites or scans tables whose size grows with the journal (a
    /// backfill over every frame, an index build), so it is not bounded by the
    /// operation timeout: a migration that cannot finish within its bound rolls
    /// back, and every later open would try again and roll back again. With a
    /// bound, both sides stop: the client gives up with a
    /// [`PgOpenError::Storage`] error and the
    /// server's `statement_timeout` for the migration stops its work. An opener
    /// that finds another one migrating waits for it as long (the advisory lock).
    /// A migration holds its tables' locks until it commits: appends of other
    /// handles wait meanwhile (each up to its operation timeout); see
    /// `docs/postgres.md`, "Rolling upgrades". Checking an up-to-date schema is
    /// always bounded by the operation timeout.
    #[must_use]
    pub fn migration_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.migration_timeout = timeout;
        self
    }

    /// How long an acquired or renewed lease lives, by the database's clock
    /// (default 30 s; at least 1 ms, at most 2³¹−1 ms, about 24.8 days). It also sets
    /// the write connection's `idle_in_transaction_session_timeout` (to the lease
    /// duration, but never below 5 s), so a writer stalled inside a batch frees the
    /// session rows about when its lease would have expired.
    #[must_use]
    pub fn lease_duration(mut self, duration: Duration) -> Self {
        self.lease_duration = duration;
        self
    }

    /// Whether appends need a lease (default [`LeasePolicy::Optional`]).
    #[must_use]
    pub fn lease_policy(mut self, policy: LeasePolicy) -> Self {
        self.lease_policy = policy;
        self
    }

    /// The most appends committed in one transaction (default 1024, at least 1, at
    /// most 65536).
    #[must_use]
    pub fn max_batch(mut self, max: usize) -> Self {
        self.max_batch = max;
        self
    }

    /// How many group-commit writers, each with its own connection, may have a
    /// batch in flight at once (default 3, at least 1, at most 64). A session's
    /// appends in flight all go to the same writer (a session with none goes to the
    /// running writer with the fewest appends in flight), so the journal's batches never wait for each other's session row locks. Each
    /// writer commits, as one batch, everything that reached it while its last batch
    /// was in flight: a lone append commits alone, at once, and a busy journal keeps
    /// a commit going on every writer while the next batches grow. The first
    /// writer connects at [`connect`](super::PgJournal::connect), the others when
    /// they first get a batch. Appends made concurrently may commit in any order;
    /// each session's sequence stays gap-free (the session row lock orders them).
    #[must_use]
    pub fn writers(mut self, writers: usize) -> Self {
        self.writers = writers;
        self
    }

    /// The largest encoded record accepted (default
    /// [`DEFAULT_MAX_RECORD_BYTES`](crate::DEFAULT_MAX_RECORD_BYTES), 1 MiB, as for the
    /// redb journal; at most the codec's decode limit
    /// [`MAX_DECODE_BYTES`](notify_types::MAX_DECODE_BYTES), so every frame replays).
    /// Larger records are refused with
    /// [`AppendError::TooLarge`](crate::AppendError::TooLarge) and nothing is written.
    #[must_use]
    pub fn max_record_bytes(mut self, max: usize) -> Self {
        self.max_record_bytes = max;
        self
    }

    /// How connections are secured (they all are, including reconnects). Without
    /// this, the connection string decides through libpq's keys (`sslmode` =
    /// `disable`, `require`, `verify-ca` or `verify-full`; `sslrootcert`; `sslcert`
    /// and `sslkey`), and without those: [`PgSslMode::VerifyFull`] with the system's
    /// root certificates for a remote host, plain text only when every host is a
    /// Unix socket or loopback. `prefer` and `allow` never fall back to plain text
    /// here; they count as unset. These settings win over the connection string's.
    ///
    /// [`PgSslMode::VerifyFull`]: super::PgSslMode::VerifyFull
    #[must_use]
    pub fn tls(mut self, tls: PgTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The password to send when the connection string sets none (a connection
    /// string's `password` always wins). For callers that read it from somewhere safer
    /// than a command line, such as libpq's `PGPASSWORD`; never printed (`Debug`
    /// redacts it) and never part of an error.
    #[must_use]
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(Secret(password.into()));
        self
    }

    /// A libpq password file (`~/.pgpass`'s format) to take the password from when
    /// neither the connection string nor [`password`](Self::password) sets one: the
    /// first line that matches the connection's host (tried in order, when there are
    /// several), port, database and user. `*` matches any value; `\:` and `\\`
    /// escape a colon and a backslash. As in libpq, a host that is a Unix socket
    /// matches `localhost`, the port defaults to 5432, the database to the user, and
    /// the user to the operating system's. A file that cannot be read is passed over,
    /// as libpq does.
    ///
    /// The file is read as given: the caller decides whether to trust it (libpq, and
    /// the `notify` command line, pass over one that others may read).
    #[must_use]
    pub fn passfile(mut self, path: impl Into<PathBuf>) -> Self {
        self.passfile = Some(path.into());
        self
    }

    /// The most rows one statement of a whole-journal operation reads or deletes
    /// (default 1024, at least 1, at most 65536): [`sessions`] reads the listing in
    /// pages of this many, each its own statement; the deep verify reads frames and
    /// heads in pages of this many; [`drop_tombstones`] deletes at most this many per
    /// statement. So no statement's work grows with the journal, and each stays well
    /// inside the operation timeout.
    ///
    /// [`sessions`]: crate::JournalRead::sessions
    /// [`drop_tombstones`]: crate::JournalBackend::drop_tombstones
    #[must_use]
    pub fn page_rows(mut self, rows: usize) -> Self {
        self.page_rows = rows;
        self
    }

    pub(crate) fn check(&self) -> Result<(), PgOpenError> {
        if !valid_schema_name(&self.schema) {
            return Err(PgOpenError::InvalidOption {
                option: "schema",
                reason: "must match [a-z_][a-z0-9_]{0,62}",
            });
        }
        if self.schema.starts_with("pg_") {
            return Err(PgOpenError::InvalidOption {
                option: "schema",
                reason: "must not start with `pg_` (reserved by PostgreSQL)",
            });
        }
        if self.operation_timeout.is_zero() {
            return Err(PgOpenError::InvalidOption {
                option: "operation_timeout",
                reason: "must be positive",
            });
        }
        if self.migration_timeout.is_some_and(|t| t.is_zero()) {
            return Err(PgOpenError::InvalidOption {
                option: "migration_timeout",
                reason: "must be positive (None: no limit)",
            });
        }
        if self.lease_duration > PG_MAX_LEASE_DURATION {
            return Err(PgOpenError::InvalidOption {
                option: "lease_duration",
                reason: "must be at most 2147483647 ms (about 24.8 days), the largest \
                         idle_in_transaction_session_timeout PostgreSQL accepts",
            });
        }
        if self.connect_timeout.is_zero() {
            return Err(PgOpenError::InvalidOption {
                option: "connect_timeout",
                reason: "must be positive",
            });
        }
        if self.lease_duration < Duration::from_millis(1) {
            return Err(PgOpenError::InvalidOption {
                option: "lease_duration",
                reason: "must be at least 1 ms",
            });
        }
        if self.max_record_bytes == 0 || self.max_record_bytes > notify_types::MAX_DECODE_BYTES {
            return Err(PgOpenError::InvalidOption {
                option: "max_record_bytes",
                reason: "must be between 1 and the codec's decode limit",
            });
        }
        if self.writers == 0 || self.writers > 64 {
            return Err(PgOpenError::InvalidOption {
                option: "writers",
                reason: "must be between 1 and 64",
            });
        }
        if self.max_batch == 0 || self.max_batch > PG_MAX_BATCH_LIMIT {
            return Err(PgOpenError::InvalidOption {
                option: "max_batch",
                reason: "must be between 1 and 65536",
            });
        }
        if self.page_rows == 0 || self.page_rows > PG_MAX_BATCH_LIMIT {
            return Err(PgOpenError::InvalidOption {
                option: "page_rows",
                reason: "must be between 1 and 65536",
            });
        }
        Ok(())
    }
}
