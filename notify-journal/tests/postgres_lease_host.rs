//! What a host runtime needs from the PostgreSQL journal's leases
//! (`JournalLeases`), against a real server: one round trip renews every lease, a
//! lost lease is reported once and stays fenced, `Held` names the holder and its
//! time left, orphans are listed, and lease changes are heard from other handles.
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default);
//! without either, each test says it was skipped and returns.
#![cfg(feature = "postgres")]
// Test code: a failed expectation is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod postgres_support;

use std::time::Duration;

use notify_journal::{AppendError, JournalBackend, LeaseError, PgJournal, PgOptions, purge};
use notify_types::{SessionId, Timestamp, Uuid};
use postgres_support::{command, database_url, drop_schema, ended, fresh_schema, journal};
use tokio::sync::broadcast;

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

async fn append(j: &PgJournal, s: SessionId) -> Result<u64, AppendError> {
    j.append(s, command(s, Uuid::now_v7(), 0))
        .await
        .map(|o| o.seq)
}

/// Waits (bounded) until `want` is announced on `changes`; other sessions are
/// skipped.
async fn heard(
    changes: &mut broadcast::Receiver<SessionId>,
    want: SessionId,
    within: Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, changes.recv()).await {
            Ok(Ok(s)) if s == want => return true,
            Ok(Ok(_) | Err(broadcast::error::RecvError::Lagged(_))) => {}
            _ => return false,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewing_many_leases_is_one_round_trip() {
    let Some(url) = database_url("renewing_many_leases_is_one_round_trip") else {
        return;
    };
    let schema = fresh_schema("renew_all");
    let j = journal(&url, &schema, PgOptions::default()).await;
    let mut leases = Vec::new();
    for _ in 0..500 {
        leases.push(j.acquire_lease(SessionId::new()).await.unwrap());
    }
    let before = j.lease_round_trips();
    let renewal = j.renew_leases().await.unwrap();
    assert_eq!(
        j.lease_round_trips() - before,
        1,
        "one statement for 500 leases"
    );
    assert!(renewal.lost.is_empty(), "{:?}", renewal.lost);
    let mut renewed = renewal.renewed.clone();
    renewed.sort_by_key(|l| l.session());
    leases.sort_by_key(|l| l.session());
    assert_eq!(renewed, leases, "every lease renewed under its epoch");
    // A handle without leases sends nothing.
    let idle = journal(&url, &schema, PgOptions::default()).await;
    let before = idle.lease_round_trips();
    assert_eq!(idle.renew_leases().await.unwrap(), Default::default());
    assert_eq!(idle.lease_round_trips(), before);
    j.close().await;
    idle.close().await;
    drop_schema(&url, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_lease_is_reported_once_announced_and_stays_fenced() {
    let Some(url) = database_url("lost_lease_is_reported_once_announced_and_stays_fenced") else {
        return;
    };
    let schema = fresh_schema("lost");
    let short = PgOptions::default().lease_duration(Duration::from_millis(2000));
    let a = journal(&url, &schema, short.clone()).await;
    let b = journal(&url, &schema, PgOptions::default()).await;
    let mut changes = b
        .lease_changes()
        .expect("PostgreSQL announces lease changes");
    // Wait until b's listener hears anything: a probe release of a's.
    let mut ready = false;
    for _ in 0..100 {
        let probe = SessionId::new();
        a.acquire_lease(probe).await.unwrap();
        a.release_lease(probe).await.unwrap();
        if heard(&mut changes, probe, Duration::from_millis(100)).await {
            ready = true;
            break;
        }
    }
    assert!(ready, "the listener never heard a release");

    let (s, kept) = (SessionId::new(), SessionId::new());
    let lost = a.acquire_lease(s).await.unwrap();
    assert_eq!(append(&a, s).await.unwrap(), 1);
    wait_for_expiry(&a, s).await;
    let taken = b.acquire_lease(s).await.unwrap();
    assert_eq!(taken.epoch(), lost.epoch() + 1);
    let mine = a.acquire_lease(kept).await.unwrap();

    let renewal = a.renew_leases().await.unwrap();
    assert_eq!(renewal.lost, vec![s]);
    assert_eq!(renewal.renewed, vec![mine]);
    assert!(
        heard(&mut changes, s, Duration::from_secs(10)).await,
        "the loss was announced"
    );
    // Reported once: the next renewal neither sends nor lists it.
    let again = a.renew_leases().await.unwrap();
    assert!(
        again.lost.is_empty() && again.renewed == vec![mine],
        "{again:?}"
    );
    // Sticky: fenced while b holds it and after b released it.
    assert!(matches!(append(&a, s).await, Err(AppendError::Fenced { session }) if session == s));
    b.release_lease(s).await.unwrap();
    assert!(matches!(
        append(&a, s).await,
        Err(AppendError::Fenced { .. })
    ));
    assert!(matches!(a.release_lease(s).await, Err(LeaseError::Lost { session }) if session == s));
    assert!(matches!(
        append(&a, s).await,
        Err(AppendError::Fenced { .. })
    ));
    // Until acquired again.
    let back = a.acquire_lease(s).await.unwrap();
    assert_eq!(back.epoch(), taken.epoch() + 1);
    assert_eq!(append(&a, s).await.unwrap(), 2);
    a.close().await;
    b.close().await;
    drop_schema(&url, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_names_the_holder_and_its_time_left() {
    let Some(url) = database_url("held_names_the_holder_and_its_time_left") else {
        return;
    };
    let schema = fresh_schema("held");
    let long = PgOptions::default().lease_duration(Duration::from_secs(600));
    let a = journal(&url, &schema, long).await;
    let b = journal(&url, &schema, PgOptions::default()).await;
    let s = SessionId::new();
    let lease = a.acquire_lease(s).await.unwrap();
    match b.acquire_lease(s).await {
        Err(LeaseError::Held {
            session,
            epoch,
            holder,
            expires_in,
        }) => {
            assert_eq!(
                (session, epoch, holder),
                (s, lease.epoch(), Some(a.holder_id()))
            );
            let left = expires_in.expect("a live lease's time left");
            // By the database's clock: more than zero, at most the lease.
            assert!(
                left > Duration::ZERO && left <= Duration::from_secs(600),
                "{left:?}"
            );
        }
        other => panic!("want Held, got {other:?}"),
    }
    let info = b.lease_info(s).await.unwrap();
    assert!(info.live && info.holder == Some(a.holder_id()) && info.expires_in.is_some());
    a.release_lease(s).await.unwrap();
    let info = b.lease_info(s).await.unwrap();
    assert!(
        !info.live && info.holder.is_none() && info.expires_in.is_none(),
        "{info:?}"
    );
    a.close().await;
    b.close().await;
    drop_schema(&url, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_are_open_sessions_without_a_live_lease() {
    let Some(url) = database_url("orphans_are_open_sessions_without_a_live_lease") else {
        return;
    };
    let schema = fresh_schema("orphans");
    let short = PgOptions::default().lease_duration(Duration::from_millis(300));
    let j = journal(&url, &schema, PgOptions::default()).await;
    let brief = journal(&url, &schema, short).await;
    let [never, released, expired, live, ended_s, purged] =
        std::array::from_fn(|_| SessionId::new());
    for s in [never, released, expired, live, ended_s, purged] {
        append(&j, s).await.unwrap();
    }
    j.acquire_lease(released).await.unwrap();
    j.release_lease(released).await.unwrap();
    j.acquire_lease(live).await.unwrap();
    brief.acquire_lease(expired).await.unwrap();
    wait_for_expiry(&j, expired).await;
    // One session purged, then another ended (not purged).
    j.append(purged, ended(purged)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let report = purge(&j, Timestamp::now(), 1000).await.unwrap();
    assert_eq!(report.sessions, 1, "{report:?}");
    j.append(ended_s, ended(ended_s)).await.unwrap();
    let orphans = j.orphaned_sessions(100).await.unwrap();
    // Never leased and released (no expiry) first, then the expired one.
    let mut first_two = orphans[..2].to_vec();
    first_two.sort();
    let mut want = vec![never, released];
    want.sort();
    assert_eq!(first_two, want, "{orphans:?}");
    assert_eq!(orphans[2..], [expired], "{orphans:?}");
    // Bounded by the limit.
    assert_eq!(j.orphaned_sessions(2).await.unwrap().len(), 2);
    assert!(j.orphaned_sessions(0).await.unwrap().is_empty());
    // The listing is an index range scan of `leases_orphans` (the statement of
    // `sql.rs`, `orphans`).
    let client = postgres_support::raw_client(&url).await;
    postgres_support::assert_orphans_scan_their_index(&client, &schema).await;
    j.close().await;
    brief.close().await;
    drop_schema(&url, &schema).await;
}

/// Rows other transactions hold locked as appends and transactional acks do (the
/// session's row `FOR UPDATE`, its lease row `FOR KEY SHARE`) hold back no renewal:
/// every lease is judged and renewed in the same round. (Before schema version 9 the
/// locked session was skipped, "not judged", round after round.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_locked_by_an_open_append_hold_back_no_renewal() {
    let Some(url) = database_url("rows_locked_by_an_open_append_hold_back_no_renewal") else {
        return;
    };
    let schema = fresh_schema("renew_skip");
    let j = journal(&url, &schema, PgOptions::default()).await;
    let mut leases = Vec::new();
    for _ in 0..4 {
        leases.push(j.acquire_lease(SessionId::new()).await.unwrap());
    }
    let busy = leases[1].session();
    // Another transaction holds what an append in an application's transaction
    // holds until it ends.
    let mut other = postgres_support::raw_client(&url).await;
    let tx = other.transaction().await.unwrap();
    for lock in [
        "SELECT 1 FROM \"{schema}\".sessions WHERE session = $1 FOR UPDATE",
        "SELECT 1 FROM \"{schema}\".leases WHERE session = $1 FOR KEY SHARE",
    ] {
        tx.execute(&lock.replace("{schema}", &schema), &[busy.as_uuid()])
            .await
            .unwrap();
    }
    // Generous guard: the renewal must not wait for that transaction.
    let renewal = tokio::time::timeout(Duration::from_secs(60), j.renew_leases())
        .await
        .expect("the renewal waited for a row lock held elsewhere")
        .unwrap();
    assert!(renewal.lost.is_empty(), "{:?}", renewal.lost);
    let mut renewed = renewal.renewed.clone();
    renewed.sort_by_key(|l| l.session());
    let mut all = leases.clone();
    all.sort_by_key(|l| l.session());
    assert_eq!(renewed, all, "every lease renewed, the locked one too");
    assert!(j.lease_info(busy).await.unwrap().live);
    tx.rollback().await.unwrap();
    j.close().await;
    drop_schema(&url, &schema).await;
}
