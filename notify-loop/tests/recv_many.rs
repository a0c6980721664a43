//! Receiving in batches ([`LoopConsumer::recv_many`]): what is queued, in order, up to
//! the limit; a wait for the first only; a dropped batch back at the front in order.

#![allow(clippy::expect_used, clippy::panic)]

use std::time::Duration;

use notify_loop::{Delivery, Received, spawn};
use notify_types::{CommandId, ProcessNotification};
use tokio::time::timeout;

mod support;
use support::Owner;

/// Long enough that, under paused time, expiry means "would wait forever".
const FOREVER: Duration = Duration::from_secs(3600);

fn ids(notes: &[ProcessNotification]) -> Vec<CommandId> {
    notes.iter().map(ProcessNotification::command_id).collect()
}

fn received_ids(batch: &[Received]) -> Vec<CommandId> {
    batch.iter().map(Received::command_id).collect()
}

#[tokio::test(start_paused = true)]
async fn takes_what_is_queued_in_order_up_to_the_limit() {
    let owner = Owner::new();
    let (handle, mut consumer) = spawn(owner.config());
    let notes = owner.notes(5);
    for n in &notes {
        assert_eq!(handle.deliver(n.clone()).await, Delivery::Accepted);
    }
    let first = consumer.recv_many(3).await;
    assert_eq!(received_ids(&first), ids(&notes[..3]));
    let rest = consumer.recv_many(10).await;
    assert_eq!(received_ids(&rest), ids(&notes[3..]));
    assert!(
        consumer.recv_many(0).await.is_empty(),
        "a limit of 0 takes nothing"
    );
    for r in first.into_iter().chain(rest) {
        r.ack().await.expect("loop running");
    }
    // Nothing queued: it waits for the first, and takes it alone.
    assert!(timeout(FOREVER, consumer.recv_many(4)).await.is_err());
    let late = owner.note();
    assert_eq!(handle.deliver(late.clone()).await, Delivery::Accepted);
    let one = consumer.recv_many(4).await;
    assert_eq!(received_ids(&one), vec![late.command_id()]);
    drop(one);
    handle.shutdown().await;
    let again = consumer.recv_many(4).await;
    assert_eq!(received_ids(&again), vec![late.command_id()]);
    for r in again {
        r.ack().await.expect("live until acknowledged");
    }
    assert!(
        consumer.recv_many(4).await.is_empty(),
        "exited: an empty batch"
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_batch_comes_back_first_in_order() {
    let owner = Owner::new();
    let (handle, mut consumer) = spawn(owner.config());
    let notes = owner.notes(6);
    for n in &notes {
        assert_eq!(handle.deliver(n.clone()).await, Delivery::Accepted);
    }
    let batch = consumer.recv_many(4).await;
    assert_eq!(received_ids(&batch), ids(&notes[..4]));
    // Dropped out of order: each goes back to its acceptance place.
    let mut batch = batch;
    batch.reverse();
    drop(batch);
    let all = consumer.recv_many(100).await;
    assert_eq!(received_ids(&all), ids(&notes));
    assert_eq!(handle.live(), 6);
}
