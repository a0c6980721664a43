//! PostgreSQL journal benchmarks beside the redb journal
//! (`cargo bench -p notify-testkit --features postgres --bench postgres`).
//!
//! * `concurrent_appenders/{redb,postgres}/N`: durable appends per second with N
//!   concurrent appenders (each on its own session, each awaiting its
//!   acknowledgement), on redb (`Durability::Immediate`, a temporary file) and on the
//!   PostgreSQL at `NOTIFY_TEST_DATABASE_URL` (default: the local test database).
//! * `concurrent_appenders/bare_insert/N`: the same load as plain autocommit
//!   `INSERT ... ON CONFLICT (id) DO NOTHING RETURNING seq` statements on the same
//!   database, one connection per appender (a pool capped at 64 connections, each
//!   used by one appender at a time): the floor of a durable single-row write, the
//!   baseline `PgJournal` is compared with (`postgres/N` over `bare_insert/N`).
//!   Both sides start from at least 50,000 rows, analyzed (a steady state, not an
//!   empty table the run fills faster than autovacuum refreshes its statistics).
//! * `shapes` (not criterion: `target/bench-metrics/pg_shapes/...`, which `cargo xtask
//!   bench` prints as ratios): 4,000 appends of a 200-byte body by N appenders (1, 64,
//!   1024) in two shapes, appender `a` on session `a % 8` (**8 hot sessions**) and a
//!   session per appender, each beside the bare autocommit insert on a minimal table
//!   (a pool of min(N, 64) connections), both in a fresh schema per round, medians of
//!   3 rounds (alternating which side goes first). `PG_BENCH=shapes` runs only these.
//! * `one_session/postgres/{1,3}_process`: appends per second to ONE session from one
//!   process vs from three processes at once (the bench re-executes itself as the
//!   children), each with 16 concurrent appenders: the cost of cross-process row
//!   locking. The three-process figure includes starting the children.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
#[path = "pg_shapes/mod.rs"]
mod shapes;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group};
use notify_journal::{JournalBackend, PgJournal, PgOptions, RedbJournal, RedbOptions};
use notify_types::{
    CommandId, JournalRecord, LoopId, ProcessCompletionNotification, ProcessLifecycleState,
    ProcessNotification, ProcessTerminalReason, SessionId, Uuid,
};

const URL_VAR: &str = "NOTIFY_TEST_DATABASE_URL";
const DEFAULT_URL: &str = "host=127.0.0.1 port=5432 user=postgres dbname=test";
// Named for the journal schema version: builds at different versions sharing a test
// database never meet (and refuse) each other's tables.
const SCHEMA: &str = "nj_bench_v9";
/// Set in the child processes of the one-session bench: `<session>/<appends>`.
const CHILD_VAR: &str = "NJ_PG_BENCH_CHILD";
const CHILD_TASKS: u64 = 16;

fn url() -> String {
    std::env::var(URL_VAR)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_URL.to_owned())
}

fn record(s: SessionId) -> JournalRecord {
    JournalRecord::from(ProcessNotification::new(ProcessCompletionNotification {
        command_id: CommandId::from_uuid(Uuid::now_v7()),
        session_id: s,
        loop_id: LoopId::from_uuid(Uuid::from_u128(7)),
        process_handle: "build-42".to_owned(),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn pg() -> PgJournal {
    PgJournal::connect(&url(), PgOptions::default().schema(SCHEMA))
        .await
        .unwrap_or_else(|e| panic!("the postgres bench needs a database ({URL_VAR}): {e}"))
}

/// `iters` appends spread over `n` concurrent appenders, each on its own session
/// (or all on `one`); returns the wall time.
async fn drive<J: JournalBackend + 'static>(
    j: &Arc<J>,
    n: u64,
    iters: u64,
    one: Option<SessionId>,
) -> Duration {
    let per = iters.div_ceil(n).max(1);
    let start = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let j = Arc::clone(j);
            // A fresh session per appender unless all share `one`.
            let s = match one {
                Some(s) => s,
                None => SessionId::new(),
            };
            tokio::spawn(async move {
                for _ in 0..per {
                    j.append(s, record(s)).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    // Scale to the requested count (the last round may overshoot by < n).
    start.elapsed().mul_f64(iters as f64 / (per * n) as f64)
}

/// Rows both the journal's tables and the bare table hold before measuring.
const POPULATED: u64 = 50_000;

/// Brings both sides to a steady state before measuring: at least
/// [`POPULATED`] rows each (the journal's through the journal), then `ANALYZE`, so
/// neither is planned for an empty table that the run then fills (plans follow
/// the statistics, which autovacuum refreshes only every minute or so).
async fn populate(pg: &Arc<PgJournal>) {
    let (client, conn) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("the postgres bench needs a database ({URL_VAR}): {e}"));
    tokio::spawn(conn);
    client
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {SCHEMA}.bare (
                 id uuid PRIMARY KEY, seq bigserial NOT NULL, bytes bytea NOT NULL)"
        ))
        .await
        .unwrap();
    let count = |table: &'static str| {
        let client = &client;
        async move {
            let n: i64 = client
                .query_one(&format!("SELECT count(*) FROM {SCHEMA}.{table}"), &[])
                .await
                .unwrap()
                .get(0);
            u64::try_from(n).unwrap()
        }
    };
    let frames = count("frames").await;
    if frames < POPULATED {
        drive(pg, 1024, POPULATED - frames, None).await;
    }
    let bare = count("bare").await;
    if bare < POPULATED {
        let bytes = record(SessionId::new()).encode();
        client
            .execute(
                &format!(
                    "INSERT INTO {SCHEMA}.bare (id, bytes)
                     SELECT gen_random_uuid(), $1 FROM generate_series(1, $2::int8)"
                ),
                &[&bytes, &i64::try_from(POPULATED - bare).unwrap()],
            )
            .await
            .unwrap();
    }
    client
        .batch_execute(&format!(
            "ANALYZE {SCHEMA}.sessions; ANALYZE {SCHEMA}.frames; ANALYZE {SCHEMA}.bare"
        ))
        .await
        .unwrap();
}

/// The bare baseline's pool size cap.
const BARE_POOL: u64 = 64;

/// Opens `n` connections (at most [`BARE_POOL`]) and creates the baseline table.
async fn bare_pool(n: u64) -> Arc<Vec<tokio::sync::Mutex<tokio_postgres::Client>>> {
    let mut pool = Vec::new();
    for _ in 0..n.min(BARE_POOL) {
        let (client, conn) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("the postgres bench needs a database ({URL_VAR}): {e}"));
        tokio::spawn(conn);
        pool.push(tokio::sync::Mutex::new(client));
    }
    pool[0]
        .lock()
        .await
        .batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {SCHEMA};
             CREATE TABLE IF NOT EXISTS {SCHEMA}.bare (
                 id uuid PRIMARY KEY, seq bigserial NOT NULL, bytes bytea NOT NULL)"
        ))
        .await
        .unwrap();
    Arc::new(pool)
}

/// `iters` bare inserts spread over `n` concurrent appenders; appender `i` uses
/// pooled connection `i % pool size`, one statement at a time.
async fn drive_bare(
    pool: &Arc<Vec<tokio::sync::Mutex<tokio_postgres::Client>>>,
    n: u64,
    iters: u64,
) -> Duration {
    let per = iters.div_ceil(n).max(1);
    let sql = format!(
        "INSERT INTO {SCHEMA}.bare (id, bytes) VALUES ($1, $2)
         ON CONFLICT (id) DO NOTHING RETURNING seq"
    );
    let bytes = record(SessionId::new()).encode();
    let start = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let pool = Arc::clone(pool);
            let (sql, bytes) = (sql.clone(), bytes.clone());
            tokio::spawn(async move {
                let slot = &pool[(i % pool.len() as u64) as usize];
                for _ in 0..per {
                    let client = slot.lock().await;
                    let row = client
                        .query_opt(&sql, &[&Uuid::now_v7(), &bytes])
                        .await
                        .unwrap();
                    assert!(row.is_some());
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    start.elapsed().mul_f64(iters as f64 / (per * n) as f64)
}

fn concurrent_appenders(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let redb =
        Arc::new(RedbJournal::open(dir.path().join("bench.redb"), RedbOptions::default()).unwrap());
    let pg = Arc::new(rt.block_on(pg()));
    rt.block_on(populate(&pg));
    let mut g = c.benchmark_group("concurrent_appenders");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Elements(1));
    for n in [1_u64, 64, 1024] {
        g.bench_with_input(BenchmarkId::new("redb", n), &n, |b, &n| {
            b.iter_custom(|iters| rt.block_on(drive(&redb, n, iters, None)));
        });
        g.bench_with_input(BenchmarkId::new("postgres", n), &n, |b, &n| {
            b.iter_custom(|iters| rt.block_on(drive(&pg, n, iters, None)));
        });
        let bare = rt.block_on(bare_pool(n));
        g.bench_with_input(BenchmarkId::new("bare_insert", n), &n, |b, &n| {
            b.iter_custom(|iters| rt.block_on(drive_bare(&bare, n, iters)));
        });
    }
    g.finish();
    rt.block_on(pg.close());
}

fn one_session(c: &mut Criterion) {
    let rt = runtime();
    let pg = Arc::new(rt.block_on(pg()));
    let exe = std::env::current_exe().unwrap();
    let mut g = c.benchmark_group("one_session");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Elements(1));
    g.bench_function("postgres/1_process", |b| {
        b.iter_custom(|iters| rt.block_on(drive(&pg, CHILD_TASKS, iters, Some(SessionId::new()))));
    });
    g.bench_function("postgres/3_processes", |b| {
        b.iter_custom(|iters| {
            let s = SessionId::new();
            let per = iters.div_ceil(3).max(1);
            let start = Instant::now();
            let children: Vec<_> = (0..3)
                .map(|_| {
                    Command::new(&exe)
                        .env(CHILD_VAR, format!("{s}/{per}"))
                        .spawn()
                        .unwrap()
                })
                .collect();
            for mut child in children {
                assert!(child.wait().unwrap().success(), "bench child failed");
            }
            start.elapsed().mul_f64(iters as f64 / (per * 3) as f64)
        });
    });
    g.finish();
    rt.block_on(pg.close());
}

/// A child of the three-process bench: `appends` appends to the given session.
fn child(role: &str) {
    let (s, n) = role.split_once('/').unwrap();
    let s = SessionId::from_uuid(s.parse().unwrap());
    let n: u64 = n.parse().unwrap();
    let rt = runtime();
    rt.block_on(async {
        let j = Arc::new(pg().await);
        drive(&j, CHILD_TASKS, n, Some(s)).await;
        j.close().await;
    });
}

criterion_group!(benches, concurrent_appenders, one_session);

fn main() {
    if let Ok(role) = std::env::var(CHILD_VAR) {
        child(&role);
        return;
    }
    shapes::run(&url());
    if std::env::var("PG_BENCH").is_ok_and(|v| v == "shapes") {
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
