//! Where the PostgreSQL test database is (feature `postgres`).
//!
//! [`DATABASE_URL_VAR`] names it. When it is unset, the standard local address
//! ([`LOCAL_DEFAULT_URL`]: 127.0.0.1:5432, user `postgres`, database `test`) is used if
//! something listens there. In CI (`CI` set) that default is used unconditionally, so a
//! missing database fails the tests instead of skipping them.
//!
//! Only outside CI, with the variable unset and nothing listening on 127.0.0.1:5432, does
//! a test skip: it returns without testing. The test harness has no "skipped" outcome
//! for a test that decides at run time, so it then counts as passed; to make that
//! visible, the first skip in a test binary prints a banner past the harness's output
//! capture, and every skip prints one `SKIPPED` line naming the test.

use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::sync::{Once, OnceLock};
use std::time::Duration;

/// The environment variable naming the test database (a libpq-style string or a
/// `postgresql://` URL).
pub const DATABASE_URL_VAR: &str = "NOTIFY_TEST_DATABASE_URL";

/// The database used when [`DATABASE_URL_VAR`] is unset: the standard local address.
pub const LOCAL_DEFAULT_URL: &str = "host=127.0.0.1 port=5432 user=postgres dbname=test";

/// The same as [`LOCAL_DEFAULT_URL`]; the name this constant had before the local
/// default applied outside CI too.
pub const CI_DEFAULT_URL: &str = LOCAL_DEFAULT_URL;

/// How long to wait for 127.0.0.1:5432 to accept a connection before skipping.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// Why there is no database to test against, or `None` if there is one at `url`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Choice {
    /// Run against this database.
    Run(String),
    /// Skip: nothing to test against.
    Skip,
}

fn choose(var: Option<String>, ci: bool, local_listens: impl FnOnce() -> bool) -> Choice {
    if let Some(url) = var.filter(|v| !v.is_empty()) {
        return Choice::Run(url);
    }
    if ci || local_listens() {
        return Choice::Run(LOCAL_DEFAULT_URL.to_owned());
    }
    Choice::Skip
}

/// Whether something accepts connections on 127.0.0.1:5432; probed once per process.
fn local_listens() -> bool {
    static LISTENS: OnceLock<bool> = OnceLock::new();
    *LISTENS.get_or_init(|| {
        let addr = SocketAddr::from(([127, 0, 0, 1], 5432));
        TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).is_ok()
    })
}

/// The database `test` should run against, or `None` after saying (past the test
/// harness's capture) that `test` is skipped and why.
///
/// Tries [`DATABASE_URL_VAR`], then the standard local address; see the module docs.
#[must_use]
pub fn database_url(test: &str) -> Option<String> {
    let var = std::env::var(DATABASE_URL_VAR).ok();
    let ci = std::env::var_os("CI").is_some();
    match choose(var, ci, local_listens) {
        Choice::Run(url) => Some(url),
        Choice::Skip => {
            static BANNER: Once = Once::new();
            let mut err = std::io::stderr().lock();
            BANNER.call_once(|| {
                let _ = writeln!(
                    err,
                    "\n*** PostgreSQL tests are SKIPPED in this test binary: {DATABASE_URL_VAR} \
                     is unset, CI is unset, and nothing listens on 127.0.0.1:5432.\n*** They \
                     return without testing and count as passed. To run them, start \
                     PostgreSQL there or set {DATABASE_URL_VAR}='{LOCAL_DEFAULT_URL}'.\n"
                );
            });
            let _ = writeln!(err, "SKIPPED {test}: no PostgreSQL to test against");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `choose` and reports whether it probed the local address.
    fn check(var: Option<&str>, ci: bool) -> (Choice, bool) {
        let probed = std::cell::Cell::new(false);
        let choice = choose(var.map(str::to_owned), ci, || {
            probed.set(true);
            true
        });
        (choice, probed.get())
    }

    #[test]
    fn the_variable_wins_without_probing() {
        for ci in [false, true] {
            assert_eq!(
                check(Some("host=db"), ci),
                (Choice::Run("host=db".into()), false)
            );
        }
    }

    #[test]
    fn ci_uses_the_local_default_without_probing() {
        for var in [None, Some("")] {
            assert_eq!(
                check(var, true),
                (Choice::Run(LOCAL_DEFAULT_URL.into()), false)
            );
        }
    }

    #[test]
    fn outside_ci_the_local_default_is_used_when_it_listens() {
        assert_eq!(
            choose(None, false, || true),
            Choice::Run(LOCAL_DEFAULT_URL.into())
        );
        assert_eq!(choose(None, false, || false), Choice::Skip);
    }
}
