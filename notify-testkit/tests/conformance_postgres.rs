//! The backend conformance suite, unchanged, against [`PgJournal`].
//!
//! Needs the `postgres` feature and a database: `NOTIFY_TEST_DATABASE_URL` (a
//! libpq-style string or URL), or `CI` set, which means the local default
//! `host=127.0.0.1 port=5432 user=postgres dbname=test`. With neither, every test
//! says it was skipped and why, and passes. With either, an unreachable database
//! fails the tests.
#![cfg(feature = "postgres")]

use notify_journal::{PgJournal, PgOptions};

/// The schema the suite's tables live in; the checks use fresh sessions, so runs
/// (and concurrent test processes) can share it.
const SCHEMA: &str = "nj_conformance";

/// Connects, or returns `None` after saying plainly that the suite is skipped.
#[expect(
    clippy::panic,
    reason = "test setup outside a #[test] fn: an unreachable database must fail the test"
)]
async fn connect(options: PgOptions) -> Option<PgJournal> {
    let url = notify_testkit::postgres::database_url("PostgreSQL conformance check")?;
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
