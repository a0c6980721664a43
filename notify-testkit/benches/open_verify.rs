//! Open, verify and replay benchmarks (`cargo bench -p notify-testkit --bench
//! open_verify`).
//!
//! Fixtures are built once per run over 16 sessions by 1,024 concurrent appenders
//! (non-durable commits made durable by the clean close).
//!
//! * `open/{off,pages,full,background}_{10k,1m}`: opening a clean 10,240- and
//!   1,024,000-record journal with `RedbVerifyOnOpen::Off`, `Pages`, `Full` and
//!   `Background` (the default: the open itself reads only the metadata; the scrub it
//!   starts is stopped by the close outside the timing); `Full` on 1M takes seconds,
//!   so it is one timed pass (`open_once/full_1m` metric, ms).
//! * `open/after_crash_100k[_quick_repair][_off]`: opening a crash image (a byte copy
//!   of the file while open, after a durable commit) of a 102,400-record journal,
//!   without and with quick-repair, with `RedbVerifyOnOpen::Pages` (which reads every page
//!   anyway) and with `_off`.
//! * `verify/handle_100k`, `verify/file_100k`: `RedbJournal::verify_blocking` on an
//!   open handle and `RedbJournal::verify_file` on the closed file (redb's page check
//!   too) of the 102,400-record journal, as file bytes per second; on the 1M journal
//!   one timed pass each (`verify_once/{handle,file}_1m` metrics, MB/s).
//! * `replay/session_64k`: frames per second replaying one 64,000-frame session of the
//!   1M journal in pages of 4,096.
//! * `scrub_once/pass_1m` (ms): one unpaced background scrub pass over the 1M journal,
//!   from open to its first clean pass.
//! * `open_once/{off,pages,background}_5m` (ms): opening a clean 5,120,000-record journal, the
//!   median of three opens (one timed pass each: `Pages` reads the whole file).
//! * `first_append_once/session_64k_{census,no_census}` (ms): the first append to a
//!   64,000-frame session of the 1M journal after an open with `RedbVerifyOnOpen::Off`, with
//!   the key census confirming index misses (it reads the session's log once) and
//!   without (`confirm_misses(false)`).
//! * Not a time: the 1M and 10k files' bytes per record (`disk/format2/*` metrics).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{file_len, fixture, metric, record, runtime, session};
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use notify_journal::{RedbJournal, RedbOptions, RedbVerifyOnOpen};

/// A crash image: a byte copy of the file while the journal is open after a durable
/// commit (redb's recovery flag is set in it).
fn crash_image(dir: &Path, source: &Path, name: &str, quick_repair: bool) -> PathBuf {
    let rt = runtime();
    let options = RedbOptions::default()
        .quick_repair(quick_repair)
        .verify_on_open(RedbVerifyOnOpen::Pages);
    let j = RedbJournal::open(source, options).unwrap();
    let s = session(0);
    rt.block_on(j.append(s, record(s, u64::MAX >> 1))).unwrap();
    let image = dir.join(name);
    std::fs::copy(source, &image).unwrap();
    j.close();
    image
}

fn timed_open(path: &Path, options: &RedbOptions) -> Duration {
    let started = Instant::now();
    let j = RedbJournal::open(path, options.clone()).unwrap();
    let elapsed = started.elapsed();
    j.close();
    elapsed
}

fn bench_open_verify_replay(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let small = fixture(dir.path(), "10k.redb", 10_240, false);
    let large = fixture(dir.path(), "1m.redb", 1_024_000, false);
    for (name, path, records) in [("10k", &small, 10_240u64), ("1m", &large, 1_024_000)] {
        metric(
            &format!("disk/format2_fixture/{name}"),
            file_len(path) as f64 / records as f64,
            "B/record",
        );
    }

    let mut g = c.benchmark_group("open");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(2));
    for (mode, check) in [
        ("off", RedbVerifyOnOpen::Off),
        ("pages", RedbVerifyOnOpen::Pages),
        ("full", RedbVerifyOnOpen::Full),
        ("background", RedbVerifyOnOpen::Background),
    ] {
        let options = RedbOptions::default().verify_on_open(check);
        for (size, path) in [("10k", &small), ("1m", &large)] {
            if check == RedbVerifyOnOpen::Full && size == "1m" {
                continue; // seconds per open: one timed pass below
            }
            g.bench_function(format!("{mode}_{size}"), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| timed_open(path, &options)).sum());
            });
        }
    }
    let mid = fixture(dir.path(), "100k.redb", 102_400, false);
    let mid_qr = fixture(dir.path(), "100k-qr.redb", 102_400, true);
    let crashed = crash_image(dir.path(), &mid, "crashed.redb", false);
    let crashed_qr = crash_image(dir.path(), &mid_qr, "crashed-qr.redb", true);
    for (name, image, qr, check) in [
        ("after_crash_100k", &crashed, false, RedbVerifyOnOpen::Pages),
        (
            "after_crash_100k_quick_repair",
            &crashed_qr,
            true,
            RedbVerifyOnOpen::Pages,
        ),
        (
            "after_crash_100k_off",
            &crashed,
            false,
            RedbVerifyOnOpen::Off,
        ),
        (
            "after_crash_100k_quick_repair_off",
            &crashed_qr,
            true,
            RedbVerifyOnOpen::Off,
        ),
    ] {
        let work = dir.path().join(format!("{name}.work"));
        let options = RedbOptions::default()
            .quick_repair(qr)
            .verify_on_open(check);
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

    let bytes = file_len(&mid);
    let mut g = c.benchmark_group("verify");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Bytes(bytes));
    let options = RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Off);
    {
        let j = RedbJournal::open(&mid, options.clone()).unwrap();
        g.bench_function("handle_100k", |b| {
            b.iter(|| assert!(j.verify_blocking(16).unwrap().is_clean()));
        });
        j.close();
    }
    g.bench_function("file_100k", |b| {
        b.iter(|| assert!(RedbJournal::verify_file(&mid, 16).unwrap().is_clean()));
    });
    g.finish();

    // The 1M-record checks take seconds each: one timed pass, not ten samples.
    let mb = file_len(&large) as f64 / 1e6;
    let once = |f: &dyn Fn()| {
        let started = Instant::now();
        f();
        started.elapsed().as_secs_f64()
    };
    let full = RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Full);
    let secs = once(&|| RedbJournal::open(&large, full.clone()).unwrap().close());
    metric("open_once/full_1m", secs * 1e3, "ms");
    let secs = once(&|| {
        let j = RedbJournal::open(&large, options.clone()).unwrap();
        assert!(j.verify_blocking(16).unwrap().is_clean());
        j.close();
    });
    metric("verify_once/handle_1m", mb / secs, "MB/s");
    let secs = once(&|| assert!(RedbJournal::verify_file(&large, 16).unwrap().is_clean()));
    metric("verify_once/file_1m", mb / secs, "MB/s");
    // One unpaced background scrub pass over the 1M journal (the default pace reads
    // at most 1,000,000 entries a second).
    let scrubbing = RedbOptions::default().scrub_pace(0);
    let secs = once(&|| {
        let j = RedbJournal::open(&large, scrubbing.clone()).unwrap();
        while j.scrub_status().clean_passes == 0 {
            assert!(!j.is_poisoned(), "{:?}", j.scrub_status());
            std::thread::sleep(Duration::from_millis(1));
        }
        j.close();
    });
    metric("scrub_once/pass_1m", secs * 1e3, "ms");

    let j = RedbJournal::open(&large, options).unwrap();
    let s = session(3);
    let frames = j.last_seq_blocking(s).unwrap();
    let mut g = c.benchmark_group("replay");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(frames));
    g.bench_function("session_64k", |b| {
        b.iter(|| {
            let mut from = 1;
            loop {
                let page = j.replay_blocking(s, from, 4096).unwrap();
                match page.last() {
                    Some((seq, _)) => from = seq + 1,
                    None => break,
                }
            }
            assert_eq!(from, frames + 1);
        });
    });
    g.finish();
    j.close();

    // The key census's one cost that is not per append: a session's first miss after
    // open reads its log once.
    let rt = runtime();
    for (name, confirm, key) in [
        ("census", true, u64::MAX >> 2),
        ("no_census", false, (u64::MAX >> 2) + 1),
    ] {
        let options = RedbOptions::default()
            .verify_on_open(RedbVerifyOnOpen::Off)
            .confirm_misses(confirm);
        let j = RedbJournal::open(&large, options).unwrap();
        let started = Instant::now();
        let out = rt.block_on(j.append(s, record(s, key))).unwrap();
        let ms = started.elapsed().as_secs_f64() * 1e3;
        assert!(out.appended);
        j.close();
        metric(&format!("first_append_once/session_64k_{name}"), ms, "ms");
    }

    // 5M records: seconds to build, so a few timed opens, not criterion samples.
    let huge = fixture(dir.path(), "5m.redb", 5_120_000, false);
    for (mode, check) in [
        ("off", RedbVerifyOnOpen::Off),
        ("pages", RedbVerifyOnOpen::Pages),
        ("background", RedbVerifyOnOpen::Background),
    ] {
        let options = RedbOptions::default().verify_on_open(check);
        let mut t: Vec<f64> = (0..3)
            .map(|_| timed_open(&huge, &options).as_secs_f64() * 1e3)
            .collect();
        t.sort_by(f64::total_cmp);
        metric(&format!("open_once/{mode}_5m"), t[1], "ms");
    }
}

criterion_group!(benches, bench_open_verify_replay);
criterion_main!(benches);
