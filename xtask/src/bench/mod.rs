//! `cargo xtask bench`: run every benchmark briefly, then print one table of each
//! measured figure beside its same-run baseline and the ratio against the issue
//! targets, and one table of the absolute figures.
//!
//! Criterion writes `target/criterion/**/new/{benchmark,estimates}.json`; the benches
//! write the figures that are not times (latency percentiles, bytes per record, peak
//! memory) to `target/bench-metrics/*.json`. This reads both back, so `--no-run` can
//! re-summarise the last run without measuring again.
//!
//! Format 1 (the journal before its storage format 2, commit `format1::FORMAT1_COMMIT`) is
//! measured in the same run: its two crates are extracted with `git archive` under
//! `target/format1/`, renamed, and benchmarked beside format 2 by one throwaway package
//! (`notify-journal/benches/format1/harness.rs`). Without git history it is skipped.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context as _, bail};
use serde_json::Value;

mod format1;

use crate::{TaskResult, cargo, root, run, target_dir};
use format1::format1_harness;

/// One criterion benchmark's result.
struct Measured {
    /// Mean time per iteration, in nanoseconds.
    mean_ns: f64,
    /// Elements per iteration, when the benchmark declares an element throughput.
    elements: Option<f64>,
    /// Bytes per iteration, when the benchmark declares a byte throughput.
    bytes: Option<f64>,
}

impl Measured {
    fn rate(&self) -> Option<f64> {
        self.elements.map(|e| e / (self.mean_ns * 1e-9))
    }
}

/// A figure that is not a time (`target/bench-metrics/*.json`).
struct Metric {
    value: f64,
    unit: String,
}

/// Everything one run measured.
#[derive(Default)]
struct Results {
    criterion: BTreeMap<String, Measured>,
    metrics: BTreeMap<String, Metric>,
}

/// Where a figure comes from.
#[derive(Clone, Copy)]
enum Src {
    /// A criterion benchmark: its rate if it declares elements, else its time.
    Crit(&'static str),
    /// A recorded metric; compared with a metric of the same unit.
    Metric(&'static str),
}

/// How a figure is judged.
#[derive(Clone, Copy)]
enum Goal {
    /// rate(measured) / rate(baseline) must be at least this.
    RateAtLeast(f64),
    /// time(measured) / time(baseline) must be at most this.
    TimeAtMost(f64),
    /// metric(measured) / metric(baseline) must be at most this.
    ValueAtMost(f64),
    /// The measured metric itself must be at most this (no baseline).
    AbsAtMost(f64),
    /// Reported, no target.
    Info,
}

struct Row {
    what: &'static str,
    measured: Src,
    baseline: Option<Src>,
    goal: Goal,
}

fn row(what: &'static str, measured: Src, baseline: Src, goal: Goal) -> Row {
    Row {
        what,
        measured,
        baseline: Some(baseline),
        goal,
    }
}

/// The comparisons, each against its same-run baseline and its issue's target.
fn rows() -> Vec<Row> {
    use Goal::*;
    use Src::{Crit, Metric};
    let mut rows = vec![
        // Issue 11: format 2 costs no more than 5% of format 1's append rate.
        row(
            "format 2 vs format 1, 1 appender",
            Metric("paired/format2_vs_format1_1/a"),
            Metric("paired/format2_vs_format1_1/b"),
            RateAtLeast(0.95),
        ),
        row(
            "format 2 vs format 1, 64 appenders",
            Metric("paired/format2_vs_format1_64/a"),
            Metric("paired/format2_vs_format1_64/b"),
            RateAtLeast(0.95),
        ),
        row(
            "format 2 vs format 1, 1024 appenders",
            Metric("paired/format2_vs_format1_1024/a"),
            Metric("paired/format2_vs_format1_1024/b"),
            RateAtLeast(0.95),
        ),
        // Issue 16: against raw redb's minimal layout and the peers.
        row(
            "journal, 1 appender vs raw redb minimal 1/txn",
            Metric("paired/journal_1_vs_raw_minimal_1/a"),
            Metric("paired/journal_1_vs_raw_minimal_1/b"),
            RateAtLeast(0.9),
        ),
        row(
            "journal, 64 appenders vs raw redb minimal 64/txn",
            Metric("paired/journal_64_vs_raw_minimal_64/a"),
            Metric("paired/journal_64_vs_raw_minimal_64/b"),
            RateAtLeast(0.8),
        ),
        row(
            "journal, 64 appenders vs persistent-queue group",
            Metric("paired/journal_64_vs_persistent_queue_64/a"),
            Metric("paired/journal_64_vs_persistent_queue_64/b"),
            RateAtLeast(2.0),
        ),
        row(
            "journal, 1024 appenders vs raw redb minimal 1000/txn",
            Metric("paired/journal_1024_vs_raw_minimal_1000/a"),
            Metric("paired/journal_1024_vs_raw_minimal_1000/b"),
            RateAtLeast(0.6),
        ),
        row(
            "journal, 16 appenders vs raw redb minimal 64/txn",
            Crit("append/journal/16"),
            Crit("append/raw_redb_minimal/64"),
            Info,
        ),
        row(
            "journal, 256 appenders vs raw redb minimal 1000/txn",
            Crit("append/journal/256"),
            Crit("append/raw_redb_minimal/1000"),
            Info,
        ),
        row(
            "stretch: journal, 1 appender vs SQLite WAL FULL 1/txn",
            Metric("paired/journal_1_vs_sqlite_1/a"),
            Metric("paired/journal_1_vs_sqlite_1/b"),
            RateAtLeast(1.0),
        ),
        row(
            "journal, 64 appenders vs SQLite WAL FULL 64/txn",
            Crit("append/journal/64"),
            Crit("append/sqlite_wal_full/64"),
            Info,
        ),
        row(
            "64 appenders over 8 sessions vs 1 session",
            Crit("spread/journal/8"),
            Crit("spread/journal/1"),
            Info,
        ),
        row(
            "64 appenders over 1,000 sessions vs 1 session",
            Metric("paired/spread_1000_vs_1/a"),
            Metric("paired/spread_1000_vs_1/b"),
            RateAtLeast(0.7),
        ),
        row(
            "64 appenders over 100,000 sessions vs 1 session",
            Metric("paired/spread_100000_vs_1/a"),
            Metric("paired/spread_100000_vs_1/b"),
            RateAtLeast(0.5),
        ),
        row(
            "quick-repair on vs off, 1 appender",
            Metric("paired/quick_repair_vs_default_1/a"),
            Metric("paired/quick_repair_vs_default_1/b"),
            RateAtLeast(0.9),
        ),
        row(
            "quick-repair on vs off, 64 appenders",
            Metric("paired/quick_repair_vs_default_64/a"),
            Metric("paired/quick_repair_vs_default_64/b"),
            RateAtLeast(0.9),
        ),
        // Issue 20, item 11: the key census confirming every index miss costs at most
        // 10% of the append rate.
        row(
            "key census on vs off, 1 appender",
            Metric("paired/census_vs_off_1/a"),
            Metric("paired/census_vs_off_1/b"),
            RateAtLeast(0.9),
        ),
        row(
            "key census on vs off, 64 appenders",
            Metric("paired/census_vs_off_64/a"),
            Metric("paired/census_vs_off_64/b"),
            RateAtLeast(0.9),
        ),
        row(
            "key census on vs off, 1024 appenders",
            Metric("paired/census_vs_off_1024/a"),
            Metric("paired/census_vs_off_1024/b"),
            RateAtLeast(0.9),
        ),
        row(
            "key census on vs off, 64 appenders over 1,000 sessions",
            Metric("paired/census_vs_off_spread_1000/a"),
            Metric("paired/census_vs_off_spread_1000/b"),
            RateAtLeast(0.9),
        ),
        row(
            "bytes on disk per notification, 1M records, format 2 vs 1",
            Metric("disk/format2/1m"),
            Metric("disk/format1/1m"),
            ValueAtMost(0.5),
        ),
        row(
            "bytes on disk per notification, 10k records, format 2 vs 1",
            Metric("disk/format2/10k"),
            Metric("disk/format1/10k"),
            Info,
        ),
        // Issue 12: steady state (2,000 sessions x 500, at most 50 live, each ended and
        // purged after a one-wave horizon).
        row(
            "steady state: final file size vs after the first 100 sessions",
            Metric("retention/file_bytes/final"),
            Metric("retention/file_bytes/after_100_sessions"),
            ValueAtMost(1.5),
        ),
        row(
            "steady state: 64 appenders on the plateaued file vs a fresh file",
            Metric("paired/steady_vs_fresh_64/a"),
            Metric("paired/steady_vs_fresh_64/b"),
            RateAtLeast(0.9),
        ),
        row(
            "64 appenders while a 100,000-frame backlog is purged vs a fresh file",
            Metric("paired/purging_vs_fresh_64/a"),
            Metric("paired/purging_vs_fresh_64/b"),
            Info,
        ),
        row(
            "offline compaction after purging everything: size after vs before",
            Metric("retention/compact/after"),
            Metric("retention/compact/before"),
            Info,
        ),
        // Issue 20, item 10: 1M tombstones dropped (steps of 1,024) while 64 appenders
        // append; an append waits for at most about one step.
        row(
            "worst append latency while 1M tombstones drop vs the longest drop step",
            Metric("retention/drop/append_latency/max"),
            Metric("retention/drop/step/max"),
            Info,
        ),
        Row {
            what: "restore, 1M-frame session, 1,000 pending: peak RSS growth (MB), 1 MiB cache",
            measured: Metric("restore/peak_rss_growth_mb/cache_1mib"),
            baseline: None,
            goal: AbsAtMost(32.0),
        },
        Row {
            what: "restore, the same, default 64 MiB cache: peak RSS growth (MB)",
            measured: Metric("restore/peak_rss_growth_mb/default_cache"),
            baseline: None,
            goal: AbsAtMost(32.0),
        },
        row(
            "open 1M records vs 10k, no verify (time)",
            Crit("open/off_1m"),
            Crit("open/off_10k"),
            TimeAtMost(3.0),
        ),
        row(
            "open 1M records, verify pages vs off (time)",
            Crit("open/pages_1m"),
            Crit("open/off_1m"),
            Info,
        ),
        row(
            "open after crash, quick-repair vs not (time)",
            Crit("open/after_crash_100k_quick_repair"),
            Crit("open/after_crash_100k"),
            Info,
        ),
        row(
            "open after crash, quick-repair vs not, verify off (time)",
            Crit("open/after_crash_100k_quick_repair_off"),
            Crit("open/after_crash_100k_off"),
            Info,
        ),
        row(
            "session notify, 64 supervisors vs journal-only",
            Crit("end_to_end/notify/64"),
            Crit("end_to_end/journal_only/64"),
            RateAtLeast(0.8),
        ),
        row(
            "PostgreSQL 1 appender vs redb journal",
            Crit("concurrent_appenders/postgres/1"),
            Crit("concurrent_appenders/redb/1"),
            Info,
        ),
        row(
            "PostgreSQL 64 appenders vs redb journal",
            Crit("concurrent_appenders/postgres/64"),
            Crit("concurrent_appenders/redb/64"),
            Info,
        ),
        row(
            "PostgreSQL 1024 appenders vs redb journal",
            Crit("concurrent_appenders/postgres/1024"),
            Crit("concurrent_appenders/redb/1024"),
            Info,
        ),
        row(
            "PostgreSQL one session, 3 processes vs 1",
            Crit("one_session/postgres/3_processes"),
            Crit("one_session/postgres/1_process"),
            Info,
        ),
    ];
    for (measured, baseline, what) in [
        (
            "current_thread/deliver_ack_x1/notify_loop",
            "current_thread/deliver_ack_x1/bare_mpsc_oneshot",
            "loop (current_thread), 1 loop vs bare round trip",
        ),
        (
            "current_thread/deliver_ack_x8/notify_loop",
            "current_thread/deliver_ack_x8/bare_mpsc_oneshot",
            "loop (current_thread), 8 loops vs bare round trips",
        ),
        (
            "multi_thread/deliver_ack_x1/notify_loop",
            "multi_thread/deliver_ack_x1/bare_mpsc_oneshot",
            "loop (multi_thread), 1 loop vs bare round trip",
        ),
        (
            "multi_thread/deliver_ack_x8/notify_loop",
            "multi_thread/deliver_ack_x8/bare_mpsc_oneshot",
            "loop (multi_thread), 8 loops vs bare round trips",
        ),
    ] {
        rows.push(row(
            what,
            Crit(measured),
            Crit(baseline),
            Goal::RateAtLeast(0.5),
        ));
    }
    rows
}

/// The absolute figures, in the order printed.
const FIGURES: &[(&str, Src)] = &[
    ("append, journal, 1 appender", Src::Crit("append/journal/1")),
    (
        "append, journal, 16 appenders",
        Src::Crit("append/journal/16"),
    ),
    (
        "append, journal, 64 appenders",
        Src::Crit("append/journal/64"),
    ),
    (
        "append, journal, 256 appenders",
        Src::Crit("append/journal/256"),
    ),
    (
        "append, journal, 1024 appenders",
        Src::Crit("append/journal/1024"),
    ),
    (
        "append, journal, quick-repair, 1 appender",
        Src::Crit("append/journal_quick_repair/1"),
    ),
    (
        "append, journal, quick-repair, 64 appenders",
        Src::Crit("append/journal_quick_repair/64"),
    ),
    (
        "raw redb minimal layout, 1 per txn",
        Src::Crit("append/raw_redb_minimal/1"),
    ),
    (
        "raw redb minimal layout, 64 per txn",
        Src::Crit("append/raw_redb_minimal/64"),
    ),
    (
        "raw redb minimal layout, 1000 per txn",
        Src::Crit("append/raw_redb_minimal/1000"),
    ),
    (
        "SQLite WAL FULL, 1 per txn",
        Src::Crit("append/sqlite_wal_full/1"),
    ),
    (
        "SQLite WAL FULL, 64 per txn",
        Src::Crit("append/sqlite_wal_full/64"),
    ),
    (
        "persistent-queue group, 64 producers",
        Src::Crit("append/persistent_queue_group/64"),
    ),
    ("64 appenders over 1 session", Src::Crit("spread/journal/1")),
    (
        "64 appenders over 8 sessions",
        Src::Crit("spread/journal/8"),
    ),
    (
        "64 appenders over 1,000 sessions",
        Src::Crit("spread/journal/1000"),
    ),
    (
        "64 appenders over 100,000 sessions",
        Src::Crit("spread/journal/100000"),
    ),
    (
        "writer CPU per append, 64 appenders, 1 session",
        Src::Metric("writer_cpu/spread/1"),
    ),
    (
        "writer CPU per append, 64 appenders, 8 sessions",
        Src::Metric("writer_cpu/spread/8"),
    ),
    (
        "writer CPU per append, 64 appenders, 1,000 sessions",
        Src::Metric("writer_cpu/spread/1000"),
    ),
    (
        "writer CPU per append, 64 appenders, 100,000 sessions",
        Src::Metric("writer_cpu/spread/100000"),
    ),
    (
        "append, format 1, 1 appender",
        Src::Crit("formats/format1/1"),
    ),
    (
        "append, format 2, 1 appender",
        Src::Crit("formats/format2/1"),
    ),
    (
        "append, format 1, 64 appenders",
        Src::Crit("formats/format1/64"),
    ),
    (
        "append, format 2, 64 appenders",
        Src::Crit("formats/format2/64"),
    ),
    (
        "append, format 1, 1024 appenders",
        Src::Crit("formats/format1/1024"),
    ),
    (
        "append, format 2, 1024 appenders",
        Src::Crit("formats/format2/1024"),
    ),
    (
        "steady state: purge rate (frames/s of step time)",
        Src::Metric("retention/purge_rate"),
    ),
    (
        "longest purge step (1,024 frames) under load",
        Src::Metric("retention/purge_step/max"),
    ),
    (
        "append latency p99 while a backlog is purged, 64 appenders",
        Src::Metric("retention/append_latency/p99"),
    ),
    (
        "worst append latency while a backlog is purged, 64 appenders",
        Src::Metric("retention/append_latency/max"),
    ),
    (
        "longest tombstone drop step (1,024 tombstones) while 1M drop under load",
        Src::Metric("retention/drop/step/max"),
    ),
    (
        "append latency p99 while 1M tombstones drop, 64 appenders",
        Src::Metric("retention/drop/append_latency/p99"),
    ),
    (
        "worst append latency while 1M tombstones drop, 64 appenders",
        Src::Metric("retention/drop/append_latency/max"),
    ),
    (
        "tombstones dropped per second under load",
        Src::Metric("retention/drop/tombstones_per_s"),
    ),
    (
        "steady state: file size after the first 100 sessions",
        Src::Metric("retention/file_bytes/after_100_sessions"),
    ),
    (
        "steady state: file size after 2,000 sessions",
        Src::Metric("retention/file_bytes/final"),
    ),
    (
        "append latency p50, 1 appender",
        Src::Metric("latency/journal/1/p50"),
    ),
    (
        "append latency p99, 1 appender",
        Src::Metric("latency/journal/1/p99"),
    ),
    (
        "append latency p50, 64 appenders",
        Src::Metric("latency/journal/64/p50"),
    ),
    (
        "append latency p99, 64 appenders",
        Src::Metric("latency/journal/64/p99"),
    ),
    (
        "replay, one 64k-frame session (frames)",
        Src::Crit("replay/session_64k"),
    ),
    (
        "verify, open handle, 100k records",
        Src::Crit("verify/handle_100k"),
    ),
    (
        "verify_file (with redb's page check), 100k records",
        Src::Crit("verify/file_100k"),
    ),
    (
        "verify, open handle, 1M records (one pass)",
        Src::Metric("verify_once/handle_1m"),
    ),
    (
        "verify_file, 1M records (one pass)",
        Src::Metric("verify_once/file_1m"),
    ),
    ("open 10k records, verify off", Src::Crit("open/off_10k")),
    (
        "open 10k records, background scrub (default)",
        Src::Crit("open/background_10k"),
    ),
    (
        "open 10k records, verify pages",
        Src::Crit("open/pages_10k"),
    ),
    ("open 10k records, verify full", Src::Crit("open/full_10k")),
    ("open 1M records, verify off", Src::Crit("open/off_1m")),
    (
        "open 1M records, background scrub (default)",
        Src::Crit("open/background_1m"),
    ),
    ("open 1M records, verify pages", Src::Crit("open/pages_1m")),
    (
        "background scrub, one unpaced pass over 1M records",
        Src::Metric("scrub_once/pass_1m"),
    ),
    (
        "open 1M records, verify full (one pass)",
        Src::Metric("open_once/full_1m"),
    ),
    (
        "open 5M records, verify off (median of 3)",
        Src::Metric("open_once/off_5m"),
    ),
    (
        "open 5M records, background scrub (default; median of 3)",
        Src::Metric("open_once/background_5m"),
    ),
    (
        "open 5M records, verify pages (median of 3)",
        Src::Metric("open_once/pages_5m"),
    ),
    (
        "first append to a 64k-frame session after open, key census (reads its log once)",
        Src::Metric("first_append_once/session_64k_census"),
    ),
    (
        "first append to a 64k-frame session after open, no key census",
        Src::Metric("first_append_once/session_64k_no_census"),
    ),
    (
        "open after crash, 100k records",
        Src::Crit("open/after_crash_100k"),
    ),
    (
        "open after crash, 100k records, quick-repair",
        Src::Crit("open/after_crash_100k_quick_repair"),
    ),
    (
        "open after crash, 100k records, verify off",
        Src::Crit("open/after_crash_100k_off"),
    ),
    (
        "open after crash, 100k records, quick-repair, verify off",
        Src::Crit("open/after_crash_100k_quick_repair_off"),
    ),
    (
        "bytes per notification, format 2 open fixture (non-durable build), 1M records",
        Src::Metric("disk/format2_fixture/1m"),
    ),
    (
        "bytes per notification, format 1, 10k records",
        Src::Metric("disk/format1/10k"),
    ),
    (
        "bytes per notification, format 2, 10k records",
        Src::Metric("disk/format2/10k"),
    ),
    (
        "bytes per notification, format 1, 1M records",
        Src::Metric("disk/format1/1m"),
    ),
    (
        "bytes per notification, format 2, 1M records",
        Src::Metric("disk/format2/1m"),
    ),
    (
        "restore peak RSS, 1 MiB cache (absolute)",
        Src::Metric("restore/peak_rss_mb/cache_1mib"),
    ),
    (
        "restore peak RSS, default cache (absolute)",
        Src::Metric("restore/peak_rss_mb/default_cache"),
    ),
];

/// What `bench` was asked to do.
pub(crate) struct BenchArgs {
    /// Measure (false: re-summarise the last run).
    pub(crate) measure: bool,
    /// Also benchmark the PostgreSQL journal.
    pub(crate) postgres: bool,
}

pub(crate) fn run_bench(args: &BenchArgs) -> TaskResult {
    let postgres = args.postgres || std::env::var_os("NOTIFY_TEST_DATABASE_URL").is_some();
    // Criterion resolves a relative CARGO_TARGET_DIR against each package's directory,
    // cargo against ours: `cargo()` hands both the same absolute path.
    let target = target_dir()?;
    if args.measure {
        let root = root()?;
        measure_all(&root, &target, postgres, &|a: &[&str]| -> TaskResult {
            run(cargo()?.arg("bench").args(a))
        })?;
    }
    summarise(&target)?;
    Ok(())
}

/// Runs every benchmark, `bench(args)` being `cargo bench ARGS` on `target`.
fn measure_all<E: From<anyhow::Error>>(
    root: &Path,
    target: &Path,
    postgres: bool,
    bench: &dyn Fn(&[&str]) -> Result<(), E>,
) -> Result<(), E> {
    // Figures from an earlier run must not pass for this one's.
    let metrics = target.join("bench-metrics");
    if metrics.exists() {
        std::fs::remove_dir_all(&metrics)
            .with_context(|| format!("removing {}", metrics.display()))?;
    }
    for name in ["append", "open_verify", "restore_memory", "retention"] {
        bench(&["-p", "notify-journal", "--bench", name])?;
    }
    match format1_harness(root, target) {
        Ok(manifest) => bench(&["--manifest-path", &manifest, "--bench", "formats"])?,
        Err(e) => eprintln!("format 1 not measured: {e:#}"),
    }
    bench(&["-p", "notify-loop"])?;
    bench(&["-p", "notify-session"])?;
    if postgres {
        bench(&[
            "-p",
            "notify-journal",
            "--features",
            "postgres",
            "--bench",
            "postgres",
        ])?;
    }
    Ok(())
}

/// Reads the last run's results back, prints the tables and writes them to
/// `target/bench-summary.md`.
fn summarise(target: &Path) -> anyhow::Result<()> {
    let results = Results {
        criterion: collect(&target.join("criterion"))?,
        metrics: collect_metrics(&target.join("bench-metrics"))?,
    };
    if results.criterion.is_empty() {
        bail!(
            "no criterion results under {}",
            target.join("criterion").display()
        );
    }
    let table = render(&results);
    println!("\n{table}");
    let out = target.join("bench-summary.md");
    std::fs::write(&out, &table).with_context(|| format!("writing {}", out.display()))?;
    println!("written to {}", out.display());
    Ok(())
}

/// Reads every `new/benchmark.json` + `new/estimates.json` pair under `dir`.
fn collect(dir: &Path) -> anyhow::Result<BTreeMap<String, Measured>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == "benchmark.json")
                && path
                    .parent()
                    .and_then(Path::file_name)
                    .is_some_and(|n| n == "new")
            {
                let bench: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
                let estimates_path = path.with_file_name("estimates.json");
                let estimates: Value = serde_json::from_slice(&std::fs::read(&estimates_path)?)?;
                let Some(id) = bench["full_id"].as_str() else {
                    continue;
                };
                let Some(mean_ns) = estimates["mean"]["point_estimate"].as_f64() else {
                    continue;
                };
                let elements = bench["throughput"]["Elements"].as_f64();
                let bytes = bench["throughput"]["Bytes"].as_f64();
                out.insert(
                    id.to_owned(),
                    Measured {
                        mean_ns,
                        elements,
                        bytes,
                    },
                );
            }
        }
    }
    Ok(out)
}

/// Reads every `*.json` metric under `dir` (none if it does not exist).
fn collect_metrics(dir: &Path) -> anyhow::Result<BTreeMap<String, Metric>> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(out);
    };
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let v: Value = serde_json::from_slice(&std::fs::read(&path)?)
            .with_context(|| format!("reading {}", path.display()))?;
        if let (Some(name), Some(value), Some(unit)) =
            (v["name"].as_str(), v["value"].as_f64(), v["unit"].as_str())
        {
            out.insert(
                name.to_owned(),
                Metric {
                    value,
                    unit: unit.to_owned(),
                },
            );
        }
    }
    Ok(out)
}

fn human_rate(rate: f64) -> String {
    if rate >= 1e6 {
        format!("{:.2} M/s", rate / 1e6)
    } else if rate >= 1e3 {
        format!("{:.1} k/s", rate / 1e3)
    } else {
        format!("{rate:.0} /s")
    }
}

fn human_time(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.1} µs", ns / 1e3)
    }
}

fn human_metric(m: &Metric) -> String {
    if m.unit == "/s" {
        human_rate(m.value)
    } else if m.value >= 100.0 {
        format!("{:.0} {}", m.value, m.unit)
    } else {
        format!("{:.1} {}", m.value, m.unit)
    }
}

/// A figure as printed, and the number comparisons use: a rate (higher is better) for
/// criterion benchmarks with elements, else a time or metric value (lower is better).
fn figure(results: &Results, src: Src) -> Option<(String, f64)> {
    match src {
        Src::Crit(id) => {
            let m = results.criterion.get(id)?;
            Some(match (m.rate(), m.bytes) {
                (Some(rate), _) => (human_rate(rate), rate),
                (None, Some(bytes)) => {
                    let mbs = bytes / (m.mean_ns * 1e-9) / 1e6;
                    (
                        format!("{mbs:.0} MB/s ({})", human_time(m.mean_ns)),
                        m.mean_ns,
                    )
                }
                (None, None) => (human_time(m.mean_ns), m.mean_ns),
            })
        }
        Src::Metric(name) => {
            let m = results.metrics.get(name)?;
            Some((human_metric(m), m.value))
        }
    }
}

fn render(results: &Results) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| comparison (same run) | measured | baseline | ratio | target | met |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- |");
    for r in rows() {
        let Some((mv, m)) = figure(results, r.measured) else {
            continue;
        };
        let base = match r.baseline {
            Some(src) => match figure(results, src) {
                Some(b) => Some(b),
                None => continue,
            },
            None => None,
        };
        let (bv, ratio) = match &base {
            Some((bv, b)) => (bv.clone(), format!("{:.2}×", m / b)),
            None => ("—".to_owned(), "—".to_owned()),
        };
        let b = base.as_ref().map_or(f64::NAN, |(_, b)| *b);
        let (target, met) = match r.goal {
            Goal::RateAtLeast(t) => (format!("≥ {t}×"), Some(m / b >= t)),
            Goal::TimeAtMost(t) | Goal::ValueAtMost(t) => (format!("≤ {t}×"), Some(m / b <= t)),
            Goal::AbsAtMost(t) => (format!("≤ {t}"), Some(m <= t)),
            Goal::Info => ("—".to_owned(), None),
        };
        let verdict = match met {
            None => "—",
            Some(true) => "yes",
            Some(false) => "**no**",
        };
        let _ = writeln!(
            s,
            "| {} | {mv} | {bv} | {ratio} | {target} | {verdict} |",
            r.what
        );
    }
    let _ = writeln!(s, "\n| figure (same run) | value |\n| --- | --- |");
    for (what, src) in FIGURES {
        if let Some((v, _)) = figure(results, *src) {
            let _ = writeln!(s, "| {what} | {v} |");
        }
    }
    s
}
