//! The host runtime on PostgreSQL, several hosts (journal handles) sharing one schema:
//! `Held` naming the holder and its time left, one lease statement per renewal
//! interval for many sessions, a lease lost to failing renewals stopping its session
//! (nothing written, `NotOwner`) while another host takes it over, a release adopted
//! at once through `LISTEN/NOTIFY`, two hosts racing for orphans, a shutdown while an
//! adoption waits in the application's start (its lease released, its loops shut), and
//! a transactional acknowledgement after the host released its session (`NotOwner`,
//! nothing written). Each test has a schema of its own (orphans are per schema),
//! dropped at its end.
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod host_support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use host_support::{
    Counting, OneLoop, Seen, WAIT, adopting_host, next_seen, notification, opening_host, started,
};
use notify_journal::{BoxFuture, PgJournal, PgOptions, replay_all};
use notify_loop::LoopConfig;
use notify_session::{
    AckError, AppError, HostApp, HostError, RestoreReport, Session, SessionConsumer, SessionHost,
    StopReason, TxAckError, restore,
};
use notify_testkit::postgres::database_url;
use notify_types::{LoopId, Notified, NotifyError, SessionId, Uuid};

/// A new schema for one test.
fn schema() -> String {
    format!("ns_host_{}", Uuid::new_v4().simple())
}

async fn journal(url: &str, schema: &str, lease: Duration) -> Arc<PgJournal> {
    let options = PgOptions::default().schema(schema).lease_duration(lease);
    Arc::new(PgJournal::connect(url, options).await.unwrap())
}

async fn drop_schema(url: &str, schema: &str) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

/// A session with `n` unacknowledged notifications to `loop_id`, written without a
/// lease (as a host that died left it): an orphan.
async fn orphan(journal: &Arc<PgJournal>, loop_id: LoopId, n: usize) -> SessionId {
    let session = Session::new(SessionId::new(), Arc::clone(journal));
    let _consumer = session
        .register_loop(LoopConfig::new(session.id(), loop_id))
        .unwrap();
    for _ in 0..n {
        let answer = session
            .notify_process_completion(notification(session.id(), loop_id))
            .await;
        assert_eq!(answer.unwrap(), Notified::Accepted);
    }
    session.id()
}

/// Waits until `b` hears lease changes: `a` opens and releases probe sessions until
/// `b`'s adopter picks one up through the announcement (its `LISTEN` connection is
/// set up in the background, and a release before it is heard only by polling).
async fn until_listening(
    a: &SessionHost<PgJournal>,
    b_seen: &mut tokio::sync::mpsc::UnboundedReceiver<Seen>,
) {
    for _ in 0..100 {
        let probe = SessionId::new();
        a.open(probe).await.unwrap();
        a.release(probe).await.unwrap();
        if let Ok(Some(Seen::Started { session, .. })) =
            tokio::time::timeout(Duration::from_millis(300), b_seen.recv()).await
        {
            assert_eq!(session, probe);
            return;
        }
    }
    panic!("the other host never heard a release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_of_a_session_another_host_holds_names_the_holder_and_its_time_left() {
    let Some(url) = database_url("host open Held") else {
        return;
    };
    let schema = schema();
    let lease = Duration::from_secs(30);
    let a = opening_host(journal(&url, &schema, lease).await, |h| h).await;
    let b = opening_host(journal(&url, &schema, lease).await, |h| h).await;
    let id = SessionId::new();
    a.open(id).await.unwrap();
    match b.open(id).await {
        Err(HostError::Held {
            session,
            holder,
            expires_in,
        }) => {
            assert_eq!((session, holder), (id, Some(a.holder_id())));
            let left = expires_in.expect("the database's time left");
            assert!(left > Duration::ZERO && left <= lease);
        }
        other => panic!("expected Held, got {other:?}"),
    }
    a.shutdown().await.unwrap();
    // Released: B opens it at once, under the next epoch.
    b.open(id).await.unwrap();
    assert_eq!(b.status().sessions[0].epoch, 2);
    b.shutdown().await.unwrap();
    drop_schema(&url, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_leases_are_renewed_by_one_statement_per_interval() {
    let Some(url) = database_url("host renewal statements") else {
        return;
    };
    let schema = schema();
    let pg = journal(&url, &schema, Duration::from_secs(30)).await;
    let counting = Arc::new(Counting::new(Arc::clone(&pg)));
    let host = opening_host(Arc::clone(&counting), |h| {
        h.renew_every(Duration::from_millis(100))
    })
    .await;
    for _ in 0..50 {
        host.open(SessionId::new()).await.unwrap();
    }
    let (calls, statements) = (
        counting.renewals.load(Ordering::SeqCst),
        pg.lease_round_trips(),
    );
    let wait = async {
        while counting.renewals.load(Ordering::SeqCst) < calls + 5 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(WAIT, wait)
        .await
        .expect("five renewals");
    // Read both once the fifth renewal has returned: each call is one statement.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let calls = counting.renewals.load(Ordering::SeqCst) - calls;
    let statements = pg.lease_round_trips() - statements;
    assert!(calls >= 5);
    // Neither pair of reads is atomic: a renewal counted as called but not yet sent when
    // the first pair was read lands its statement inside the window (one more statement
    // than calls), and one called but not yet sent at the second pair one fewer. One
    // statement per lease would be 50 a call.
    assert!(
        statements.abs_diff(calls as u64) <= 1,
        "{statements} lease statements for {calls} renewals of 50 leases"
    );
    assert_eq!(host.status().sessions.len(), 50);
    host.shutdown().await.unwrap();
    drop_schema(&url, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_to_failing_renewals_stops_the_session_and_another_host_takes_over() {
    let Some(url) = database_url("host lease lost") else {
        return;
    };
    let schema = schema();
    let lease = Duration::from_secs(2);
    let loop_id = LoopId::new();
    let a_journal = journal(&url, &schema, lease).await;
    let counting = Arc::new(Counting::new(Arc::clone(&a_journal)));
    let (a_app, mut a_seen) = OneLoop::new(loop_id);
    let a = opening_host(Arc::clone(&counting), |h| h.app(a_app)).await;
    let id = SessionId::new();
    let session = a.open(id).await.unwrap();
    let (_, _, _consumer) = started(&mut a_seen).await;
    let n = notification(id, loop_id);
    assert_eq!(
        session.notify_process_completion(n).await.unwrap(),
        Notified::Accepted
    );

    // A's renewals fail from now on (a database A cannot reach): past its deadline A
    // stops serving the session, at once and by itself.
    counting.failing.store(true, Ordering::SeqCst);
    match next_seen(&mut a_seen).await {
        Seen::Stopped { session, why } => {
            assert_eq!((session, why), (id, StopReason::LeaseLost { owner: None }));
        }
        Seen::Started { .. } => panic!("expected the stop"),
    }
    let retry = notification(id, loop_id);
    let refused = session.notify_process_completion(retry.clone()).await;
    assert!(
        matches!(refused, Err(NotifyError::NotOwner { .. })),
        "{refused:?}"
    );

    // B adopts the session once the lease runs out by the database's clock, with the
    // pending notification, and takes the supervisor's retry.
    let (b_app, mut b_seen) = OneLoop::new(loop_id);
    let b = adopting_host(
        journal(&url, &schema, lease).await,
        Duration::from_millis(200),
        |h| h.app(b_app),
    )
    .await;
    let (adopted, seeded, _b_consumer) = started(&mut b_seen).await;
    assert_eq!((adopted, seeded), (id, 1));
    let b_session = host_support::served(&b, id).await;
    assert_eq!(b.status().sessions[0].epoch, 2);
    assert_eq!(
        b_session.notify_process_completion(retry).await.unwrap(),
        Notified::Accepted
    );
    // A wrote nothing after it stopped: the log is the first notification and B's.
    let frames = replay_all(a_journal.as_ref(), id).await.unwrap();
    assert_eq!(frames.len(), 2);
    let info = a_journal.lease_info(id).await.unwrap();
    assert_eq!((info.epoch, info.holder), (2, Some(b.holder_id())));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    drop_schema(&url, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_session_is_adopted_through_lease_changes() {
    let Some(url) = database_url("host release adopted") else {
        return;
    };
    let schema = schema();
    let lease = Duration::from_secs(30);
    let loop_id = LoopId::new();
    let a_journal = journal(&url, &schema, lease).await;
    let id = orphan(&a_journal, loop_id, 2).await;
    let a = opening_host(Arc::clone(&a_journal), |h| h).await;
    let session = a.open(id).await.unwrap();
    // B polls once an hour: only the release's NOTIFY can bring it the session.
    let (b_app, mut b_seen) = OneLoop::new(loop_id);
    let b = adopting_host(
        journal(&url, &schema, lease).await,
        Duration::from_secs(3600),
        |h| h.app(b_app),
    )
    .await;
    until_listening(&a, &mut b_seen).await;
    a.release(id).await.unwrap();
    let (adopted, seeded, _consumer) = started(&mut b_seen).await;
    assert_eq!((adopted, seeded), (id, 2));
    let refused = session
        .notify_process_completion(notification(id, loop_id))
        .await;
    assert!(matches!(refused, Err(NotifyError::NotOwner { .. })));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    drop_schema(&url, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_racing_for_orphans_never_share_one() {
    let Some(url) = database_url("host adoption race") else {
        return;
    };
    let schema = schema();
    let lease = Duration::from_secs(30);
    let loop_id = LoopId::new();
    let writer = journal(&url, &schema, lease).await;
    let mut orphans = Vec::new();
    for _ in 0..8 {
        orphans.push(orphan(&writer, loop_id, 1).await);
    }
    // Each host also polls every second: an orphan the racing first polls leave to
    // each other (or one whose open failed under load) is adopted by a later poll,
    // not after the default poll of one lease duration (30 s, as long as the wait).
    let every = Duration::from_secs(1);
    let (a, b) = tokio::join!(
        async {
            adopting_host(journal(&url, &schema, lease).await, every, |h| {
                h.capacity(5)
            })
            .await
        },
        async {
            adopting_host(journal(&url, &schema, lease).await, every, |h| {
                h.capacity(5)
            })
            .await
        },
    );
    let wait = async {
        while a.sessions().len() + b.sessions().len() < orphans.len() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(WAIT, wait)
        .await
        .expect("every orphan adopted");
    for id in &orphans {
        assert!(
            a.sessions().contains(id) ^ b.sessions().contains(id),
            "{id} is served by exactly one host"
        );
        let info = writer.lease_info(*id).await.unwrap();
        assert!(info.live && info.epoch == 1);
    }
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    drop_schema(&url, &schema).await;
}

/// What the gated application saw: a start entered (its loop registered), a stop.
enum GateSeen {
    Entered(SessionConsumer),
    Stopped(SessionId, StopReason),
}

/// An application whose start registers its loop, then waits for the gate.
struct Gated {
    loop_id: LoopId,
    seen: tokio::sync::mpsc::UnboundedSender<GateSeen>,
    gate: Arc<tokio::sync::Notify>,
}

impl HostApp for Gated {
    fn started<'a>(
        &'a self,
        session: &'a Session,
        _report: RestoreReport,
    ) -> BoxFuture<'a, Result<(), AppError>> {
        Box::pin(async move {
            let consumer = session.register_loop(LoopConfig::new(session.id(), self.loop_id))?;
            let _ = self.seen.send(GateSeen::Entered(consumer));
            self.gate.notified().await;
            Ok(())
        })
    }

    fn stopped(&self, session: SessionId, why: StopReason) {
        let _ = self.seen.send(GateSeen::Stopped(session, why));
    }
}

/// Host A, adopting an orphan, waits in the application's start (loop registered).
struct GatedAdoption {
    a: SessionHost<PgJournal>,
    writer: Arc<PgJournal>,
    id: SessionId,
    consumer: SessionConsumer,
    gate: Arc<tokio::sync::Notify>,
    seen_rx: tokio::sync::mpsc::UnboundedReceiver<GateSeen>,
}

async fn gated_adoption(
    url: &str,
    schema: &str,
    lease: Duration,
    grace: Duration,
) -> GatedAdoption {
    let loop_id = LoopId::new();
    let writer = journal(url, schema, lease).await;
    let (seen, mut seen_rx) = tokio::sync::mpsc::unbounded_channel();
    let gate = Arc::new(tokio::sync::Notify::new());
    let a = adopting_host(
        journal(url, schema, lease).await,
        Duration::from_millis(50),
        |h| {
            h.shutdown_grace(grace).app(Gated {
                loop_id,
                seen,
                gate: Arc::clone(&gate),
            })
        },
    )
    .await;
    let id = orphan(&writer, loop_id, 1).await;
    let Some(GateSeen::Entered(consumer)) = tokio::time::timeout(WAIT, seen_rx.recv())
        .await
        .expect("the adoption reached the application's start")
    else {
        panic!("expected the adoption's start");
    };
    assert!(
        writer.lease_info(id).await.unwrap().live,
        "A took the lease"
    );
    GatedAdoption {
        a,
        writer,
        id,
        consumer,
        gate,
        seen_rx,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_during_an_adoption_in_the_apps_start_releases_its_lease_and_shuts_its_loop() {
    let Some(url) = database_url("host shutdown during an adoption") else {
        return;
    };
    let schema = schema();
    let lease = Duration::from_secs(30);
    let GatedAdoption {
        a,
        writer,
        id,
        mut consumer,
        gate,
        mut seen_rx,
    } = gated_adoption(&url, &schema, lease, lease).await;
    let watch = a.clone();

    // Shut A down while its start waits; the gate opens once the lease is released
    // (or at once if shutdown returns first).
    let down = tokio::spawn(a.shutdown());
    let released = async {
        while !down.is_finished() && writer.lease_info(id).await.unwrap().live {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(WAIT, released)
        .await
        .expect("the lease released or the shutdown done");
    gate.notify_one();
    tokio::time::timeout(WAIT, down)
        .await
        .expect("shutdown returns")
        .unwrap()
        .unwrap();

    // The lease is free: another host opens the session at once.
    let b = opening_host(journal(&url, &schema, lease).await, |h| h).await;
    b.open(id)
        .await
        .expect("released by the shutdown: another host opens it at once");
    // The adoption went on after the stop and shut the loop it had registered, then
    // told the application, before shutdown returned; A serves nothing.
    match seen_rx.try_recv() {
        Ok(GateSeen::Stopped(session, StopReason::ShutDown)) => assert_eq!(session, id),
        Ok(GateSeen::Stopped(_, why)) => panic!("stopped for {why}"),
        Ok(GateSeen::Entered(_)) => panic!("a second start"),
        Err(e) => panic!("the application was not told the session stopped: {e}"),
    }
    assert!(
        tokio::time::timeout(WAIT, consumer.recv())
            .await
            .expect("A's loop neither delivered nor closed within the bound")
            .is_none(),
        "A's loop delivers nothing"
    );
    assert!(watch.sessions().is_empty() && watch.status().sessions.is_empty());
    b.shutdown().await.unwrap();
    drop_schema(&url, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactional_ack_after_the_host_released_the_session_is_not_owner_and_writes_nothing() {
    let Some(url) = database_url("host txack after release") else {
        return;
    };
    let schema = schema();
    let lease = Duration::from_secs(30);
    let loop_id = LoopId::new();
    let j = journal(&url, &schema, lease).await;
    let id = orphan(&j, loop_id, 1).await;
    let (app, mut seen) = OneLoop::new(loop_id);
    let a = opening_host(Arc::clone(&j), |h| h.app(app)).await;
    a.open(id).await.unwrap();
    let (_, seeded, mut consumer) = started(&mut seen).await;
    assert_eq!(seeded, 1);
    let received = consumer.recv().await.unwrap();
    a.release(id).await.unwrap();

    // The application's transaction: even committed, it carries no consumption.
    let (mut app_client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let tx = app_client.transaction().await.unwrap();
    let refused = received.ack_in_pg(&j, &tx).await;
    assert!(
        matches!(
            &refused,
            Err(TxAckError::Ack(AckError::NotOwner { session_id, .. })) if *session_id == id
        ),
        "{refused:?}"
    );
    tx.commit().await.unwrap();
    let report = restore(id, j.as_ref()).await.unwrap();
    assert_eq!(report.pending_count(), 1, "nothing acknowledged");
    a.shutdown().await.unwrap();
    drop_schema(&url, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_past_its_grace_aborts_a_start_that_never_returns_and_still_releases_the_lease() {
    let Some(url) = database_url("host shutdown past its grace") else {
        return;
    };
    let schema = schema();
    let lease = Duration::from_secs(30);
    // The gate never opens: only the grace ends the adoption.
    let GatedAdoption {
        a,
        id,
        mut consumer,
        gate,
        ..
    } = gated_adoption(&url, &schema, lease, Duration::from_millis(100)).await;
    tokio::time::timeout(WAIT, a.shutdown())
        .await
        .expect("shutdown returns past its grace")
        .unwrap();
    let b = opening_host(journal(&url, &schema, lease).await, |h| h).await;
    b.open(id)
        .await
        .expect("released by the shutdown: another host opens it at once");
    assert!(
        tokio::time::timeout(WAIT, consumer.recv())
            .await
            .expect("A's loop neither delivered nor closed within the bound")
            .is_none(),
        "A's loop delivers nothing"
    );
    drop(gate);
    b.shutdown().await.unwrap();
    drop_schema(&url, &schema).await;
}
