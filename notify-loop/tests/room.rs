//! `LoopHandle::wait_for_room`: a producer answered `Full` waits for room, woken with
//! hysteresis (once per drained batch, not once per acknowledgement), and never after
//! the loop has stopped.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only, not the helpers here.
#![allow(clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use notify_loop::{Delivery, LoopConsumer, LoopHandle, Received, spawn};
use notify_types::StopCause;

mod support;
use support::Owner;

const FULL: Delivery = Delivery::Stopped(StopCause::Full);

/// A waker that counts its wake-ups; its `Arc`'s strong count tells whether the loop
/// still holds a clone of it.
#[derive(Default)]
struct Counter(AtomicUsize);

impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A `wait_for_room` future polled by hand with a counting waker.
struct Probe<'a> {
    wait: Pin<Box<dyn Future<Output = ()> + Send + 'a>>,
    counter: Arc<Counter>,
    waker: Waker,
}

impl<'a> Probe<'a> {
    fn new(handle: &'a LoopHandle) -> Self {
        let counter = Arc::new(Counter::default());
        Self {
            wait: Box::pin(handle.wait_for_room()),
            waker: Waker::from(Arc::clone(&counter)),
            counter,
        }
    }

    fn poll(&mut self) -> Poll<()> {
        self.wait
            .as_mut()
            .poll(&mut Context::from_waker(&self.waker))
    }

    fn wakes(&self) -> usize {
        self.counter.0.load(Ordering::SeqCst)
    }
}

/// A loop of `capacity` filled to it, and the consumer.
async fn full_loop(owner: &Owner, capacity: usize) -> (LoopHandle, LoopConsumer) {
    let (handle, consumer) = spawn(owner.config().capacity(capacity));
    for note in owner.notes(capacity) {
        assert_eq!(handle.deliver(note).await, Delivery::Accepted);
    }
    assert_eq!(handle.deliver(owner.note()).await, FULL);
    (handle, consumer)
}

async fn recv(consumer: &mut LoopConsumer) -> Received {
    consumer.recv().await.expect("a live notification")
}

#[tokio::test]
async fn resolves_at_once_with_room() {
    let owner = Owner::new();
    let (handle, _consumer) = spawn(owner.config().capacity(2));
    assert_eq!(Probe::new(&handle).poll(), Poll::Ready(()));
    assert_eq!(handle.deliver(owner.note()).await, Delivery::Accepted);
    assert_eq!(Probe::new(&handle).poll(), Poll::Ready(()));
}

#[tokio::test]
async fn wakes_once_when_acks_drain_to_half_capacity() {
    let owner = Owner::new();
    let (handle, mut consumer) = full_loop(&owner, 8).await;
    let mut probe = Probe::new(&handle);
    assert_eq!(probe.poll(), Poll::Pending);

    // Acks bringing the live set to 7, 6 and 5 free room but wake nobody...
    for live in [7, 6, 5] {
        recv(&mut consumer).await.ack().await.expect("running");
        assert_eq!(probe.wakes(), 0, "woken at {live} live");
    }
    // ...the one reaching half the capacity wakes the waiter, once.
    recv(&mut consumer).await.ack().await.expect("running");
    assert_eq!(probe.wakes(), 1);
    assert_eq!(probe.poll(), Poll::Ready(()));
    for _ in 0..4 {
        recv(&mut consumer).await.ack().await.expect("running");
    }
    assert_eq!(probe.wakes(), 1, "woken again after it resolved");

    // The room is there: four deliveries are accepted.
    for note in owner.notes(4) {
        assert_eq!(handle.deliver(note).await, Delivery::Accepted);
    }
}

#[tokio::test]
async fn small_capacity_wakes_at_the_first_free_slot() {
    let owner = Owner::new();
    let (handle, mut consumer) = full_loop(&owner, 2).await;
    let mut probe = Probe::new(&handle);
    assert_eq!(probe.poll(), Poll::Pending);
    recv(&mut consumer).await.ack().await.expect("running");
    assert_eq!(probe.wakes(), 1);
    assert_eq!(probe.poll(), Poll::Ready(()));
}

#[tokio::test]
async fn an_idle_consumer_holding_the_rest_wakes_the_waiter() {
    let owner = Owner::new();
    let (handle, mut consumer) = full_loop(&owner, 8).await;
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(recv(&mut consumer).await);
    }
    let mut probe = Probe::new(&handle);
    assert_eq!(probe.poll(), Poll::Pending);
    for received in held.drain(..3) {
        received.ack().await.expect("running");
    }
    // 5 live, above the mark: no wake yet.
    assert_eq!(probe.wakes(), 0);
    // The consumer now waits on an empty queue while holding the other five.
    let mut next = Box::pin(consumer.recv());
    let waker = Waker::noop();
    assert!(
        next.as_mut()
            .poll(&mut Context::from_waker(waker))
            .is_pending()
    );
    assert_eq!(probe.wakes(), 1);
    assert_eq!(probe.poll(), Poll::Ready(()));
}

#[tokio::test]
async fn resolves_when_the_loop_shuts_down() {
    let owner = Owner::new();
    let (handle, _consumer) = full_loop(&owner, 4).await;
    let mut probe = Probe::new(&handle);
    assert_eq!(probe.poll(), Poll::Pending);
    handle.shutdown().await;
    assert_eq!(probe.wakes(), 1);
    assert_eq!(probe.poll(), Poll::Ready(()));
    // Later waits on the stopped loop resolve at once.
    assert_eq!(Probe::new(&handle).poll(), Poll::Ready(()));
}

#[tokio::test]
async fn resolves_when_the_consumer_is_dropped() {
    let owner = Owner::new();
    let (handle, consumer) = full_loop(&owner, 4).await;
    let mut probe = Probe::new(&handle);
    assert_eq!(probe.poll(), Poll::Pending);
    drop(consumer);
    assert_eq!(probe.wakes(), 1);
    assert_eq!(probe.poll(), Poll::Ready(()));
    assert_eq!(Probe::new(&handle).poll(), Poll::Ready(()));
}

#[tokio::test]
async fn a_cancelled_wait_leaves_no_waiter_behind() {
    let owner = Owner::new();
    let (handle, mut consumer) = full_loop(&owner, 4).await;
    let mut cancelled = Probe::new(&handle);
    assert_eq!(cancelled.poll(), Poll::Pending);
    // The loop holds a clone of the waiting task's waker...
    assert_eq!(Arc::strong_count(&cancelled.counter), 3);
    let Probe {
        wait,
        counter,
        waker,
    } = cancelled;
    drop(wait);
    drop(waker);
    // ...and gives it back when the wait is dropped.
    assert_eq!(Arc::strong_count(&counter), 1);

    // A later wait still works, and the cancelled one is not woken.
    let mut later = Probe::new(&handle);
    assert_eq!(later.poll(), Poll::Pending);
    for _ in 0..3 {
        recv(&mut consumer).await.ack().await.expect("running");
    }
    assert_eq!(later.wakes(), 1);
    assert_eq!(later.poll(), Poll::Ready(()));
    assert_eq!(counter.0.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_producers_all_finish() {
    const PRODUCERS: usize = 6;
    const EACH: usize = 300;
    let owner = Owner::new();
    let (handle, mut consumer) = spawn(owner.config().capacity(8));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|_| {
            let handle = handle.clone();
            let notes = owner.notes(EACH);
            tokio::spawn(async move {
                let mut fulls = 0usize;
                for note in notes {
                    loop {
                        match handle.deliver(note.clone()).await {
                            Delivery::Accepted => break,
                            FULL => {
                                fulls += 1;
                                handle.wait_for_room().await;
                            }
                            other => panic!("unexpected {other:?}"),
                        }
                    }
                }
                fulls
            })
        })
        .collect();
    drop(handle);
    let consumer = tokio::spawn(async move {
        let mut n = 0;
        while let Some(received) = consumer.recv().await {
            received.ack().await.expect("running");
            n += 1;
        }
        n
    });
    let mut fulls = 0;
    for producer in producers {
        fulls += producer.await.expect("producer finished");
    }
    // Every producer finished; the last handle is gone, so the consumer ends too.
    assert_eq!(consumer.await.expect("consumer finished"), PRODUCERS * EACH);
    assert!(
        fulls > 0,
        "the inbox was never full: the test tested nothing"
    );
}
