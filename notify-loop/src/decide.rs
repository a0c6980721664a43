//! The loop's decisions: the delivery rules, the capacity bound, the duplicate guard
//! and the memory of consumed IDs. Pure state, kept inside the inbox's lock (see
//! `crate::inbox`); it does no I/O and never blocks.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};

use notify_types::{CommandId, LoopId, ProcessNotification, SessionId, StopCause};

use crate::config::LoopConfig;
use crate::delivery::Delivery;

/// Up to this capacity, producers waiting for room are woken as soon as one slot is
/// free: a batch of half of it would be too small to save wake-ups.
const SMALL_CAPACITY: usize = 4;

/// An accepted notification waiting in the consumer queue, or handed out.
pub(crate) struct Pending {
    /// Acceptance order; keeps a requeued notification ahead of later ones.
    pub(crate) seq: u64,
    /// The notification itself.
    pub(crate) notification: ProcessNotification,
}

/// Why a delivery was refused as invalid or misaddressed.
pub(crate) enum Refusal {
    Invalid(notify_types::ValidationError),
    WrongSession(SessionId),
    WrongLoop(LoopId),
}

/// What the loop knows about a command ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    /// Accepted, not yet acknowledged.
    Live,
    /// Acknowledged and still remembered.
    Consumed,
}

/// What one loop knows, and decides every delivery from.
pub(crate) struct Decider {
    /// The owner; a delivery for another session is refused.
    pub(crate) session_id: SessionId,
    /// This loop; a delivery for another loop is refused.
    pub(crate) loop_id: LoopId,
    /// Most live notifications a delivery may bring the live set to.
    capacity: usize,
    /// Most consumed IDs remembered in `known`.
    consumed_memory: usize,
    /// Every ID the loop knows: live (accepted and not yet acknowledged, whether queued
    /// or handed out) or consumed (acknowledged, still remembered). The duplicate guard;
    /// one map so that a delivery and an acknowledgement each cost one lookup.
    known: HashMap<CommandId, Known>,
    /// How many entries of `known` are live: the capacity count, and zero once the loop
    /// may end after a shutdown.
    pub(crate) live: usize,
    /// The consumed IDs in `known`, oldest first, to forget the oldest when memory is
    /// full.
    consumed_order: VecDeque<CommandId>,
    /// The next acceptance sequence number.
    next_seq: u64,
}

impl Decider {
    /// The state of a new loop, before seeding.
    pub(crate) fn new(config: &LoopConfig) -> Self {
        Self {
            session_id: config.session_id,
            loop_id: config.loop_id,
            capacity: config.capacity,
            consumed_memory: config.consumed_memory,
            known: HashMap::new(),
            live: 0,
            consumed_order: VecDeque::new(),
            next_seq: 0,
        }
    }

    /// The spec's delivery rules 2 to 5 (rule 1, a loop that no longer accepts, is the
    /// caller's): the answer, and the notification to queue when it is `Accepted`.
    pub(crate) fn deliver(
        &mut self,
        notification: ProcessNotification,
    ) -> Result<(Delivery, Option<Pending>), (Refusal, ProcessNotification)> {
        if let Err(refusal) = self.check(&notification) {
            return Err((refusal, notification));
        }
        let full = self.live >= self.capacity;
        Ok(match self.known.entry(notification.command_id()) {
            Entry::Occupied(_) => (Delivery::Duplicate, None),
            Entry::Vacant(_) if full => (Delivery::Stopped(StopCause::Full), None),
            Entry::Vacant(slot) => {
                slot.insert(Known::Live);
                (Delivery::Accepted, Some(self.accept(notification)))
            }
        })
    }

    /// Whether a new command ID would be accepted rather than answered `Full`.
    pub(crate) fn has_room(&self) -> bool {
        self.live < self.capacity
    }

    /// Whether the live set has drained to the low-water mark at which producers
    /// waiting for room are woken: half the capacity, or one below it when the
    /// capacity is at most [`SMALL_CAPACITY`] (then every freed slot wakes them).
    pub(crate) fn at_low_water(&self) -> bool {
        let mark = if self.capacity <= SMALL_CAPACITY {
            self.capacity.saturating_sub(1)
        } else {
            self.capacity / 2
        };
        self.live <= mark
    }

    /// Seeding: the delivery guards without the capacity bound. A refused seed comes
    /// back with its refusal, for the caller to warn about.
    pub(crate) fn seed(
        &mut self,
        notification: ProcessNotification,
    ) -> Result<Option<Pending>, (Refusal, ProcessNotification)> {
        if let Err(refusal) = self.check(&notification) {
            return Err((refusal, notification));
        }
        Ok(match self.known.entry(notification.command_id()) {
            Entry::Vacant(slot) => {
                slot.insert(Known::Live);
                Some(self.accept(notification))
            }
            Entry::Occupied(_) => None,
        })
    }

    fn check(&self, notification: &ProcessNotification) -> Result<(), Refusal> {
        notification.validate().map_err(Refusal::Invalid)?;
        if notification.session_id() != self.session_id {
            return Err(Refusal::WrongSession(notification.session_id()));
        }
        if notification.loop_id() != self.loop_id {
            return Err(Refusal::WrongLoop(notification.loop_id()));
        }
        Ok(())
    }

    /// Counts a notification already marked live in `known` and numbers it.
    fn accept(&mut self, notification: ProcessNotification) -> Pending {
        self.live += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        Pending { seq, notification }
    }

    /// An acknowledgement: the ID leaves the live set and is remembered as consumed,
    /// forgetting the oldest remembered one if memory is full.
    pub(crate) fn release(&mut self, id: CommandId) {
        let Entry::Occupied(mut slot) = self.known.entry(id) else {
            return;
        };
        if *slot.get() != Known::Live {
            return;
        }
        self.live -= 1;
        if self.consumed_memory == 0 {
            slot.remove();
            return;
        }
        slot.insert(Known::Consumed);
        self.consumed_order.push_back(id);
        while self.consumed_order.len() > self.consumed_memory {
            // Every ID in `consumed_order` is `Consumed` in `known`: an ID leaves that
            // state only by being forgotten here.
            if let Some(oldest) = self.consumed_order.pop_front() {
                self.known.remove(&oldest);
            }
        }
    }
}

/// Logs a refused delivery (or skipped seed), outside the inbox's lock.
pub(crate) fn warn_refused(
    (session_id, loop_id): (SessionId, LoopId),
    notification: &ProcessNotification,
    refusal: &Refusal,
    what: &str,
) {
    let command_id = notification.command_id();
    match refusal {
        Refusal::Invalid(err) => tracing::warn!(
            %command_id, %session_id, %loop_id,
            field = %err.field(), "{what}: invalid notification"
        ),
        Refusal::WrongSession(got) => tracing::warn!(
            %command_id, %session_id, %loop_id,
            got_session_id = %got, "{what}: addressed to another session"
        ),
        Refusal::WrongLoop(got) => tracing::warn!(
            %command_id, %session_id, %loop_id,
            got_loop_id = %got, "{what}: addressed to another loop"
        ),
    }
}
