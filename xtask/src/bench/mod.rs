//! `cargo xtask bench`: run every benchmark briefly, then print one table of each
//! measured figure beside its same-run baseline and the ratio against the issue
//! targets, and one table of the absolute figures; write both into `docs/benchmarks.md`
//! (between its markers) and draw the charts beside it (`docs/benchmarks/*.svg`).
//!
//! Criterion writes `target/criterion/**/new/{benchmark,estimates}.json`; the benches
//! write the figures that are not times (latency percentiles, bytes per record, peak
//! memory, the serve bench's rates) to `target/bench-metrics/*.json`. This reads both
//! back, so `--no-run` can re-summarise the last run without measuring again.
//!
//! Most benches are the testkit's (`notify-testkit/benches/`: those of the journal and
//! the session that share `notify_testkit::bench`); `notify-loop` and `notify-session`
//! keep the benches that need nothing but their own crate.
//!
//! Format 1 (the journal before its storage format 2, commit `format1::FORMAT1_COMMIT`) is
//! measured in the same run: its two crates are extracted with `git archive` under
//! `target/format1/`, renamed, and benchmarked beside format 2 by one throwaway package
//! (`notify-testkit/benches/format1/harness.rs`). Without git history it is skipped.
//!
//! Here: running the benches and the summary's steps. `results.rs` reads a run back,
//! `issue34.rs` is issue 34's table (each of its rows with its target, met or not),
//! `comparisons.rs` and `figures.rs` are the two other tables' rows, `render.rs` prints them,
//! `chart_list.rs` names the charts and `charts.rs` draws them, `page.rs` writes the page.

use std::path::Path;

use anyhow::{Context as _, bail};

mod chart_list;
mod charts;
mod comparisons;
mod figures;
mod format1;
mod human;
mod issue34;
mod page;
mod render;
mod results;
#[cfg(test)]
mod tests;

use crate::{TaskResult, build_notify, cargo, root, run, target_dir};
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
    let root = root()?;
    if args.measure {
        // The serve bench's load generator: missing, the run would stop half-way.
        if std::process::Command::new("wrk")
            .arg("--version")
            .output()
            .is_err()
        {
            return Err(anyhow::anyhow!(
                "`cargo xtask bench` needs wrk, the serve bench's load generator (Debian: `apt-get install wrk`)"
            )
            .into());
        }
        measure_all(&root, &target, postgres, &|a: &[&str]| -> TaskResult {
            run(cargo()?.args(a))
        })?;
    }
    summarise(&root, &target)?;
    Ok(())
}

/// The testkit's benches (the journal's and the session's that share
/// `notify_testkit::bench`), all built with one feature set so that they share one build.
const TESTKIT: [&str; 4] = ["-p", "notify-testkit", "--features", "postgres,serve"];

/// Runs every benchmark, `cargo(args)` being `cargo ARGS` on `target`.
fn measure_all<E: From<anyhow::Error>>(
    root: &Path,
    target: &Path,
    postgres: bool,
    cargo: &dyn Fn(&[&str]) -> Result<(), E>,
) -> Result<(), E> {
    // Figures from an earlier run must not pass for this one's.
    let metrics = target.join("bench-metrics");
    if metrics.exists() {
        std::fs::remove_dir_all(&metrics)
            .with_context(|| format!("removing {}", metrics.display()))?;
    }
    let testkit = |name: &str| cargo(&[&["bench"][..], &TESTKIT, &["--bench", name]].concat());
    for name in ["append", "spread", "open_verify", "retention"] {
        testkit(name)?;
    }
    match format1_harness(root, target) {
        Ok(manifest) => cargo(&["bench", "--manifest-path", &manifest, "--bench", "formats"])?,
        Err(e) => eprintln!("format 1 not measured: {e:#}"),
    }
    cargo(&["bench", "-p", "notify-loop"])?;
    for name in ["notify", "txack"] {
        cargo(&["bench", "-p", "notify-session", "--bench", name])?;
    }
    testkit("restore_memory")?;
    testkit("drain")?;
    // The serve bench drives the real `notify` binary, which cargo builds only for the
    // benches of its own package: built here, in the bench profile's directory.
    cargo(&build_notify("bench"))?;
    testkit("serve")?;
    if postgres {
        testkit("host")?;
        cargo(&["bench", "-p", "notify-session", "--bench", "txack_pg"])?;
        testkit("postgres")?;
        testkit("drain_pg")?;
    }
    Ok(())
}

/// Reads the last run's results back, prints the tables, writes them to
/// `target/bench-summary.md`, and writes `docs/benchmarks.md` and its charts.
fn summarise(root: &Path, target: &Path) -> anyhow::Result<()> {
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
    page::write(root, &results)
}
