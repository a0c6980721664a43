//! The host runtime over the testkit's in-memory journal (real holders, epochs,
//! expiry and fencing), several hosts (holders) sharing it:
//! open (lease, restore, seed through the application), `Held`, one renewal per
//! interval for all sessions, a lost lease stopping its session (`NotOwner`, nothing
//! written), handoff by release and shutdown, adoption (capacity, two hosts racing),
//! and retention. Waits are for events, bounded by a generous timeout; the renewal
//! count runs on tokio's paused clock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod host_support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use host_support::{
    Counting, OneLoop, Seen, WAIT, adopting_host, next_seen, notification, opening_host,
    start_host, started,
};
use notify_journal::{JournalLeases, JournalRead, replay_all};
use notify_loop::LoopConfig;
use notify_session::{
    AckError, HostError, IfPending, RetentionSchedule, Session, SessionHost, StopReason,
};
use notify_testkit::MemoryJournal;
use notify_types::{LoopId, Notified, NotifyError, SessionId};

const LEASE: Duration = Duration::from_secs(6);

/// The testkit's in-memory journal, leases lasting [`LEASE`].
fn journal_with_leases() -> MemoryJournal {
    MemoryJournal::new().with_lease_duration(LEASE)
}

/// Writes a session with `n` notifications to `loop_id`, the first `acked` of them
/// acknowledged, through a plain session (no lease: as a host that died left it).
async fn seed_session(
    journal: &MemoryJournal,
    loop_id: LoopId,
    n: usize,
    acked: usize,
) -> SessionId {
    let session = Session::new(SessionId::new(), journal.another_holder());
    let mut consumer = session
        .register_loop(LoopConfig::new(session.id(), loop_id))
        .unwrap();
    for _ in 0..n {
        let answer = session
            .notify_process_completion(notification(session.id(), loop_id))
            .await;
        assert_eq!(answer.unwrap(), Notified::Accepted);
    }
    for _ in 0..acked {
        consumer.recv().await.unwrap().ack().await.unwrap();
    }
    session.id()
}

async fn stopped(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Seen>) -> (SessionId, StopReason) {
    match next_seen(rx).await {
        Seen::Stopped { session, why } => (session, why),
        Seen::Started { session, .. } => panic!("expected a stop, saw {session} start"),
    }
}

#[tokio::test]
async fn open_takes_the_lease_restores_and_seeds_through_the_app() {
    let journal = journal_with_leases();
    let loop_id = LoopId::new();
    let id = seed_session(&journal, loop_id, 3, 1).await;
    let (app, mut seen) = OneLoop::new(loop_id);
    let host = opening_host(Arc::new(journal.clone()), |h| h.app(app)).await;

    let session = host.open(id).await.unwrap();
    let (started_id, seeded, mut consumer) = started(&mut seen).await;
    assert_eq!((started_id, seeded), (id, 2));
    assert_eq!(host.session(id).unwrap().id(), id);
    assert_eq!(host.sessions(), vec![id]);

    let status = host.status();
    assert_eq!(status.holder, journal.holder_id());
    assert_eq!(status.sessions.len(), 1);
    assert_eq!(
        (status.sessions[0].epoch, status.sessions[0].pending),
        (1, 2)
    );
    assert!(status.sessions[0].time_left > Duration::ZERO);

    // The two pending ones come back; a new one is accepted and journaled.
    for _ in 0..2 {
        let received = consumer.recv().await.unwrap();
        received.ack().await.unwrap();
    }
    let n = notification(id, loop_id);
    assert_eq!(
        session.notify_process_completion(n).await.unwrap(),
        Notified::Accepted
    );
    assert_eq!(host.status().sessions[0].pending, 1);
    // Opening again answers the session served.
    assert_eq!(host.open(id).await.unwrap().id(), id);
    host.shutdown().await.unwrap();
}

#[tokio::test]
async fn open_of_a_session_held_elsewhere_names_the_holder_and_time_left() {
    let a_journal = journal_with_leases();
    let b_journal = a_journal.another_holder();
    let a = opening_host(Arc::new(a_journal.clone()), |h| h).await;
    let b = opening_host(Arc::new(b_journal), |h| h).await;
    let id = SessionId::new();
    a.open(id).await.unwrap();
    match b.open(id).await {
        Err(HostError::Held {
            session,
            holder,
            expires_in,
        }) => {
            assert_eq!(session, id);
            assert_eq!(holder, Some(a.holder_id()));
            let left = expires_in.expect("time left");
            assert!(left > Duration::ZERO && left <= LEASE);
        }
        other => panic!("expected Held, got {other:?}"),
    }
    assert!(b.session(id).is_none());
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn all_leases_are_renewed_by_one_call_per_interval() {
    let counting = Arc::new(Counting::new(Arc::new(journal_with_leases())));
    let every = Duration::from_millis(500);
    let host = opening_host(Arc::clone(&counting), |h| h.renew_every(every)).await;
    for _ in 0..20 {
        host.open(SessionId::new()).await.unwrap();
    }
    let before = counting.renewals.load(Ordering::SeqCst);
    // Ten intervals of the paused clock: ten renewals for twenty sessions.
    tokio::time::sleep(every * 10 + every / 2).await;
    let calls = counting.renewals.load(Ordering::SeqCst) - before;
    assert_eq!(
        calls, 10,
        "one renewal per interval, whatever the number of sessions"
    );
    let status = host.status();
    assert_eq!(status.sessions.len(), 20);
    assert!(status.sessions.iter().all(|s| s.since_renewal < every));
    host.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn renewals_failing_past_the_deadline_stop_the_session() {
    let counting = Arc::new(Counting::new(Arc::new(journal_with_leases())));
    let loop_id = LoopId::new();
    let (app, mut seen) = OneLoop::new(loop_id);
    let host = opening_host(Arc::clone(&counting), |h| h.app(app)).await;
    let id = SessionId::new();
    let session = host.open(id).await.unwrap();
    let (_, _, mut consumer) = started(&mut seen).await;
    let n = notification(id, loop_id);
    session.notify_process_completion(n).await.unwrap();
    let received = consumer.recv().await.unwrap();
    let head = counting.inner.last_seq(id).await.unwrap();

    counting.failing.store(true, Ordering::SeqCst);
    let (stopped_id, why) = stopped(&mut seen).await;
    assert_eq!(
        (stopped_id, why),
        (id, StopReason::LeaseLost { owner: None })
    );
    assert!(host.session(id).is_none());

    // Nothing more is written: new notifications, acks and consumers all see it.
    let again = session
        .notify_process_completion(notification(id, loop_id))
        .await;
    assert!(
        matches!(again, Err(NotifyError::NotOwner { session_id, owner: None }) if session_id == id)
    );
    assert!(again.unwrap_err().is_retryable());
    assert!(matches!(
        received.ack().await,
        Err(AckError::NotOwner { .. })
    ));
    assert!(consumer.recv().await.is_none());
    assert_eq!(counting.inner.last_seq(id).await.unwrap(), head);
    host.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn one_hung_renewal_does_not_cost_the_lease() {
    let counting = Arc::new(Counting::new(Arc::new(journal_with_leases())));
    let loop_id = LoopId::new();
    let (app, mut seen) = OneLoop::new(loop_id);
    // Defaults for a 6 s lease: renewals every 2 s, deadline 5.4 s after the last one.
    let host = opening_host(Arc::clone(&counting), |h| h.app(app)).await;
    let id = SessionId::new();
    let session = host.open(id).await.unwrap();
    let (_, _, _consumer) = started(&mut seen).await;
    // The round at 2 s hangs until it is cut short; the next must still come in time.
    counting.hang_once.store(true, Ordering::SeqCst);
    // Past the deadline of the renewal at open (5.4 s): the fence must be open still.
    tokio::time::sleep(Duration::from_millis(5_700)).await;
    session
        .notify_process_completion(notification(id, loop_id))
        .await
        .unwrap();
    tokio::time::sleep(LEASE * 2).await;
    assert!(
        seen.try_recv().is_err(),
        "the session was stopped by one hung renewal"
    );
    assert_eq!(host.sessions(), vec![id]);
    assert!(!counting.hang_once.load(Ordering::SeqCst));
    // Renewals failing for good still stop it at the deadline.
    counting.failing.store(true, Ordering::SeqCst);
    assert_eq!(
        stopped(&mut seen).await,
        (id, StopReason::LeaseLost { owner: None })
    );
    assert!(host.session(id).is_none());
    host.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_lease_taken_over_stops_the_session_and_names_the_new_owner() {
    let a_journal = journal_with_leases();
    let b_journal = a_journal.another_holder();
    let loop_id = LoopId::new();
    let (app, mut seen) = OneLoop::new(loop_id);
    let counting = Arc::new(Counting::new(Arc::new(a_journal.clone())));
    let a = opening_host(Arc::clone(&counting), |h| {
        h.renew_every(Duration::from_millis(50)).app(app)
    })
    .await;
    let id = SessionId::new();
    let session = a.open(id).await.unwrap();
    let (_, _, mut consumer) = started(&mut seen).await;
    session
        .notify_process_completion(notification(id, loop_id))
        .await
        .unwrap();

    // The engine's clock ran past A's lease (A's renewals held back meanwhile, well
    // within its deadline); B takes the session under epoch 2; A's next renewal
    // finds the lease lost.
    counting.failing.store(true, Ordering::SeqCst);
    a_journal.advance_lease_clock(LEASE);
    let b = opening_host(Arc::new(b_journal.clone()), |h| h).await;
    let b_session = b.open(id).await.unwrap();
    assert_eq!(b.status().sessions[0].epoch, 2);
    // A stale append through A's journal handle is fenced by the engine itself.
    let stale = session
        .notify_process_completion(notification(id, loop_id))
        .await;
    assert!(
        matches!(stale, Err(NotifyError::NotOwner { .. })),
        "{stale:?}"
    );
    counting.failing.store(false, Ordering::SeqCst);

    let (stopped_id, why) = stopped(&mut seen).await;
    assert_eq!(stopped_id, id);
    assert_eq!(
        why,
        StopReason::LeaseLost {
            owner: Some(b.holder_id())
        }
    );
    let n = notification(id, loop_id);
    match session.notify_process_completion(n.clone()).await {
        Err(NotifyError::NotOwner { session_id, owner }) => {
            assert_eq!((session_id, owner), (id, Some(b.holder_id())));
        }
        other => panic!("expected NotOwner, got {other:?}"),
    }
    assert!(consumer.recv().await.is_none());
    // Nothing of A's is journaled after the takeover: the log is the one notification.
    let frames = replay_all(&a_journal, id).await.unwrap();
    assert_eq!(frames.len(), 1);
    // The supervisor's retry reaches the new owner.
    let _b_consumer = b_session
        .register_loop(LoopConfig::new(id, loop_id))
        .unwrap();
    assert_eq!(
        b_session.notify_process_completion(n).await.unwrap(),
        Notified::Accepted
    );
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_released_session_is_adopted_by_another_host_at_once() {
    let a_journal = journal_with_leases();
    let loop_id = LoopId::new();
    let id = seed_session(&a_journal, loop_id, 2, 0).await;
    let (a_app, mut a_seen) = OneLoop::new(loop_id);
    let (b_app, mut b_seen) = OneLoop::new(loop_id);
    let a = opening_host(Arc::new(a_journal.clone()), |h| h.app(a_app)).await;
    let session = a.open(id).await.unwrap();
    started(&mut a_seen).await;
    // B polls once an hour: only the release's announcement can bring it the session.
    let b = adopting_host(
        Arc::new(a_journal.another_holder()),
        Duration::from_secs(3600),
        |h| h.app(b_app),
    )
    .await;
    assert!(b.sessions().is_empty());

    a.release(id).await.unwrap();
    assert_eq!(stopped(&mut a_seen).await, (id, StopReason::Released));
    let (adopted, seeded, _consumer) = started(&mut b_seen).await;
    assert_eq!((adopted, seeded), (id, 2));
    host_support::served(&b, id).await;
    assert_eq!(b.sessions(), vec![id]);
    assert!(matches!(
        session
            .notify_process_completion(notification(id, loop_id))
            .await,
        Err(NotifyError::NotOwner { .. })
    ));
    assert!(matches!(
        a.release(id).await,
        Err(HostError::NotServed { .. })
    ));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test]
async fn shutdown_hands_every_session_to_another_host() {
    let a_journal = journal_with_leases();
    let loop_id = LoopId::new();
    let (b_app, mut b_seen) = OneLoop::new(loop_id);
    let a = opening_host(Arc::new(a_journal.clone()), |h| h).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = seed_session(&a_journal, loop_id, 1, 0).await;
        a.open(id).await.unwrap();
        ids.push(id);
    }
    let b = adopting_host(
        Arc::new(a_journal.another_holder()),
        Duration::from_secs(3600),
        |h| h.app(b_app),
    )
    .await;
    let a2 = a.clone();
    a.shutdown().await.unwrap();
    assert!(matches!(
        a2.open(SessionId::new()).await,
        Err(HostError::ShutDown)
    ));
    let mut adopted = Vec::new();
    for _ in 0..3 {
        adopted.push(started(&mut b_seen).await.0);
    }
    adopted.sort();
    ids.sort();
    assert_eq!(adopted, ids);
    b.shutdown().await.unwrap();
}

#[tokio::test]
async fn adoption_stops_at_capacity_and_two_racing_hosts_never_share_a_session() {
    let journal = journal_with_leases();
    let loop_id = LoopId::new();
    let mut orphans = Vec::new();
    for _ in 0..6 {
        orphans.push(seed_session(&journal, loop_id, 1, 0).await);
    }
    // Both hosts adopt as they start, racing for the same six orphans.
    let (a, b) = tokio::join!(
        start_host(Arc::new(journal.clone()), |h| h.capacity(4)),
        start_host(Arc::new(journal.another_holder()), |h| h.capacity(4)),
    );
    let wait = async {
        while a.sessions().len() + b.sessions().len() < 6 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(WAIT, wait)
        .await
        .expect("every orphan adopted");
    assert!(a.sessions().len() <= 4 && b.sessions().len() <= 4);
    for id in &orphans {
        let on_a = a.sessions().contains(id);
        let on_b = b.sessions().contains(id);
        assert!(on_a ^ on_b, "session {id} is served by exactly one host");
    }
    // An explicit race for one new session: exactly one open wins.
    let id = SessionId::new();
    let (x, y) = tokio::join!(a.open(id), b.open(id));
    let wins = usize::from(x.is_ok()) + usize::from(y.is_ok());
    let refusals = [&x, &y]
        .iter()
        .filter(|r| {
            matches!(
                r,
                Err(HostError::Held { .. } | HostError::AtCapacity { .. })
            )
        })
        .count();
    assert_eq!((wins, refusals), (1, 1));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test]
async fn retention_purges_ended_sessions_and_drops_their_tombstones() {
    let journal = journal_with_leases();
    let loop_id = LoopId::new();
    let mut ended = Vec::new();
    for _ in 0..3 {
        let session = Session::new(SessionId::new(), journal.clone());
        let _consumer = session
            .register_loop(LoopConfig::new(session.id(), loop_id))
            .unwrap();
        session
            .notify_process_completion(notification(session.id(), loop_id))
            .await
            .unwrap();
        session.end(IfPending::Abandon).await.unwrap();
        ended.push(session.id());
    }
    let live = seed_session(&journal, loop_id, 1, 0).await;
    let host = opening_host(Arc::new(journal.clone()), |h| {
        h.retention(RetentionSchedule {
            purge_after: Duration::ZERO,
            drop_tombstones_after: Duration::ZERO,
            max_share: 0.5,
            step: 1,
            every: Duration::from_millis(20),
        })
    })
    .await;
    let wait = async {
        loop {
            let sessions = journal.sessions().await.unwrap();
            if ended.iter().all(|id| !sessions.contains(id)) {
                return sessions;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let left = tokio::time::timeout(WAIT, wait)
        .await
        .expect("purged and dropped");
    assert_eq!(left, vec![live], "the live session stays");
    assert_eq!(replay_all(&journal, live).await.unwrap().len(), 1);
    host.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_session_ended_through_its_handle_is_released() {
    let journal = journal_with_leases();
    let loop_id = LoopId::new();
    let (app, mut seen) = OneLoop::new(loop_id);
    let host = opening_host(Arc::new(journal.clone()), |h| {
        h.renew_every(Duration::from_millis(50)).app(app)
    })
    .await;
    let id = SessionId::new();
    let session = host.open(id).await.unwrap();
    let (_, _, _consumer) = started(&mut seen).await;
    session
        .notify_process_completion(notification(id, loop_id))
        .await
        .unwrap();
    session.end(IfPending::Abandon).await.unwrap();
    assert_eq!(stopped(&mut seen).await, (id, StopReason::Ended));
    assert!(host.sessions().is_empty());
    let info = journal.lease_info(id).await.unwrap();
    assert!(!info.live, "the ended session's lease is released");
    host.shutdown().await.unwrap();
}

/// Renewals failing: at the deadline (not at the keeper's next round) the session is
/// stopped, and nothing more is appended.
#[tokio::test(start_paused = true)]
async fn appends_are_refused_from_the_deadline_on_not_from_the_next_round() {
    let counting = Arc::new(Counting::new(Arc::new(journal_with_leases())));
    let loop_id = LoopId::new();
    let (app, mut seen) = OneLoop::new(loop_id);
    // Renewals at 2 s, then (failing) every 0.5 s; the deadline is at 5.4 s (6 s
    // less a tenth).
    let host = opening_host(Arc::clone(&counting), |h| {
        h.renew_every(Duration::from_secs(2)).app(app)
    })
    .await;
    let id = SessionId::new();
    let session = host.open(id).await.unwrap();
    let (_, _, _consumer) = started(&mut seen).await;
    counting.failing.store(true, Ordering::SeqCst);
    // Failed rounds are retried every 0.5 s: the keeper's next is at 5.5 s; the
    // engine's lease (by the wall clock) is live.
    tokio::time::sleep(Duration::from_millis(5_450)).await;
    assert!(host.status().sessions.is_empty());
    let answer = session
        .notify_process_completion(notification(id, loop_id))
        .await;
    assert!(
        matches!(answer, Err(NotifyError::NotOwner { .. })),
        "{answer:?}"
    );
    assert_eq!(counting.inner.last_seq(id).await.unwrap(), 0);
    host.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_schedule_without_room_for_two_renewals_is_refused() {
    // 6 s less 0.6 s leaves 5.4 s: 2.7 s leaves no room for a second renewal.
    let built = SessionHost::builder(Arc::new(journal_with_leases()))
        .adopt(false)
        .renew_every(Duration::from_millis(2_700))
        .start()
        .await;
    assert!(matches!(built, Err(HostError::Options { .. })));
    let built = opening_host(Arc::new(journal_with_leases()), |h| {
        h.renew_every(Duration::from_millis(2_600))
    })
    .await;
    built.shutdown().await.unwrap();
}
