//! Batch acknowledgements on real PostgreSQL: the scenarios of `batch_ack.rs`
//! (`batch_support`), each in a schema of its own.
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod batch_support;

use std::future::Future;
use std::sync::Arc;

use notify_journal::{PgJournal, PgOptions};
use notify_testkit::postgres::database_url;
use notify_types::Uuid;

/// Runs `scenario` on a journal in a fresh schema, then drops the schema.
async fn on_postgres<F, Fut>(test: &str, scenario: F)
where
    F: FnOnce(Arc<PgJournal>) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(url) = database_url(test) else {
        return;
    };
    let schema = format!("batch_ack_{}", Uuid::new_v4().simple());
    let journal = PgJournal::connect(&url, PgOptions::default().schema(&schema))
        .await
        .unwrap();
    scenario(Arc::new(journal)).await;
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_is_kept() {
    on_postgres("order_is_kept", batch_support::order_is_kept).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_released_before_its_commit() {
    on_postgres(
        "nothing_is_released_before_its_commit",
        batch_support::nothing_is_released_before_its_commit,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_spanning_the_end_of_this_session() {
    on_postgres("a_batch_spanning_the_end_of_this_session", |j| {
        batch_support::a_batch_spanning_the_end(j, false)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_spanning_an_end_by_another_handle() {
    on_postgres("a_batch_spanning_an_end_by_another_handle", |j| {
        batch_support::a_batch_spanning_the_end(j, true)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_ack_released_none() {
    on_postgres(
        "a_cancelled_ack_released_none",
        batch_support::a_cancelled_ack_released_none,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_answer_is_refused_whole() {
    on_postgres(
        "a_short_answer_is_refused_whole",
        batch_support::a_short_answer_is_refused_whole,
    )
    .await;
}
