//! One consumer draining a backlog on PostgreSQL (`cargo bench -p notify-testkit --features postgres
//! --bench drain_pg`; the database is `NOTIFY_TEST_DATABASE_URL`, default the local
//! test database; each sample uses a schema of its own and drops it): acknowledgements
//! awaited in turn against acknowledged in batches, as the `drain` bench does on redb
//! (`drain_pg/turn/1`, `drain_pg/batch/1`, and the figures `drain_pg/turn_per_s`,
//! `drain_pg/batch_per_s`, `drain_pg/ratio`). A batch is one `append_all`: one
//! transaction of the journal's own.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use notify_journal::{PgJournal, PgOptions};
use tokio_postgres::NoTls;

mod drain_support;
use drain_support::{drain_group, drain_on, runtime};

const URL_VAR: &str = "NOTIFY_TEST_DATABASE_URL";
const DEFAULT_URL: &str = "host=127.0.0.1 port=5432 user=postgres dbname=test";

fn url() -> String {
    std::env::var(URL_VAR)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_URL.to_owned())
}

/// Drains on a fresh schema, dropped afterwards.
fn drain(rt: &tokio::runtime::Runtime, backlog: u64, count: u64, batched: bool) -> Duration {
    static SAMPLE: AtomicU64 = AtomicU64::new(0);
    let schema = format!(
        "ns_drain_bench_{}_{}",
        std::process::id(),
        SAMPLE.fetch_add(1, Ordering::Relaxed)
    );
    rt.block_on(async {
        let journal = std::sync::Arc::new(
            PgJournal::connect(&url(), PgOptions::default().schema(&schema))
                .await
                .unwrap(),
        );
        let elapsed = drain_on(journal.clone(), backlog, count, batched).await;
        journal.close().await;
        let (client, conn) = tokio_postgres::connect(&url(), NoTls).await.unwrap();
        tokio::spawn(conn);
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .await
            .unwrap();
        elapsed
    })
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    drain_group(c, "drain_pg", |backlog, count, batched| {
        drain(&rt, backlog, count, batched)
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
