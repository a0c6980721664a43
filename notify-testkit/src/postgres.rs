//! Where the PostgreSQL test database is (feature `postgres`).
//!
//! One environment variable names it: [`DATABASE_URL_VAR`]. Outside CI, a test with no
//! database says plainly that it was skipped and why; in CI (`CI` set) the local
//! default is used, so a missing database fails the test instead of skipping it.

use std::io::Write as _;

/// The environment variable naming the test database (a libpq-style string or a
/// `postgresql://` URL).
pub const DATABASE_URL_VAR: &str = "NOTIFY_TEST_DATABASE_URL";

/// The database CI uses when [`DATABASE_URL_VAR`] is unset.
pub const CI_DEFAULT_URL: &str = "host=127.0.0.1 port=5432 user=postgres dbname=test";

/// The database `test` should run against, or `None` after printing (past the test
/// harness's capture) that `test` is skipped and why.
#[must_use]
pub fn database_url(test: &str) -> Option<String> {
    if let Some(url) = std::env::var(DATABASE_URL_VAR)
        .ok()
        .filter(|v| !v.is_empty())
    {
        return Some(url);
    }
    if std::env::var_os("CI").is_some() {
        return Some(CI_DEFAULT_URL.to_owned());
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {DATABASE_URL_VAR} is unset and CI is unset, so there is no \
         PostgreSQL to test against; set {DATABASE_URL_VAR}='{CI_DEFAULT_URL}' to run it"
    );
    None
}
