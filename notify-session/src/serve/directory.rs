//! Where the other hosts are: each server advertises its base URL under its
//! lease-holder identity, so a request for a session another host owns is answered
//! with that host's URL (307 + `Location`) instead of a bare refusal.
//!
//! On PostgreSQL the advertisements live beside the journal, in a table of their
//! own (`<schema>.serve_hosts`: holder, URL, last seen), written at start and every
//! minute and removed at a clean shutdown; the journal's tables are untouched. On a
//! redb file the server is the only host and there is nothing to advertise.

use std::time::Duration;

use notify_journal::BoxFuture;
use notify_types::Uuid;

/// Advertises this host and finds others.
pub trait OwnerDirectory: Send + Sync + 'static {
    /// The advertised base URL of the host with lease-holder identity `holder`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    fn url_of(&self, holder: Uuid) -> BoxFuture<'_, Option<String>>;

    /// Advertises (again) `url` for `holder`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the advertisement is written or not.
    fn advertise(&self, holder: Uuid, url: String) -> BoxFuture<'_, ()>;

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

    fn advertise(&self, _holder: Uuid, _url: String) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    fn withdraw(&self, _holder: Uuid) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// Advertisements in PostgreSQL, beside the journal's schema.
pub struct PgDirectory {
    client: tokio_postgres::Client,
    table: String,
    /// The journal's `leases` table (schema version 9 and later).
    leases: String,
}

impl std::fmt::Debug for PgDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgDirectory")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

/// How long a statement of the directory may take.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);

impl PgDirectory {
    /// Connects (without TLS: use a trusted network or a local socket) and creates
    /// the table `<schema>.serve_hosts` if missing. `schema` is the journal's, which
    /// must exist already (open the journal first).
    ///
    /// # Errors
    ///
    /// The connection's or the statement's error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is left half-made (the table is created in one statement).
    pub async fn connect(
        config: &tokio_postgres::Config,
        schema: &str,
    ) -> Result<Self, tokio_postgres::Error> {
        let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %e, "the host directory's connection ended");
            }
        });
        let table = format!("{}.serve_hosts", quote_ident(schema));
        let leases = format!("{}.leases", quote_ident(schema));
        let create = format!(
            "CREATE TABLE IF NOT EXISTS {table} (holder uuid PRIMARY KEY, url text NOT NULL, seen_at timestamptz NOT NULL DEFAULT now())"
        );
        // Two servers starting at once may both create it: the loser's unique
        // violation on the catalog means the table is there.
        if let Err(e) = client.batch_execute(&create).await
            && e.code() != Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION)
        {
            return Err(e);
        }
        Ok(Self {
            client,
            table,
            leases,
        })
    }
}

fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

impl OwnerDirectory for PgDirectory {
    fn url_of(&self, holder: Uuid) -> BoxFuture<'_, Option<String>> {
        Box::pin(async move {
            let sql = format!("SELECT url FROM {} WHERE holder = $1", self.table);
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&holder];
            let query = self.client.query_opt(&sql, &params);
            match tokio::time::timeout(STATEMENT_TIMEOUT, query).await {
                Ok(Ok(row)) => row.and_then(|r| r.try_get::<_, String>(0).ok()),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "looking up the owner's URL failed");
                    None
                }
                Err(_) => None,
            }
        })
    }

    fn advertise(&self, holder: Uuid, url: String) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let sql = format!(
                "INSERT INTO {} (holder, url, seen_at) VALUES ($1, $2, now()) \
                 ON CONFLICT (holder) DO UPDATE SET url = EXCLUDED.url, seen_at = now()",
                self.table
            );
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&holder, &url];
            let write = self.client.execute(&sql, &params);
            if let Ok(Err(e)) = tokio::time::timeout(STATEMENT_TIMEOUT, write).await {
                tracing::warn!(error = %e, "advertising this host's URL failed");
            }
            // Hosts gone for a week are forgotten (a crashed host never withdraws).
            let sql = format!(
                "DELETE FROM {} WHERE seen_at < now() - interval '7 days'",
                self.table
            );
            let _ = tokio::time::timeout(STATEMENT_TIMEOUT, self.client.execute(&sql, &[])).await;
        })
    }

    fn withdraw(&self, holder: Uuid) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let sql = format!("DELETE FROM {} WHERE holder = $1", self.table);
            let _ = tokio::time::timeout(STATEMENT_TIMEOUT, self.client.execute(&sql, &[&holder]))
                .await;
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
            let query = self.client.query(&sql, &[]);
            let rows = match tokio::time::timeout(STATEMENT_TIMEOUT, query).await {
                Ok(Ok(rows)) => rows,
                Ok(Err(e)) => return Some(Err(format!("reading the hosts failed: {e}"))),
                Err(_) => return Some(Err("reading the hosts timed out".to_owned())),
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
