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
//!
//! Here: running the benches and the summary's steps. `results.rs` reads a run back,
//! `comparisons.rs` and `figures.rs` are the two tables' rows, `render.rs` prints them.

use std::path::Path;

use anyhow::{Context as _, bail};

mod comparisons;
mod figures;
mod format1;
mod render;
mod results;

use crate::{TaskResult, cargo, root, run, target_dir};
use format1::format1_harness;
use render::render;
use results::{Results, collect, collect_metrics};

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
    for name in ["append", "spread", "open_verify", "retention"] {
        bench(&["-p", "notify-journal", "--bench", name])?;
    }
    match format1_harness(root, target) {
        Ok(manifest) => bench(&["--manifest-path", &manifest, "--bench", "formats"])?,
        Err(e) => eprintln!("format 1 not measured: {e:#}"),
    }
    bench(&["-p", "notify-loop"])?;
    for name in ["notify", "restore_memory", "txack"] {
        bench(&["-p", "notify-session", "--bench", name])?;
    }
    if postgres {
        for name in ["host", "txack_pg"] {
            bench(&["-p", "notify-session", "--bench", name])?;
        }
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
