//! The consumer side shares the queue with the deliverers: these tests drive it from
//! several threads at once, where requeues, acknowledgements and deliveries race.

#![allow(clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::time::Duration;

use notify_loop::{Delivery, LoopConfig, spawn};
use notify_types::{
    CommandId, LoopId, ProcessCompletionNotification, ProcessLifecycleState, ProcessNotification,
    ProcessTerminalReason, SessionId, StopCause,
};
use tokio::sync::oneshot;
use tokio::time::timeout;

fn notes(session_id: SessionId, loop_id: LoopId, n: usize) -> Vec<ProcessNotification> {
    (0..n)
        .map(|_| {
            ProcessNotification::new(ProcessCompletionNotification {
                command_id: CommandId::new(),
                session_id,
                loop_id,
                process_handle: "build-42".into(),
                state: ProcessLifecycleState::Exited,
                reason: ProcessTerminalReason::Exited,
            })
        })
        .collect()
}

/// An ack made on one thread is applied before a delivery that another thread starts
/// after learning of it: with capacity 1, every next delivery is Accepted, never Full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_on_another_thread_frees_capacity_for_the_next_delivery() {
    const N: usize = 300;
    let (session_id, loop_id) = (SessionId::new(), LoopId::new());
    let (handle, mut consumer) = spawn(LoopConfig::new(session_id, loop_id).capacity(1));
    let notes = notes(session_id, loop_id, N);
    let (acked_tx, mut acked_rx) = tokio::sync::mpsc::channel::<CommandId>(1);
    let consuming = tokio::spawn(async move {
        for _ in 0..N {
            let received = consumer.recv().await.expect("live");
            let id = received.command_id();
            received.ack().await.expect("loop running");
            acked_tx.send(id).await.expect("producer waiting");
        }
        consumer
    });
    for note in &notes {
        assert_eq!(handle.deliver(note.clone()).await, Delivery::Accepted);
        let acked = acked_rx.recv().await.expect("consumer running");
        assert_eq!(acked, note.command_id());
    }
    let mut consumer = consuming.await.expect("consumer task");
    for note in &notes {
        assert_eq!(handle.deliver(note.clone()).await, Delivery::Duplicate);
    }
    handle.shutdown().await;
    assert!(consumer.recv().await.is_none());
}

/// Notifications dropped unacknowledged on other threads come back; in the end every
/// accepted ID is acknowledged exactly once and nothing is lost or duplicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeues_from_other_threads_lose_nothing() {
    const N: usize = 500;
    let (session_id, loop_id) = (SessionId::new(), LoopId::new());
    let (handle, mut consumer) = spawn(LoopConfig::new(session_id, loop_id).capacity(16));
    let notes = notes(session_id, loop_id, N);
    let producer = {
        let handle = handle.clone();
        let notes = notes.clone();
        tokio::spawn(async move {
            for note in notes {
                loop {
                    match handle.deliver(note.clone()).await {
                        Delivery::Accepted => break,
                        Delivery::Stopped(StopCause::Full) => tokio::task::yield_now().await,
                        other => panic!("unexpected {other:?}"),
                    }
                }
            }
        })
    };
    let mut acked = Vec::with_capacity(N);
    let mut round = 0_usize;
    while acked.len() < N {
        let received = consumer.recv().await.expect("live");
        round += 1;
        if round.is_multiple_of(3) {
            // Dropped unacknowledged on another task (possibly another thread).
            tokio::spawn(async move { drop(received) })
                .await
                .expect("dropper");
        } else {
            acked.push(received.command_id());
            received.ack().await.expect("loop running");
        }
    }
    producer.await.expect("producer");
    let distinct: HashSet<_> = acked.iter().copied().collect();
    assert_eq!(distinct.len(), N, "an ID was acknowledged twice");
    assert_eq!(
        distinct,
        notes.iter().map(ProcessNotification::command_id).collect()
    );
    handle.shutdown().await;
    assert!(consumer.recv().await.is_none());
}

/// After a shutdown the loop waits for the live set to drain; the last ack, made on
/// another task while the consumer waits in `recv`, lets it exit and ends that `recv`.
#[tokio::test(start_paused = true)]
async fn last_ack_after_shutdown_ends_a_waiting_recv() {
    let (session_id, loop_id) = (SessionId::new(), LoopId::new());
    let (handle, mut consumer) = spawn(LoopConfig::new(session_id, loop_id));
    let [note] = <[_; 1]>::try_from(notes(session_id, loop_id, 1)).expect("one");
    assert_eq!(handle.deliver(note).await, Delivery::Accepted);
    let received = consumer.recv().await.expect("live");
    handle.shutdown().await;
    let (go, wait) = oneshot::channel::<()>();
    let acker = tokio::spawn(async move {
        wait.await.expect("signal");
        received.ack().await.expect("loop still draining");
    });
    let waiting = tokio::spawn(async move { consumer.recv().await.is_none() });
    tokio::task::yield_now().await;
    go.send(()).expect("acker waiting");
    acker.await.expect("acker");
    let ended = timeout(Duration::from_secs(3600), waiting).await;
    assert!(ended.expect("recv ended").expect("task"));
}

/// A `Received` that outlives its consumer: acknowledging it fails, dropping it is
/// harmless, and the loop has exited.
#[tokio::test(start_paused = true)]
async fn received_outliving_the_consumer() {
    let (session_id, loop_id) = (SessionId::new(), LoopId::new());
    let (handle, mut consumer) = spawn(LoopConfig::new(session_id, loop_id));
    let notes = notes(session_id, loop_id, 3);
    for note in &notes {
        assert_eq!(handle.deliver(note.clone()).await, Delivery::Accepted);
    }
    let first = consumer.recv().await.expect("live");
    let second = consumer.recv().await.expect("live");
    drop(consumer);
    drop(second); // requeue into a loop whose consumer is gone: discarded
    assert!(first.ack().await.is_err());
    assert_eq!(
        handle.deliver(notes[2].clone()).await,
        Delivery::Stopped(StopCause::Exited)
    );
    assert!(handle.is_closed());
}
