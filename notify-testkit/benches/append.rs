//! Append benchmarks (`cargo bench -p notify-testkit --bench append`).
//!
//! Every sample starts from an empty file, so the database size per measurement is
//! fixed by the sample's iteration count. Durability is the default everywhere
//! (`Immediate`: every acknowledged append is on disk; redb's default for the raw
//! baselines).
//!
//! * `append/journal/N`: N concurrent appenders each awaiting its acknowledgement,
//!   appender `a` writing to session `a % 8`, record keys drawn from one shared counter
//!   (time-ordered, like the UUIDv7 of `CommandId::new()`).
//! * `append/journal_quick_repair/N`: the same with `quick_repair(true)`.
//! * `append/raw_redb_minimal/K`: raw redb writing the minimal idempotent layout from
//!   one thread, K records per transaction: one table `seq -> record bytes` (the
//!   record's canonical JSON), one table `ID -> seq`; no dedup read, no checksum.
//! * `append/sqlite_wal_full/K`: SQLite in WAL mode, `synchronous=FULL`, a unique key
//!   on the record ID, K appends per transaction over one connection.
//! * `append/persistent_queue_group/64`: persistent-queue 0.2 on redb with group
//!   durability and 64 producer threads (no ID dedup).
//! * `spread/journal/S`: 64 appenders whose appends spread over S sessions (append `j`
//!   of appender `a` goes to session `(a + 64 j) mod S`), at least 16,384 appends per
//!   sample.
//! * Not a time: per-append latency p50/p99 at 1 and 64 appenders (one pass of
//!   4,096 and 16,384 appends), recorded as `latency/journal/N/p50|p99` metrics.
//! * Not a time: the writer thread's CPU per append at 64 appenders over 1, 8, 1,000
//!   and 100,000 sessions (one pass of 32,768 appends each, from the thread's
//!   `schedstat`; Linux), recorded as `writer_cpu/spread/S` metrics.
//! * Not criterion: the key census's cost (`paired/census_vs_off_{1,64,1024}`,
//!   `paired/census_vs_off_spread_1000`): the default journal, which confirms every
//!   index miss against the session's log before a new frame is written, against
//!   `confirm_misses(false)`, in alternating rounds of one run.
//! * Not criterion: the background scrub's cost (`paired/scrub_vs_off_{1,64}`): the
//!   default journal scrubbing continuously (`scrub_interval(0)`, default pace)
//!   against `RedbVerifyOnOpen::Off`, in alternating rounds of one run, each sample
//!   appending to a copy of one journal of 10,000 records (so that the scrub reads at
//!   its full pace from the first append on; a sample whose scrub finished no pass or
//!   stopped fails the bench).
//! * Not criterion: appends (64 appenders) into a file already holding 1,024,000 records
//!   (`common::fixture`, opened once) against a fresh file (issue 34):
//!   `paired/aged_1m_vs_fresh_64` with the default options, and
//!   `paired/census_cliff_scaled_1m_vs_fresh_64` with the key census's budget cut to
//!   2^17 keys (its cliff at a reachable scale; see `bench_aged`).
//! * Not criterion: every ratio with a target measured again as paired rounds (10
//!   rounds alternating the two sides, `paired/NAME/{a,b}` metrics, appends/s): on a
//!   machine whose load drifts, the two sides of a ratio see the same load.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
#[path = "scrub/mod.rs"]
mod scrub;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{metric, paired, record, runtime, scale, session, split};
use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use notify_journal::{RedbJournal, RedbOptions, RedbVerifyOnOpen};
use redb::TableDefinition;

const RECORDS: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("records");
const IDS: TableDefinition<'_, u128, u64> = TableDefinition::new("ids");

/// The sessions the plain append benchmarks spread their records over.
const SESSIONS: u64 = 8;

/// The fewest appends one spread sample makes, so every sample spreads over enough
/// sessions to show the layout's cost.
const SPREAD_MIN: u64 = 16_384;

/// Appends `per` records from each of `appenders` tasks; appender `a`'s `j`-th append
/// goes to session `route(a, j)`. Returns the elapsed time and each append's latency
/// when `latencies` is set.
fn drive(
    rt: &tokio::runtime::Runtime,
    options: RedbOptions,
    appenders: u64,
    per: u64,
    route: Route,
    latencies: bool,
) -> (Duration, Vec<Duration>) {
    let dir = tempfile::tempdir().unwrap();
    let j = RedbJournal::open(dir.path().join("j.redb"), options).unwrap();
    let out = drive_on(rt, &j, appenders, per, route, latencies, 0);
    j.close();
    out
}

/// [`drive`] on a journal already open (left open), keys from `first_key` on.
fn drive_on(
    rt: &tokio::runtime::Runtime,
    j: &RedbJournal,
    appenders: u64,
    per: u64,
    route: Route,
    latencies: bool,
    first_key: u64,
) -> (Duration, Vec<Duration>) {
    let next_key = Arc::new(AtomicU64::new(first_key));
    let started = Instant::now();
    let lat = rt.block_on(async {
        let tasks: Vec<_> = (0..appenders)
            .map(|a| {
                let j = j.clone();
                let next_key = Arc::clone(&next_key);
                tokio::spawn(async move {
                    let mut lat = Vec::with_capacity(if latencies { per as usize } else { 0 });
                    for i in 0..per {
                        let s = session(route(a, i));
                        let key = next_key.fetch_add(1, Ordering::Relaxed);
                        let r = record(s, key);
                        let t = Instant::now();
                        j.append(s, r).await.unwrap();
                        if latencies {
                            lat.push(t.elapsed());
                        }
                    }
                    lat
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all
    });
    (started.elapsed(), lat)
}

fn by_appender(a: u64, _: u64) -> u64 {
    a % SESSIONS
}

fn append_journal(
    rt: &tokio::runtime::Runtime,
    options: &RedbOptions,
    appenders: u64,
    iters: u64,
) -> Duration {
    let (per, total) = split(iters, appenders);
    let (elapsed, _) = drive(rt, options.clone(), appenders, per, by_appender, false);
    scale(elapsed, iters, total)
}

fn append_raw_minimal(per_txn: u64, iters: u64) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let db = redb::Database::create(dir.path().join("raw.redb")).unwrap();
    let (txns, total) = split(iters, per_txn);
    let started = Instant::now();
    let mut seq = 0u64;
    for _ in 0..txns {
        let txn = db.begin_write().unwrap();
        {
            let mut records = txn.open_table(RECORDS).unwrap();
            let mut ids = txn.open_table(IDS).unwrap();
            for a in 0..per_txn {
                let r = record(session(a % SESSIONS), seq);
                seq += 1;
                records.insert(seq, r.encode().as_slice()).unwrap();
                ids.insert(r.key().as_u128(), seq).unwrap();
            }
        }
        txn.commit().unwrap();
    }
    scale(started.elapsed(), iters, total)
}

fn append_sqlite(per_txn: u64, iters: u64) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("sq.db")).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
         CREATE TABLE frames(session BLOB NOT NULL, seq INTEGER NOT NULL,
           id BLOB NOT NULL, body BLOB NOT NULL, PRIMARY KEY(session, seq), UNIQUE(session, id));",
    )
    .unwrap();
    let s = session(0);
    let sid = s.as_uuid().as_bytes().to_vec();
    let (txns, total) = split(iters, per_txn);
    let started = Instant::now();
    let mut n = 0u64;
    for _ in 0..txns {
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        {
            let mut stmt = conn
                .prepare_cached(
                    "INSERT INTO frames(session, seq, id, body) VALUES (?1, \
                     (SELECT COALESCE(MAX(seq), 0) + 1 FROM frames WHERE session = ?1), ?2, ?3)",
                )
                .unwrap();
            for _ in 0..per_txn {
                n += 1;
                let r = record(s, n);
                stmt.execute(rusqlite::params![
                    sid,
                    r.key().as_bytes().to_vec(),
                    r.encode()
                ])
                .unwrap();
            }
        }
        conn.execute_batch("COMMIT").unwrap();
    }
    scale(started.elapsed(), iters, total)
}

fn append_persistent_queue(producers: u64, iters: u64) -> Duration {
    use persistent_queue::{Builder, Durability as PqDurability, RedbStore};
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open(dir.path().join("pq.redb")).unwrap();
    let (tx, _rx) = Builder::new(store)
        .capacity(1 << 30)
        .durability(PqDurability::Group)
        .open()
        .unwrap();
    let (per, total) = split(iters, producers);
    let s = session(0);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for p in 0..producers {
            let tx = tx.clone();
            scope.spawn(move || {
                for i in 0..per {
                    tx.push(&record(s, p * per + i).encode()).unwrap();
                }
            });
        }
    });
    scale(started.elapsed(), iters, total)
}

fn bench_append(c: &mut Criterion) {
    let rt = runtime();
    let defaults = RedbOptions::default();
    let quick_repair = RedbOptions::default().quick_repair(true);
    let mut g = c.benchmark_group("append");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    for n in [1u64, 16, 64, 256, 1024] {
        g.bench_with_input(BenchmarkId::new("journal", n), &n, |b, &n| {
            b.iter_custom(|iters| append_journal(&rt, &defaults, n, iters));
        });
    }
    for n in [1u64, 64] {
        g.bench_with_input(BenchmarkId::new("journal_quick_repair", n), &n, |b, &n| {
            b.iter_custom(|iters| append_journal(&rt, &quick_repair, n, iters));
        });
    }
    for k in [1u64, 64, 1000] {
        g.bench_with_input(BenchmarkId::new("raw_redb_minimal", k), &k, |b, &k| {
            b.iter_custom(|iters| append_raw_minimal(k, iters));
        });
    }
    for k in [1u64, 64] {
        g.bench_with_input(BenchmarkId::new("sqlite_wal_full", k), &k, |b, &k| {
            b.iter_custom(|iters| append_sqlite(k, iters));
        });
    }
    g.bench_with_input(
        BenchmarkId::new("persistent_queue_group", 64),
        &64u64,
        |b, &n| {
            b.iter_custom(|iters| append_persistent_queue(n, iters));
        },
    );
    g.finish();
}

/// Which session appender `a`'s `j`-th append goes to.
type Route = fn(u64, u64) -> u64;

fn spread_route<const S: u64>(a: u64, j: u64) -> u64 {
    (a + 64 * j) % S
}

fn bench_spread(c: &mut Criterion) {
    let rt = runtime();
    let mut g = c.benchmark_group("spread");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    let routes: [(u64, Route); 4] = [
        (1, spread_route::<1>),
        (8, spread_route::<8>),
        (1_000, spread_route::<1_000>),
        (100_000, spread_route::<100_000>),
    ];
    for (sessions, route) in routes {
        g.bench_with_input(BenchmarkId::new("journal", sessions), &sessions, |b, _| {
            b.iter_custom(|iters| {
                let (per, total) = split(iters.max(SPREAD_MIN), 64);
                let (elapsed, _) = drive(&rt, RedbOptions::default(), 64, per, route, false);
                scale(elapsed, iters, total)
            });
        });
    }
    g.finish();
}

/// The CPU time the journal's writer thread has used so far, in nanoseconds (Linux:
/// `/proc/self/task/*/schedstat` of the thread named `notify-journal-writer`, the only
/// `notify-journal-` thread of a journal opened without the scrub).
fn writer_cpu_ns() -> Option<u64> {
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.starts_with("notify-journal-") {
            let stat = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
            return stat.split_whitespace().next()?.parse().ok();
        }
    }
    None
}

/// One pass per spread, outside criterion: the writer thread's CPU per append.
fn bench_writer_cpu(_: &mut Criterion) {
    let rt = runtime();
    let routes: [(u64, Route); 4] = [
        (1, spread_route::<1>),
        (8, spread_route::<8>),
        (1_000, spread_route::<1_000>),
        (100_000, spread_route::<100_000>),
    ];
    for (sessions, route) in routes {
        let dir = tempfile::tempdir().unwrap();
        // No scrub: its thread's name (`notify-journal-scrub`) reads, cut to the 15
        // bytes Linux keeps, as the writer's (`notify-journal-writer`).
        let options = RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Off);
        let j = RedbJournal::open(dir.path().join("j.redb"), options).unwrap();
        // The writer names itself once it runs: after one append it has.
        let s = session(u64::MAX);
        rt.block_on(j.append(s, record(s, u64::MAX >> 1))).unwrap();
        let Some(before) = writer_cpu_ns() else {
            eprintln!("writer CPU not measured: no schedstat for the writer thread");
            return;
        };
        const PER: u64 = 512;
        let next_key = Arc::new(AtomicU64::new(0));
        rt.block_on(async {
            let tasks: Vec<_> = (0..64)
                .map(|a| {
                    let j = j.clone();
                    let next_key = Arc::clone(&next_key);
                    tokio::spawn(async move {
                        for i in 0..PER {
                            let s = session(route(a, i));
                            let key = next_key.fetch_add(1, Ordering::Relaxed);
                            j.append(s, record(s, key)).await.unwrap();
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        let after = writer_cpu_ns().unwrap();
        j.close();
        metric(
            &format!("writer_cpu/spread/{sessions}"),
            (after - before) as f64 / 1e3 / (64 * PER) as f64,
            "µs/append",
        );
    }
}

/// One pass per appender count, outside criterion: the latency of every append.
fn bench_latency(_: &mut Criterion) {
    let rt = runtime();
    for (appenders, per) in [(1u64, 4_096u64), (64, 256)] {
        let (_, mut lat) = drive(
            &rt,
            RedbOptions::default(),
            appenders,
            per,
            by_appender,
            true,
        );
        lat.sort_unstable();
        let pick = |q: f64| {
            let i = ((lat.len() as f64 * q).ceil() as usize).saturating_sub(1);
            lat[i.min(lat.len() - 1)].as_secs_f64() * 1e6
        };
        metric(
            &format!("latency/journal/{appenders}/p50"),
            pick(0.50),
            "µs",
        );
        metric(
            &format!("latency/journal/{appenders}/p99"),
            pick(0.99),
            "µs",
        );
    }
}

fn spread(rt: &tokio::runtime::Runtime, route: Route, iters: u64) -> Duration {
    spread_with(rt, &RedbOptions::default(), route, iters)
}

fn spread_with(
    rt: &tokio::runtime::Runtime,
    options: &RedbOptions,
    route: Route,
    iters: u64,
) -> Duration {
    let (per, total) = split(iters, 64);
    let (elapsed, _) = drive(rt, options.clone(), 64, per, route, false);
    scale(elapsed, iters, total)
}

/// The targets' comparisons again as paired rounds (see `common::paired`): the two
/// sides of each ratio measured alternately, so a change in the machine's load between
/// two criterion benchmarks does not move the ratio.
fn bench_paired(_: &mut Criterion) {
    let rt = runtime();
    let d = RedbOptions::default();
    let qr = RedbOptions::default().quick_repair(true);
    const ROUNDS: u32 = 10;
    paired(
        "journal_1_vs_raw_minimal_1",
        ROUNDS,
        400,
        &mut |i| append_journal(&rt, &d, 1, i),
        &mut |i| append_raw_minimal(1, i),
    );
    paired(
        "journal_1_vs_sqlite_1",
        ROUNDS,
        400,
        &mut |i| append_journal(&rt, &d, 1, i),
        &mut |i| append_sqlite(1, i),
    );
    paired(
        "journal_64_vs_raw_minimal_64",
        ROUNDS,
        6_400,
        &mut |i| append_journal(&rt, &d, 64, i),
        &mut |i| append_raw_minimal(64, i),
    );
    paired(
        "journal_64_vs_persistent_queue_64",
        ROUNDS,
        6_400,
        &mut |i| append_journal(&rt, &d, 64, i),
        &mut |i| append_persistent_queue(64, i),
    );
    paired(
        "journal_1024_vs_raw_minimal_1000",
        ROUNDS,
        20_480,
        &mut |i| append_journal(&rt, &d, 1024, i),
        &mut |i| append_raw_minimal(1000, i),
    );
    paired(
        "spread_1000_vs_1",
        ROUNDS,
        SPREAD_MIN,
        &mut |i| spread(&rt, spread_route::<1_000>, i),
        &mut |i| spread(&rt, spread_route::<1>, i),
    );
    paired(
        "spread_100000_vs_1",
        ROUNDS,
        SPREAD_MIN,
        &mut |i| spread(&rt, spread_route::<100_000>, i),
        &mut |i| spread(&rt, spread_route::<1>, i),
    );
    paired(
        "quick_repair_vs_default_1",
        ROUNDS,
        300,
        &mut |i| append_journal(&rt, &qr, 1, i),
        &mut |i| append_journal(&rt, &d, 1, i),
    );
    paired(
        "quick_repair_vs_default_64",
        ROUNDS,
        6_400,
        &mut |i| append_journal(&rt, &qr, 64, i),
        &mut |i| append_journal(&rt, &d, 64, i),
    );
    bench_census(&rt);
    bench_aged(&rt);
    scrub::bench_scrub(&rt, &|j, appenders, per| {
        drive_on(&rt, j, appenders, per, by_appender, false, 0).0
    });
}

/// The key census (`confirm_misses`, on by default) against the journal without it.
fn bench_census(rt: &tokio::runtime::Runtime) {
    let d = RedbOptions::default();
    let off = RedbOptions::default().confirm_misses(false);
    const ROUNDS: u32 = 10;
    for (name, appenders, iters) in [
        ("census_vs_off_1", 1, 400),
        ("census_vs_off_64", 64, 6_400),
        ("census_vs_off_1024", 1024, 20_480),
    ] {
        paired(
            name,
            ROUNDS,
            iters,
            &mut |i| append_journal(rt, &d, appenders, i),
            &mut |i| append_journal(rt, &off, appenders, i),
        );
    }
    paired(
        "census_vs_off_spread_1000",
        ROUNDS,
        SPREAD_MIN,
        &mut |i| spread_with(rt, &d, spread_route::<1_000>, i),
        &mut |i| spread_with(rt, &off, spread_route::<1_000>, i),
    );
}

/// Records in the aged files of [`bench_aged`] (`NOTIFY_BENCH_AGED_RECORDS` to change;
/// the metrics name their count, so only the 1M run is issue 34's row).
const AGED: u64 = 1_024_000;

/// Issue 34: 64 appenders into a file already holding 1M records (16 sessions, keys
/// past its own; `common::fixture`), opened once, against a fresh file, routed alike:
///
/// * `paired/aged_1m_vs_fresh_64`: default options, 8 of its sessions.
/// * `paired/census_cliff_scaled_1m_vs_fresh_64`: the key census's cliff at a scale a
///   run reaches: its budget cut to 2^17 keys (the default's 2^20 / 8), so the 1M keys
///   stand to it as 8M keys to the default; appends round robin over all 16
///   sessions. Not the 20M-key shape, and never reported as it.
fn bench_aged(rt: &tokio::runtime::Runtime) {
    aged_vs_fresh(rt, "aged", &RedbOptions::default(), by_appender, 10, 6_400);
    aged_vs_fresh(
        rt,
        "census_cliff_scaled",
        &RedbOptions::default().census_max_keys(1 << 17),
        spread_route::<16>,
        // Past the cliff an append reads a whole 64k-frame log: ~15 appends/s here.
        2,
        320,
    );
}

/// One comparison of [`bench_aged`]: `paired/{label}_{1m|N}_vs_fresh_64`.
fn aged_vs_fresh(
    rt: &tokio::runtime::Runtime,
    label: &str,
    options: &RedbOptions,
    route: Route,
    rounds: u32,
    iters: u64,
) {
    let records = std::env::var("NOTIFY_BENCH_AGED_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(AGED);
    let name = match records {
        AGED => format!("{label}_1m_vs_fresh_64"),
        n => format!("{label}_{n}_vs_fresh_64"),
    };
    if std::env::var("NOTIFY_BENCH_PAIRED").is_ok_and(|only| !name.contains(&only)) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let aged = RedbJournal::open(
        common::fixture(dir.path(), "aged.redb", records, false),
        options.clone(),
    )
    .unwrap();
    let mut next_key = records;
    paired(
        &name,
        rounds,
        iters,
        &mut |i| {
            let (per, total) = split(i, 64);
            let (elapsed, _) = drive_on(rt, &aged, 64, per, route, false, next_key);
            next_key += total;
            scale(elapsed, i, total)
        },
        &mut |i| spread_with(rt, options, route, i),
    );
    aged.close();
}

criterion_group!(
    benches,
    bench_append,
    bench_spread,
    bench_latency,
    bench_writer_cpu,
    bench_paired
);
criterion_main!(benches);
