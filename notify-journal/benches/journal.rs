//! Journal benchmarks (`cargo bench -p notify-journal`).
//!
//! * `append/*`: durable appends per second. `journal/N` has N concurrent appenders
//!   each awaiting its acknowledgement, appender `a` writing to session `a % 8`, with
//!   record keys drawn from one shared counter (time-ordered, like the UUIDv7 of
//!   `CommandId::new()`); `raw_redb_txn/K` writes the same frame and index rows from
//!   one thread, K records per transaction (record `a` of a transaction in session
//!   `a % 8`, keys in order, sequences per session; no dedup read, no heads row): the
//!   ceiling of this design; `sqlite_wal_full/K` is SQLite in WAL mode, `synchronous=FULL`, a unique
//!   key on the record ID, K appends per transaction over one connection;
//!   `persistent_queue_group/64` is persistent-queue 0.2 on redb with group durability
//!   and 64 producer threads (no ID dedup). Every sample starts from an empty file, so
//!   the database size per measurement is fixed by the sample's iteration count.
//! * `open/*`: a clean open of a 10k- and a 1M-record journal; an open after a crash
//!   (a copy of a live file) of a 100k-record journal with and without quick-repair.
//! * `replay`: records per second replaying a 100k-record session.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use notify_journal::{Durability, JournalOptions, RedbJournal};
use notify_types::{
    CommandId, JournalRecord, LoopId, ProcessCompletionNotification, ProcessLifecycleState,
    ProcessNotification, ProcessTerminalReason, SessionId, Uuid,
};
use redb::TableDefinition;

const FRAMES: TableDefinition<'_, (u128, u64), &[u8]> = TableDefinition::new("frames");
const INDEX: TableDefinition<'_, (u128, u128), u64> = TableDefinition::new("index");

/// The sessions the append benchmarks spread their records over.
const SESSIONS: u64 = 8;

fn session(n: u64) -> SessionId {
    SessionId::from_uuid(Uuid::from_u128((0x5e55 << 112) | u128::from(n)))
}

fn record(s: SessionId, i: u64) -> JournalRecord {
    JournalRecord::from(ProcessNotification::new(ProcessCompletionNotification {
        command_id: CommandId::from_uuid(Uuid::from_u128((1 << 127) | u128::from(i))),
        session_id: s,
        loop_id: LoopId::from_uuid(Uuid::from_u128(7)),
        process_handle: format!("build-{i}"),
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

/// Splits `iters` over `n` workers; returns (per worker, total).
fn split(iters: u64, n: u64) -> (u64, u64) {
    let per = iters.div_ceil(n).max(1);
    (per, per * n)
}

fn scale(elapsed: Duration, iters: u64, done: u64) -> Duration {
    elapsed.mul_f64(iters as f64 / done as f64)
}

fn append_journal(rt: &tokio::runtime::Runtime, appenders: u64, iters: u64) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let j = RedbJournal::open(dir.path().join("j.redb"), JournalOptions::default()).unwrap();
    let (per, total) = split(iters, appenders);
    let next_key = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    rt.block_on(async {
        let tasks: Vec<_> = (0..appenders)
            .map(|a| {
                let j = j.clone();
                let next_key = Arc::clone(&next_key);
                tokio::spawn(async move {
                    let s = session(a % SESSIONS);
                    for _ in 0..per {
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
    let elapsed = started.elapsed();
    j.close();
    scale(elapsed, iters, total)
}

fn append_raw_redb(per_txn: u64, iters: u64) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let db = redb::Database::create(dir.path().join("raw.redb")).unwrap();
    let (txns, total) = split(iters, per_txn);
    let mut heads = [0u64; SESSIONS as usize];
    let started = Instant::now();
    let mut key = 0;
    for _ in 0..txns {
        let txn = db.begin_write().unwrap();
        {
            let mut frames = txn.open_table(FRAMES).unwrap();
            let mut index = txn.open_table(INDEX).unwrap();
            for a in 0..per_txn {
                let s = session(a % SESSIONS);
                let sid = s.as_uuid().as_u128();
                let head = &mut heads[(a % SESSIONS) as usize];
                *head += 1;
                let r = record(s, key);
                key += 1;
                frames.insert((sid, *head), r.encode().as_slice()).unwrap();
                index.insert((sid, r.key().as_u128()), *head).unwrap();
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
    let mut n = 0i64;
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
                let r = record(s, n as u64);
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
    let mut g = c.benchmark_group("append");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    for n in [1u64, 16, 64, 256, 1024] {
        g.bench_with_input(BenchmarkId::new("journal", n), &n, |b, &n| {
            b.iter_custom(|iters| append_journal(&rt, n, iters));
        });
    }
    for k in [1u64, 64, 1000] {
        g.bench_with_input(BenchmarkId::new("raw_redb_txn", k), &k, |b, &k| {
            b.iter_custom(|iters| append_raw_redb(k, iters));
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

/// Builds a journal of `records` frames over 16 sessions (non-durable commits, made
/// durable by the clean close), once per run.
fn fixture(dir: &Path, name: &str, records: u64, quick_repair: bool) -> PathBuf {
    let path = dir.join(name);
    let rt = runtime();
    let j = Arc::new(
        RedbJournal::open(
            &path,
            JournalOptions::default()
                .durability(Durability::NonDurableForTestsOnly)
                .quick_repair(quick_repair),
        )
        .unwrap(),
    );
    const WRITERS: u64 = 1024;
    let per = records / WRITERS;
    rt.block_on(async {
        let tasks: Vec<_> = (0..WRITERS)
            .map(|w| {
                let j = Arc::clone(&j);
                tokio::spawn(async move {
                    let s = session(w % 16);
                    for i in 0..per {
                        j.append(s, record(s, w * per + i)).await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    j.close();
    path
}

/// A crash image: a byte copy of the file while the journal is open after a durable
/// commit (redb's recovery flag is set in it).
fn crash_image(dir: &Path, source: &Path, name: &str, quick_repair: bool) -> PathBuf {
    let rt = runtime();
    let options = JournalOptions::default().quick_repair(quick_repair);
    let j = RedbJournal::open(source, options).unwrap();
    let s = session(0);
    rt.block_on(j.append(s, record(s, u64::MAX >> 1))).unwrap();
    let image = dir.join(name);
    std::fs::copy(source, &image).unwrap();
    j.close();
    image
}

fn timed_open(path: &Path, options: &JournalOptions) -> Duration {
    let started = Instant::now();
    let j = RedbJournal::open(path, options.clone()).unwrap();
    let elapsed = started.elapsed();
    j.close();
    elapsed
}

fn bench_open_and_replay(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let small = fixture(dir.path(), "10k.redb", 10_240, false);
    let large = fixture(dir.path(), "1m.redb", 1_024_000, false);
    let mid = fixture(dir.path(), "100k.redb", 102_400, false);
    let mid_qr = fixture(dir.path(), "100k-qr.redb", 102_400, true);
    let crashed = crash_image(dir.path(), &mid, "crashed.redb", false);
    let crashed_qr = crash_image(dir.path(), &mid_qr, "crashed-qr.redb", true);

    let mut g = c.benchmark_group("open");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let defaults = JournalOptions::default();
    for (name, path) in [("clean_10k", &small), ("clean_1m", &large)] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| (0..iters).map(|_| timed_open(path, &defaults)).sum());
        });
    }
    for (name, image, qr) in [
        ("after_crash_100k", &crashed, false),
        ("after_crash_100k_quick_repair", &crashed_qr, true),
    ] {
        let work = dir.path().join(format!("{name}.work"));
        let options = JournalOptions::default().quick_repair(qr);
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    std::fs::copy(image, &work).unwrap();
                    total += timed_open(&work, &options);
                }
                total
            });
        });
    }
    g.finish();

    let j = RedbJournal::open(&mid, JournalOptions::default()).unwrap();
    let s = session(3);
    let frames = j.last_seq_blocking(s).unwrap();
    let mut g = c.benchmark_group("replay");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(frames));
    g.bench_function("session_6400_frames", |b| {
        b.iter(|| {
            let mut from = 1;
            loop {
                let page = j.replay_blocking(s, from, 4096).unwrap();
                match page.last() {
                    Some((seq, _)) => from = seq + 1,
                    None => break,
                }
            }
        });
    });
    g.finish();
    j.close();
}

criterion_group!(benches, bench_append, bench_open_and_replay);
criterion_main!(benches);
