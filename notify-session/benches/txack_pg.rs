//! Acknowledgements per second on PostgreSQL, plain against transactional
//! (`cargo bench -p notify-session --bench txack_pg`; the database is
//! `NOTIFY_TEST_DATABASE_URL`, default the local test database; each sample uses a
//! schema of its own and drops it).
//!
//! * `txack_pg/plain/N`: N consumers (one loop each) of one session receive and `ack`
//!   notifications (the journal's own append, batched by its writer connections).
//! * `txack_pg/tx/N`: the same with `ack_in_pg`, each consumer on its own connection:
//!   `BEGIN`, the consumption appended, one `INSERT` into the application's table (a
//!   statement prepared once per connection, as a driver's statement cache does), all
//!   in one transaction, `COMMIT`, then `committed()`: four round trips.
//! * `txack_pg/tx_with/N`: the same transaction run by `ack_in_pg_with`, which sends
//!   `BEGIN`, the consumption and the `INSERT` together, then `COMMIT`: two round
//!   trips.
//! * `.../64x8`: 64 consumers over 8 sessions (loop `i` on session `i % 8`), each mode.
//!
//! The notifications are notified before the clock starts; the consumers' connections
//! are opened before it too. A sample acknowledges at least 512 notifications.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use notify_journal::{PgJournal, PgOptions};
use notify_session::{PgAck, PgAcked};
use tokio_postgres::NoTls;

mod txack_support;
use txack_support::{ONE_SESSION, Shape, ack_group, prepared, timed};

const URL_VAR: &str = "NOTIFY_TEST_DATABASE_URL";
const DEFAULT_URL: &str = "host=127.0.0.1 port=5432 user=postgres dbname=test";
const MIN_ACKS: u64 = 512;

fn url() -> String {
    std::env::var(URL_VAR)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_URL.to_owned())
}

async fn client(schema: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&url(), NoTls).await.unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!("SET search_path = \"{schema}\""))
        .await
        .unwrap();
    client
}

fn acks(rt: &tokio::runtime::Runtime, shape: Shape, mode: &'static str, iters: u64) -> Duration {
    let consumers = shape.consumers;
    static SAMPLE: AtomicU64 = AtomicU64::new(0);
    // At least MIN_ACKS per sample, so that the first statements on fresh
    // connections do not dominate a sample; the time is scaled back to `iters`.
    let per = iters.max(MIN_ACKS).div_ceil(consumers as u64);
    let schema = format!(
        "ns_txack_bench_{}_{}",
        std::process::id(),
        SAMPLE.fetch_add(1, Ordering::Relaxed)
    );
    let elapsed = rt.block_on(async {
        let journal = Arc::new(
            PgJournal::connect(&url(), PgOptions::default().schema(&schema))
                .await
                .unwrap(),
        );
        client(&schema)
            .await
            .batch_execute("CREATE TABLE conversation (id uuid PRIMARY KEY, body text NOT NULL)")
            .await
            .unwrap();
        let (sessions, inboxes) = prepared(Arc::clone(&journal), shape, per).await;
        let for_acks = Arc::clone(&journal);
        let schema_for = schema.clone();
        let elapsed = timed(
            inboxes,
            per,
            // The application's statement prepared once per connection, as its driver's
            // statement cache would (sqlx's, deadpool's `prepare_cached`).
            async |_| {
                let client = client(&schema_for).await;
                let insert = client
                    .prepare("INSERT INTO conversation (id, body) VALUES ($1, 'build exited')")
                    .await
                    .unwrap();
                (Arc::clone(&for_acks), client, insert)
            },
            move |received, (journal, mut client, insert)| async move {
                let id = *received.command_id().as_uuid();
                match mode {
                    "tx" => {
                        let t = client.transaction().await.unwrap();
                        // The consumption first: it says whether to write.
                        if let PgAck::Write(pending) =
                            received.ack_in_pg(&journal, &t).await.unwrap()
                        {
                            t.execute(&insert, &[&id]).await.unwrap();
                            t.commit().await.unwrap();
                            pending.committed().await.unwrap();
                        }
                    }
                    "tx_with" => {
                        let acked = received
                            .ack_in_pg_with(&journal, &mut client, async |t| {
                                t.execute(&insert, &[&id]).await
                            })
                            .await
                            .unwrap();
                        assert!(matches!(acked, PgAcked::Committed(1)));
                    }
                    "plain" => received.ack().await.unwrap(),
                    other => panic!("no acknowledgement mode {other}"),
                }
                (journal, client, insert)
            },
        )
        .await;
        drop(sessions);
        journal.close().await;
        client(&schema)
            .await
            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .await
            .unwrap();
        elapsed
    });
    elapsed.mul_f64(iters as f64 / (per * consumers as u64) as f64)
}

fn bench(c: &mut Criterion) {
    let shapes = [
        ONE_SESSION[0],
        ONE_SESSION[1],
        Shape {
            consumers: 64,
            sessions: 8,
        },
    ];
    ack_group(c, "txack_pg", &["plain", "tx", "tx_with"], &shapes, acks);
}

criterion_group!(benches, bench);
criterion_main!(benches);
