//! The PostgreSQL journal's leases against a real server: expiry, takeover and
//! fencing, the required-lease policy, connection turnover, retried releases.
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default);
//! without either, each test says it was skipped and returns.
#![cfg(feature = "postgres")]
// Test code: a failed expectation is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod postgres_support;

use std::sync::Arc;
use std::time::Duration;

use notify_journal::{
    AppendError, AppendOutcome, JournalBackend, JournalRead, LeaseError, LeasePolicy, PgJournal,
    PgOptions, replay_all,
};
use notify_types::{SessionId, Uuid};
use postgres_support::{
    HANG_GUARD, command, conninfo_with, database_url, journal, not_over_tcp, raw_client,
};

/// Polls `probe` (bounded) until it returns true; panics with `what` otherwise.
async fn poll_until<F, Fut>(what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..1500 {
        if probe().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("gave up waiting: {what}");
}

/// The tests' shared schema (each test uses fresh sessions in it).
// Named for the journal schema version: builds at different versions sharing a test
// database never meet (and refuse) each other's tables.
const SHARED: &str = "nj_test_shared_v9";

/// Waits, by the database's clock, until `session`'s lease is no longer live. Polls;
/// never asserts on elapsed time.
async fn wait_for_expiry(j: &PgJournal, session: SessionId) {
    for _ in 0..2000 {
        if !j.lease_info(session).await.unwrap().live {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("lease on {session} never expired");
}

fn appended(seq: u64) -> AppendOutcome {
    AppendOutcome {
        seq,
        appended: true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_writer_whose_lease_expired_is_fenced_and_writes_nothing() {
    let Some(url) = database_url("paused_writer_whose_lease_expired_is_fenced_and_writes_nothing")
    else {
        return;
    };
    let short = PgOptions::default().lease_duration(Duration::from_millis(200));
    let writer = journal(&url, SHARED, short).await;
    let s = SessionId::new();
    let lease = writer.acquire_lease(s).await.unwrap();
    assert_eq!(lease.epoch(), 1);

    // The writer "pauses" past its lease, by the database's clock.
    wait_for_expiry(&writer, s).await;
    let k = Uuid::now_v7();
    for _ in 0..2 {
        match writer.append(s, command(s, k, 0)).await {
            Err(AppendError::Fenced { session }) => assert_eq!(session, s),
            other => panic!("expected Fenced, got {other:?}"),
        }
    }
    assert_eq!(writer.last_seq(s).await.unwrap(), 0);
    assert_eq!(writer.lookup(s, k).await.unwrap(), None);
    assert!(replay_all(&writer, s).await.unwrap().is_empty());
    assert!(!writer.sessions().await.unwrap().contains(&s));
    // An expired lease cannot be renewed: the writer must start a new epoch.
    assert!(matches!(
        writer.renew_lease(s).await,
        Err(LeaseError::Lost { session }) if session == s
    ));
    let again = writer.acquire_lease(s).await.unwrap();
    assert_eq!(again.epoch(), 2);
    // Under the new lease the write may well be fenced again if this machine is
    // slow enough to let 200 ms pass; retry under fresh leases until it lands.
    let mut seq = None;
    for _ in 0..50 {
        match writer.append(s, command(s, k, 0)).await {
            Ok(out) => {
                seq = Some(out.seq);
                break;
            }
            Err(AppendError::Fenced { .. }) => {
                writer.acquire_lease(s).await.unwrap();
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(seq, Some(1), "the first frame ever written is seq 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_takeover_raises_the_epoch_and_fences_the_old_holder() {
    let Some(url) = database_url("lease_takeover_raises_the_epoch_and_fences_the_old_holder")
    else {
        return;
    };
    let a = journal(
        &url,
        SHARED,
        PgOptions::default().lease_duration(Duration::from_millis(300)),
    )
    .await;
    let b = journal(&url, SHARED, PgOptions::default()).await;
    let bystander = journal(&url, SHARED, PgOptions::default()).await;
    let s = SessionId::new();

    let first = a.acquire_lease(s).await.unwrap();
    // B cannot take a live lease; it can once A's has expired (bounded polling).
    let mut taken = None;
    for _ in 0..1500 {
        match b.acquire_lease(s).await {
            Ok(lease) => {
                taken = Some(lease);
                break;
            }
            Err(LeaseError::Held { session, epoch, .. }) => {
                assert_eq!((session, epoch), (s, first.epoch()));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    let taken = taken.expect("A's 300 ms lease never expired by the database's clock");
    assert!(taken.epoch() > first.epoch(), "a takeover raises the epoch");
    let info = b.lease_info(s).await.unwrap();
    assert_eq!(
        (info.epoch, info.holder),
        (taken.epoch(), Some(b.holder_id()))
    );
    assert!(info.live);

    // The old holder is fenced and writes nothing; the new one writes.
    let k = Uuid::now_v7();
    assert!(matches!(
        a.append(s, command(s, k, 0)).await,
        Err(AppendError::Fenced { .. })
    ));
    assert_eq!(b.last_seq(s).await.unwrap(), 0);
    assert_eq!(b.append(s, command(s, k, 0)).await.unwrap(), appended(1));
    // The old holder cannot renew, nor re-acquire a live lease.
    assert!(matches!(
        a.renew_lease(s).await,
        Err(LeaseError::Lost { .. })
    ));
    // Releasing the lost lease says it was lost (never a silent success); A then
    // behaves as a writer without a lease, fenced by B's.
    assert!(matches!(
        a.release_lease(s).await,
        Err(LeaseError::Lost { session }) if session == s
    ));
    assert!(matches!(
        a.append(s, command(s, k, 0)).await,
        Err(AppendError::Fenced { .. })
    ));
    assert_eq!(b.lease_info(s).await.unwrap().holder, Some(b.holder_id()));
    assert!(matches!(
        a.acquire_lease(s).await,
        Err(LeaseError::Held { epoch, .. }) if epoch == taken.epoch()
    ));
    // A writer without a lease is fenced by B's live lease too.
    assert!(matches!(
        bystander.append(s, command(s, Uuid::now_v7(), 0)).await,
        Err(AppendError::Fenced { .. })
    ));
    // Renewing keeps the epoch; acquiring a held lease again keeps it too.
    assert_eq!(b.renew_lease(s).await.unwrap().epoch(), taken.epoch());
    assert_eq!(b.acquire_lease(s).await.unwrap().epoch(), taken.epoch());

    // After release, the next lease has a higher epoch still, and writers without a
    // lease may append again.
    b.release_lease(s).await.unwrap();
    assert!(!b.lease_info(s).await.unwrap().live);
    assert_eq!(
        bystander
            .append(s, command(s, Uuid::now_v7(), 0))
            .await
            .unwrap(),
        appended(2)
    );
    let next = bystander.acquire_lease(s).await.unwrap();
    assert!(next.epoch() > taken.epoch());
    assert_eq!(replay_all(&b, s).await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_lease_policy_refuses_appends_without_a_lease() {
    let Some(url) = database_url("required_lease_policy_refuses_appends_without_a_lease") else {
        return;
    };
    let j = journal(
        &url,
        SHARED,
        PgOptions::default().lease_policy(LeasePolicy::Required),
    )
    .await;
    let s = SessionId::new();
    let k = Uuid::now_v7();
    assert!(matches!(
        j.append(s, command(s, k, 0)).await,
        Err(AppendError::Fenced { .. })
    ));
    j.acquire_lease(s).await.unwrap();
    assert_eq!(j.append(s, command(s, k, 0)).await.unwrap(), appended(1));
    j.release_lease(s).await.unwrap();
    assert!(matches!(
        j.append(s, command(s, Uuid::now_v7(), 0)).await,
        Err(AppendError::Fenced { .. })
    ));
    assert_eq!(j.last_seq(s).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_and_appends_survive_connection_turnover() {
    let Some(url) = database_url("leases_and_appends_survive_connection_turnover") else {
        return;
    };
    let app = format!("nj_turnover_{}", Uuid::now_v7().simple());
    // The application name tags this journal's connections so only they are killed.
    let tagged = if url.contains("://") {
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}application_name={app}")
    } else {
        format!("{url} application_name={app}")
    };
    let j = journal(&tagged, SHARED, PgOptions::default()).await;
    let s = SessionId::new();
    let lease = j.acquire_lease(s).await.unwrap();
    assert_eq!(
        j.append(s, command(s, Uuid::now_v7(), 0)).await.unwrap(),
        appended(1)
    );

    let admin = raw_client(&url).await;
    let killed = admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .await
        .unwrap();
    // The reader's and every writer's that has connected (at least one).
    assert!(
        killed >= 2,
        "the writers' and the reader's connections: {killed}"
    );

    // Each call may see the dead connection once; a retry reconnects. The lease,
    // kept in the database, is still ours.
    let k = Uuid::now_v7();
    let mut out = None;
    for _ in 0..5 {
        match j.append(s, command(s, k, 0)).await {
            Ok(o) => {
                out = Some(o);
                break;
            }
            Err(e) => assert!(e.is_retryable(), "{e}"),
        }
    }
    assert_eq!(out.map(|o| o.seq), Some(2));
    let mut info = None;
    for _ in 0..5 {
        if let Ok(i) = j.lease_info(s).await {
            info = Some(i);
            break;
        }
    }
    let info = info.unwrap();
    assert_eq!(
        (info.epoch, info.holder),
        (lease.epoch(), Some(j.holder_id()))
    );
    assert_eq!(j.renew_lease(s).await.unwrap().epoch(), lease.epoch());
}

/// A writer whose lease expires while it waits for its lease row (locked `FOR UPDATE`
/// elsewhere, as an acquire or release of another handle does) is fenced (append) or
/// has lost the lease (renew): expiry is judged after the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_expiring_during_the_row_lock_wait_fences() {
    let Some(url) = database_url("lease_expiring_during_the_row_lock_wait_fences") else {
        return;
    };
    let app = format!("nj_lockwait_{}", Uuid::now_v7().simple());
    let Some(tagged) = conninfo_with(&url, None, &format!("application_name={app}")) else {
        not_over_tcp("lease_expiring_during_the_row_lock_wait_fences");
        return;
    };
    let j = Arc::new(
        journal(
            &tagged,
            SHARED,
            PgOptions::default().lease_duration(Duration::from_millis(1500)),
        )
        .await,
    );
    let admin = raw_client(&url).await;
    let probe = raw_client(&url).await;
    let s = SessionId::new();

    for step in ["append", "renew"] {
        j.acquire_lease(s).await.unwrap();
        // Another connection holds the lease row (without changing it).
        admin.batch_execute("BEGIN").await.unwrap();
        admin
            .execute(
                &format!("SELECT 1 FROM {SHARED}.leases WHERE session = $1 FOR UPDATE"),
                &[s.as_uuid()],
            )
            .await
            .unwrap();
        let jj = Arc::clone(&j);
        let call = tokio::spawn(async move {
            match step {
                "append" => match jj.append(s, command(s, Uuid::now_v7(), 0)).await {
                    Err(AppendError::Fenced { .. }) => Ok(()),
                    other => Err(format!("append: expected Fenced, got {other:?}")),
                },
                _ => match jj.renew_lease(s).await {
                    Err(LeaseError::Lost { .. }) => Ok(()),
                    other => Err(format!("renew: expected Lost, got {other:?}")),
                },
            }
        });
        // The call waits for the row lock ...
        poll_until("the call to wait for the row lock", || async {
            let n: i64 = probe
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE application_name = $1 AND wait_event_type = 'Lock'",
                    &[&app],
                )
                .await
                .unwrap()
                .get(0);
            n > 0
        })
        .await;
        // ... while its lease expires by the database's clock ...
        poll_until("the lease to expire", || async {
            probe
                .query_one(
                    &format!(
                        "SELECT expires_at <= clock_timestamp()
                         FROM {SHARED}.leases WHERE session = $1"
                    ),
                    &[s.as_uuid()],
                )
                .await
                .unwrap()
                .get::<_, bool>(0)
        })
        .await;
        // ... and is judged only once it gets the lock.
        admin.batch_execute("ROLLBACK").await.unwrap();
        tokio::time::timeout(HANG_GUARD, call)
            .await
            .expect("the call hung")
            .unwrap()
            .unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(j.last_seq(s).await.unwrap(), 0, "nothing written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_retried_after_it_committed_unseen_is_not_lost() {
    // postmortem (review): a release whose answer was lost (timeout, broken connection)
    // but which had committed matched no row when retried and was reported Lost,
    // which reads as "your appends since were fenced".
    let Some(url) = database_url("a_release_retried_after_it_committed_unseen_is_not_lost") else {
        return;
    };
    let j = journal(&url, SHARED, PgOptions::default()).await;
    let s = SessionId::new();
    let lease = j.acquire_lease(s).await.unwrap();
    // The first release commits, but its answer never reaches the journal.
    let raw = raw_client(&url).await;
    let released = raw
        .execute(
            &format!(
                "UPDATE {SHARED}.leases SET holder = NULL, expires_at = NULL \
                 WHERE session = $1"
            ),
            &[s.as_uuid()],
        )
        .await
        .unwrap();
    assert_eq!(released, 1);
    j.release_lease(s).await.unwrap();
    assert_eq!(j.lease_info(s).await.unwrap().epoch, lease.epoch());

    // A lease taken over is still reported lost.
    let t = SessionId::new();
    j.acquire_lease(t).await.unwrap();
    raw.execute(
        &format!(
            "UPDATE {SHARED}.leases SET epoch = epoch + 1, \
             holder = gen_random_uuid() WHERE session = $1"
        ),
        &[t.as_uuid()],
    )
    .await
    .unwrap();
    assert!(matches!(
        j.release_lease(t).await,
        Err(LeaseError::Lost { .. })
    ));
}

/// Fencing is sticky: a handle that held a lease and lost it stays fenced on the
/// session until it acquires a new one. Releasing the lost lease answers `Lost` and
/// lifts nothing, even once no live lease exists (an expired lease nobody took over;
/// a taken-over lease its new holder released).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_fences_until_a_new_one_is_acquired() {
    let Some(url) = database_url("a_lost_lease_fences_until_a_new_one_is_acquired") else {
        return;
    };
    let short = PgOptions::default().lease_duration(Duration::from_millis(200));
    let a = journal(&url, SHARED, short.clone()).await;
    let raw = raw_client(&url).await;
    let frames = |s: SessionId| {
        let raw = &raw;
        async move {
            let n: i64 = raw
                .query_one(
                    &format!("SELECT count(*) FROM {SHARED}.frames WHERE session = $1"),
                    &[s.as_uuid()],
                )
                .await
                .unwrap()
                .get(0);
            n
        }
    };

    // Acquire, expire (nobody takes over), release: the release says the lease was
    // lost, and appends stay fenced although no live lease exists.
    let s = SessionId::new();
    let first = a.acquire_lease(s).await.unwrap();
    wait_for_expiry(&a, s).await;
    assert!(matches!(
        a.release_lease(s).await,
        Err(LeaseError::Lost { session }) if session == s
    ));
    assert!(!a.lease_info(s).await.unwrap().live);
    for _ in 0..2 {
        assert!(matches!(
            a.append(s, command(s, Uuid::now_v7(), 0)).await,
            Err(AppendError::Fenced { session }) if session == s
        ));
        // A second release changes nothing either.
        assert!(matches!(
            a.release_lease(s).await,
            Err(LeaseError::Lost { .. })
        ));
    }
    assert_eq!(frames(s).await, 0, "a fenced handle wrote nothing");
    // A new lease (a new epoch) lifts the fence.
    let mut landed = false;
    for _ in 0..50 {
        let again = a.acquire_lease(s).await.unwrap();
        assert!(again.epoch() > first.epoch());
        match a.append(s, command(s, Uuid::now_v7(), 0)).await {
            Ok(out) => {
                assert_eq!(out, appended(1));
                landed = true;
                break;
            }
            // This machine let 200 ms pass: the new lease expired too.
            Err(AppendError::Fenced { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(landed, "an append under a fresh lease lands");

    // Taken over, released by its new holder: the old holder is still fenced.
    let t = SessionId::new();
    let long = PgOptions::default().lease_duration(Duration::from_secs(60));
    let b = journal(&url, SHARED, long).await;
    a.acquire_lease(t).await.unwrap();
    wait_for_expiry(&a, t).await;
    b.acquire_lease(t).await.unwrap();
    assert!(matches!(
        a.release_lease(t).await,
        Err(LeaseError::Lost { session }) if session == t
    ));
    b.release_lease(t).await.unwrap();
    assert!(!a.lease_info(t).await.unwrap().live);
    assert!(matches!(
        a.append(t, command(t, Uuid::now_v7(), 0)).await,
        Err(AppendError::Fenced { session }) if session == t
    ));
    assert_eq!(frames(t).await, 0, "a fenced handle wrote nothing");
    // A handle that never held a lease there appends, as the lease policy allows.
    assert_eq!(
        b.append(t, command(t, Uuid::now_v7(), 0)).await.unwrap(),
        appended(1)
    );
    a.close().await;
    b.close().await;
}
