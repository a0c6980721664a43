//! The PostgreSQL host tests' schema of their own: a journal on it, a plain client,
//! and dropping it at the end.

use std::sync::Arc;
use std::time::Duration;

use notify_journal::{PgJournal, PgOptions};

/// A journal on `schema` whose leases last `lease`.
pub(crate) async fn journal(url: &str, schema: &str, lease: Duration) -> Arc<PgJournal> {
    let options = PgOptions::default().schema(schema).lease_duration(lease);
    Arc::new(PgJournal::connect(url, options).await.unwrap())
}

/// A plain client of the database (its connection driven on the test's runtime).
pub(crate) async fn raw(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// Drops the test's schema.
pub(crate) async fn drop_schema(url: &str, schema: &str) {
    raw(url)
        .await
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}
