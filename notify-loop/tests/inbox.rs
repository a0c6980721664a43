//! Behaviour of one loop: every delivery branch, the bounds, order, seeding,
//! requeueing, exit, and concurrent duplicate detection.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only, not the helpers here.
#![allow(clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Waker};
use std::time::Duration;

use notify_loop::{DEFAULT_CAPACITY, Delivery, LoopAckError, LoopConsumer, LoopHandle, spawn};
use notify_types::{CommandId, Disposition, LoopId, ProcessNotification, SessionId, StopCause};
use tokio::time::timeout;

mod support;
use support::Owner;

const ACCEPTED: Delivery = Delivery::Accepted;
const DUPLICATE: Delivery = Delivery::Duplicate;
const FULL: Delivery = Delivery::Stopped(StopCause::Full);
const EXITED: Delivery = Delivery::Stopped(StopCause::Exited);
const REFUSED: Delivery = Delivery::Stopped(StopCause::Refused);

/// Long enough that, under paused time, expiry means "would wait forever".
const FOREVER: Duration = Duration::from_secs(3600);

fn ids(notes: &[ProcessNotification]) -> Vec<CommandId> {
    notes.iter().map(ProcessNotification::command_id).collect()
}

/// Delivers each notification and asserts the answers.
async fn check(handle: &LoopHandle, cases: &[(&ProcessNotification, Delivery)]) {
    for (i, (note, want)) in cases.iter().enumerate() {
        let got = handle.deliver((*note).clone()).await;
        assert_eq!(got, *want, "case {i}: {:?}", note.command_id());
    }
}

/// Receives `n` notifications, acknowledging each, and returns their IDs in order.
async fn recv_ack(consumer: &mut LoopConsumer, n: usize) -> Vec<CommandId> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let received = consumer.recv().await.expect("a live notification");
        out.push(received.command_id());
        received.ack().await.expect("loop running");
    }
    out
}

/// Asserts that `recv` would wait forever (paused time makes this instant).
async fn assert_recv_waits(consumer: &mut LoopConsumer) {
    assert!(
        timeout(FOREVER, consumer.recv()).await.is_err(),
        "recv returned although nothing should be available"
    );
}

#[tokio::test(start_paused = true)]
async fn every_delivery_branch() {
    let owner = Owner::new();
    let (handle, mut consumer) = spawn(owner.config().capacity(2));
    let [a, b, c] = [owner.note(), owner.note(), owner.note()];

    let mut invalid = owner.note().into_notification();
    invalid.process_handle = "no/slashes".into();
    let invalid = ProcessNotification::new(invalid);
    let mut nil_id = owner.note().into_notification();
    nil_id.command_id = CommandId::NIL;
    let nil_id = ProcessNotification::new(nil_id);
    let mut other_session = owner.note().into_notification();
    other_session.session_id = SessionId::new();
    let other_session = ProcessNotification::new(other_session);
    let mut other_loop = owner.note().into_notification();
    other_loop.loop_id = LoopId::new();
    let other_loop = ProcessNotification::new(other_loop);

    check(
        &handle,
        &[
            (&a, ACCEPTED),
            (&a, DUPLICATE), // live
            (&invalid, REFUSED),
            (&nil_id, REFUSED),
            (&other_session, REFUSED),
            (&other_loop, REFUSED),
            (&b, ACCEPTED),
            (&c, FULL),
            // Precedence: refusal and duplicate are decided before fullness.
            (&invalid, REFUSED),
            (&b, DUPLICATE),
        ],
    )
    .await;

    // Remembered as consumed -> Duplicate even with room again.
    assert_eq!(recv_ack(&mut consumer, 1).await, vec![a.command_id()]);
    check(&handle, &[(&a, DUPLICATE), (&c, ACCEPTED)]).await;

    // Exited comes first of all, even for an invalid notification.
    handle.shutdown().await;
    check(
        &handle,
        &[(&c, EXITED), (&owner.note(), EXITED), (&invalid, EXITED)],
    )
    .await;
}

#[test]
fn delivery_disposition() {
    let cases = [
        (ACCEPTED, Disposition::Accepted),
        (DUPLICATE, Disposition::Duplicate),
        (FULL, Disposition::Stopped),
        (EXITED, Disposition::Stopped),
        (REFUSED, Disposition::Stopped),
    ];
    for (delivery, want) in cases {
        assert_eq!(delivery.disposition(), want, "{delivery:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn capacity_boundary_65th_is_full_until_one_ack() {
    let owner = Owner::new();
    let (handle, mut consumer) = spawn(owner.config());
    assert_eq!(DEFAULT_CAPACITY, 64);
    let notes = owner.notes(66);
    for note in &notes[..64] {
        assert_eq!(handle.deliver(note.clone()).await, ACCEPTED);
    }
    let [n65, n66] = [&notes[64], &notes[65]];
    assert_eq!(handle.deliver(n65.clone()).await, FULL);

    // Receiving without acknowledging frees nothing.
    let first = consumer.recv().await.expect("live");
    assert_eq!(first.command_id(), notes[0].command_id());
    assert_eq!(handle.deliver(n65.clone()).await, FULL);

    // One ack frees exactly one slot, visible to the very next delivery.
    first.ack().await.expect("loop running");
    check(&handle, &[(n65, ACCEPTED), (n66, FULL)]).await;
}

#[tokio::test(start_paused = true)]
async fn consumed_memory_forgets_oldest_first() {
    let owner = Owner::new();
    let (handle, mut consumer) = spawn(owner.config().consumed_memory(3));
    let notes = owner.notes(4);
    for note in &notes {
        assert_eq!(handle.deliver(note.clone()).await, ACCEPTED);
    }

    // Exactly at the bound: all three consumed IDs are remembered.
    recv_ack(&mut consumer, 3).await;
    check(
        &handle,
        &[
            (&notes[0], DUPLICATE),
            (&notes[1], DUPLICATE),
            (&notes[2], DUPLICATE),
        ],
    )
    .await;

    // One past the bound: only the oldest is forgotten, and is accepted again
    // (documented: the loop cannot tell a forgotten ID from a new one).
    recv_ack(&mut consumer, 1).await;
    check(
        &handle,
        &[
            (&notes[1], DUPLICATE),
            (&notes[2], DUPLICATE),
            (&notes[3], DUPLICATE),
            (&notes[0], ACCEPTED),
        ],
    )
    .await;
    assert_eq!(
        recv_ack(&mut consumer, 1).await,
        vec![notes[0].command_id()]
    );
}

#[tokio::test(start_paused = true)]
async fn consumed_memory_zero_remembers_nothing() {
    let owner = Owner::new();
    let (handle, mut consumer) = spawn(owner.config().consumed_memory(0));
    let note = owner.note();
    check(&handle, &[(&note, ACCEPTED), (&note, DUPLICATE)]).await;
    recv_ack(&mut consumer, 1).await;
    check(&handle, &[(&note, ACCEPTED)]).await;
}

#[tokio::test(start_paused = true)]
async fn consumer_sees_acceptance_order() {
    let owner = Owner::new();
    let (handle, mut consumer) = spawn(owner.config());
    let notes = owner.notes(40);
    for note in &notes[..20] {
        assert_eq!(handle.deliver(note.clone()).await, ACCEPTED);
    }
    // Interleave receiving with delivering: order still holds.
    let mut got = recv_ack(&mut consumer, 10).await;
    for note in &notes[20..] {
        assert_eq!(handle.deliver(note.clone()).await, ACCEPTED);
    }
    got.extend(recv_ack(&mut consumer, 30).await);
    assert_eq!(got, ids(&notes));
    assert_recv_waits(&mut consumer).await;
}

#[tokio::test(start_paused = true)]
async fn seeded_first_in_order_and_beyond_capacity() {
    let owner = Owner::new();
    let seeded = owner.notes(5);
    let mut misaddressed = owner.note().into_notification();
    misaddressed.loop_id = LoopId::new();
    let mut seed = seeded.clone();
    seed.push(ProcessNotification::new(misaddressed)); // skipped with a warning
    seed.push(seeded[1].clone()); // repeated ID: held once
    let (handle, mut consumer) = spawn(owner.config().capacity(2).seed(seed));

    let [d, e] = [owner.note(), owner.note()];
    // Five live, capacity two: full; a seeded ID is live, so Duplicate.
    check(&handle, &[(&d, FULL), (&seeded[4], DUPLICATE)]).await;

    // Acking down to two live still leaves it full; one more frees a slot.
    let mut got = recv_ack(&mut consumer, 3).await;
    check(&handle, &[(&d, FULL)]).await;
    got.extend(recv_ack(&mut consumer, 1).await);
    check(&handle, &[(&d, ACCEPTED), (&e, FULL)]).await;

    got.extend(recv_ack(&mut consumer, 2).await);
    let mut want = ids(&seeded);
    want.push(d.command_id());
    assert_eq!(got, want);
    assert_recv_waits(&mut consumer).await;
}

#[tokio::test(start_paused = true)]
async fn dropped_without_ack_is_redelivered_first() {
    let owner = Owner::new();
    let (handle, mut consumer) = spawn(owner.config());
    let notes = owner.notes(3);
    for note in &notes {
        assert_eq!(handle.deliver(note.clone()).await, ACCEPTED);
    }

    let a = consumer.recv().await.expect("live");
    assert_eq!(a.command_id(), notes[0].command_id());
    drop(a);
    // Still live while requeued.
    check(&handle, &[(&notes[0], DUPLICATE)]).await;
    let a = consumer.recv().await.expect("live");
    assert_eq!(a.command_id(), notes[0].command_id());

    // Two out, dropped in reverse: they come back in acceptance order, ahead of c.
    let b = consumer.recv().await.expect("live");
    assert_eq!(b.command_id(), notes[1].command_id());
    drop(b);
    drop(a);
    assert_eq!(recv_ack(&mut consumer, 3).await, ids(&notes));
    assert_recv_waits(&mut consumer).await;
}

#[tokio::test(start_paused = true)]
async fn dropped_elsewhere_wakes_a_waiting_consumer() {
    let owner = Owner::new();
    let (handle, mut consumer) = spawn(owner.config());
    let note = owner.note();
    assert_eq!(handle.deliver(note.clone()).await, ACCEPTED);
    let received = consumer.recv().await.expect("live");
    let worker = tokio::spawn(async move {
        tokio::task::yield_now().await;
        drop(received);
    });
    // Nothing else is queued: this recv is answered by the requeue from the worker.
    let again = consumer.recv().await.expect("requeued");
    assert_eq!(again.command_id(), note.command_id());
    worker.await.expect("worker");
    again.ack().await.expect("loop running");
}

#[tokio::test(start_paused = true)]
async fn cancelled_recv_loses_nothing() {
    let owner = Owner::new();
    let (handle, mut consumer) = spawn(owner.config());
    let notes = owner.notes(2);

    // Cancelled while waiting on an empty queue.
    assert_recv_waits(&mut consumer).await;

    // Cancelled after the loop already handed it a notification.
    {
        let mut pending = pin!(consumer.recv());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(pending.as_mut().poll(&mut cx).is_pending());
        assert_eq!(handle.deliver(notes[0].clone()).await, ACCEPTED);
        assert_eq!(handle.deliver(notes[1].clone()).await, ACCEPTED);
        // Dropped here without being polled again.
    }
    assert_eq!(recv_ack(&mut consumer, 2).await, ids(&notes));
}

#[tokio::test(start_paused = true)]
async fn unpolled_ack_requeues() {
    let owner = Owner::new();
    let (handle, mut consumer) = spawn(owner.config());
    let note = owner.note();
    assert_eq!(handle.deliver(note.clone()).await, ACCEPTED);
    let received = consumer.recv().await.expect("live");
    drop(received.ack()); // cancelled before its first poll
    assert_eq!(recv_ack(&mut consumer, 1).await, vec![note.command_id()]);
}

#[tokio::test(start_paused = true)]
async fn shutdown_refuses_new_and_drains_live() {
    let owner = Owner::new();
    let (handle, mut consumer) = spawn(owner.config());
    let notes = owner.notes(3);
    check(&handle, &[(&notes[0], ACCEPTED), (&notes[1], ACCEPTED)]).await;
    let clone = handle.clone();
    assert!(!handle.is_closed());

    handle.shutdown().await;
    assert!(handle.is_closed() && clone.is_closed());
    check(&clone, &[(&notes[2], EXITED), (&notes[0], EXITED)]).await;

    // Accepted before the shutdown: still received, in order, and acknowledgeable.
    let first = consumer.recv().await.expect("live");
    assert_eq!(first.command_id(), notes[0].command_id());
    drop(first); // requeued even while shutting down
    assert_eq!(recv_ack(&mut consumer, 2).await, ids(&notes[..2]));

    // Nothing left: the loop has exited.
    assert!(consumer.recv().await.is_none());
    assert!(consumer.recv().await.is_none());
    assert_eq!(handle.deliver(notes[2].clone()).await, EXITED);
    handle.shutdown().await; // idempotent, returns at once
}

#[tokio::test(start_paused = true)]
async fn shutdown_wakes_an_idle_consumer_with_none() {
    let owner = Owner::new();
    let (handle, mut consumer) = spawn(owner.config());
    let waiting = tokio::spawn(async move { consumer.recv().await.is_none() });
    tokio::task::yield_now().await;
    handle.shutdown().await;
    let ended = timeout(FOREVER, waiting).await.expect("recv ended");
    assert!(ended.expect("task"));
}

#[tokio::test(start_paused = true)]
async fn dropping_every_handle_lets_the_consumer_drain() {
    let owner = Owner::new();
    let (handle, mut consumer) = spawn(owner.config());
    let note = owner.note();
    assert_eq!(handle.deliver(note.clone()).await, ACCEPTED);
    drop(handle);
    assert_eq!(recv_ack(&mut consumer, 1).await, vec![note.command_id()]);
    assert!(consumer.recv().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn dropping_the_consumer_exits_the_loop() {
    let owner = Owner::new();
    let (handle, mut consumer) = spawn(owner.config());
    let notes = owner.notes(2);
    assert_eq!(handle.deliver(notes[0].clone()).await, ACCEPTED);
    let outstanding = consumer.recv().await.expect("live");
    drop(consumer);

    // Answers without hanging (paused time: expiry would mean a hang).
    let answer = timeout(FOREVER, handle.deliver(notes[1].clone())).await;
    assert_eq!(answer, Ok(EXITED));
    assert!(handle.is_closed());
    assert_eq!(
        outstanding.ack().await,
        Err(LoopAckError::LoopExited {
            loop_id: owner.loop_id,
            command_id: notes[0].command_id(),
        })
    );
    let shutdown = timeout(FOREVER, handle.shutdown()).await;
    assert!(shutdown.is_ok(), "shutdown of an exited loop hung");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_duplicates_accept_each_id_once() {
    const IDS: usize = 200;
    const DELIVERIES: usize = 1_000;
    let owner = Owner::new();
    let (handle, mut consumer) = spawn(owner.config().capacity(256));
    let notes = owner.notes(IDS);

    // The consumer receives and acknowledges concurrently with the deliveries.
    let consuming = tokio::spawn(async move {
        let mut seen = Vec::with_capacity(IDS);
        for _ in 0..IDS {
            let received = consumer.recv().await.expect("live");
            seen.push(received.command_id());
            received.ack().await.expect("loop running");
        }
        (consumer, seen)
    });
    let deliveries: Vec<_> = (0..DELIVERIES)
        .map(|i| {
            let handle = handle.clone();
            let note = notes[i % IDS].clone();
            tokio::spawn(async move { handle.deliver(note).await })
        })
        .collect();
    let (mut accepted, mut duplicate) = (0, 0);
    for delivery in deliveries {
        match delivery.await.expect("delivery task") {
            Delivery::Accepted => accepted += 1,
            Delivery::Duplicate => duplicate += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((accepted, duplicate), (200, 800));

    let (mut consumer, seen) = consuming.await.expect("consumer task");
    let distinct: HashSet<_> = seen.iter().copied().collect();
    assert_eq!(seen.len(), IDS);
    assert_eq!(distinct, ids(&notes).into_iter().collect::<HashSet<_>>());
    // Nothing more was queued: after shutdown the consumer ends at once.
    handle.shutdown().await;
    assert!(consumer.recv().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn zero_capacity_holds_only_seeded() {
    let owner = Owner::new();
    let seeded = owner.notes(1);
    let (handle, mut consumer) = spawn(owner.config().capacity(0).seed(seeded.clone()));
    check(&handle, &[(&owner.note(), FULL), (&seeded[0], DUPLICATE)]).await;
    assert_eq!(recv_ack(&mut consumer, 1).await, ids(&seeded));
    check(&handle, &[(&owner.note(), FULL), (&seeded[0], DUPLICATE)]).await;
}

/// `live` counts what the consumer still has to acknowledge: seeds once each (a
/// refused or repeated seed not at all), accepted deliveries (not duplicates nor
/// refusals), whether queued, handed out or put back; an `ack` takes one off, also
/// after a shutdown; a dropped consumer leaves the rest counted.
#[tokio::test(start_paused = true)]
async fn live_counts_what_is_left_to_acknowledge() {
    let owner = Owner::new();
    let seeded = owner.notes(2);
    let mut misaddressed = owner.note().into_notification();
    misaddressed.loop_id = LoopId::new();
    let mut seed = seeded.clone();
    seed.push(ProcessNotification::new(misaddressed));
    seed.push(seeded[0].clone());
    let (handle, mut consumer) = spawn(owner.config().capacity(4).seed(seed));
    assert_eq!(
        handle.live(),
        2,
        "two seeds, a refused and a repeated one skipped"
    );

    let notes = owner.notes(3);
    check(
        &handle,
        &[
            (&notes[0], ACCEPTED),
            (&notes[0], DUPLICATE),
            (&seeded[1], DUPLICATE),
            (&notes[1], ACCEPTED),
            (&notes[2], FULL),
        ],
    )
    .await;
    assert_eq!(handle.live(), 4);

    let received = consumer.recv().await.expect("live");
    assert_eq!(handle.live(), 4, "handed out, not released");
    drop(received);
    assert_eq!(handle.live(), 4, "put back");
    recv_ack(&mut consumer, 1).await;
    assert_eq!(handle.live(), 3);

    handle.shutdown().await;
    recv_ack(&mut consumer, 1).await;
    assert_eq!(handle.live(), 2, "released after the shutdown");
    drop(consumer);
    assert_eq!(handle.live(), 2, "never released");
}
