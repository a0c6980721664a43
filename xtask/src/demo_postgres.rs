//! `cargo xtask demo --postgres`: the failover story on the PostgreSQL journal (two
//! hosts, one session; host A dies with notifications pending, host B takes over),
//! narrated. Runs `notify-session`'s `demo_postgres` example against the database in
//! `NOTIFY_TEST_DATABASE_URL` (default: the local test database).

use anyhow::Context as _;

/// Runs the failover demo; `args` are `demo`'s arguments (`--postgres` is dropped).
pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    crate::run(
        crate::cargo()
            .args([
                "run",
                "--quiet",
                "-p",
                "notify-session",
                "--example",
                "demo_postgres",
                "--",
            ])
            .args(args.iter().filter(|a| *a != "--postgres")),
    )
    .context("the PostgreSQL failover demo failed")
}
