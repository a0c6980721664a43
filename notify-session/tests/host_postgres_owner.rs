//! `NotOwner` names the new owner on PostgreSQL: a host frozen past its lease (its
//! runtime's only thread blocked, as a SIGSTOP would) while another holder takes the
//! session over stops the session when it resumes, naming that holder, and the
//! session's `NotOwner` answers name it from then on. The test has a schema of its
//! own, dropped at its end.
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod host_support;

use std::time::Duration;

use host_support::pg::{drop_schema, journal};
use host_support::{OneLoop, WAIT, notification, opening_host, started, stop_of};
use notify_session::{HostError, StopReason};
use notify_testkit::postgres::database_url;
use notify_types::{LoopId, NotifyError, SessionId, Uuid};

/// On the code before the fix the resumed host stopped the session by its deadline
/// without asking the engine: `LeaseLost { owner: None }`, and `NotOwner` named no
/// one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_resumed_past_its_lease_names_the_holder_that_took_it_over() {
    let Some(url) = database_url("host names the owner after a pause") else {
        return;
    };
    let schema = format!("ns_host_owner_{}", Uuid::new_v4().simple());
    let lease = Duration::from_secs(2);
    let loop_id = LoopId::new();
    // Host A runs on a runtime of its own, in a thread of its own (its journal's
    // connections run on the test's runtime, as a database would go on).
    let a_journal = journal(&url, &schema, lease).await;
    let a_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let a_rt = a_runtime.handle().clone();
    let (end_a, a_ends) = tokio::sync::oneshot::channel::<()>();
    let a_thread = std::thread::spawn(move || {
        a_runtime.block_on(async move {
            let _ = a_ends.await;
        });
    });
    let (app, mut seen) = OneLoop::new(loop_id);
    let a = a_rt
        .spawn(async move { opening_host(a_journal, |h| h.app(app)).await })
        .await
        .unwrap();
    let id = SessionId::new();
    let session = {
        let a = a.clone();
        a_rt.spawn(async move { a.open(id).await.unwrap() })
            .await
            .unwrap()
    };
    let _consumer = started(&mut seen).await;

    // A freezes for three lease durations; host B takes the session (and keeps it)
    // once A's lease runs out by the database's clock.
    a_rt.spawn(async move { std::thread::sleep(lease * 3) });
    let b = opening_host(journal(&url, &schema, lease).await, |h| h).await;
    tokio::time::timeout(WAIT, async {
        loop {
            match b.open(id).await {
                Ok(_) => return,
                Err(HostError::Held { .. }) => tokio::time::sleep(Duration::from_millis(100)).await,
                Err(e) => panic!("opening the session on B failed: {e}"),
            }
        }
    })
    .await
    .expect("A's lease never ran out");
    assert_eq!(b.status().sessions[0].epoch, 2);

    // A resumes past its deadline: it stops the session, naming B.
    let why = tokio::time::timeout(WAIT, stop_of(&mut seen, id))
        .await
        .unwrap();
    assert_eq!(
        why,
        StopReason::LeaseLost {
            owner: Some(b.holder_id())
        }
    );
    match session
        .notify_process_completion(notification(id, loop_id))
        .await
    {
        Err(NotifyError::NotOwner { session_id, owner }) => {
            assert_eq!((session_id, owner), (id, Some(b.holder_id())));
        }
        answer => panic!("expected NotOwner naming B, got {answer:?}"),
    }
    a_rt.spawn(async move { a.shutdown().await.unwrap() })
        .await
        .unwrap();
    b.shutdown().await.unwrap();
    let _ = end_a.send(());
    a_thread.join().unwrap();
    drop_schema(&url, &schema).await;
}
