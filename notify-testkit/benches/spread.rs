//! Sessions spread (`cargo bench -p notify-testkit --bench spread`): how the journal's
//! rate at 64 appenders holds up as their appends spread over more sessions.
//!
//! Not criterion: for S = 1, 8, 1,000 and 100,000 sessions, 140,000 fresh commands
//! (keys never appended before) from 64 appenders, the `k`-th append (one shared
//! counter) going to session `order[k mod S]`, where `order` is a fixed shuffle of the
//! S sessions: consecutive appends land far apart in the key space, as unrelated
//! sessions do. A fresh file per configuration and run, default options; 3 rounds,
//! each running every S once (in a rotated order, so that a drift in the machine's load
//! is shared); the median per S is recorded as `spread_shuffled/S` (appends/s), with
//! the writer thread's CPU per append (median) as `spread_shuffled_cpu/S`.
//!
//! For profiling (e.g. under `valgrind --tool=callgrind --separate-threads=yes`),
//! `SPREAD_ONLY=S` runs that spread alone, once, and `SPREAD_COMMANDS=N` appends `N`
//! commands per run instead of 140,000.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use common::{metric, record, runtime, session};
use notify_journal::{RedbJournal, RedbOptions};
use notify_types::SessionId;

const APPENDERS: u64 = 64;
const COMMANDS: u64 = 140_000;
const ROUNDS: usize = 3;
const SPREADS: [u64; 4] = [1, 8, 1_000, 100_000];

/// The S sessions in a fixed pseudo-random order (Fisher-Yates over xorshift64).
fn shuffled(s: u64) -> Vec<SessionId> {
    let mut order: Vec<u64> = (0..s).collect();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    order.into_iter().map(session).collect()
}

/// The CPU time the journal's writer thread has used so far, in nanoseconds (Linux:
/// `/proc/self/task/*/schedstat` of the thread named `notify-journal-writer`).
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

/// One run: a fresh file, `COMMANDS` appends over `order`. Returns (appends/s, writer
/// CPU µs per append, 0 where not measurable).
fn run(rt: &tokio::runtime::Runtime, order: &Arc<Vec<SessionId>>, commands: u64) -> (f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let j = RedbJournal::open(dir.path().join("j.redb"), RedbOptions::default()).unwrap();
    // The writer names itself once it runs: after one append it has.
    let s = session(u64::MAX);
    rt.block_on(j.append(s, record(s, u64::MAX >> 1))).unwrap();
    let cpu_before = writer_cpu_ns();
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    rt.block_on(async {
        let tasks: Vec<_> = (0..APPENDERS)
            .map(|_| {
                let (j, next, order) = (j.clone(), Arc::clone(&next), Arc::clone(order));
                tokio::spawn(async move {
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        if k >= commands {
                            break;
                        }
                        let s = order[(k % order.len() as u64) as usize];
                        j.append(s, record(s, k)).await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    let rate = commands as f64 / started.elapsed().as_secs_f64();
    let cpu = match (cpu_before, writer_cpu_ns()) {
        (Some(a), Some(b)) => (b - a) as f64 / 1e3 / commands as f64,
        _ => 0.0,
    };
    j.close();
    (rate, cpu)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A `u64` from the environment variable `name`, if set and a number.
fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

fn main() {
    let rt = runtime();
    let commands = env_u64("SPREAD_COMMANDS").unwrap_or(COMMANDS);
    if let Some(s) = env_u64("SPREAD_ONLY") {
        let (rate, cpu) = run(&rt, &Arc::new(shuffled(s)), commands);
        eprintln!("spread {s} sessions: {rate:.0} appends/s, writer {cpu:.2} µs/append");
        return;
    }
    let orders: Vec<Arc<Vec<SessionId>>> = SPREADS.iter().map(|&s| Arc::new(shuffled(s))).collect();
    let mut rates = vec![Vec::new(); SPREADS.len()];
    let mut cpus = vec![Vec::new(); SPREADS.len()];
    for round in 0..ROUNDS {
        for step in 0..SPREADS.len() {
            let i = (round + step) % SPREADS.len();
            let (rate, cpu) = run(&rt, &orders[i], commands);
            eprintln!(
                "spread {} sessions, round {round}: {rate:.0} appends/s, writer {cpu:.2} µs/append",
                SPREADS[i]
            );
            rates[i].push(rate);
            cpus[i].push(cpu);
        }
    }
    let rates: Vec<f64> = rates.into_iter().map(median).collect();
    for (i, &s) in SPREADS.iter().enumerate() {
        metric(&format!("spread_shuffled/{s}"), rates[i], "/s");
        metric(
            &format!("spread_shuffled_cpu/{s}"),
            median(cpus[i].clone()),
            "µs/append",
        );
        eprintln!("spread {s} sessions vs 1: {:.2}x", rates[i] / rates[0]);
    }
}
