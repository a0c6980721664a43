//! Consumers over the wire: the server holds each registered loop's
//! [`SessionConsumer`] and lends its notifications to HTTP clients.
//!
//! # The redelivery rule
//!
//! A notification handed to a client (by a poll or on a stream) stays *handed out*
//! until it is acknowledged or its **visibility timeout** runs out (default 30 s,
//! chosen per poll or stream with `visibility_ms`). Then it goes back to the front of
//! the loop's queue, in acceptance order, and the next poll (or the stream) hands it
//! out again, before anything newer, with its `delivery` count raised. A stream
//! that closes (the client disconnected) puts back everything it handed out and
//! nobody acknowledged, at once. Across a restart, or when another host takes the
//! session over, everything unacknowledged is handed out again too (restore seeds
//! the loop when it is registered). So a client loses nothing by disconnecting;
//! it may see a notification more than once (at-least-once), and acts idempotently.
//!
//! One client consumes a loop at a time: a poll or a stream holds the loop's
//! consumer while it runs (a second waits for it, bounded).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify_types::{CommandId, LoopId, SessionId};
use tokio::sync::{Mutex as AsyncMutex, Notify, OwnedMutexGuard};
use tokio::time::Instant;

use crate::{SessionConsumer, SessionReceived};

/// One notification handed out and not yet acknowledged.
struct Handed {
    received: SessionReceived,
    /// When it goes back to the queue unless acknowledged.
    visible_at: Instant,
    /// The stream that handed it out (0: a poll).
    stream: u64,
}

/// A notification as the handler sends it.
pub(crate) struct Lent {
    /// Its command ID.
    pub(crate) command_id: CommandId,
    /// How many times it has been handed out here (1 the first time).
    pub(crate) delivery: u32,
    /// The notification's wire form (the DTO's canonical bytes).
    pub(crate) notification: Vec<u8>,
}

/// A registered loop's consumer and what it has handed out.
pub(crate) struct LoopSlot {
    pub(crate) loop_id: LoopId,
    pub(crate) capacity: usize,
    consumer: Arc<AsyncMutex<SessionConsumer>>,
    handed: Mutex<HashMap<CommandId, Handed>>,
    /// How often each live notification was handed out (kept until acknowledged).
    deliveries: Mutex<HashMap<CommandId, u32>>,
    /// Woken by every acknowledgement (a stream at its in-flight bound waits on it).
    acked: Notify,
}

/// Why a notification could not be acknowledged here.
pub(crate) enum AckOutcome {
    /// Acknowledged now.
    Acknowledged,
    /// Not handed out (never, or put back after its visibility timeout).
    NotHandedOut,
    /// The session's refusal.
    Failed(crate::AckError),
}

impl LoopSlot {
    fn new(loop_id: LoopId, capacity: usize, consumer: SessionConsumer) -> Self {
        Self {
            loop_id,
            capacity,
            consumer: Arc::new(AsyncMutex::new(consumer)),
            handed: Mutex::new(HashMap::new()),
            deliveries: Mutex::new(HashMap::new()),
            acked: Notify::new(),
        }
    }

    /// Takes the loop's consumer, waiting at most `wait` for another client to
    /// finish with it.
    pub(crate) async fn lock(&self, wait: Duration) -> Option<OwnedMutexGuard<SessionConsumer>> {
        tokio::time::timeout(wait, Arc::clone(&self.consumer).lock_owned())
            .await
            .ok()
    }

    /// Records `received` as handed out (by `stream`, 0 for a poll) until
    /// `visibility` has passed; the form the client gets.
    pub(crate) fn lend(
        &self,
        received: SessionReceived,
        visibility: Duration,
        stream: u64,
    ) -> Lent {
        let command_id = received.command_id();
        let notification = received.notification().notification().encode();
        let delivery = {
            let mut d = self.deliveries.lock().unwrap_or_else(|p| p.into_inner());
            let n = d.entry(command_id).or_insert(0);
            *n = n.saturating_add(1);
            *n
        };
        let entry = Handed {
            received,
            visible_at: Instant::now() + visibility,
            stream,
        };
        // A notification handed out twice at once cannot happen (the loop hands it
        // out once until it is put back); replacing would put the old one back.
        let old = self
            .handed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(command_id, entry);
        drop(old);
        Lent {
            command_id,
            delivery,
            notification,
        }
    }

    /// Puts back every handed-out notification whose visibility timeout has passed
    /// (dropping a `SessionReceived` returns it to the front of the loop's queue).
    pub(crate) fn expire(&self, now: Instant) {
        let expired: Vec<Handed> = {
            let mut handed = self.handed.lock().unwrap_or_else(|p| p.into_inner());
            let ids: Vec<CommandId> = handed
                .iter()
                .filter(|(_, h)| h.visible_at <= now)
                .map(|(id, _)| *id)
                .collect();
            ids.iter().filter_map(|id| handed.remove(id)).collect()
        };
        if !expired.is_empty() {
            tracing::debug!(loop_id = %self.loop_id, count = expired.len(), "visibility timeout: handed out again");
        }
        drop(expired);
    }

    /// Puts back everything `stream` handed out (it closed).
    pub(crate) fn release_stream(&self, stream: u64) {
        let released: Vec<Handed> = {
            let mut handed = self.handed.lock().unwrap_or_else(|p| p.into_inner());
            let ids: Vec<CommandId> = handed
                .iter()
                .filter(|(_, h)| h.stream == stream)
                .map(|(id, _)| *id)
                .collect();
            ids.iter().filter_map(|id| handed.remove(id)).collect()
        };
        if !released.is_empty() {
            tracing::debug!(loop_id = %self.loop_id, count = released.len(), "stream closed: unacknowledged notifications handed out again");
        }
        drop(released);
    }

    /// The earliest visibility deadline of what is handed out.
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        self.handed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|h| h.visible_at)
            .min()
    }

    /// How many notifications `stream` has out.
    pub(crate) fn in_flight(&self, stream: u64) -> usize {
        self.handed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|h| h.stream == stream)
            .count()
    }

    /// Waits until `stream` has fewer than `max` out (at once if it has).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads and waits.
    pub(crate) async fn room(&self, stream: u64, max: usize) {
        loop {
            // Created before the count is read, so an acknowledgement between the two
            // still wakes it (`notify_waiters` wakes every waiter created before it).
            let acked = self.acked.notified();
            if self.in_flight(stream) < max {
                return;
            }
            acked.await;
        }
    }

    /// Acknowledges `command_id` if it is handed out: journals its consumption, then
    /// releases it in the loop.
    pub(crate) async fn ack(&self, command_id: CommandId) -> AckOutcome {
        let entry = self
            .handed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&command_id);
        let Some(entry) = entry else {
            return AckOutcome::NotHandedOut;
        };
        let answer = entry.received.ack().await;
        // It is out no more either way (a failed acknowledgement hands it back to the
        // loop): a stream at its in-flight bound has room again.
        let outcome = match answer {
            Ok(()) | Err(crate::AckError::LoopExited(_)) => {
                self.deliveries
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&command_id);
                AckOutcome::Acknowledged
            }
            Err(e) => AckOutcome::Failed(e),
        };
        self.acked.notify_waiters();
        outcome
    }
}

/// Every loop registered over HTTP on this server.
#[derive(Default)]
pub(crate) struct Consumers {
    slots: Mutex<HashMap<(SessionId, LoopId), Arc<LoopSlot>>>,
    next_stream: AtomicU64,
}

impl Consumers {
    /// The loop's slot, if registered here.
    pub(crate) fn get(&self, session: SessionId, loop_id: LoopId) -> Option<Arc<LoopSlot>> {
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(session, loop_id))
            .cloned()
    }

    /// Adds a freshly registered loop's consumer.
    pub(crate) fn insert(
        &self,
        session: SessionId,
        loop_id: LoopId,
        capacity: usize,
        consumer: SessionConsumer,
    ) -> Arc<LoopSlot> {
        let slot = Arc::new(LoopSlot::new(loop_id, capacity, consumer));
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((session, loop_id), Arc::clone(&slot));
        slot
    }

    /// Forgets a loop's `slot` (its consumer is dropped once no poll or stream holds
    /// it), unless the loop has another slot by now (registered again under a later
    /// placement of the session).
    pub(crate) fn remove(&self, session: SessionId, slot: &Arc<LoopSlot>) {
        let removed = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            let key = (session, slot.loop_id);
            match slots.get(&key) {
                Some(current) if Arc::ptr_eq(current, slot) => slots.remove(&key),
                _ => None,
            }
        };
        drop(removed);
    }

    /// Forgets every loop of `session` (the host stopped serving it, or it ended).
    pub(crate) fn drop_session(&self, session: SessionId) {
        let dropped: Vec<Arc<LoopSlot>> = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            let keys: Vec<_> = slots
                .keys()
                .filter(|(s, _)| *s == session)
                .copied()
                .collect();
            keys.iter().filter_map(|k| slots.remove(k)).collect()
        };
        drop(dropped);
    }

    /// A new stream's ID (never 0).
    pub(crate) fn stream_id(&self) -> u64 {
        self.next_stream.fetch_add(1, Ordering::Relaxed) + 1
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::Session;
    use notify_loop::LoopConfig;

    /// A poll that ends on a slot of an earlier placement (its consumer closed when
    /// that placement stopped) must not forget the slot the loop was registered with
    /// since, under the session's next placement.
    #[tokio::test]
    async fn closing_an_earlier_placements_slot_keeps_the_current_one() {
        let consumers = Consumers::default();
        let loop_id = LoopId::new();
        let earlier = Session::headless(SessionId::new());
        let id = earlier.id();
        let first = earlier.register_loop(LoopConfig::new(id, loop_id)).unwrap();
        let stale = consumers.insert(id, loop_id, 8, first);
        let later = Session::headless(id);
        let second = later.register_loop(LoopConfig::new(id, loop_id)).unwrap();
        let current = consumers.insert(id, loop_id, 8, second);

        consumers.remove(id, &stale);
        let kept = consumers.get(id, loop_id).unwrap();
        assert!(
            Arc::ptr_eq(&kept, &current),
            "the current slot was forgotten"
        );
        consumers.remove(id, &current);
        assert!(consumers.get(id, loop_id).is_none());
    }
}
