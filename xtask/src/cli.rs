//! `cargo xtask`'s command line: the tasks, their flags and help texts.

use std::path::PathBuf;

use clap::{Arg, ArgAction, ArgMatches, value_parser};

/// The whole command line.
pub(crate) fn cli() -> clap::Command {
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
        .subcommand(soak_command())
        .subcommand(
            clap::Command::new("ci")
                .about("Run .ci/run: formatting, lints, layering, tests, packaging, the demo"),
        )
}

/// `soak`'s arguments.
fn soak_command() -> clap::Command {
    clap::Command::new("soak")
        .about("Run the model-based test with many more cases than CI runs, or (--hosts) the host runtime's soak")
        .long_about(
            "Run the model-based test with many more cases than CI runs. With --hosts, run \
             the host runtime's soak instead: the host chaos test at full size, three host \
             processes on PostgreSQL (NOTIFY_TEST_DATABASE_URL, default the local test \
             database) with the default lease and poll, 64 concurrent appenders over 24 hot \
             sessions, transactional consumers, sessions ending and opening; a fault-free \
             phase first (no lease lost, no NotOwner), then SIGKILLs, SIGSTOPs past the \
             lease and graceful shutdowns (every accepted notification consumed exactly \
             once, every session owned again within lease + one poll). It prints the \
             takeover and answer latencies (p50/p99/max) and the throughput.",
        )
        .arg(
            Arg::new("cases")
                .long("cases")
                .value_name("N")
                .value_parser(value_parser!(u64).range(1..))
                .default_value("10000")
                .conflicts_with("hosts")
                .help("How many cases"),
        )
        .arg(
            Arg::new("hosts")
                .long("hosts")
                .action(ArgAction::SetTrue)
                .help("Run the host runtime's soak on PostgreSQL instead"),
        )
        .arg(
            Arg::new("minutes")
                .long("minutes")
                .value_name("N")
                .value_parser(value_parser!(u64).range(1..=24 * 60))
                .requires("hosts")
                .help("Minutes of traffic at least (default 5; the last fault's takeover may run past them)"),
        )
        .arg(
            Arg::new("no-faults")
                .long("no-faults")
                .action(ArgAction::SetTrue)
                .requires("hosts")
                .help("Only the fault-free phase"),
        )
}

/// What `soak --hosts` was asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SoakHostsArgs {
    /// Minutes of traffic at least.
    pub(crate) minutes: u64,
    /// Whether faults follow the fault-free phase.
    pub(crate) faults: bool,
}

impl SoakHostsArgs {
    /// `None` unless `--hosts` was given.
    pub(crate) fn from_matches(m: &ArgMatches) -> Option<Self> {
        m.get_flag("hosts").then(|| Self {
            minutes: m.get_one::<u64>("minutes").copied().unwrap_or(5),
            faults: !m.get_flag("no-faults"),
        })
    }
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
        .arg(
            Arg::new("hosts")
                .long("hosts")
                .value_name("N")
                .value_parser(value_parser!(u8).range(2..=9))
                .conflicts_with_all(["journal", "journal-at-crash", "postgres"])
                .help("Run the host runtime story on PostgreSQL instead: N host processes (2 to 9) share sessions; one is killed and the others adopt its sessions, redeliver what it left pending, and the narration times the takeover (database: NOTIFY_TEST_DATABASE_URL, default the local test database)"),
        )
        .arg(
            Arg::new("serve")
                .long("serve")
                .action(ArgAction::SetTrue)
                .conflicts_with_all(["journal", "journal-at-crash", "postgres", "hosts"])
                .help("Run the HTTP story instead: `notify serve` with a Python supervisor and a Python loop (standard library only): a duplicate, a collision (409), the server killed and restarted, the unacknowledged notifications handed out again (needs python3)"),
        )
}

/// What `demo` was asked to do.
pub(crate) struct DemoArgs {
    pub(crate) journal: Option<PathBuf>,
    pub(crate) journal_at_crash: Option<PathBuf>,
    pub(crate) postgres: bool,
    /// `--hosts N`: the host runtime story with N host processes.
    pub(crate) hosts: Option<u8>,
    /// `--serve`: the `notify serve` story.
    pub(crate) serve: bool,
}

impl DemoArgs {
    pub(crate) fn from_matches(m: &ArgMatches) -> Self {
        Self {
            journal: m.get_one::<PathBuf>("journal").cloned(),
            journal_at_crash: m.get_one::<PathBuf>("journal-at-crash").cloned(),
            postgres: m.get_flag("postgres"),
            hosts: m.get_one::<u8>("hosts").copied(),
            serve: m.get_flag("serve"),
        }
    }
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
            &["soak", "--minutes", "3"],
            &["soak", "--no-faults"],
            &["soak", "--hosts", "--cases", "5"],
            &["soak", "--hosts", "--minutes", "0"],
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
        assert!(parse(&["demo", "--hosts", "3", "--postgres"]).is_err());
        assert!(parse(&["demo", "--hosts", "1"]).is_err());
        let m = parse(&["demo", "--hosts", "3"]).unwrap();
        let Some(("demo", m)) = m.subcommand() else {
            panic!("not demo")
        };
        assert_eq!(DemoArgs::from_matches(m).hosts, Some(3));
    }

    #[test]
    fn soak_takes_the_host_soak_flags() {
        let soak = |args: &[&str]| {
            let m = parse(args).unwrap();
            let Some(("soak", m)) = m.subcommand() else {
                panic!("not soak")
            };
            SoakHostsArgs::from_matches(m)
        };
        assert_eq!(soak(&["soak"]), None);
        assert_eq!(soak(&["soak", "--cases", "5"]), None);
        assert_eq!(
            soak(&["soak", "--hosts"]),
            Some(SoakHostsArgs {
                minutes: 5,
                faults: true
            })
        );
        assert_eq!(
            soak(&["soak", "--hosts", "--minutes", "2", "--no-faults"]),
            Some(SoakHostsArgs {
                minutes: 2,
                faults: false
            })
        );
    }
}
