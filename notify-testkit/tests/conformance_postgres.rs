//! The backend conformance suite, unchanged, against [`PgJournal`].
//!
//! Needs the `postgres` feature and a database: `NOTIFY_TEST_DATABASE_URL` (a
//! libpq-style string or URL), or `CI` set, which means the local default
//! `host=127.0.0.1 port=5432 user=postgres dbname=test`. With neither, every test
//! says it was skipped and why, and passes. With either, an unreachable database
//! fails the tests.
#![cfg(feature = "postgres")]

use std::io::Write;

use notify_journal::{PgJournal, PgOptions};

const DATABASE_URL_VAR: &str = "NOTIFY_TEST_DATABASE_URL";
const CI_DEFAULT_URL: &str = "host=127.0.0.1 port=5432 user=postgres dbname=test";
/// The schema the suite's tables live in; the checks use fresh sessions, so runs
/// (and concurrent test processes) can share it.
const SCHEMA: &str = "nj_conformance";

/// Connects, or returns `None` after saying plainly that the suite is skipped.
#[expect(
    clippy::panic,
    reason = "test setup outside a #[test] fn: an unreachable database must fail the test"
)]
async fn connect(options: PgOptions) -> Option<PgJournal> {
    let url = match std::env::var(DATABASE_URL_VAR)
        .ok()
        .filter(|v| !v.is_empty())
    {
        Some(url) => url,
        None if std::env::var_os("CI").is_some() => CI_DEFAULT_URL.to_owned(),
        None => {
            // Written past the harness's capture, so the skip is visible.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED PostgreSQL conformance check: {DATABASE_URL_VAR} is unset and CI is \
                 unset, so there is no PostgreSQL to test against"
            );
            return None;
        }
    };
    match PgJournal::connect(&url, options.schema(SCHEMA)).await {
        Ok(journal) => Some(journal),
        Err(e) => panic!("cannot open the PostgreSQL journal: {e}"),
    }
}

notify_testkit::conformance_tests! {
    setup = match connect(PgOptions::default()).await {
        Some(journal) => journal,
        None => return Ok(()),
    },
    backend = |journal| &journal,
    max_record_bytes = notify_journal::DEFAULT_MAX_RECORD_BYTES,
}

mod small_cap {
    //! The suite with a small size cap.
    use notify_journal::PgOptions;

    const CAP: usize = 4096;

    notify_testkit::conformance_tests! {
        setup = match super::connect(PgOptions::default().max_record_bytes(CAP)).await {
            Some(journal) => journal,
            None => return Ok(()),
        },
        backend = |journal| &journal,
        max_record_bytes = CAP,
    }
}
