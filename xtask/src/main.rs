//! `cargo xtask`: project automation, in Rust so it runs wherever cargo does.
//!
//! * `demo [--journal PATH]`: the main job; builds and runs the end-to-end demo
//!   (`src/bin/notify-demo/`, this crate's second binary). `demo --postgres`: the
//!   failover story on PostgreSQL (`demo_postgres.rs`); `demo --hosts N`: the host
//!   runtime story, N host processes on PostgreSQL (`demo_postgres.rs` too);
//!   `demo --serve`: `notify serve` with a Python supervisor and loop (`demo_serve.rs`).
//! * `bench [--no-run] [--postgres]`: runs the benchmarks briefly and prints one summary
//!   table (each rate beside its same-run baseline and the ratio to the target), also
//!   written as markdown to `target/bench-summary.md`.
//! * `soak [--cases N]`: the model-based test with many more cases than CI runs.
//!   `soak --hosts [--minutes N] [--no-faults]`: the host runtime's soak (`soak.rs`),
//!   the host chaos test at full size: three host processes on PostgreSQL with the
//!   default lease and poll, 64 appenders over 24 hot sessions, transactional
//!   consumers, sessions ending and opening, at least N minutes (default 5): a
//!   fault-free phase (no lease lost, no `NotOwner`), then SIGKILLs, SIGSTOPs past the
//!   lease and graceful shutdowns (exactly-once consumption, takeover within lease +
//!   poll); it prints the takeover and answer latencies and the throughput.
//! * `ci`: what `.ci/run` does.
//!
//! Every task takes `--help`; a help flag never starts a task. Errors are printed once:
//! when a task's own child process (cargo, the demo, the CI script) fails, it has already
//! said why, and xtask only passes its exit status on. Relative paths are taken from the
//! directory `cargo xtask` was run in. The command line itself is `cli.rs`.
#![allow(clippy::print_stdout, reason = "a command-line tool reports on stdout")]
#![allow(
    clippy::print_stderr,
    reason = "a command-line tool reports errors on stderr"
)]

mod bench;
mod cli;
mod demo_postgres;
mod demo_serve;
mod soak;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::Context as _;

use crate::cli::{DemoArgs, SoakHostsArgs, cli};

/// Why a task failed.
pub(crate) enum Failure {
    /// A child process failed and has reported why itself; exit with its status.
    Reported(u8),
    /// xtask's own error, not yet printed.
    Error(anyhow::Error),
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Self::Error(e)
    }
}

pub(crate) type TaskResult = Result<(), Failure>;

fn main() -> ExitCode {
    // Prints help (exit 0) or one usage error (exit 2) and exits; nothing has started.
    let matches = cli().get_matches();
    let result = match matches.subcommand() {
        Some(("demo", m)) => demo(&DemoArgs::from_matches(m)),
        Some(("bench", m)) => bench::run_bench(&bench::BenchArgs {
            measure: !m.get_flag("no-run"),
            postgres: m.get_flag("postgres"),
        }),
        Some(("soak", m)) => match SoakHostsArgs::from_matches(m) {
            Some(args) => soak::hosts(args),
            None => soak::model(m.get_one::<u64>("cases").copied().unwrap_or(10_000)),
        },
        Some(("ci", _)) => root()
            .map_err(Failure::from)
            .and_then(|root| run(Command::new("bash").arg(root.join(".ci/run")))),
        // ok: `subcommand_required` makes clap refuse anything else before we get here.
        _ => Err(Failure::Error(anyhow::anyhow!("no task given"))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Reported(code)) => ExitCode::from(code),
        Err(Failure::Error(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root: xtask lives one level below it.
pub(crate) fn root() -> anyhow::Result<PathBuf> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .map(Path::to_path_buf)
        .context("xtask has no parent directory")
}

/// `path` made absolute against the directory `cargo xtask` was run in (cargo runs
/// xtask there, not in the workspace root).
pub(crate) fn from_caller(path: &Path) -> anyhow::Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("cannot resolve {}", path.display()))
}

/// The target dir cargo uses for us, absolute: a relative `CARGO_TARGET_DIR` was
/// resolved by the outer cargo against the caller's directory, and the inner cargo
/// (run in the workspace root) must use the same one.
pub(crate) fn target_dir() -> anyhow::Result<PathBuf> {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => from_caller(Path::new(&dir)),
        None => Ok(root()?.join("target")),
    }
}

/// `cargo`, as the one that runs us, in the workspace root, on our target dir.
pub(crate) fn cargo() -> anyhow::Result<Command> {
    let cargo: OsString = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root()?)
        .env("CARGO_TARGET_DIR", target_dir()?);
    Ok(cmd)
}

/// `cargo` arguments that build the `notify` binary with `notify serve` in `profile`
/// (`dev` for the demo; `bench` for the serve bench, which runs it from
/// `target/release/`).
pub(crate) fn build_notify(profile: &str) -> [&str; 9] {
    [
        "build",
        "--profile",
        profile,
        "-p",
        "notify-session",
        "--features",
        "serve",
        "--bin",
        "notify",
    ]
}

/// Runs `cmd`; if it fails, it has said why on its own output, so only its exit status
/// is passed on.
pub(crate) fn run(cmd: &mut Command) -> TaskResult {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let status = cmd
        .status()
        .with_context(|| format!("could not start {program}"))?;
    if status.success() {
        return Ok(());
    }
    let code = status
        .code()
        .and_then(|c| u8::try_from(c).ok())
        .filter(|&c| c != 0)
        .unwrap_or(1);
    Err(Failure::Reported(code))
}

fn demo(args: &DemoArgs) -> TaskResult {
    if args.postgres {
        return demo_postgres::run_demo();
    }
    if args.serve {
        return demo_serve::run_demo();
    }
    if let Some(hosts) = args.hosts {
        return demo_postgres::run_hosts_demo(hosts);
    }
    let mut cmd = cargo()?;
    // No `--quiet`: the first build takes a while and cargo's progress shows it.
    cmd.args(["run", "-p", "xtask", "--bin", "notify-demo", "--"]);
    if let Some(journal) = &args.journal {
        cmd.arg("--journal").arg(from_caller(journal)?);
    }
    if let Some(copy) = &args.journal_at_crash {
        cmd.arg("--journal-at-crash").arg(from_caller(copy)?);
    }
    run(&mut cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_resolve_against_the_callers_directory() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            from_caller(Path::new("j.redb")).unwrap(),
            cwd.join("j.redb")
        );
        assert_eq!(
            from_caller(Path::new("/tmp/j")).unwrap(),
            PathBuf::from("/tmp/j")
        );
    }
}
