//! Where the other hosts are: each server advertises its base URL under its
//! lease-holder identity, so a request for a session another host owns is answered
//! with that host's URL (307 + `Location`) instead of a bare refusal.
//!
//! On PostgreSQL the advertisements live beside the journal, in a table of their
//! own (`<schema>.serve_hosts`: holder, URL, last seen), written at start and every
//! minute (every few seconds while writing fails) and removed at a clean shutdown;
//! the journal's tables are untouched. The directory connects as the journal does
//! (its [`PgConnector`]: TLS, password, timeouts) and reconnects by itself after its
//! connection broke. On a redb file the server is the only host and there is nothing
//! to advertise.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use notify_journal::{BoxFuture, PgConnector, PgOpenError};
use notify_types::Uuid;
use tokio::time::Instant;

/// Advertises this host and finds others.
pub trait OwnerDirectory: Send + Sync + 'static {
    /// The advertised base URL of the host with lease-holder identity `holder`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    fn url_of(&self, holder: Uuid) -> BoxFuture<'_, Option<String>>;

    /// Advertises (again) `url` for `holder`: `true` once written, `false` if it
    /// could not be (the server tries again soon).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the advertisement is written or not.
    fn advertise(&self, holder: Uuid, url: String) -> BoxFuture<'_, bool>;

    /// Withdraws `holder`'s advertisement (a clean shutdown).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: withdrawn or not (a stale row only names a holder no lease names).
    fn withdraw(&self, holder: Uuid) -> BoxFuture<'_, ()>;

    /// Every host the directory knows, with the leases it holds (the console's Hosts
    /// page). `None`: this directory keeps no such list (one host on a redb file).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    fn hosts(&self) -> BoxFuture<'_, Option<Result<Vec<HostRow>, String>>> {
        Box::pin(async { None })
    }
}

/// One host as the directory knows it: its advertisement and the leases it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRow {
    /// Its lease-holder identity.
    pub holder: Uuid,
    /// Its advertised URL (`None`: it holds leases but advertises nothing).
    pub url: Option<String>,
    /// When it last advertised (RFC 3339, the database's clock).
    pub seen_at: Option<String>,
    /// Sessions whose lease it holds unexpired.
    pub live_leases: u64,
    /// Sessions whose lease names it but has expired (it died or was cut off).
    pub expired_leases: u64,
    /// Of the leases it holds, those at an epoch above 1: it took them over from
    /// an earlier holder, or reopened them after a release.
    pub taken_over: u64,
    /// When its latest lease runs out (its last renewal plus the lease duration).
    pub leases_until: Option<String>,
}

/// No other hosts (one host on a redb file).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoDirectory;

impl OwnerDirectory for NoDirectory {
    fn url_of(&self, _holder: Uuid) -> BoxFuture<'_, Option<String>> {
        Box::pin(async { None })
    }

    fn advertise(&self, _holder: Uuid, _url: String) -> BoxFuture<'_, bool> {
        Box::pin(async { true })
    }

    fn withdraw(&self, _holder: Uuid) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// The `application_name` of the directory's connection (as `pg_stat_activity`
/// shows it), unless the connection string names its connections.
pub const DIRECTORY_APPLICATION_NAME: &str = "notify-serve-directory";

/// Advertisements in PostgreSQL, beside the journal's schema.
///
/// It connects exactly as the journal does (a [`PgConnector`] from
/// [`PgJournal::connector`](notify_journal::PgJournal::connector): the same server,
/// credentials, TLS settings and connect timeout), on one connection of its own
/// named [`DIRECTORY_APPLICATION_NAME`]. The connection is opened on first use (or
/// by [`connect`](Self::connect)) and reopened lazily: a statement that meets a
/// broken connection (closed, I/O error, the backend terminated) drops it and runs
/// once more on a fresh one, and a later call connects again if that failed too. A
/// failed connect is not retried before a short backoff (0.5 s, doubling up to
/// 10 s), so a database that is down is not hammered: meanwhile lookups answer
/// "unknown" at once. A connect never waits longer than the connect timeout;
/// concurrent callers share one attempt.
pub struct PgDirectory {
    connector: PgConnector,
    table: String,
    /// The journal's `leases` table (schema version 9 and later).
    leases: String,
    /// The connection, held across a connect so concurrent callers share one.
    conn: tokio::sync::Mutex<Conn>,
}

/// The directory's connection and its reconnect state.
#[derive(Default)]
struct Conn {
    client: Option<Arc<tokio_postgres::Client>>,
    /// No connect before this (set by a failed one).
    retry_at: Option<Instant>,
    /// The wait after the next failed connect.
    backoff: Duration,
    /// The table was created (or found) on some connection.
    table_ready: bool,
    /// A connection was lost or never opened: the next success is logged.
    lost: bool,
}

impl std::fmt::Debug for PgDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgDirectory")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

/// Why a statement of the directory failed (logged; the directory's callers get
/// "unknown" or "not written").
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgDirectoryError {
    /// The connection could not be opened (sanitized: no connection string, no
    /// driver text).
    #[error("the host directory could not connect")]
    Connect(#[source] PgOpenError),
    /// A connect failed a moment ago; the next is not tried before the backoff ends.
    #[error("the host directory is not connected (next connect in {0:?})")]
    Backoff(Duration),
    /// Creating the table `<schema>.serve_hosts` failed.
    #[error("creating the host directory's table failed")]
    Table(#[source] tokio_postgres::Error),
    /// A statement took longer than its bound (its connection is dropped).
    #[error("the host directory's statement timed out after {0:?}")]
    Timeout(Duration),
    /// A statement failed.
    #[error("the host directory's statement failed")]
    Statement(#[source] tokio_postgres::Error),
}

/// How long a statement of the directory may take.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);
/// The first wait after a failed connect; it doubles up to `MAX_BACKOFF`.
const MIN_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(10);

impl PgDirectory {
    /// A directory in the journal's schema `schema` (which must exist: open the
    /// journal first), connecting through `connector` (the journal's, from
    /// [`PgJournal::connector`](notify_journal::PgJournal::connector)). Nothing is
    /// connected yet: the first call (or [`connect`](Self::connect)) connects and
    /// creates the table `<schema>.serve_hosts` if missing.
    #[must_use]
    pub fn new(connector: &PgConnector, schema: &str) -> Self {
        Self {
            connector: connector.application_name(DIRECTORY_APPLICATION_NAME),
            table: format!("{}.serve_hosts", quote_ident(schema)),
            leases: format!("{}.leases", quote_ident(schema)),
            conn: tokio::sync::Mutex::new(Conn {
                backoff: MIN_BACKOFF,
                ..Conn::default()
            }),
        }
    }

    /// Connects now, unless connected, and creates the table if missing: for a
    /// caller that wants to know at start whether the directory works. A directory
    /// whose connect failed stays usable: it connects again on a later call.
    ///
    /// # Errors
    ///
    /// [`PgDirectoryError::Connect`] (after at most the connect timeout),
    /// [`PgDirectoryError::Table`], or [`PgDirectoryError::Backoff`] if a connect
    /// failed a moment ago.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the connection being opened is abandoned; the table is created in
    /// one statement.
    pub async fn connect(&self) -> Result<(), PgDirectoryError> {
        self.client().await.map(drop)
    }

    /// The open connection, or a new one (unless a failed connect's backoff runs).
    async fn client(&self) -> Result<Arc<tokio_postgres::Client>, PgDirectoryError> {
        let mut conn = self.conn.lock().await;
        if let Some(client) = &conn.client {
            if !client.is_closed() {
                return Ok(Arc::clone(client));
            }
            conn.client = None;
            conn.lost = true;
            tracing::warn!("the host directory's connection closed: reconnecting");
        }
        let now = Instant::now();
        if let Some(at) = conn.retry_at
            && at > now
        {
            return Err(PgDirectoryError::Backoff(at - now));
        }
        let opened = self.open(conn.table_ready).await;
        match opened {
            Ok(client) => {
                let client = Arc::new(client);
                conn.client = Some(Arc::clone(&client));
                conn.retry_at = None;
                conn.backoff = MIN_BACKOFF;
                conn.table_ready = true;
                if std::mem::take(&mut conn.lost) {
                    tracing::info!("the host directory is connected again");
                }
                Ok(client)
            }
            Err(e) => {
                conn.retry_at = Some(now + conn.backoff);
                conn.backoff = (conn.backoff * 2).min(MAX_BACKOFF);
                conn.lost = true;
                tracing::warn!(
                    error = %chain(&e),
                    retry_in = ?conn.retry_at.map(|at| at.saturating_duration_since(now)),
                    "the host directory could not connect"
                );
                Err(e)
            }
        }
    }

    /// Connects and, unless done on an earlier connection, creates the table.
    async fn open(&self, table_ready: bool) -> Result<tokio_postgres::Client, PgDirectoryError> {
        let client = self
            .connector
            .connect()
            .await
            .map_err(PgDirectoryError::Connect)?;
        if !table_ready {
            let create = format!(
                "CREATE TABLE IF NOT EXISTS {} (holder uuid PRIMARY KEY, url text NOT NULL, seen_at timestamptz NOT NULL DEFAULT now())",
                self.table
            );
            // Two servers starting at once may both create it: the loser's unique
            // violation on the catalog means the table is there.
            match tokio::time::timeout(STATEMENT_TIMEOUT, client.batch_execute(&create)).await {
                Ok(Ok(())) => {}
                Ok(Err(e))
                    if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => {}
                Ok(Err(e)) => return Err(PgDirectoryError::Table(e)),
                Err(_) => return Err(PgDirectoryError::Timeout(STATEMENT_TIMEOUT)),
            }
        }
        Ok(client)
    }

    /// No connect before the backoff has passed (which doubles, up to its bound).
    async fn back_off(&self) {
        let mut conn = self.conn.lock().await;
        conn.retry_at = Some(Instant::now() + conn.backoff);
        conn.backoff = (conn.backoff * 2).min(MAX_BACKOFF);
    }

    /// Forgets `client` if it is still the current connection.
    async fn discard(&self, client: &Arc<tokio_postgres::Client>) {
        let mut conn = self.conn.lock().await;
        if conn
            .client
            .as_ref()
            .is_some_and(|current| Arc::ptr_eq(current, client))
        {
            conn.client = None;
            conn.lost = true;
        }
    }

    /// Runs `statement` (bounded by [`STATEMENT_TIMEOUT`]) on the connection. One
    /// that meets a broken connection drops it and runs once more on a fresh one
    /// (every statement of the directory may run twice: upserts, deletes, reads); one
    /// that times out drops its connection and fails, and the next connect waits for
    /// the backoff.
    async fn run<T, F, Fut>(&self, statement: F) -> Result<T, PgDirectoryError>
    where
        F: Fn(Arc<tokio_postgres::Client>) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let mut retried = false;
        loop {
            let client = self.client().await?;
            match tokio::time::timeout(STATEMENT_TIMEOUT, statement(Arc::clone(&client))).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(e)) if broken(&e, &client) => {
                    self.discard(&client).await;
                    if retried {
                        return Err(PgDirectoryError::Statement(e));
                    }
                    tracing::warn!(error = %e, "the host directory's connection broke: reconnecting");
                    retried = true;
                }
                Ok(Err(e)) => return Err(PgDirectoryError::Statement(e)),
                Err(_) => {
                    // A database that accepts connections but stalls: no fresh
                    // connection per statement, the backoff first.
                    self.discard(&client).await;
                    self.back_off().await;
                    return Err(PgDirectoryError::Timeout(STATEMENT_TIMEOUT));
                }
            }
        }
    }
}

/// Whether `e` says the connection is unusable (closed, I/O, the backend
/// terminated or the server shutting down), not that the statement was refused.
fn broken(e: &tokio_postgres::Error, client: &tokio_postgres::Client) -> bool {
    if client.is_closed() || e.is_closed() {
        return true;
    }
    match e.code() {
        // No SQLSTATE: the driver's own failure (I/O, protocol).
        None => true,
        // Class 08: connection exception; 57P0x: admin or crash shutdown, cannot
        // connect now.
        Some(state) => state.code().starts_with("08") || state.code().starts_with("57P"),
    }
}

/// `e` and its sources, `: `-separated.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

impl OwnerDirectory for PgDirectory {
    fn url_of(&self, holder: Uuid) -> BoxFuture<'_, Option<String>> {
        Box::pin(async move {
            let sql = format!("SELECT url FROM {} WHERE holder = $1", self.table);
            let sql = sql.as_str();
            let found = self
                .run(move |client| async move { client.query_opt(sql, &[&holder]).await })
                .await;
            match found {
                Ok(row) => row.and_then(|r| r.try_get::<_, String>(0).ok()),
                Err(PgDirectoryError::Backoff(_)) => None,
                Err(e) => {
                    tracing::warn!(error = %chain(&e), "looking up the owner's URL failed");
                    None
                }
            }
        })
    }

    fn advertise(&self, holder: Uuid, url: String) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            let sql = format!(
                "INSERT INTO {} (holder, url, seen_at) VALUES ($1, $2, now()) \
                 ON CONFLICT (holder) DO UPDATE SET url = EXCLUDED.url, seen_at = now()",
                self.table
            );
            let (sql, url) = (sql.as_str(), url.as_str());
            let written = self
                .run(move |client| async move { client.execute(sql, &[&holder, &url]).await })
                .await;
            if let Err(e) = &written {
                tracing::warn!(error = %chain(e), "advertising this host's URL failed");
                return false;
            }
            // Hosts gone for a week are forgotten (a crashed host never withdraws).
            let sql = format!(
                "DELETE FROM {} WHERE seen_at < now() - interval '7 days'",
                self.table
            );
            let sql = sql.as_str();
            if let Err(e) = self
                .run(move |client| async move { client.execute(sql, &[]).await })
                .await
            {
                tracing::debug!(error = %chain(&e), "forgetting hosts gone for a week failed");
            }
            true
        })
    }

    fn withdraw(&self, holder: Uuid) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let sql = format!("DELETE FROM {} WHERE holder = $1", self.table);
            let sql = sql.as_str();
            if let Err(e) = self
                .run(move |client| async move { client.execute(sql, &[&holder]).await })
                .await
            {
                tracing::warn!(error = %chain(&e), "withdrawing this host's advertisement failed: other hosts forget it after a week");
            }
        })
    }

    fn hosts(&self) -> BoxFuture<'_, Option<Result<Vec<HostRow>, String>>> {
        Box::pin(async move {
            // One statement: the advertisements, and every holder the leases name.
            let sql = format!(
                "WITH l AS (SELECT holder, \
                   count(*) FILTER (WHERE expires_at > now()) AS live, \
                   count(*) FILTER (WHERE expires_at <= now()) AS expired, \
                   count(*) FILTER (WHERE expires_at > now() AND epoch > 1) AS taken, \
                   max(expires_at) AS until \
                 FROM {leases} WHERE holder IS NOT NULL GROUP BY holder) \
                 SELECT coalesce(h.holder, l.holder), h.url, h.seen_at::text, \
                   coalesce(l.live, 0), coalesce(l.expired, 0), coalesce(l.taken, 0), l.until::text \
                 FROM {hosts} h FULL JOIN l ON l.holder = h.holder \
                 ORDER BY 2 NULLS LAST, 1 LIMIT 1000",
                leases = self.leases,
                hosts = self.table
            );
            let sql = sql.as_str();
            let read = self
                .run(move |client| async move { client.query(sql, &[]).await })
                .await;
            let rows = match read {
                Ok(rows) => rows,
                Err(e) => return Some(Err(format!("reading the hosts failed: {}", chain(&e)))),
            };
            let count = |r: &tokio_postgres::Row, i: usize| {
                r.try_get::<_, i64>(i)
                    .ok()
                    .and_then(|v| u64::try_from(v).ok())
                    .unwrap_or(0)
            };
            Some(Ok(rows
                .iter()
                .filter_map(|r| {
                    Some(HostRow {
                        holder: r.try_get(0).ok()?,
                        url: r.try_get(1).ok()?,
                        seen_at: r.try_get(2).ok()?,
                        live_leases: count(r, 3),
                        expired_leases: count(r, 4),
                        taken_over: count(r, 5),
                        leases_until: r.try_get(6).ok()?,
                    })
                })
                .collect()))
        })
    }
}
