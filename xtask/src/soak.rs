//! `cargo xtask soak`: the model-based test with many more cases than CI runs, or
//! (`--hosts`) the host runtime's soak: the host chaos test
//! (`notify-session/tests/host_chaos.rs`) at full size, sized through the
//! environment variables it reads (`host_chaos_support/config.rs`).

use std::time::Instant;

use crate::cli::SoakHostsArgs;
use crate::{TaskResult, cargo, run};

/// The database the PostgreSQL tests use unless `NOTIFY_TEST_DATABASE_URL` says
/// otherwise (the testkit's local default).
const LOCAL_DATABASE: &str = "host=127.0.0.1 port=5432 user=postgres dbname=test";

/// The host chaos test, run in the soak.
const HOST_CHAOS: &str = "three_hosts_keep_every_session_through_kills_stops_and_shutdowns";

/// `soak [--cases N]`: the model-based test with `cases` cases.
pub(crate) fn model(cases: u64) -> TaskResult {
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

/// The host chaos test's environment for a soak of `args`: the default lease
/// (30 s) and poll (the host's default: the lease), 64 appenders over 24 hot
/// sessions, a session ended and a new one opened every 2 s; two fifths of the time
/// fault-free, then faults (at least one of each kind) for the rest.
pub(crate) fn host_soak_env(args: SoakHostsArgs) -> Vec<(&'static str, String)> {
    let secs = args.minutes * 60;
    let (quiet, faulty, rounds) = if args.faults {
        let quiet = secs * 2 / 5;
        (quiet, secs - quiet, 3)
    } else {
        (secs, 0, 0)
    };
    vec![
        ("NS_HOST_CHAOS_LEASE_MS", "30000".to_owned()),
        ("NS_HOST_CHAOS_QUIET_SECS", quiet.to_string()),
        ("NS_HOST_CHAOS_FAULT_SECS", faulty.to_string()),
        ("NS_HOST_CHAOS_ROUNDS", rounds.to_string()),
        ("NS_HOST_CHAOS_APPENDERS", "64".to_owned()),
        ("NS_HOST_CHAOS_SESSIONS", "24".to_owned()),
        ("NS_HOST_CHAOS_CHURN_MS", "2000".to_owned()),
        ("NS_HOST_CHAOS_SLACK_MS", "5000".to_owned()),
    ]
}

/// `soak --hosts [--minutes N] [--no-faults]`.
pub(crate) fn hosts(args: SoakHostsArgs) -> TaskResult {
    let started = Instant::now();
    let mut cmd = cargo()?;
    if std::env::var_os("NOTIFY_TEST_DATABASE_URL").is_none() {
        cmd.env("NOTIFY_TEST_DATABASE_URL", LOCAL_DATABASE);
    }
    // The soak's size wins over any left in the caller's environment.
    cmd.envs(host_soak_env(args));
    // The host's default poll.
    cmd.env_remove("NS_HOST_CHAOS_POLL_MS").args([
        "test",
        "--release",
        "-p",
        "notify-session",
        "--test",
        "host_chaos",
        "--",
        "--exact",
        HOST_CHAOS,
        "--nocapture",
    ]);
    run(&mut cmd)?;
    println!(
        "soak --hosts: {} minutes of traffic{} passed in {:.0} s",
        args.minutes,
        if args.faults {
            " with faults"
        } else {
            " without faults"
        },
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_soak_is_sized_as_documented() {
        let env = host_soak_env(SoakHostsArgs {
            minutes: 5,
            faults: true,
        });
        let get = |k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("NS_HOST_CHAOS_LEASE_MS"), Some("30000"));
        assert_eq!(get("NS_HOST_CHAOS_QUIET_SECS"), Some("120"));
        assert_eq!(get("NS_HOST_CHAOS_FAULT_SECS"), Some("180"));
        assert_eq!(get("NS_HOST_CHAOS_ROUNDS"), Some("3"));
        let env = host_soak_env(SoakHostsArgs {
            minutes: 2,
            faults: false,
        });
        let get = |k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("NS_HOST_CHAOS_QUIET_SECS"), Some("120"));
        assert_eq!(get("NS_HOST_CHAOS_ROUNDS"), Some("0"));
    }
}
