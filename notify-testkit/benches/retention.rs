//! The steady-state retention benchmark (`cargo bench -p notify-testkit --bench
//! retention`): sessions start, end and are purged, and the file must stop growing.
//!
//! 2,000 sessions × 500 notifications (1,000,000 appends) in 40 waves of 50 sessions:
//! at most 50 sessions are live at once. In each wave 64 appenders append the wave's
//! 25,000 notifications (appender `a` takes every 64th), then the wave's sessions end.
//! The retention horizon is one wave: before wave `w` appends, every session that
//! ended before wave `w - 1` ended is purged (steps of 1,024 frames), so the file holds
//! about three waves at any time. Durability is the default (`Immediate`).
//!
//! Then a backlog: 4 waves are appended and ended without purging, and purged while
//! one more wave appends, to measure appends during a purge.
//!
//! Not criterion (one pass is the measurement); figures go to `target/bench-metrics/`:
//!
//! * `retention/file_bytes/after_100_sessions` and `retention/file_bytes/final`: the
//!   file's size after the first 100 sessions ended, and after the 2,000th (target:
//!   final ≤ 1.5× the first).
//! * `paired/steady_vs_fresh_64/{a,b}`: appends/s at 64 appenders in the last 10 waves
//!   of the steady state (on the plateaued file, reusing freed pages) against the same
//!   wave's workload on a fresh file, run just before each of them (target: ≥ 0.9).
//! * `retention/purge_rate`: frames purged per second of purge step time (steady state).
//! * `paired/purging_vs_fresh_64/{a,b}`: appends/s of the wave that runs while the
//!   backlog (100,000 frames) is purged, against the fresh-file rate: the writer's time
//!   is shared between the two.
//! * `retention/append_latency/max` and `/p99` of that wave (µs), and
//!   `retention/purge_step/max` (the longest step then, µs): an append waits at most
//!   about one step.
//! * `retention/compact/{before,after}`: bytes on disk after everything is ended and
//!   purged, before and after the offline compaction.
//!
//! Then a tombstone drop under load, on a file of its own: 1,000,000 sessions end (one
//! end marker each, appended by 64 appenders) and are purged (8 purgers stepping
//! concurrently, one session per step), all through the public API with
//! `RedbDurability::NonDurableForTestsOnly` commits so the fixture takes minutes, not
//! hours (each purge step still one transaction for one session); the file is closed
//! (a clean close makes it durable) and reopened with the
//! default options. Then `drop_tombstones(now, usize::MAX)` drops all 1,000,000 (steps
//! of `DEFAULT_DROP_STEP`, 1,024) while 64 appenders append to live sessions:
//!
//! * `retention/drop/append_latency/{max,p99}` (µs): what an append waited during
//!   the drop, against `retention/drop/step/max` (µs), the longest single step (the
//!   journal's `notify_journal_tombstone_drop_step_seconds`, read back through a
//!   `metrics` recorder): an append waits for at most about one step.
//! * `retention/drop/tombstones_per_s`: tombstones dropped per second of the drop.
//!
//! `RETENTION_BENCH=drop` runs only this last part.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{file_len, metric, record, runtime, session};
use notify_journal::{PurgeStep, RedbDurability, RedbJournal, RedbOptions, purge_with};
use notify_types::{JournalRecord, SessionEnded, SessionEvent, Timestamp};

const SESSIONS: u64 = 2_000;
const PER_SESSION: u64 = 500;
const WAVE: u64 = 50;
const APPENDERS: u64 = 64;
const PURGE_STEP: usize = 1_024;
/// The last waves, measured against a fresh file.
const MEASURED_WAVES: u64 = 10;
/// Waves left unpurged, then purged while one more wave appends.
const BACKLOG_WAVES: u64 = 4;
/// Tombstones dropped under load.
const TOMBSTONES: u64 = 1_000_000;
/// The first session number of the tombstone part (apart from the waves').
const TOMBSTONE_BASE: u64 = 1 << 40;

/// What one wave of appends measured.
struct Wave {
    elapsed: Duration,
    latencies: Vec<Duration>,
}

/// Appends wave `w`'s notifications (sessions `w * WAVE ..`) from 64 appenders.
fn append_wave(rt: &tokio::runtime::Runtime, j: &RedbJournal, w: u64) -> Wave {
    let total = WAVE * PER_SESSION;
    let started = Instant::now();
    let latencies = rt.block_on(async {
        let tasks: Vec<_> = (0..APPENDERS)
            .map(|a| {
                let j = j.clone();
                tokio::spawn(async move {
                    let mut lat = Vec::with_capacity((total / APPENDERS + 1) as usize);
                    let mut i = a;
                    while i < total {
                        let s = session(w * WAVE + i % WAVE);
                        let r = record(s, w * total + i);
                        let t = Instant::now();
                        j.append(s, r).await.unwrap();
                        lat.push(t.elapsed());
                        i += APPENDERS;
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
    Wave {
        elapsed: started.elapsed(),
        latencies,
    }
}

/// Ends wave `w`'s sessions.
fn end_wave(rt: &tokio::runtime::Runtime, j: &RedbJournal, w: u64) {
    rt.block_on(async {
        for n in w * WAVE..(w + 1) * WAVE {
            let s = session(n);
            let marker = JournalRecord::from(SessionEvent::from(SessionEnded::new(s)));
            j.append(s, marker).await.unwrap();
        }
    });
}

/// The same wave on a fresh file, for the steady-vs-fresh ratio.
fn fresh_wave(rt: &tokio::runtime::Runtime, dir: &Path, w: u64) -> Duration {
    let path = dir.join(format!("fresh-{w}.redb"));
    let j = RedbJournal::open(&path, RedbOptions::default()).unwrap();
    let wave = append_wave(rt, &j, w);
    j.close();
    std::fs::remove_file(&path).unwrap();
    wave.elapsed
}

/// Purge statistics, shared with the purge task.
#[derive(Default)]
struct PurgeStats {
    frames: u64,
    busy: Duration,
    longest_step: Duration,
}

/// Purges everything that ended before `horizon`, timing each step.
async fn purge_timed(
    j: &RedbJournal,
    horizon: Timestamp,
    stats: &std::sync::Mutex<PurgeStats>,
) -> notify_journal::PurgeReport {
    let mut last = Instant::now();
    purge_with(j, horizon, PURGE_STEP, |step, _| {
        let took = last.elapsed();
        let mut s = stats.lock().unwrap();
        s.frames += step.frames_removed;
        s.busy += took;
        s.longest_step = s.longest_step.max(took);
        last = Instant::now();
    })
    .await
    .unwrap()
}

/// Ends and purges `TOMBSTONES` sessions on a file of their own, then drops every
/// tombstone while 64 appenders append, and reports what the appends waited against
/// the longest step of the drop.
fn tombstone_drop(rt: &tokio::runtime::Runtime, dir: &Path) {
    let path = dir.join("tombstones.redb");
    let setup = Instant::now();
    let fixture = RedbOptions::default().durability(RedbDurability::NonDurableForTestsOnly);
    let j = RedbJournal::open(&path, fixture).unwrap();
    rt.block_on(async {
        let tasks: Vec<_> = (0..APPENDERS)
            .map(|a| {
                let j = j.clone();
                tokio::spawn(async move {
                    let mut i = a;
                    while i < TOMBSTONES {
                        let s = session(TOMBSTONE_BASE + i);
                        let marker = JournalRecord::from(SessionEvent::from(SessionEnded::new(s)));
                        j.append(s, marker).await.unwrap();
                        i += APPENDERS;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        // Purge steps queue behind each other; each purges one session.
        let horizon = Timestamp::now();
        let purgers: Vec<_> = (0..8)
            .map(|_| {
                let j = j.clone();
                tokio::spawn(async move {
                    while j.purge_step(horizon, 16).await.unwrap() != PurgeStep::IDLE {}
                })
            })
            .collect();
        for p in purgers {
            p.await.unwrap();
        }
    });
    j.close();
    eprintln!(
        "tombstone fixture: {TOMBSTONES} sessions ended and purged in {:.1} s, file {} MiB",
        setup.elapsed().as_secs_f64(),
        file_len(&path) >> 20
    );

    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::set_global_recorder(recorder).unwrap();
    let j = RedbJournal::open(&path, RedbOptions::default()).unwrap();
    let horizon = Timestamp::now();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = Instant::now();
    let (dropped, took, mut latencies) = rt.block_on(async {
        let appenders: Vec<_> = (0..APPENDERS)
            .map(|a| {
                let (j, done) = (j.clone(), Arc::clone(&done));
                tokio::spawn(async move {
                    let mut lat = Vec::new();
                    let mut i = 0;
                    while !done.load(std::sync::atomic::Ordering::Acquire) {
                        let s = session(TOMBSTONE_BASE + TOMBSTONES + a);
                        let t = Instant::now();
                        j.append(s, record(s, i)).await.unwrap();
                        lat.push(t.elapsed());
                        i += 1;
                    }
                    lat
                })
            })
            .collect();
        let dropped = j.drop_tombstones(horizon, usize::MAX).await.unwrap();
        let took = started.elapsed();
        done.store(true, std::sync::atomic::Ordering::Release);
        let mut all = Vec::new();
        for t in appenders {
            all.extend(t.await.unwrap());
        }
        (dropped, took, all)
    });
    j.close();
    assert_eq!(dropped, TOMBSTONES);
    let mut steps: Vec<f64> = Vec::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        if let metrics_util::debugging::DebugValue::Histogram(samples) = value
            && key.key().name() == "notify_journal_tombstone_drop_step_seconds"
        {
            steps.extend(samples.into_iter().map(|s| s.into_inner()));
        }
    }
    let longest_step = steps.iter().copied().fold(0.0_f64, f64::max);
    latencies.sort_unstable();
    let p99 = latencies[latencies.len() * 99 / 100];
    let max = latencies[latencies.len() - 1];
    metric(
        "retention/drop/append_latency/max",
        max.as_secs_f64() * 1e6,
        "µs",
    );
    metric(
        "retention/drop/append_latency/p99",
        p99.as_secs_f64() * 1e6,
        "µs",
    );
    metric("retention/drop/step/max", longest_step * 1e6, "µs");
    metric(
        "retention/drop/tombstones_per_s",
        dropped as f64 / took.as_secs_f64(),
        "/s",
    );
    eprintln!(
        "tombstone drop: {dropped} in {:.1} s, {} steps (longest {:.0} µs), {} appends meanwhile (max {:.0} µs, p99 {:.0} µs)",
        took.as_secs_f64(),
        steps.len(),
        longest_step * 1e6,
        latencies.len(),
        max.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6
    );
}

fn main() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    if std::env::var("RETENTION_BENCH").is_ok_and(|v| v == "drop") {
        tombstone_drop(&rt, dir.path());
        return;
    }
    let path = dir.path().join("steady.redb");
    let j = RedbJournal::open(&path, RedbOptions::default()).unwrap();
    let stats = Arc::new(std::sync::Mutex::new(PurgeStats::default()));
    // ended[w]: when wave w's sessions had all ended.
    let mut ended: Vec<Timestamp> = Vec::new();
    let mut after_100 = 0;
    let (mut steady, mut fresh) = (Duration::ZERO, Duration::ZERO);
    let waves = SESSIONS / WAVE;

    // Steady state: before each wave, purge what is past the horizon (everything that
    // ended before the previous wave ended); then the wave appends, then ends.
    for w in 0..waves {
        if let Some(h) = w.checked_sub(2) {
            rt.block_on(purge_timed(&j, ended[h as usize], &stats));
        }
        if w >= waves - MEASURED_WAVES {
            fresh += fresh_wave(&rt, dir.path(), w);
        }
        let wave = append_wave(&rt, &j, w);
        if w >= waves - MEASURED_WAVES {
            steady += wave.elapsed;
        }
        end_wave(&rt, &j, w);
        ended.push(Timestamp::now());
        if (w + 1) * WAVE == 100 {
            after_100 = file_len(&path);
        }
        eprintln!(
            "wave {w}: {:.0} appends/s, file {} MiB",
            (WAVE * PER_SESSION) as f64 / wave.elapsed.as_secs_f64(),
            file_len(&path) >> 20
        );
    }
    let final_len = file_len(&path);
    metric(
        "retention/file_bytes/after_100_sessions",
        after_100 as f64,
        "B",
    );
    metric("retention/file_bytes/final", final_len as f64, "B");
    let done = (MEASURED_WAVES * WAVE * PER_SESSION) as f64;
    metric(
        "paired/steady_vs_fresh_64/a",
        done / steady.as_secs_f64(),
        "/s",
    );
    metric(
        "paired/steady_vs_fresh_64/b",
        done / fresh.as_secs_f64(),
        "/s",
    );
    {
        let s = stats.lock().unwrap();
        metric(
            "retention/purge_rate",
            s.frames as f64 / s.busy.as_secs_f64(),
            "/s",
        );
    }

    // Purge under load: a backlog of BACKLOG_WAVES waves is purged while the next wave
    // appends from 64 appenders; every append's latency is recorded.
    let backlog_start = waves;
    for w in backlog_start..backlog_start + BACKLOG_WAVES {
        append_wave(&rt, &j, w);
        end_wave(&rt, &j, w);
    }
    let horizon = Timestamp::now();
    let under_load = Arc::new(std::sync::Mutex::new(PurgeStats::default()));
    let purge = {
        let (j, under_load) = (j.clone(), Arc::clone(&under_load));
        rt.spawn(async move { purge_timed(&j, horizon, &under_load).await })
    };
    let wave = append_wave(&rt, &j, backlog_start + BACKLOG_WAVES);
    let purged = rt.block_on(purge).unwrap();
    let mut latencies = wave.latencies;
    latencies.sort_unstable();
    let p99 = latencies[latencies.len() * 99 / 100];
    let max = latencies[latencies.len() - 1];
    metric(
        "retention/append_latency/p99",
        p99.as_secs_f64() * 1e6,
        "µs",
    );
    metric(
        "retention/append_latency/max",
        max.as_secs_f64() * 1e6,
        "µs",
    );
    metric(
        "paired/purging_vs_fresh_64/a",
        (WAVE * PER_SESSION) as f64 / wave.elapsed.as_secs_f64(),
        "/s",
    );
    metric(
        "paired/purging_vs_fresh_64/b",
        done / fresh.as_secs_f64(),
        "/s",
    );
    {
        let s = under_load.lock().unwrap();
        metric(
            "retention/purge_step/max",
            s.longest_step.as_secs_f64() * 1e6,
            "µs",
        );
        eprintln!(
            "purge under load: {} sessions, {} frames, {:.0} frames/s of step time",
            purged.sessions,
            purged.frames,
            s.frames as f64 / s.busy.as_secs_f64()
        );
    }

    // Everything ended and purged, then compacted offline.
    end_wave(&rt, &j, backlog_start + BACKLOG_WAVES);
    rt.block_on(async {
        notify_journal::purge(&j, Timestamp::MAX, PURGE_STEP)
            .await
            .unwrap();
    });
    j.close();
    let before = file_len(&path);
    let report = RedbJournal::compact_file(&path).unwrap();
    metric("retention/compact/before", before as f64, "B");
    metric("retention/compact/after", report.bytes_after as f64, "B");
    std::fs::remove_file(&path).unwrap();

    tombstone_drop(&rt, dir.path());
}
