//! The consumer queue, shared between the loop task and the consumer side.
//!
//! # Why this state is not owned by the loop task
//!
//! Everything else a loop knows (the live set, the consumed memory, the capacity, the
//! accepting flag) is owned by its task, as the house style prefers. The consumer queue
//! is the exception, for throughput. When `recv` was a request/reply to the task and
//! `ack` a message the task woke up for, one accepted-and-acknowledged notification
//! cost three channel round trips and task wake-ups where the deliver alone needs one;
//! the loop measured 0.08-0.21x a bare `mpsc` + `oneshot` round trip. Here `recv` takes
//! the front of the queue itself, dropping an unacknowledged
//! [`Received`](crate::Received) puts it back itself, and `ack` records the release for
//! the task to apply without waking it, so the deliver is the only round trip.
//!
//! # Invariants
//!
//! * **The loop task stays the single decider.** Every delivery answer (accepted,
//!   duplicate, full, refused, exited) is decided by the task, exactly once, from state
//!   only it owns. Only the task puts new notifications into `queue`, and only ones it
//!   has accepted. The consumer side decides nothing: it moves queued notifications out
//!   (`recv`) and back in (requeue of one it holds), and records releases (`acked`).
//! * **Every release is applied before any decision that could observe it.** The task
//!   takes `acked` after it has taken a batch of requests from its channel and before
//!   it decides any of them. An `ack` that returned before a `deliver` was sent pushed
//!   its ID before that request entered the channel, so the task applies it first.
//! * **`queue` holds the live notifications not handed out, in acceptance order**
//!   (`seq` ascending). The task appends new ones (their `seq` is higher than any
//!   before); a requeue inserts at its `seq`'s place.
//! * **No wake-up is lost.** A waiting `recv` and the waiting task each register their
//!   waker under the lock in the same critical section as the check that found nothing
//!   to do; whoever changes that state takes the waker under the lock and wakes it
//!   after releasing the lock. The task is only woken for what it must react to while
//!   idle: the consumer dropped, or a release while draining after a shutdown.
//! * **The lock is never held across `.await`** (a `std` mutex, per the tokio
//!   guidance). Critical sections are a few collection operations plus cloning or
//!   dropping a waker; nothing in them panics, so a poisoned lock still guards
//!   consistent state and is recovered rather than propagated.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use notify_types::{CommandId, ProcessNotification};

/// An accepted notification waiting in the consumer queue, or handed out.
pub(crate) struct Pending {
    /// Acceptance order; keeps a requeued notification ahead of later ones.
    pub(crate) seq: u64,
    /// The notification itself.
    pub(crate) notification: ProcessNotification,
}

/// The state behind the lock.
struct InboxState {
    /// Live notifications not currently handed out, in acceptance order, so the
    /// consumer receives them in order without asking the loop task.
    queue: VecDeque<Pending>,
    /// IDs acknowledged since the loop task last looked; it applies them to its live set
    /// and consumed memory before its next decision. At most one entry per live
    /// notification, so it is bounded by the live set.
    acked: Vec<CommandId>,
    /// True once the task no longer accepts and waits for the live set to drain: only
    /// then does an `ack` wake it (otherwise releases wait for the next delivery, which
    /// is the only decision they can affect).
    draining: bool,
    /// True once the [`LoopConsumer`](crate::LoopConsumer) is dropped: the task exits,
    /// releases are refused and requeues discarded.
    consumer_gone: bool,
    /// True once the task has exited: `recv` on an empty queue returns `None` instead of
    /// waiting, and releases are refused.
    exited: bool,
    /// The waker of a `recv` that found the queue empty, stored under the same lock as
    /// the check, so a notification queued right after it is never missed. Taken (and
    /// woken) by whoever queues something or closes the inbox; a stale one left by a
    /// cancelled `recv` only causes a spurious wake-up.
    consumer_waker: Option<Waker>,
    /// The loop task's waker, registered each time it waits, under the same lock as it
    /// takes the releases. Taken (and woken) when the consumer is dropped, and by an
    /// `ack` while draining.
    loop_waker: Option<Waker>,
}

/// The consumer queue, shared by the loop task, the [`LoopConsumer`](crate::LoopConsumer)
/// and every outstanding [`Received`](crate::Received).
pub(crate) struct Inbox {
    /// The shared state; see the module docs for its invariants.
    state: Mutex<InboxState>,
}

impl Inbox {
    /// An empty inbox.
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(InboxState {
                queue: VecDeque::new(),
                acked: Vec::new(),
                draining: false,
                consumer_gone: false,
                exited: false,
                consumer_waker: None,
                loop_waker: None,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, InboxState> {
        // Nothing panics while the lock is held (see the module docs), so a poisoned
        // state is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    // ---- consumer side ----

    /// Takes the front of the queue; `None` once the queue is empty and the loop has
    /// exited; otherwise registers `cx` to be woken when either changes.
    pub(crate) fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<Pending>> {
        let mut state = self.lock();
        if let Some(pending) = state.queue.pop_front() {
            return Poll::Ready(Some(pending));
        }
        if state.exited {
            return Poll::Ready(None);
        }
        register(&mut state.consumer_waker, cx.waker());
        Poll::Pending
    }

    /// Records a release for the task. False if the loop has exited or is exiting
    /// (consumer dropped): there is nothing left to release.
    pub(crate) fn ack(&self, command_id: CommandId) -> bool {
        let waker = {
            let mut state = self.lock();
            if state.exited || state.consumer_gone {
                return false;
            }
            state.acked.push(command_id);
            if state.draining {
                state.loop_waker.take()
            } else {
                None
            }
        };
        wake(waker);
        true
    }

    /// Puts a handed-out notification back at its acceptance position: ahead of every
    /// notification never handed out, behind any returned one accepted earlier.
    pub(crate) fn requeue(&self, pending: Pending) {
        let waker = {
            let mut state = self.lock();
            if state.exited || state.consumer_gone {
                // Nobody can receive it any more.
                return;
            }
            let at = state.queue.partition_point(|p| p.seq < pending.seq);
            state.queue.insert(at, pending);
            state.consumer_waker.take()
        };
        wake(waker);
    }

    /// The consumer is gone: the loop task must exit.
    pub(crate) fn consumer_dropped(&self) {
        let (queued, waker) = {
            let mut state = self.lock();
            state.consumer_gone = true;
            (std::mem::take(&mut state.queue), state.loop_waker.take())
        };
        // Dropped outside the lock.
        drop(queued);
        wake(waker);
    }

    // ---- loop-task side ----

    /// Moves the releases recorded since the last call into `acked` (which must be
    /// empty) and registers `waker` to be woken when the consumer side needs the task.
    /// Returns whether the consumer has been dropped.
    pub(crate) fn take_releases(&self, acked: &mut Vec<CommandId>, waker: &Waker) -> bool {
        let mut state = self.lock();
        std::mem::swap(&mut state.acked, acked);
        register(&mut state.loop_waker, waker);
        state.consumer_gone
    }

    /// Appends `accepted` (newly accepted, in order) to the queue, leaving it empty, and
    /// records whether the task is draining. Wakes a waiting consumer if anything was
    /// queued.
    pub(crate) fn publish(&self, accepted: &mut VecDeque<Pending>, draining: bool) {
        let waker = {
            let mut state = self.lock();
            state.draining = draining;
            if accepted.is_empty() || state.consumer_gone {
                None
            } else {
                state.queue.append(accepted);
                state.consumer_waker.take()
            }
        };
        // Only non-empty when the consumer is gone; dropped outside the lock.
        accepted.clear();
        wake(waker);
    }

    /// The task has exited: a waiting or later `recv` on an empty queue returns `None`,
    /// and releases are refused.
    pub(crate) fn close(&self) {
        let waker = {
            let mut state = self.lock();
            state.exited = true;
            state.loop_waker = None;
            state.consumer_waker.take()
        };
        wake(waker);
    }
}

/// Stores `waker` in `slot` unless it already holds one that wakes the same task.
fn register(slot: &mut Option<Waker>, waker: &Waker) {
    match slot {
        Some(stored) if stored.will_wake(waker) => {}
        _ => *slot = Some(waker.clone()),
    }
}

/// Wakes a waker taken out of the state, after the lock is released.
fn wake(waker: Option<Waker>) {
    if let Some(waker) = waker {
        waker.wake();
    }
}
