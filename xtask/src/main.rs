//! `cargo xtask`: project automation, in Rust so it runs wherever cargo does.
//!
//! * `demo [--journal PATH]`: the main job; runs the end-to-end demo.
//!   `demo --postgres`: the failover demo on PostgreSQL (`demo_postgres.rs`).
//! * `bench [--no-run] [--postgres]`: runs the benchmarks briefly and prints one summary table (each
//!   rate beside its same-run baseline and the ratio to the target), also written as
//!   markdown to `target/bench-summary.md`.
//! * `soak [--cases N]`: the model-based test with many more cases than CI runs.
//! * `ci`: what `.ci/run` does.
#![allow(clippy::print_stdout, reason = "a command-line tool reports on stdout")]

mod bench;
mod demo_postgres;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, bail};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((task, rest)) = args.split_first() else {
        print_usage();
        return Ok(());
    };
    match task.as_str() {
        "demo" => demo(rest),
        "bench" => bench::run_bench(&root()?, rest),
        "soak" => soak(rest),
        "ci" => run(Command::new("bash").arg(root()?.join(".ci/run"))),
        "-h" | "--help" | "help" => {
            print_usage();
            Ok(())
        }
        other => {
            print_usage();
            bail!("unknown task {other:?}")
        }
    }
}

fn print_usage() {
    println!(
        "usage: cargo xtask <task>\n\n\
         tasks:\n  \
         demo [--journal PATH]   run the end-to-end demo (the main job)\n  \
         demo --postgres         run the failover demo on PostgreSQL\n  \
         bench [--no-run] [--postgres]\n                          run the benchmarks and print the summary table\n  \
         soak [--cases N]        run the model-based test with N cases (default 10000)\n  \
         ci                      run .ci/run"
    );
}

/// The workspace root: xtask lives one level below it.
pub(crate) fn root() -> anyhow::Result<PathBuf> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .map(Path::to_path_buf)
        .context("xtask has no parent directory")
}

/// `cargo`, as the one that runs us.
pub(crate) fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    if let Ok(root) = root() {
        cmd.current_dir(root);
    }
    cmd
}

pub(crate) fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("could not run {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

fn demo(args: &[String]) -> anyhow::Result<()> {
    if args.iter().any(|a| a == "--postgres") {
        return demo_postgres::run(args);
    }
    run(cargo()
        .args([
            "run",
            "--quiet",
            "-p",
            "notify-session",
            "--example",
            "demo",
            "--",
        ])
        .args(args))
}

fn soak(args: &[String]) -> anyhow::Result<()> {
    let cases = match args {
        [] => 10_000,
        [flag, n] if flag == "--cases" => n.parse().context("--cases needs a number")?,
        _ => bail!("usage: cargo xtask soak [--cases N]"),
    };
    let started = Instant::now();
    run(cargo()
        .env("PROPTEST_CASES", cases.to_string())
        .env("NOTIFY_MODEL_CASES", cases.to_string())
        .args([
            "test",
            "--release",
            "-p",
            "notify-testkit",
            "--test",
            "model",
            "--",
            "--nocapture",
        ]))?;
    println!(
        "soak: {cases} model-test cases passed in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
