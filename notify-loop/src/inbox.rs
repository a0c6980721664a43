//! The loop's state, shared by its handles and its consumer under one lock.
//!
//! # Why there is no loop task
//!
//! A loop was once a task that owned this state and decided each delivery sent to it
//! over a channel, answering on a `oneshot`. One accepted-and-acknowledged
//! notification then cost three hand-offs between tasks (producer to loop task, loop
//! task back to the producer, loop task to the consumer) where a bare `mpsc` +
//! `oneshot` round trip costs two, and the loop measured 0.21-0.34x of that round
//! trip. Every decision is a few map operations, so here the producer makes it
//! itself, under the lock, and the only hand-off left is the one to the consumer
//! (and only when it is waiting): `deliver` completes on its first poll. `recv` takes
//! the front of the queue, dropping an unacknowledged [`Received`](crate::Received)
//! puts it back, and `ack` applies the release, each under the same lock.
//!
//! # Invariants
//!
//! * **One decider at a time.** Every delivery answer (accepted, duplicate, full,
//!   refused, exited) is decided exactly once, under the lock, from [`Decider`]'s state,
//!   so deliveries are decided in the order they take the lock: the deliveries of one
//!   task in the order it makes them.
//! * **Every release is applied before any decision that could observe it.** `ack`
//!   applies it under the lock before it returns, so a delivery that starts after an
//!   `ack` returned sees it.
//! * **`queue` holds the live notifications not handed out, in acceptance order**
//!   (`seq` ascending). A delivery appends (its `seq` is higher than any before); a
//!   requeue inserts at its `seq`'s place.
//! * **The loop ends once**: when its consumer is dropped, or when it no longer
//!   accepts (shutdown, or every handle dropped) and no notification is live. Then a
//!   `recv` on the empty queue returns `None`, releases are refused and requeues
//!   discarded; its gauges are given back at that moment.
//! * **No wake-up is lost.** A waiting `recv` registers its waker under the lock in
//!   the same critical section as the check that found nothing; whoever queues
//!   something or ends the loop takes the waker under the lock and wakes it after
//!   releasing the lock.
//! * **No producer waiting for room is forgotten.** `wait_for_room` registers with
//!   `room` (a `tokio::sync::Notify`, which removes a dropped waiter itself) *before*
//!   it takes the lock to check for room, and when it finds none it sets
//!   `room_waiters` in that same critical section. Whoever later, under the lock,
//!   finds `room_waiters` set and a reason to wake clears it and calls
//!   `notify_waiters` after releasing the lock, which reaches every waiter registered
//!   before the flag was seen. The reasons, with hysteresis so that a producer
//!   refilling a full inbox pays about one wake per batch rather than one per `ack`:
//!   the live set drained to the low-water mark (half the capacity; one free slot for
//!   a capacity of at most 4), the consumer waits on an empty queue while there is
//!   room (so a consumer holding unacknowledged notifications above the mark cannot
//!   strand a producer), or the loop stops accepting or ends. A woken waiter checks
//!   again and waits again if others took the room first.
//! * **The lock is never held across `.await`** (a `std` mutex, per the tokio
//!   guidance), and neither logging nor metrics run under it. Critical sections are a
//!   few collection operations plus cloning or dropping a waker; nothing in them
//!   panics, so a poisoned lock still guards consistent state and is recovered rather
//!   than propagated.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use tokio::sync::Notify;

use notify_types::{CommandId, ProcessNotification, StopCause};

use crate::config::LoopConfig;
use crate::decide::{Decider, Pending, warn_refused};
use crate::delivery::Delivery;

/// The state behind the lock.
struct InboxState {
    /// The live set, the consumed memory and the delivery rules.
    decider: Decider,
    /// Live notifications not currently handed out, in acceptance order.
    queue: VecDeque<Pending>,
    /// False after a shutdown or once every handle is gone: deliveries answer Exited,
    /// and the loop ends when the live set drains.
    accepting: bool,
    /// True once the [`LoopConsumer`](crate::LoopConsumer) is dropped: the loop ends at
    /// once.
    consumer_gone: bool,
    /// True once the loop has ended (see the module docs).
    ended: bool,
    /// The live count as last added to the inbox depth gauge (the gauge sums every
    /// loop's; an ended loop has given all of its back).
    reported_live: usize,
    /// The waker of a `recv` that found the queue empty, stored under the same lock as
    /// the check, so a notification queued right after it is never missed. Taken (and
    /// woken) by whoever queues something or ends the loop; a stale one left by a
    /// cancelled `recv` only causes a spurious wake-up.
    consumer_waker: Option<Waker>,
    /// True once a `wait_for_room` found no room and until the producers waiting on
    /// `Inbox::room` are woken (see the module docs).
    room_waiters: bool,
}

/// What a critical section leaves for after the lock: the gauges to move and the
/// consumer to wake.
#[must_use]
struct After {
    /// The depth gauge moves from the first to the second.
    live: (usize, usize),
    /// The loop ended in this critical section.
    ended: bool,
    /// A waiting consumer to wake.
    waker: Option<Waker>,
    /// Wake the producers waiting for room.
    room: bool,
}

impl After {
    fn apply(self, room: &Notify) {
        let (mut reported, live) = self.live;
        crate::metrics::live_changed(&mut reported, live);
        if self.ended {
            crate::metrics::loop_running(false);
        }
        if let Some(waker) = self.waker {
            waker.wake();
        }
        if self.room {
            room.notify_waiters();
        }
    }
}

/// One loop's state, shared by its [`LoopHandle`](crate::LoopHandle)s, its
/// [`LoopConsumer`](crate::LoopConsumer) and every outstanding
/// [`Received`](crate::Received).
pub(crate) struct Inbox {
    /// The shared state; see the module docs for its invariants.
    state: Mutex<InboxState>,
    /// Producers waiting for room (see the module docs); woken only when
    /// `InboxState::room_waiters` says someone waits.
    room: Notify,
}

impl Inbox {
    /// A running loop, holding the seeded notifications (a refused seed is skipped with
    /// a warning).
    pub(crate) fn start(mut config: LoopConfig) -> Self {
        let seed = std::mem::take(&mut config.seed);
        let mut decider = Decider::new(&config);
        let owner = (decider.session_id, decider.loop_id);
        let mut queue = VecDeque::with_capacity(seed.len());
        for notification in seed {
            match decider.seed(notification) {
                Ok(Some(pending)) => queue.push_back(pending),
                Ok(None) => {}
                Err((refusal, notification)) => warn_refused(
                    owner,
                    &notification,
                    &refusal,
                    "skipped seeded notification",
                ),
            }
        }
        crate::metrics::loop_running(true);
        let mut reported_live = 0;
        crate::metrics::live_changed(&mut reported_live, decider.live);
        Self {
            state: Mutex::new(InboxState {
                decider,
                queue,
                accepting: true,
                consumer_gone: false,
                ended: false,
                reported_live,
                consumer_waker: None,
                room_waiters: false,
            }),
            room: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, InboxState> {
        // Nothing panics while the lock is held (see the module docs), so a poisoned
        // state is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    // ---- producer side ----

    /// Decides one delivery (see [`LoopHandle::deliver`](crate::LoopHandle::deliver)
    /// for the rules) and queues it if accepted.
    pub(crate) fn deliver(&self, notification: ProcessNotification) -> Delivery {
        let mut state = self.lock();
        if !state.accepting || state.consumer_gone {
            return Delivery::Stopped(StopCause::Exited);
        }
        match state.decider.deliver(notification) {
            Ok((answer, None)) => answer,
            Ok((answer, Some(pending))) => {
                state.queue.push_back(pending);
                let after = state.after();
                drop(state);
                after.apply(&self.room);
                answer
            }
            Err((refusal, notification)) => {
                let owner = (state.decider.session_id, state.decider.loop_id);
                drop(state);
                warn_refused(owner, &notification, &refusal, "refused delivery");
                Delivery::Stopped(StopCause::Refused)
            }
        }
    }

    /// Stops accepting (a shutdown, or the last handle dropped); the loop ends now if
    /// nothing is live.
    pub(crate) fn stop_accepting(&self) {
        let mut state = self.lock();
        state.accepting = false;
        let after = state.after();
        drop(state);
        after.apply(&self.room);
    }

    /// Resolves once a new command ID would not be answered `Full`, or the loop no
    /// longer accepts (see [`LoopHandle::wait_for_room`](crate::LoopHandle::wait_for_room)).
    /// Cancel safe: a dropped `Notified` leaves `room`'s waiter list itself.
    pub(crate) async fn wait_for_room(&self) {
        loop {
            let notified = self.room.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the check, so a wake sent after it is not missed.
            notified.as_mut().enable();
            {
                let mut state = self.lock();
                if !state.accepting || state.consumer_gone || state.decider.has_room() {
                    return;
                }
                state.room_waiters = true;
            }
            notified.await;
        }
    }

    /// How many notifications are live (see [`LoopHandle::live`](crate::LoopHandle::live)).
    pub(crate) fn live(&self) -> usize {
        self.lock().decider.live
    }

    /// Whether deliveries answer `Stopped(Exited)` now.
    pub(crate) fn is_closed(&self) -> bool {
        let state = self.lock();
        !state.accepting || state.consumer_gone
    }

    // ---- consumer side ----

    /// Takes the front of the queue; `None` once the queue is empty and the loop has
    /// ended; otherwise registers `cx` to be woken when either changes.
    pub(crate) fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<Pending>> {
        self.poll_take(cx, VecDeque::pop_front).map(Option::flatten)
    }

    /// Takes up to `max` notifications from the front of the queue (at least one, or
    /// `None` once the queue is empty and the loop has ended), as
    /// [`poll_next`](Self::poll_next) does for one, in one critical section.
    pub(crate) fn poll_many(&self, cx: &mut Context<'_>, max: usize) -> Poll<Option<Vec<Pending>>> {
        self.poll_take(cx, |queue| {
            let take = max.min(queue.len());
            queue.drain(..take).collect()
        })
    }

    /// The one consumer-side take: `take` runs on the queue, under the lock, when it
    /// is not empty; `None` once it is empty and the loop has ended; otherwise `cx` is
    /// registered to be woken when either changes.
    fn poll_take<T>(
        &self,
        cx: &mut Context<'_>,
        take: impl FnOnce(&mut VecDeque<Pending>) -> T,
    ) -> Poll<Option<T>> {
        let mut state = self.lock();
        if !state.queue.is_empty() {
            return Poll::Ready(Some(take(&mut state.queue)));
        }
        if state.ended {
            return Poll::Ready(None);
        }
        match &mut state.consumer_waker {
            Some(stored) if stored.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        // The consumer has nothing left to do: producers waiting for room should not
        // wait for the low-water mark (the consumer may hold the rest unacknowledged).
        let room = state.room_waiters && state.decider.has_room();
        if room {
            state.room_waiters = false;
        }
        drop(state);
        if room {
            self.room.notify_waiters();
        }
        Poll::Pending
    }

    /// Applies a release. False if the loop has ended: there is nothing left to
    /// release.
    pub(crate) fn ack(&self, command_id: CommandId) -> bool {
        let mut state = self.lock();
        if state.ended {
            return false;
        }
        state.decider.release(command_id);
        let after = state.after();
        drop(state);
        after.apply(&self.room);
        true
    }

    /// Puts a handed-out notification back at its acceptance position: ahead of every
    /// notification never handed out, behind any returned one accepted earlier.
    pub(crate) fn requeue(&self, pending: Pending) {
        let mut state = self.lock();
        if state.ended {
            // Nobody can receive it any more.
            return;
        }
        let at = state.queue.partition_point(|p| p.seq < pending.seq);
        state.queue.insert(at, pending);
        let waker = state.consumer_waker.take();
        drop(state);
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The consumer is gone: the loop ends.
    pub(crate) fn consumer_dropped(&self) {
        let mut state = self.lock();
        state.consumer_gone = true;
        let queued = std::mem::take(&mut state.queue);
        let after = state.after();
        drop(state);
        // Dropped outside the lock.
        drop(queued);
        after.apply(&self.room);
    }
}

impl InboxState {
    /// Ends the loop if it should end now, and collects what to do after the lock: the
    /// depth gauge's move, the consumer to wake if something is queued or the loop
    /// ended (unless the consumer is gone), and whether to wake the producers waiting
    /// for room (the loop closed, or the live set is at the low-water mark).
    fn after(&mut self) -> After {
        let ending =
            !self.ended && (self.consumer_gone || (!self.accepting && self.decider.live == 0));
        if ending {
            self.ended = true;
        }
        let live = if self.ended { 0 } else { self.decider.live };
        let moved = (self.reported_live, live);
        self.reported_live = live;
        let waker = if self.consumer_gone || (self.queue.is_empty() && !ending) {
            None
        } else {
            self.consumer_waker.take()
        };
        let closed = self.ended || !self.accepting || self.consumer_gone;
        let room = self.room_waiters
            && (closed || (self.decider.has_room() && self.decider.at_low_water()));
        if room {
            self.room_waiters = false;
        }
        After {
            live: moved,
            ended: ending,
            waker,
            room,
        }
    }
}
