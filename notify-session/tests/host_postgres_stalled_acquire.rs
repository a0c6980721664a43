//! An acquire that waits starts its placement with a whole lease. Adopting a session
//! whose stalled holder (a host frozen by SIGSTOP) has an append in flight, the
//! acquire waits for that append's lock on the lease row; the lease it then takes
//! runs from when it got the row, not from when the call began. The placement's local
//! deadline must not count from the call's start, or the session is stopped as lost
//! the moment it opens (seen in the three-host chaos test: adopted at epoch 3 and
//! stopped within the same millisecond when the frozen host resumed). The test has a
//! schema of its own, dropped at its end.
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod host_support;

use std::time::Duration;

use host_support::pg::{drop_schema, journal, raw};
use host_support::{WAIT, opening_host};
use notify_testkit::postgres::database_url;
use notify_types::{SessionId, Uuid};

/// On the code before the fix the session was stopped as lost as soon as its open
/// finished (`HostError::Lost`): its deadline had passed while the acquire waited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_that_waited_for_a_stalled_append_keeps_its_lease() {
    let Some(url) = database_url("an acquire that waited keeps its lease") else {
        return;
    };
    let schema = format!("ns_host_stalled_{}", Uuid::new_v4().simple());
    let lease = Duration::from_secs(2);
    let id = SessionId::new();

    // The stalled holder: it took the lease and never renews it; one of its appends
    // is in flight, holding the lease row as every append does (FOR KEY SHARE).
    let stalled = journal(&url, &schema, lease).await;
    stalled.acquire_lease(id).await.unwrap();
    let mut append_in_flight = raw(&url).await;
    let txn = append_in_flight.transaction().await.unwrap();
    let locked = txn
        .execute(
            &format!("SELECT 1 FROM \"{schema}\".leases WHERE session = $1 FOR KEY SHARE"),
            &[id.as_uuid()],
        )
        .await
        .unwrap();
    assert_eq!(locked, 1, "the lease row is held");
    // Its lease runs out by the database's clock.
    tokio::time::sleep(lease + Duration::from_millis(500)).await;

    // Another host adopts the session: its acquire waits for the append in flight,
    // longer than a lease, before it takes the row.
    let host = opening_host(journal(&url, &schema, lease).await, |h| h).await;
    let opening = {
        let host = host.clone();
        tokio::spawn(async move { host.open(id).await })
    };
    tokio::time::sleep(lease + Duration::from_millis(500)).await;
    assert!(
        !opening.is_finished(),
        "the acquire did not wait for the row"
    );
    txn.commit().await.unwrap();

    let opened = tokio::time::timeout(WAIT, opening).await.unwrap().unwrap();
    assert!(
        opened.is_ok(),
        "the adopted session was not served: {opened:?}"
    );
    // And it stays served, renewed round after round, under the epoch it took.
    tokio::time::sleep(lease * 2).await;
    let status = host.status();
    let held: Vec<_> = status.sessions.iter().filter(|s| s.session == id).collect();
    assert_eq!(held.len(), 1, "the session is no longer held: {status:?}");
    assert_eq!(held[0].epoch, 2);

    host.shutdown().await.unwrap();
    drop(stalled);
    drop_schema(&url, &schema).await;
}
