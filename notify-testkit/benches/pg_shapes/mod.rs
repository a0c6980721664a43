//! The PostgreSQL journal against the bare insert, in the shapes real runtimes have:
//! appenders over 8 hot sessions (appender `a` on session `a % 8`) and a session per
//! appender, at 1, 64 and 1024 appenders.
//!
//! Each measurement appends [`RECORDS`] records of a [`BODY`]-byte body in a fresh
//! schema (dropped and made again), then does the same number of bare autocommit
//! `INSERT … ON CONFLICT (id) DO NOTHING RETURNING seq` statements on a minimal table
//! in another fresh schema, from a pool of min(N, 64) connections; [`ROUNDS`] rounds,
//! alternating which side goes first, and the medians are recorded as
//! `pg_shapes/{hot8,own}/N/{journal,bare}` (appends per second).
//!
//! `PG_SHAPES_WRITERS=2,8` (a comma-separated list of writer counts) also measures
//! the journal with those [`PgOptions::writers`] in every round, beside the same bare
//! runs, recorded as `pg_shapes/{hot8,own}/N/journal_wK`: a lever compared paired.
//! `PG_SHAPES_APPENDERS=64,1024` measures only those appender counts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use notify_journal::{JournalBackend, PgJournal, PgOptions};
use notify_types::{
    CommandId, JournalRecord, LoopId, ProcessCompletionNotification, ProcessLifecycleState,
    ProcessNotification, ProcessTerminalReason, SessionId, Uuid,
};
use tokio_postgres::{Client, NoTls};

use crate::common::{metric, runtime};

/// Records per measurement.
const RECORDS: u64 = 4_000;
/// The encoded record's size, in bytes.
const BODY: usize = 200;
/// Rounds per figure; the median is recorded.
const ROUNDS: usize = 3;
/// The bare baseline's pool size cap.
const POOL: u64 = 64;
/// The journal's schema and the bare table's.
const JOURNAL_SCHEMA: &str = "nj_bench_shapes";
const BARE_SCHEMA: &str = "nj_bench_shapes_bare";

/// How appenders map to sessions.
#[derive(Clone, Copy)]
enum Shape {
    /// Appender `a` on session `a % 8`.
    Hot8,
    /// A session per appender.
    Own,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Hot8 => "hot8",
            Shape::Own => "own",
        }
    }

    fn sessions(self, appenders: u64) -> Vec<SessionId> {
        let n = match self {
            Shape::Hot8 => appenders.min(8),
            Shape::Own => appenders,
        };
        (0..n).map(|_| SessionId::new()).collect()
    }
}

/// A record of session `s` whose encoding is [`BODY`] bytes (the handle pads it).
fn record(s: SessionId, pad: usize) -> JournalRecord {
    JournalRecord::from(ProcessNotification::new(ProcessCompletionNotification {
        command_id: CommandId::from_uuid(Uuid::now_v7()),
        session_id: s,
        loop_id: LoopId::from_uuid(Uuid::from_u128(7)),
        process_handle: "h".repeat(pad),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }))
}

/// The handle length that makes a record [`BODY`] bytes long (at least 1 byte: a
/// handle is never empty; the smallest record is then a little over `BODY`).
fn pad() -> usize {
    let base = record(SessionId::new(), 0).encode().len();
    let pad = BODY.saturating_sub(base).max(1);
    eprintln!(
        "pg_shapes: records of {} bytes",
        record(SessionId::new(), pad).encode().len()
    );
    pad
}

async fn connect(url: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("the postgres bench needs a database: {e}"));
    tokio::spawn(conn);
    client
}

async fn fresh_schema(url: &str, schema: &str) {
    connect(url)
        .await
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
        ))
        .await
        .unwrap();
}

/// [`RECORDS`] appends by `appenders` concurrent appenders, in a fresh schema.
/// `writers`: `None` for the default options.
async fn journal(
    url: &str,
    shape: Shape,
    appenders: u64,
    pad: usize,
    writers: Option<usize>,
) -> Duration {
    fresh_schema(url, JOURNAL_SCHEMA).await;
    let mut options = PgOptions::default().schema(JOURNAL_SCHEMA);
    if let Some(w) = writers {
        options = options.writers(w);
    }
    let j = Arc::new(PgJournal::connect(url, options).await.unwrap());
    let sessions = shape.sessions(appenders);
    let per = RECORDS.div_ceil(appenders);
    // Encoded before the clock starts, as the bare side's bytes are.
    let work: Vec<Vec<(SessionId, JournalRecord)>> = (0..appenders)
        .map(|a| {
            let s = sessions[(a % sessions.len() as u64) as usize];
            (0..per).map(|_| (s, record(s, pad))).collect()
        })
        .collect();
    let start = Instant::now();
    let tasks: Vec<_> = work
        .into_iter()
        .map(|records| {
            let j = Arc::clone(&j);
            tokio::spawn(async move {
                for (s, r) in records {
                    let outcome = j.append(s, r).await.unwrap();
                    assert!(outcome.appended);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let took = start
        .elapsed()
        .mul_f64(RECORDS as f64 / (per * appenders) as f64);
    j.close().await;
    took
}

/// [`RECORDS`] bare inserts by `appenders` concurrent appenders over a pool of
/// min(appenders, 64) connections, in a fresh schema.
async fn bare(url: &str, appenders: u64, pad: usize) -> Duration {
    fresh_schema(url, BARE_SCHEMA).await;
    let mut pool = Vec::new();
    for _ in 0..appenders.min(POOL) {
        pool.push(tokio::sync::Mutex::new(connect(url).await));
    }
    pool[0]
        .lock()
        .await
        .batch_execute(&format!(
            "CREATE TABLE {BARE_SCHEMA}.bare (
                 id uuid PRIMARY KEY, seq bigserial NOT NULL, bytes bytea NOT NULL)"
        ))
        .await
        .unwrap();
    let pool = Arc::new(pool);
    let sql = format!(
        "INSERT INTO {BARE_SCHEMA}.bare (id, bytes) VALUES ($1, $2)
         ON CONFLICT (id) DO NOTHING RETURNING seq"
    );
    let bytes = record(SessionId::new(), pad).encode();
    let per = RECORDS.div_ceil(appenders);
    let start = Instant::now();
    let tasks: Vec<_> = (0..appenders)
        .map(|a| {
            let pool = Arc::clone(&pool);
            let (sql, bytes) = (sql.clone(), bytes.clone());
            tokio::spawn(async move {
                let slot = &pool[(a % pool.len() as u64) as usize];
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
    start
        .elapsed()
        .mul_f64(RECORDS as f64 / (per * appenders) as f64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The extra writer counts of `PG_SHAPES_WRITERS`.
fn extra_writers() -> Vec<usize> {
    std::env::var("PG_SHAPES_WRITERS")
        .unwrap_or_default()
        .split(',')
        .filter(|w| !w.trim().is_empty())
        .map(|w| w.trim().parse().unwrap())
        .collect()
}

/// The appender counts to measure: `PG_SHAPES_APPENDERS`, else 1, 64 and 1024.
fn appender_counts() -> Vec<u64> {
    let only: Vec<u64> = std::env::var("PG_SHAPES_APPENDERS")
        .unwrap_or_default()
        .split(',')
        .filter(|n| !n.trim().is_empty())
        .map(|n| n.trim().parse().unwrap())
        .collect();
    if only.is_empty() {
        vec![1, 64, 1024]
    } else {
        only
    }
}

/// Measures every shape and appender count; records the medians.
pub(crate) fn run(url: &str) {
    let rt = runtime();
    let pad = pad();
    // `None`: the default options; then the extra writer counts.
    let variants: Vec<Option<usize>> = std::iter::once(None)
        .chain(extra_writers().into_iter().map(Some))
        .collect();
    let rate = |d: Duration| RECORDS as f64 / d.as_secs_f64();
    for shape in [Shape::Hot8, Shape::Own] {
        for &appenders in &appender_counts() {
            let mut js = vec![Vec::new(); variants.len()];
            let mut bs = Vec::new();
            for round in 0..ROUNDS {
                rt.block_on(async {
                    if round % 2 == 1 {
                        bs.push(rate(bare(url, appenders, pad).await));
                    }
                    // Every other round the variants run in reverse order.
                    let order: Vec<usize> = if round % 2 == 0 {
                        (0..variants.len()).collect()
                    } else {
                        (0..variants.len()).rev().collect()
                    };
                    for v in order {
                        let d = journal(url, shape, appenders, pad, variants[v]).await;
                        js[v].push(rate(d));
                    }
                    if round % 2 == 0 {
                        bs.push(rate(bare(url, appenders, pad).await));
                    }
                });
            }
            let name = format!("pg_shapes/{}/{appenders}", shape.name());
            for (v, rates) in variants.iter().zip(js) {
                let label = match v {
                    None => "journal".to_owned(),
                    Some(w) => format!("journal_w{w}"),
                };
                let shown: Vec<String> = rates
                    .iter()
                    .zip(&bs)
                    .map(|(j, b)| format!("{j:.0}/{b:.0}"))
                    .collect();
                eprintln!("{name}: {label}/bare per round {}", shown.join(" "));
                metric(&format!("{name}/{label}"), median(rates), "/s");
            }
            metric(&format!("{name}/bare"), median(bs), "/s");
        }
    }
    rt.block_on(async {
        let c = connect(url).await;
        c.batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {JOURNAL_SCHEMA} CASCADE;
             DROP SCHEMA IF EXISTS {BARE_SCHEMA} CASCADE"
        ))
        .await
        .unwrap();
    });
}
