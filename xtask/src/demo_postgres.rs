//! `cargo xtask demo --postgres`: the failover story on the PostgreSQL journal (two
//! hosts, one session; host A dies with notifications pending, host B takes over),
//! narrated. Runs `notify-session`'s `demo_postgres` example (it needs the `postgres`
//! feature, a dev-dependency of notify-session, so it is not part of the quick demo)
//! against the database in `NOTIFY_TEST_DATABASE_URL` (default: the local test
//! database).
//!
//! `cargo xtask demo --hosts N`: the host runtime story on PostgreSQL (N host
//! processes share sessions; one is killed; the others adopt its sessions and
//! redeliver what it left pending), `notify-session`'s `demo_hosts` example.

use crate::{TaskResult, cargo, run};

/// Builds and runs the failover demo.
pub(crate) fn run_demo() -> TaskResult {
    // No `--quiet`: the build takes a while and cargo's progress shows it.
    run(cargo()?.args(["run", "-p", "notify-session", "--example", "demo_postgres"]))
}

/// Builds and runs the host runtime demo with `hosts` host processes.
pub(crate) fn run_hosts_demo(hosts: u8) -> TaskResult {
    run(cargo()?
        .args([
            "run",
            "-p",
            "notify-session",
            "--example",
            "demo_hosts",
            "--",
            "--hosts",
        ])
        .arg(hosts.to_string()))
}
