//! `cargo xtask`: project automation, in Rust so it runs wherever cargo does.
//!
//! * `demo [--journal PATH]`: the main job; builds and runs the end-to-end demo
//!   (`src/bin/notify-demo/`, this crate's second binary). `demo --postgres`: the
//!   failover story on PostgreSQL (`demo_postgres.rs`).
//! * `bench [--no-run] [--postgres]`: runs the benchmarks briefly and prints one summary
//!   table (each rate beside its same-run baseline and the ratio to the target), also
//!   written as markdown to `target/bench-summary.md`.
//! * `soak [--cases N]`: the model-based test with many more cases than CI runs.
//! * `ci`: what `.ci/run` does.
//!
//! Every task takes `--help`; a help flag never starts a task. Errors are printed once:
//! when a task's own child process (cargo, the demo, the CI script) fails, it has already
//! said why, and xtask only passes its exit status on. Relative paths are taken from the
//! directory `cargo xtask` was run in.
#![allow(clippy::print_stdout, reason = "a command-line tool reports on stdout")]
#![allow(
    clippy::print_stderr,
    reason = "a command-line tool reports errors on stderr"
)]

mod bench;
mod demo_postgres;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::Context as _;
use clap::{Arg, ArgAction, ArgMatches, value_parser};

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

fn cli() -> clap::Command {
    clap::Command::new("xtask")
        .bin_name("cargo xtask")
        .about("Project automation for the notify workspace.")
        .subcommand_required(true)
        .arg_required_else_help(true)
        .subcommand(demo_command())
        .subcommand(
            clap::Command::new("bench")
                .about("Run every benchmark briefly and print the summary table")
                .long_about(
                    "Run every benchmark briefly and print each rate beside its same-run \
                     baseline and the ratio to the project's target. The table is also \
                     written to target/bench-summary.md.",
                )
                .arg(
                    Arg::new("no-run")
                        .long("no-run")
                        .action(ArgAction::SetTrue)
                        .help("Re-summarise the last run without measuring again"),
                )
                .arg(
                    Arg::new("postgres")
                        .long("postgres")
                        .action(ArgAction::SetTrue)
                        .help(
                            "Also benchmark the PostgreSQL journal (on by default when \
                             NOTIFY_TEST_DATABASE_URL is set)",
                        ),
                ),
        )
        .subcommand(
            clap::Command::new("soak")
                .about("Run the model-based test with many more cases than CI runs")
                .arg(
                    Arg::new("cases")
                        .long("cases")
                        .value_name("N")
                        .value_parser(value_parser!(u64).range(1..))
                        .default_value("10000")
                        .help("How many cases"),
                ),
        )
        .subcommand(
            clap::Command::new("ci")
                .about("Run .ci/run: formatting, lints, layering, tests, packaging, the demo"),
        )
}

/// `demo`'s arguments.
fn demo_command() -> clap::Command {
    clap::Command::new("demo")
        .about("Build and run the end-to-end demo (the main job)")
        .long_about(
            "Build and run the end-to-end demo: a session over a real redb journal, real \
             processes under a supervisor, every disposition, a real crash (SIGKILL) and \
             restore. The first run compiles about 50 crates; cargo shows its progress.",
        )
        .arg(
            Arg::new("journal")
                .long("journal")
                .value_name("PATH")
                .value_parser(value_parser!(PathBuf))
                .help("Keep the journal in this file (relative to the current directory); default: a fresh temp dir"),
        )
        .arg(
            Arg::new("journal-at-crash")
                .long("journal-at-crash")
                .value_name("PATH")
                .value_parser(value_parser!(PathBuf))
                .conflicts_with("postgres")
                .help("Also keep a copy of the journal as the crash left it, before restore (relative to the current directory): `notify pending PATH` shows what restore then does"),
        )
        .arg(
            Arg::new("postgres")
                .long("postgres")
                .action(ArgAction::SetTrue)
                .conflicts_with("journal")
                .help("Run the failover story on PostgreSQL instead: two hosts share a session through its lease; host A dies with notifications pending, host B takes over (database: NOTIFY_TEST_DATABASE_URL, default the local test database)"),
        )
}

/// What `demo` was asked to do.
struct DemoArgs {
    journal: Option<PathBuf>,
    journal_at_crash: Option<PathBuf>,
    postgres: bool,
}

impl DemoArgs {
    fn from_matches(m: &ArgMatches) -> Self {
        Self {
            journal: m.get_one::<PathBuf>("journal").cloned(),
            journal_at_crash: m.get_one::<PathBuf>("journal-at-crash").cloned(),
            postgres: m.get_flag("postgres"),
        }
    }
}

fn main() -> ExitCode {
    // Prints help (exit 0) or one usage error (exit 2) and exits; nothing has started.
    let matches = cli().get_matches();
    let result = match matches.subcommand() {
        Some(("demo", m)) => demo(&DemoArgs::from_matches(m)),
        Some(("bench", m)) => bench::run_bench(&bench::BenchArgs {
            measure: !m.get_flag("no-run"),
            postgres: m.get_flag("postgres"),
        }),
        Some(("soak", m)) => soak(m.get_one::<u64>("cases").copied().unwrap_or(10_000)),
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

fn soak(cases: u64) -> TaskResult {
    let started = Instant::now();
    run(cargo()?
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<ArgMatches, clap::Error> {
        cli().try_get_matches_from(std::iter::once("xtask").chain(args.iter().copied()))
    }

    #[test]
    fn the_command_line_is_consistent() {
        cli().debug_assert();
    }

    #[test]
    fn help_on_every_task_starts_nothing() {
        for task in ["demo", "bench", "soak", "ci"] {
            let err = parse(&[task, "--help"]).err();
            let kind = err.map(|e| e.kind());
            assert_eq!(
                kind,
                Some(clap::error::ErrorKind::DisplayHelp),
                "{task} --help"
            );
        }
        assert_eq!(
            parse(&["help", "ci"]).err().map(|e| e.kind()),
            Some(clap::error::ErrorKind::DisplayHelp)
        );
    }

    #[test]
    fn unknown_flags_and_tasks_are_refused() {
        for args in [
            &["ci", "--fast"][..],
            &["demo", "--jornal", "x"],
            &["bench", "--now"],
            &["soak", "--cases", "many"],
            &["soak", "--cases", "0"],
            &["deploy"],
            &[],
        ] {
            let err = parse(args).err();
            assert!(
                err.is_some_and(
                    |e| e.kind() != clap::error::ErrorKind::DisplayHelp || args.is_empty()
                ),
                "{args:?} was accepted"
            );
        }
    }

    #[test]
    fn demo_takes_a_journal_path() {
        let m = parse(&["demo", "--journal", "j.redb"]).unwrap();
        let Some(("demo", m)) = m.subcommand() else {
            panic!("not demo")
        };
        assert_eq!(
            DemoArgs::from_matches(m).journal,
            Some(PathBuf::from("j.redb"))
        );
        let m = parse(&["demo", "--journal-at-crash", "c.redb"]).unwrap();
        let Some(("demo", m)) = m.subcommand() else {
            panic!("not demo")
        };
        let args = DemoArgs::from_matches(m);
        assert_eq!(args.journal_at_crash, Some(PathBuf::from("c.redb")));
        assert_eq!(args.journal, None);
        assert!(parse(&["demo", "--postgres", "--journal-at-crash", "c.redb"]).is_err());
    }

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
