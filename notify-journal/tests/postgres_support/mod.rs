//! Helpers shared by the PostgreSQL journal tests: where the database is, whether to
//! skip, fresh schemas and record builders.
#![allow(dead_code, unreachable_pub, clippy::expect_used)]

use std::io::Write;

use notify_journal::{PgJournal, PgOptions};
use notify_types::{
    CommandId, JournalRecord, LoopId, NotificationConsumed, ProcessCompletionNotification,
    ProcessLifecycleState, ProcessNotification, ProcessTerminalReason, SessionEvent, SessionId,
    Uuid,
};

/// The one environment variable naming the test database (a libpq-style string or a
/// `postgresql://` URL).
pub const DATABASE_URL_VAR: &str = "NOTIFY_TEST_DATABASE_URL";

/// What CI uses when the variable is unset (CI sets `CI=true`).
pub const CI_DEFAULT_URL: &str = "host=127.0.0.1 port=5432 user=postgres dbname=test";

/// The database to test against, or `None` (after saying so plainly) when neither
/// `NOTIFY_TEST_DATABASE_URL` nor `CI` is set. In CI, or with the variable set, the
/// database must be reachable: tests then fail hard if it is not.
pub fn database_url(test: &str) -> Option<String> {
    if let Some(url) = std::env::var(DATABASE_URL_VAR)
        .ok()
        .filter(|v| !v.is_empty())
    {
        return Some(url);
    }
    if std::env::var_os("CI").is_some() {
        return Some(CI_DEFAULT_URL.to_owned());
    }
    // Written past the test harness's capture, so the skip is visible.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {DATABASE_URL_VAR} is unset and CI is unset, so there is no \
         PostgreSQL to test against; set {DATABASE_URL_VAR}='{CI_DEFAULT_URL}' to run it"
    );
    None
}

/// A fresh schema name, so tests sharing the database never see each other's tables.
pub fn fresh_schema(tag: &str) -> String {
    format!("nj_{tag}_{}", Uuid::now_v7().simple())
}

/// Drops a test schema (best effort; a leftover schema is harmless).
pub async fn drop_schema(url: &str, schema: &str) {
    if let Ok((client, conn)) = tokio_postgres::connect(url, tokio_postgres::NoTls).await {
        tokio::spawn(conn);
        let _ = client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await;
    }
}

/// A raw client for poking at the tables directly.
pub async fn raw_client(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    tokio::spawn(conn);
    client
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
