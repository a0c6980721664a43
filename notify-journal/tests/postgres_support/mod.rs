//! Helpers shared by the PostgreSQL journal tests: where the database is, whether to
//! skip, fresh schemas and record builders.
#![allow(dead_code, unused_imports, unreachable_pub, clippy::expect_used)]

pub mod retention;
pub mod tls_server;
pub mod traffic;
pub mod version_1;

use notify_journal::{PG_SCHEMA_VERSION, PgJournal, PgOptions};
use notify_types::{
    CommandId, JournalRecord, LoopId, NotificationConsumed, ProcessCompletionNotification,
    ProcessLifecycleState, ProcessNotification, ProcessTerminalReason, SessionEvent, SessionId,
    Uuid,
};

/// Where the test database is (one environment variable), and the plain "skipped"
/// message outside CI: the testkit's, shared by every PostgreSQL test.
pub use notify_testkit::postgres::{DATABASE_URL_VAR, database_url};

/// Called by a test that needs the database reached over TCP (it puts a proxy in
/// front of it, or adds connection options) when [`conninfo_with`] or
/// [`StallingProxy::start`] says it is not. In CI (`CI` set) this fails the test: the
/// harness would count a skip as a pass. Elsewhere it prints one `SKIPPED` line past
/// the harness's output capture, like [`database_url`]'s skips, and the test returns.
pub fn not_over_tcp(test: &str) {
    use std::io::Write as _;
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: the test database ({DATABASE_URL_VAR}) is not reached over TCP, and in CI \
         this test may not be skipped"
    );
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED {test}: the test database is not reached over TCP"
    );
}

/// Guards against hangs: far above any wait a correct run has (never a timing
/// assertion on speed).
pub const HANG_GUARD: std::time::Duration = std::time::Duration::from_secs(60);

/// A fresh schema name, so tests sharing the database never see each other's tables.
pub fn fresh_schema(tag: &str) -> String {
    format!("nj_{tag}_{}", Uuid::now_v7().simple())
}

/// Drops a test schema (best effort; a leftover schema is harmless).
pub async fn drop_schema(url: &str, schema: &str) {
    if let Ok((client, conn)) = tokio_postgres::connect(url, tokio_postgres::NoTls).await {
        tokio::spawn(conn);
        let _ = client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .await;
    }
}

/// Sets `schema` back to schema version `version`: below version 9, first takes back
/// what version 9 changed ([`undo_leases_table`]); then runs `undo` (what the other
/// later versions added, taken away) and forgets the later versions' records.
pub async fn back_to(raw: &tokio_postgres::Client, schema: &str, version: u32, undo: &str) {
    let leases = if version < 9 {
        undo_leases_table(schema)
    } else {
        String::new()
    };
    raw.batch_execute(&format!(
        "{leases}
         {undo}
         DELETE FROM \"{schema}\".schema_version WHERE version > {version};"
    ))
    .await
    .unwrap();
}

/// What migration 9 changed, taken back: the lease columns of `sessions` (as
/// migration 1 made them) filled from the `leases` table, migration 6's
/// `sessions_orphans` index, and no `leases` table or lease functions. Version 9's
/// `append_batch` and `purge_step` stay (the migration replaces them in place).
pub fn undo_leases_table(schema: &str) -> String {
    let q = format!("\"{schema}\"");
    format!(
        "ALTER TABLE {q}.sessions
             ADD COLUMN lease_epoch bigint NOT NULL DEFAULT 0 CHECK (lease_epoch >= 0),
             ADD COLUMN lease_holder uuid,
             ADD COLUMN lease_expires_at timestamptz,
             ADD CHECK ((lease_holder IS NULL) = (lease_expires_at IS NULL));
         UPDATE {q}.sessions x SET lease_epoch = l.epoch, lease_holder = l.holder,
                                   lease_expires_at = l.expires_at
         FROM {q}.leases l WHERE l.session = x.session;
         CREATE INDEX sessions_orphans ON {q}.sessions
             ((coalesce(lease_expires_at, '-infinity'::timestamptz)), session)
             WHERE ended_at IS NULL AND purged_at IS NULL;
         DROP FUNCTION {q}.acquire_lease, {q}.release_lease, {q}.renew_leases;
         DROP TABLE {q}.leases;"
    )
}

/// Opens the journal on `schema` (the connect migrates it) and checks that the schema
/// is then at the current version.
pub async fn migrated(url: &str, schema: &str, raw: &tokio_postgres::Client) -> PgJournal {
    let j = journal(url, schema, PgOptions::default()).await;
    let version: i32 = raw
        .query_one(
            &format!("SELECT max(version) FROM \"{schema}\".schema_version"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(u32::try_from(version).unwrap(), PG_SCHEMA_VERSION);
    j
}

/// Asserts that the orphan listing (the statement of `sql.rs`, `orphans`) is planned
/// as a range scan of the `leases_orphans` index in `schema`, sequential scans off.
/// Sets `raw`'s `search_path` to `schema`.
pub async fn assert_orphans_scan_their_index(raw: &tokio_postgres::Client, schema: &str) {
    raw.batch_execute(&format!(
        "SET search_path = \"{schema}\"; SET enable_seqscan = off"
    ))
    .await
    .unwrap();
    let plan: Vec<String> = raw
        .query(
            "EXPLAIN SELECT l.session FROM leases l \
             LEFT JOIN sessions x ON x.session = l.session \
             WHERE NOT l.ended AND coalesce(l.expires_at, '-infinity'::timestamptz) <= now() \
             AND x.ended_at IS NULL AND x.purged_at IS NULL \
             ORDER BY coalesce(l.expires_at, '-infinity'::timestamptz), l.session LIMIT 10",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        plan.iter().any(|l| l.contains("leases_orphans")),
        "{plan:?}"
    );
}

/// A raw client for poking at the tables directly.
pub async fn raw_client(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    tokio::spawn(conn);
    client
}

/// A transaction on `client` that holds `session`'s row in `schema`'s sessions table,
/// as an append to the session holds it until it commits. Dropped (or committed), it
/// lets go.
pub async fn hold_row<'c>(
    client: &'c mut tokio_postgres::Client,
    schema: &str,
    session: SessionId,
) -> tokio_postgres::Transaction<'c> {
    let tx = client
        .transaction()
        .await
        .expect("begin the row-holding transaction");
    tx.execute(
        &format!("SELECT 1 FROM \"{schema}\".sessions WHERE session = $1 FOR UPDATE"),
        &[session.as_uuid()],
    )
    .await
    .expect("lock the session's row");
    tx
}

/// Connects with `options` on a fresh schema.
pub async fn journal(url: &str, schema: &str, options: PgOptions) -> PgJournal {
    PgJournal::connect(url, options.schema(schema))
        .await
        .expect("connect the journal to the test database")
}

pub fn loop_id() -> LoopId {
    LoopId::from_uuid(Uuid::from_u128(0x100b))
}

/// A completion command keyed `key`; `variant` changes the payload, not the key.
pub fn command(session: SessionId, key: Uuid, variant: u32) -> JournalRecord {
    JournalRecord::from(ProcessNotification::new(ProcessCompletionNotification {
        command_id: CommandId::from_uuid(key),
        session_id: session,
        loop_id: loop_id(),
        process_handle: format!("proc-{variant}"),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }))
}

/// The consumption event of command `cause` (another record kind).
pub fn consumed(session: SessionId, cause: CommandId) -> JournalRecord {
    JournalRecord::from(SessionEvent::NotificationConsumed(
        NotificationConsumed::new(session, loop_id(), cause),
    ))
}

/// The end marker of `session`.
pub fn ended(session: SessionId) -> JournalRecord {
    JournalRecord::from(SessionEvent::SessionEnded(notify_types::SessionEnded::new(
        session,
    )))
}

/// Rebuilds `url` as a key/value connection string (`host`, `port`, `user`,
/// `dbname`, `password` from it), optionally pointed at another TCP port, with
/// `extra` appended. `None` when the server is not reached over TCP.
pub fn conninfo_with(url: &str, port: Option<u16>, extra: &str) -> Option<String> {
    let config: tokio_postgres::Config = url.parse().expect("the test database URL parses");
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => return None,
    };
    let q = |v: &str| format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"));
    let mut out = format!(
        "host={} port={}",
        q(&host),
        port.unwrap_or_else(|| config.get_ports().first().copied().unwrap_or(5432))
    );
    if let Some(user) = config.get_user() {
        out.push_str(&format!(" user={}", q(user)));
    }
    if let Some(db) = config.get_dbname() {
        out.push_str(&format!(" dbname={}", q(db)));
    }
    if let Some(pw) = config.get_password() {
        out.push_str(&format!(" password={}", q(&String::from_utf8_lossy(pw))));
    }
    out.push(' ');
    out.push_str(extra);
    Some(out)
}

/// A TCP proxy on 127.0.0.1 in front of the test database that can be told to stop
/// forwarding (a silent network partition: sockets stay open, nothing passes). It
/// stops by itself after [`StallingProxy::LIFETIME`], and when dropped.
pub struct StallingProxy {
    /// The port it listens on.
    pub port: u16,
    stalled: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl StallingProxy {
    /// The longest the proxy (and every connection through it) lives.
    pub const LIFETIME: std::time::Duration = std::time::Duration::from_secs(60);

    /// Starts a proxy to `url`'s host and port (`None`: not a TCP server).
    pub async fn start(url: &str) -> Option<Self> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let config: tokio_postgres::Config = url.parse().expect("the test database URL parses");
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            _ => return None,
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let local = listener.local_addr().expect("proxy address").port();
        let stalled = std::sync::Arc::new(AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&stalled);
        let task = tokio::spawn(async move {
            // Dropping the set (on abort or at the deadline) aborts every pipe.
            let mut pipes = tokio::task::JoinSet::new();
            let serve = async {
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        return;
                    };
                    let flag = std::sync::Arc::clone(&flag);
                    let target = (host.clone(), port);
                    pipes.spawn(async move {
                        if flag.load(Ordering::SeqCst) {
                            // Partitioned: hold the socket, answer nothing.
                            let _hold = client;
                            std::future::pending::<()>().await;
                            return;
                        }
                        let Ok(server) = tokio::net::TcpStream::connect(target).await else {
                            return;
                        };
                        let (cr, cw) = client.into_split();
                        let (sr, sw) = server.into_split();
                        tokio::join!(
                            pipe(cr, sw, std::sync::Arc::clone(&flag)),
                            pipe(sr, cw, flag)
                        );
                    });
                }
            };
            let _ = tokio::time::timeout(Self::LIFETIME, serve).await;
        });
        Some(Self {
            port: local,
            stalled,
            task,
        })
    }

    /// Stops forwarding, in both directions, on every connection, now and later.
    pub fn stall(&self) {
        self.stalled
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for StallingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    stalled: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0_u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if stalled.load(std::sync::atomic::Ordering::SeqCst) {
            // Swallow this and everything after; keep both sockets open.
            let _hold = (from, to);
            std::future::pending::<()>().await;
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
