//! What the journal benches share: sample arithmetic and paired comparisons, here; the
//! records, sessions, runtime and the side-channel for figures that are not times
//! (latency percentiles, bytes per record, peak memory), which `cargo xtask bench`
//! reads back beside criterion's, are every crate's benches' (`notify_testkit::bench`).
// Each bench uses a part of this module (and of what it re-exports).
#![allow(dead_code, unreachable_pub, unused_imports)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify_journal::{RedbDurability, RedbJournal, RedbOptions, RedbVerifyOnOpen};

pub use notify_testkit::bench::fixture::{
    LOOP, command_id, consumed, notification, record, runtime, session,
};
pub use notify_testkit::bench::{metric, target_dir};

/// Splits `iters` over `n` workers; returns (per worker, total).
pub fn split(iters: u64, n: u64) -> (u64, u64) {
    let per = iters.div_ceil(n).max(1);
    (per, per * n)
}

/// The time `iters` iterations would have taken, given `done` took `elapsed`.
pub fn scale(elapsed: Duration, iters: u64, done: u64) -> Duration {
    elapsed.mul_f64(iters as f64 / done as f64)
}

/// The file's size in bytes.
pub fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

/// A paired comparison, robust to a shared machine's drifting load: `rounds` rounds of
/// `a` then `b` (every other round `b` then `a`), each call doing `iters` appends and
/// returning its time. Records `paired/NAME/a` and `paired/NAME/b` (appends per second
/// over all rounds) and returns (rate a, rate b).
///
/// With `NOTIFY_BENCH_PAIRED` set, only the comparisons whose name contains its value
/// run (the others return `(0, 0)` and record nothing): one comparison can be measured
/// again without the rest.
pub fn paired(
    name: &str,
    rounds: u32,
    iters: u64,
    a: &mut dyn FnMut(u64) -> Duration,
    b: &mut dyn FnMut(u64) -> Duration,
) -> (f64, f64) {
    if let Ok(only) = std::env::var("NOTIFY_BENCH_PAIRED")
        && !name.contains(&only)
    {
        return (0.0, 0.0);
    }
    let (mut ta, mut tb) = (Duration::ZERO, Duration::ZERO);
    let mut ratios = Vec::new();
    for round in 0..rounds {
        let (da, db) = if round % 2 == 0 {
            let da = a(iters);
            (da, b(iters))
        } else {
            let db = b(iters);
            (a(iters), db)
        };
        ta += da;
        tb += db;
        ratios.push(db.as_secs_f64() / da.as_secs_f64());
    }
    let shown: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    eprintln!(
        "paired {name}: rate ratio a/b per round {}",
        shown.join(" ")
    );
    let done = (u64::from(rounds) * iters) as f64;
    let (ra, rb) = (done / ta.as_secs_f64(), done / tb.as_secs_f64());
    metric(&format!("paired/{name}/a"), ra, "/s");
    metric(&format!("paired/{name}/b"), rb, "/s");
    (ra, rb)
}

/// Builds a journal of `records` frames over 16 sessions (`session(0..16)`, keys
/// `command_id(0..records)`) by 1,024 concurrent appenders, with non-durable commits
/// made durable by the clean close; returns its path.
pub fn fixture(dir: &Path, name: &str, records: u64, quick_repair: bool) -> PathBuf {
    let path = dir.join(name);
    let rt = runtime();
    let j = Arc::new(
        RedbJournal::open(
            &path,
            RedbOptions::default()
                .durability(RedbDurability::NonDurableForTestsOnly)
                .quick_repair(quick_repair)
                .verify_on_open(RedbVerifyOnOpen::Off)
                // The fixture only needs its records, so it skips the key census (its
                // cost is the `census_vs_off` rows of the append bench).
                .confirm_misses(false),
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
