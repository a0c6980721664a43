//! The backend conformance suite against [`RedbJournal`] on a temporary file.

use notify_journal::{RedbJournal, RedbOptions};
use tempfile::TempDir;

/// A journal on a fresh file; the directory outlives the journal (fields drop in
/// declaration order).
struct TempJournal {
    journal: RedbJournal,
    _dir: TempDir,
}

#[expect(
    clippy::expect_used,
    reason = "test setup outside a #[test] fn: failing to open is an environment failure"
)]
fn open(options: RedbOptions) -> TempJournal {
    let dir = tempfile::tempdir().expect("create a temporary directory");
    let journal =
        RedbJournal::open(dir.path().join("journal.redb"), options).expect("open the journal");
    TempJournal { journal, _dir: dir }
}

notify_testkit::conformance_tests! {
    setup = open(RedbOptions::default()),
    backend = |fixture| &fixture.journal,
    max_record_bytes = notify_journal::DEFAULT_MAX_RECORD_BYTES,
}

mod small_cap {
    //! The suite with a small size cap.
    use notify_journal::RedbOptions;

    const CAP: usize = 4096;

    notify_testkit::conformance_tests! {
        setup = super::open(RedbOptions::default().max_record_bytes(CAP)),
        backend = |fixture| &fixture.journal,
        max_record_bytes = CAP,
    }
}

mod integrity {
    //! Damage to the file behind the journal's back is named.
    use notify_journal::{RedbOptions, RedbVerifyOnOpen};
    use notify_testkit::tamper::RedbTamper;

    #[expect(
        clippy::expect_used,
        reason = "test setup outside a #[test] fn: failing to open is an environment failure"
    )]
    fn open() -> (RedbTamper, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("create a temporary directory");
        // No scrub: it could poison the handle (`Damaged`) before a check re-appends
        // to the file it damaged and expects the append path's own answer.
        let options = RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Pages);
        let journal =
            RedbTamper::open(dir.path().join("journal.redb"), options).expect("open the journal");
        (journal, dir)
    }

    notify_testkit::conformance_integrity_tests! {
        setup = open(),
        backend = |fixture| &fixture.0,
    }
}

mod leases {
    //! The one-holder lease contract (the file lock is the lease: there is no
    //! second holder), each check on a file of its own.
    use notify_journal::RedbOptions;

    notify_testkit::conformance_lease_tests! {
        setup = super::open(RedbOptions::default()),
        holder = |fixture| &fixture.journal,
    }
}

mod retention {
    //! Session end, purge and tombstones, each check on a file of its own.
    use notify_journal::RedbOptions;

    notify_testkit::conformance_retention_tests! {
        setup = super::open(RedbOptions::default()),
        backend = |fixture| &fixture.journal,
    }
}

/// The concurrent group check on redb, shown to run inside group commits: the writer
/// committed the groups (refused ones included) in batches shared with other
/// appenders' appends, fewer commits than calls, and every check of the atomic groups
/// held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_inside_a_group_commit() -> Result<(), notify_testkit::conformance::ConformanceError>
{
    // Four plain appends before, then 24 calls in flight together (16 plain appends,
    // eight groups of which four are refused).
    const CALLS: u64 = 4 + 24;
    let fixture = open(RedbOptions::default());
    notify_testkit::conformance::concurrent_groups_commit_whole_or_not_at_all(&fixture.journal)
        .await?;
    let stats = fixture.journal.commit_stats();
    assert!(
        stats.commits < CALLS,
        "{} commits for {CALLS} calls: the groups never shared a batch",
        stats.commits
    );
    Ok(())
}
