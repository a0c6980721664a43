//! The backend conformance suite, unchanged, against [`PgJournal`]: the contract, the
//! integrity checks, and the retention checks (each in a schema of its own).
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
// Named for the journal schema version: builds at different versions sharing a test
// database never meet (and refuse) each other's tables.
const SCHEMA: &str = "nj_conformance_v9";

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

mod integrity {
    //! Rows changed or deleted behind the journal's back are named, never answered.
    use notify_journal::{
        BoxFuture, JournalBackend, JournalError, JournalRead, PgJournal, PgOptions, Problem,
    };
    use notify_testkit::conformance::Tamper;
    use notify_types::{LoopId, SessionId};

    /// The journal, and a plain connection to damage its rows with.
    pub(super) struct PgTamper {
        journal: PgJournal,
        client: tokio_postgres::Client,
    }

    #[expect(
        clippy::panic,
        reason = "test setup outside a #[test] fn: an unreachable database must fail the test"
    )]
    pub(super) async fn open() -> Option<PgTamper> {
        let journal = super::connect(PgOptions::default()).await?;
        let url = notify_testkit::postgres::database_url("PostgreSQL integrity check")?;
        let (client, connection) = match tokio_postgres::connect(&url, tokio_postgres::NoTls).await
        {
            Ok(c) => c,
            Err(e) => panic!("cannot connect to damage rows: {e}"),
        };
        tokio::spawn(connection);
        Some(PgTamper { journal, client })
    }

    impl PgTamper {
        async fn exec(&self, sql: &str, session: SessionId, seq: u64) -> Result<(), String> {
            let seq = i64::try_from(seq).map_err(|e| e.to_string())?;
            let n = self
                .client
                .execute(
                    &sql.replace("{s}", super::SCHEMA),
                    &[session.as_uuid(), &seq],
                )
                .await
                .map_err(|e| e.to_string())?;
            if n == 1 {
                Ok(())
            } else {
                Err(format!("no frame {seq} of {session}"))
            }
        }
    }

    impl Tamper for PgTamper {
        fn damage_frame(&self, session: SessionId, seq: u64) -> BoxFuture<'_, Result<(), String>> {
            Box::pin(self.exec(
                "UPDATE {s}.frames
                 SET bytes = set_byte(bytes, length(bytes) - 1, get_byte(bytes, length(bytes) - 1) # 1)
                 WHERE session = $1 AND seq = $2",
                session,
                seq,
            ))
        }

        fn remove_frame(&self, session: SessionId, seq: u64) -> BoxFuture<'_, Result<(), String>> {
            Box::pin(self.exec(
                "DELETE FROM {s}.frames WHERE session = $1 AND seq = $2",
                session,
                seq,
            ))
        }
    }

    impl notify_journal::layer::JournalReadLayer for PgTamper {
        type Inner = PgJournal;
        fn inner(&self) -> &PgJournal {
            &self.journal
        }
    }

    impl notify_journal::layer::JournalLayer for PgTamper {}

    notify_testkit::conformance_integrity_tests! {
        setup = match open().await {
            Some(t) => t,
            None => return Ok(()),
        },
        backend = |fixture| &fixture,
    }

    /// An `UPDATE` of a row's bytes is named by replay, restore and verify; a clean
    /// session verifies clean.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_updated_row_is_named_by_replay_restore_and_verify() {
        let Some(t) = open().await else { return };
        let s = SessionId::new();
        let loop_id = LoopId::new();
        for r in notify_testkit::sample::one_of_each(s, loop_id) {
            t.journal.append(s, r).await.unwrap();
        }
        let before = t.journal.verify(1000).await.unwrap();
        assert!(
            !before
                .problems
                .iter()
                .any(|p| matches!(p, Problem::Frame { session, .. } if *session == s)),
            "{before}"
        );
        t.damage_frame(s, 3).await.unwrap();
        assert!(matches!(
            t.journal.replay(s, 1, 100).await,
            Err(JournalError::Corrupt { seq: 3, .. })
        ));
        assert!(
            notify_session::restore(s, &t.journal).await.is_err(),
            "restore answered a damaged log"
        );
        let after = t.journal.verify(1000).await.unwrap();
        assert!(
            after.problems.iter().any(|p| matches!(
                p,
                Problem::Frame { session, seq: 3, .. } if *session == s
            )),
            "verify missed the updated row: {after}"
        );
    }
}

mod retention {
    //! Session end, purge and tombstones. A purge takes every ended session of its
    //! schema, so each check gets a fresh schema of its own, dropped when it ends.
    use notify_journal::{PgJournal, PgOptions};
    use notify_types::Uuid;

    /// A journal on a schema of its own.
    pub(super) struct Isolated {
        pub(super) journal: PgJournal,
        pub(super) url: String,
        pub(super) schema: String,
    }

    pub(super) async fn open() -> Option<Isolated> {
        open_with(PgOptions::default()).await
    }

    #[expect(
        clippy::panic,
        reason = "test setup outside a #[test] fn: an unreachable database must fail the test"
    )]
    pub(super) async fn open_with(options: PgOptions) -> Option<Isolated> {
        let url = notify_testkit::postgres::database_url("PostgreSQL retention check")?;
        let schema = format!("nj_ret_{}", Uuid::now_v7().simple());
        match PgJournal::connect(&url, options.schema(&schema)).await {
            Ok(journal) => Some(Isolated {
                journal,
                url,
                schema,
            }),
            Err(e) => panic!("cannot open the PostgreSQL journal: {e}"),
        }
    }

    impl Drop for Isolated {
        /// Drops the schema, best effort (a leftover schema is harmless), on a thread
        /// of its own: `drop` cannot await.
        fn drop(&mut self) {
            let (url, schema) = (self.url.clone(), self.schema.clone());
            let _ = std::thread::spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                rt.block_on(async {
                    if let Ok((client, conn)) =
                        tokio_postgres::connect(&url, tokio_postgres::NoTls).await
                    {
                        tokio::spawn(conn);
                        let _ = client
                            .batch_execute(&format!(
                                "SET lock_timeout = '10s'; DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
                            ))
                            .await;
                    }
                });
            })
            .join();
        }
    }

    notify_testkit::conformance_retention_tests! {
        setup = match open().await {
            Some(isolated) => isolated,
            None => return Ok(()),
        },
        backend = |isolated| &isolated.journal,
    }
}

mod leases {
    //! The lease checks, each on a schema of its own (the orphan check lists the
    //! whole schema): one holder with the default lease, and two handles (two
    //! holders) with 2 s leases for the two-holder checks.
    use std::time::Duration;

    use notify_journal::{PgJournal, PgOptions};

    use super::retention::{Isolated, open, open_with};

    /// Two handles, two holders, on one schema of its own.
    pub(super) struct Pair {
        b: PgJournal,
        a: Isolated,
    }

    #[expect(
        clippy::panic,
        reason = "test setup outside a #[test] fn: an unreachable database must fail the test"
    )]
    async fn pair() -> Option<Pair> {
        let options = PgOptions::default().lease_duration(Duration::from_secs(2));
        let a = open_with(options.clone()).await?;
        match PgJournal::connect(&a.url, options.schema(&a.schema)).await {
            Ok(b) => Some(Pair { b, a }),
            Err(e) => panic!("cannot open the second PostgreSQL journal: {e}"),
        }
    }

    notify_testkit::conformance_lease_tests! {
        setup = match open().await {
            Some(isolated) => isolated,
            None => return Ok(()),
        },
        holder = |isolated| &isolated.journal,
    }

    mod two_holders {
        notify_testkit::conformance_lease_tests! {
            setup = match super::pair().await {
                Some(pair) => pair,
                None => return Ok(()),
            },
            holder = |pair| &pair.a.journal,
            holders = |pair| (&pair.a.journal, &pair.b),
        }
    }
}
