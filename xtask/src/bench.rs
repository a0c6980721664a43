//! `cargo xtask bench`: run every benchmark briefly, then print one table of each
//! measured rate beside its same-run baseline and the ratio against the issue targets.
//!
//! Criterion writes `target/criterion/**/new/{benchmark,estimates}.json`; this reads
//! them back, so `--no-run` can re-summarise the last run without measuring again.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context as _, anyhow};
use serde_json::Value;

use crate::{TaskResult, cargo, run, target_dir};

/// One measured benchmark.
struct Measured {
    /// Mean time per iteration, in nanoseconds.
    mean_ns: f64,
    /// Elements per iteration, when the benchmark declares a throughput.
    elements: Option<f64>,
}

impl Measured {
    fn rate(&self) -> Option<f64> {
        self.elements.map(|e| e / (self.mean_ns * 1e-9))
    }
}

/// How a comparison is judged.
#[derive(Clone, Copy)]
enum Goal {
    /// rate(measured) / rate(baseline) must be at least this.
    RateAtLeast(f64),
    /// time(measured) / time(baseline) must be at most this.
    TimeAtMost(f64),
    /// Reported, no target.
    Info,
}

struct Row {
    what: &'static str,
    measured: String,
    baseline: String,
    goal: Goal,
}

fn row(
    what: &'static str,
    measured: impl Into<String>,
    baseline: impl Into<String>,
    goal: Goal,
) -> Row {
    Row {
        what,
        measured: measured.into(),
        baseline: baseline.into(),
        goal,
    }
}

fn rows() -> Vec<Row> {
    use Goal::*;
    let mut rows = vec![
        row(
            "journal, 1 appender vs raw redb 1/txn",
            "append/journal/1",
            "append/raw_redb_txn/1",
            RateAtLeast(0.9),
        ),
        row(
            "journal, 16 appenders vs raw redb 64/txn",
            "append/journal/16",
            "append/raw_redb_txn/64",
            Info,
        ),
        row(
            "journal, 64 appenders vs raw redb 64/txn",
            "append/journal/64",
            "append/raw_redb_txn/64",
            RateAtLeast(0.8),
        ),
        row(
            "journal, 64 appenders vs persistent-queue group",
            "append/journal/64",
            "append/persistent_queue_group/64",
            RateAtLeast(2.0),
        ),
        row(
            "journal, 256 appenders vs raw redb 1000/txn",
            "append/journal/256",
            "append/raw_redb_txn/1000",
            Info,
        ),
        row(
            "journal, 1024 appenders vs raw redb 1000/txn",
            "append/journal/1024",
            "append/raw_redb_txn/1000",
            RateAtLeast(0.6),
        ),
        row(
            "journal, 1 appender vs SQLite WAL FULL 1/txn",
            "append/journal/1",
            "append/sqlite_wal_full/1",
            Info,
        ),
        row(
            "journal, 64 appenders vs SQLite WAL FULL 64/txn",
            "append/journal/64",
            "append/sqlite_wal_full/64",
            Info,
        ),
        row(
            "open 1M records vs open 10k (time)",
            "open/clean_1m",
            "open/clean_10k",
            TimeAtMost(3.0),
        ),
        row(
            "open after crash, quick-repair vs not (time)",
            "open/after_crash_100k_quick_repair",
            "open/after_crash_100k",
            Info,
        ),
        row(
            "session notify, 64 supervisors vs journal-only",
            "end_to_end/notify/64",
            "end_to_end/journal_only/64",
            RateAtLeast(0.8),
        ),
        row(
            "PostgreSQL 1 appender vs redb journal",
            "concurrent_appenders/postgres/1",
            "concurrent_appenders/redb/1",
            Info,
        ),
        row(
            "PostgreSQL 64 appenders vs redb journal",
            "concurrent_appenders/postgres/64",
            "concurrent_appenders/redb/64",
            Info,
        ),
        row(
            "PostgreSQL 1024 appenders vs redb journal",
            "concurrent_appenders/postgres/1024",
            "concurrent_appenders/redb/1024",
            Info,
        ),
        row(
            "PostgreSQL one session, 3 processes vs 1",
            "one_session/postgres/3_processes",
            "one_session/postgres/1_process",
            Info,
        ),
    ];
    for (measured, baseline, what) in [
        (
            "current_thread/deliver_ack_x1",
            "current_thread/deliver_ack_x1",
            "loop (current_thread), 1 loop vs bare round trip",
        ),
        (
            "current_thread/deliver_ack_x8",
            "current_thread/deliver_ack_x8",
            "loop (current_thread), 8 loops vs bare round trips",
        ),
        (
            "multi_thread/deliver_ack_x1",
            "multi_thread/deliver_ack_x1",
            "loop (multi_thread), 1 loop vs bare round trip",
        ),
        (
            "multi_thread/deliver_ack_x8",
            "multi_thread/deliver_ack_x8",
            "loop (multi_thread), 8 loops vs bare round trips",
        ),
    ] {
        rows.push(row(
            what,
            format!("{measured}/notify_loop"),
            format!("{baseline}/bare_mpsc_oneshot"),
            Goal::RateAtLeast(0.5),
        ));
    }
    rows
}

/// What `bench` was asked to do.
pub(crate) struct BenchArgs {
    /// Measure (false: re-summarise the last run).
    pub(crate) measure: bool,
    /// Also benchmark the PostgreSQL journal.
    pub(crate) postgres: bool,
}

pub(crate) fn run_bench(args: &BenchArgs) -> TaskResult {
    let measure = args.measure;
    let postgres = args.postgres || std::env::var_os("NOTIFY_TEST_DATABASE_URL").is_some();
    // Criterion resolves a relative CARGO_TARGET_DIR against each package's directory,
    // cargo against ours: `cargo()` hands both the same absolute path.
    let target = target_dir()?;
    let bench = |args: &[&str]| -> TaskResult { run(cargo()?.arg("bench").args(args)) };
    if measure {
        bench(&["-p", "notify-journal", "--bench", "journal"])?;
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
    }
    let results = collect(&target.join("criterion"))?;
    if results.is_empty() {
        return Err(anyhow!(
            "no criterion results under {}",
            target.join("criterion").display()
        )
        .into());
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
                out.insert(id.to_owned(), Measured { mean_ns, elements });
            }
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

fn render(results: &BTreeMap<String, Measured>) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| comparison (same run) | measured | baseline | ratio | target | met |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- |");
    for r in rows() {
        let (Some(m), Some(b)) = (results.get(&r.measured), results.get(&r.baseline)) else {
            continue;
        };
        let (mv, bv, ratio, target, met) = match r.goal {
            Goal::TimeAtMost(t) => {
                let ratio = m.mean_ns / b.mean_ns;
                (
                    human_time(m.mean_ns),
                    human_time(b.mean_ns),
                    ratio,
                    format!("≤ {t}×"),
                    ratio <= t,
                )
            }
            Goal::Info if m.rate().is_none() || b.rate().is_none() => {
                let ratio = m.mean_ns / b.mean_ns;
                let (mv, bv) = (human_time(m.mean_ns), human_time(b.mean_ns));
                (mv, bv, ratio, "— (time)".to_owned(), true)
            }
            Goal::RateAtLeast(_) | Goal::Info => {
                let (Some(mr), Some(br)) = (m.rate(), b.rate()) else {
                    continue;
                };
                let ratio = mr / br;
                match r.goal {
                    Goal::RateAtLeast(t) => (
                        human_rate(mr),
                        human_rate(br),
                        ratio,
                        format!("≥ {t}×"),
                        ratio >= t,
                    ),
                    _ => (human_rate(mr), human_rate(br), ratio, "—".to_owned(), true),
                }
            }
        };
        let verdict = match r.goal {
            Goal::Info => "—",
            _ if met => "yes",
            _ => "**no**",
        };
        let _ = writeln!(
            s,
            "| {} | {mv} | {bv} | {ratio:.2}× | {target} | {verdict} |",
            r.what
        );
    }
    s
}
