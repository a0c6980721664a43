//! `cargo xtask demo --postgres`: the failover story on the PostgreSQL journal (two
//! hosts, one session; host A dies with notifications pending, host B takes over),
//! narrated. Runs `notify-session`'s `demo_postgres` example (it needs the `postgres`
//! feature, a dev-dependency of notify-session, so it is not part of the quick demo)
//! against the database in `NOTIFY_TEST_DATABASE_URL` (default: the local test
//! database).

use crate::{TaskResult, cargo, run};

/// Builds and runs the failover demo.
pub(crate) fn run_demo() -> TaskResult {
    // No `--quiet`: the build takes a while and cargo's progress shows it.
    run(cargo()?.args(["run", "-p", "notify-session", "--example", "demo_postgres"]))
}
