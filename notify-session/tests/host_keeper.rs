//! Keeping leases under load, on tokio's paused clock over the testkit's in-memory
//! journal: a session past its deadline is stopped at the deadline (not at the next
//! renewal round) and its consumer is handed nothing more; a stop that hangs holds no
//! other lease's renewal back; a session stopped at its deadline names the holder that
//! took it over. Waits are bounded by a generous timeout; the bounds asserted are
//! correctness deadlines (the lease's), never speed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod host_support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use host_support::{Counting, OneLoop, WAIT, notification, opening_host, started, stop_of};
use notify_journal::JournalLeases;
use notify_session::{IfPending, StopReason};
use notify_testkit::MemoryJournal;
use notify_types::{LoopId, Notified, NotifyError, SessionId};
use tokio::time::Instant;

/// Leases of 3 s: renewals every 1 s, a session's deadline 2.7 s after the start of
/// its last renewal (the default margin is a tenth).
const LEASE: Duration = Duration::from_secs(3);
const KEEP_FOR: Duration = Duration::from_millis(2_700);

fn counting_journal() -> (MemoryJournal, Arc<Counting<MemoryJournal>>) {
    let journal = MemoryJournal::new().with_lease_duration(LEASE);
    let counting = Arc::new(Counting::new(Arc::new(journal.clone())));
    (journal, counting)
}

/// Renewals that succeed but never report the session (as a renewal that skips its
/// locked row round after round): its deadline passes between two rounds. The host
/// stops it at the deadline, and the consumer, holding a notification across the
/// deadline, has its acknowledgement refused once and is handed nothing more.
///
/// On the code before the fix the stop came only at the next round, 300 ms after the
/// deadline, and meanwhile the consumer was handed the same notification over and
/// over (299 times, each acknowledgement refused).
#[tokio::test(start_paused = true)]
async fn a_session_past_its_deadline_is_stopped_then_and_hands_out_nothing_more() {
    let (_journal, counting) = counting_journal();
    counting.hide_renewals.store(true, Ordering::SeqCst);
    let loop_id = LoopId::new();
    let (app, mut seen) = OneLoop::new(loop_id);
    let host = opening_host(Arc::clone(&counting), |h| h.app(app)).await;
    let id = SessionId::new();
    let opened_at = Instant::now();
    let session = host.open(id).await.unwrap();
    let (_, _, mut consumer) = started(&mut seen).await;
    let deadline = opened_at + KEEP_FOR;
    session
        .notify_process_completion(notification(id, loop_id))
        .await
        .unwrap();

    // A consumer that holds what it receives across the deadline, then acknowledges,
    // and goes on receiving whatever the acknowledgement answered.
    let consuming = tokio::spawn(async move {
        let (mut handed, mut refused) = (0usize, 0usize);
        while let Some(received) = consumer.recv().await {
            handed += 1;
            if Instant::now() < deadline {
                tokio::time::sleep_until(deadline + Duration::from_millis(10)).await;
            }
            if received.ack().await.is_err() {
                refused += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            if handed > 100_000 {
                break;
            }
        }
        (handed, refused)
    });

    let why = tokio::time::timeout(WAIT, stop_of(&mut seen, id))
        .await
        .unwrap();
    let stopped_at = Instant::now();
    assert_eq!(why, StopReason::LeaseLost { owner: None });
    let late = stopped_at.saturating_duration_since(deadline);
    let (handed, refused) = tokio::time::timeout(WAIT, consuming)
        .await
        .expect("the consumer was never told the session stopped")
        .unwrap();
    assert!(
        late < Duration::from_millis(50) && (handed, refused) == (1, 1),
        "stopped {late:?} after the deadline; the notification handed {handed} times, \
         {refused} acknowledgements refused"
    );
    host.shutdown().await.unwrap();
}

/// Two sessions; one ends and its stop hangs (its release never returns, as one
/// waiting for a row lock). The other's renewals go on: three lease durations later
/// it is still served, and accepts.
///
/// On the code before the fix the keeper waited inside the hung stop: no renewal ran
/// again, and the other session's notification was refused `NotOwner` (fenced past
/// its deadline).
#[tokio::test(start_paused = true)]
async fn a_stop_that_hangs_holds_no_other_leases_renewal_back() {
    let (_journal, counting) = counting_journal();
    let loop_id = LoopId::new();
    let (app, mut seen) = OneLoop::new(loop_id);
    let host = opening_host(Arc::clone(&counting), |h| {
        h.shutdown_grace(Duration::from_millis(100)).app(app)
    })
    .await;
    let (a, b) = (SessionId::new(), SessionId::new());
    let a_session = host.open(a).await.unwrap();
    let _a_consumer = started(&mut seen).await;
    let b_session = host.open(b).await.unwrap();
    let _b_consumer = started(&mut seen).await;
    counting.hang_releases.store(true, Ordering::SeqCst);
    a_session.end(IfPending::Abandon).await.unwrap();

    let renewals = counting.renewals.load(Ordering::SeqCst);
    tokio::time::sleep(LEASE * 3).await;
    assert!(
        counting.renewals.load(Ordering::SeqCst) >= renewals + 8,
        "renewals stopped while a stop hung"
    );
    assert_eq!(host.sessions(), vec![b]);
    let answer = b_session
        .notify_process_completion(notification(b, loop_id))
        .await;
    assert_eq!(answer.unwrap(), Notified::Accepted);
    tokio::time::timeout(WAIT, host.shutdown())
        .await
        .expect("shutdown waited past its grace for the hung stop")
        .unwrap();
}

/// The host's renewals fail (as a host paused past its lease); the engine's clock
/// runs past the lease and another holder takes the session. At its deadline the
/// host stops the session naming that holder, and the session's `NotOwner` answers
/// name it from then on.
///
/// On the code before the fix a stop by deadline never asked: `owner: None`.
#[tokio::test(start_paused = true)]
async fn a_session_stopped_at_its_deadline_names_the_holder_that_took_it() {
    let (journal, counting) = counting_journal();
    let loop_id = LoopId::new();
    let (app, mut seen) = OneLoop::new(loop_id);
    let host = opening_host(Arc::clone(&counting), |h| h.app(app)).await;
    let id = SessionId::new();
    let session = host.open(id).await.unwrap();
    let _consumer = started(&mut seen).await;

    counting.failing.store(true, Ordering::SeqCst);
    journal.advance_lease_clock(LEASE);
    let other = journal.another_holder();
    other.acquire_lease(id).await.unwrap();

    let why = tokio::time::timeout(WAIT, stop_of(&mut seen, id))
        .await
        .unwrap();
    assert_eq!(
        why,
        StopReason::LeaseLost {
            owner: Some(other.holder_id())
        }
    );
    match session
        .notify_process_completion(notification(id, loop_id))
        .await
    {
        Err(NotifyError::NotOwner { session_id, owner }) => {
            assert_eq!((session_id, owner), (id, Some(other.holder_id())));
        }
        answer => panic!("expected NotOwner naming the new holder, got {answer:?}"),
    }
    host.shutdown().await.unwrap();
}
