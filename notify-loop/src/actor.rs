//! The loop task: it owns every piece of loop state except the consumer queue (see
//! `crate::inbox`), decides every delivery, and answers requests in order.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Context, Poll};

use notify_types::{CommandId, LoopId, ProcessNotification, SessionId, StopCause};
use tokio::sync::{mpsc, oneshot};

use crate::config::LoopConfig;
use crate::consumer::LoopConsumer;
use crate::handle::{Delivery, LoopHandle, Request};
use crate::inbox::{Inbox, Pending};

/// Buffer of the bounded request channel between handles and the loop task, and the
/// most requests the task takes from it at once.
///
/// Deliveries beyond it wait in `send` (back-pressure), they are not refused.
const REQUEST_BUFFER: usize = 64;

/// Why the loop task woke up.
enum Work {
    /// `n` requests arrived (`0`: every handle is gone).
    Requests(usize),
    /// The consumer side needs the task: its consumer was dropped, or a release
    /// arrived while draining.
    ConsumerSide,
}

/// An answer decided in the current batch, sent once the batch is published.
enum Reply {
    /// The answer to a `Deliver`.
    Delivery(oneshot::Sender<Delivery>, Delivery),
    /// The acknowledgement of a `Shutdown`.
    Shutdown(oneshot::Sender<()>),
}

/// Why a delivery was refused as invalid or misaddressed.
enum Refusal {
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

/// The state owned by one loop task.
struct LoopActor {
    /// The owner; a delivery for another session is refused.
    session_id: SessionId,
    /// This loop; a delivery for another loop is refused.
    loop_id: LoopId,
    /// Most live notifications a delivery may bring the live set to.
    capacity: usize,
    /// Most consumed IDs remembered in `known`.
    consumed_memory: usize,
    /// Every ID the loop knows: live (accepted and not yet acknowledged, whether queued
    /// or handed out) or consumed (acknowledged, still remembered). The duplicate guard;
    /// one map so that a delivery and an acknowledgement each cost one lookup.
    known: HashMap<CommandId, Known>,
    /// How many entries of `known` are live: the capacity count, and zero once the loop
    /// may exit after a shutdown.
    live: usize,
    /// `live` as last added to the inbox depth gauge (updated once per batch; the
    /// gauge sums every loop's, so what is still counted is taken back on drop).
    reported_live: usize,
    /// The consumed IDs in `known`, oldest first, to forget the oldest when memory is
    /// full.
    consumed_order: VecDeque<CommandId>,
    /// The next acceptance sequence number.
    next_seq: u64,
    /// False after shutdown or once every handle is gone: deliveries answer Exited,
    /// and the task ends when the live set drains.
    accepting: bool,
    /// True once the consumer is dropped: the task ends at once.
    consumer_gone: bool,
    /// The consumer queue, shared with the consumer side (see `crate::inbox` for why it
    /// is not owned here); the task appends what it accepts and takes releases from it.
    inbox: Arc<Inbox>,
    /// Accepted in the current batch, not yet in the inbox: the batch is published
    /// under one lock, before any of its answers is sent.
    accepted: VecDeque<Pending>,
    /// Answers decided in the current batch, sent once it is published, so that an
    /// `Accepted` caller always finds the notification already queued.
    replies: Vec<Reply>,
    /// Releases taken from the inbox, to apply (kept empty between uses, so that the
    /// buffer swapped with the inbox's is reused rather than reallocated).
    acked: Vec<CommandId>,
}

/// Starts a loop task on the current runtime.
pub(crate) fn spawn(config: LoopConfig) -> (LoopHandle, LoopConsumer) {
    let (requests_tx, requests_rx) = mpsc::channel(REQUEST_BUFFER);
    let LoopConfig {
        session_id,
        loop_id,
        capacity,
        consumed_memory,
        seed,
    } = config;
    let inbox = Arc::new(Inbox::new());
    let mut actor = LoopActor {
        session_id,
        loop_id,
        capacity,
        consumed_memory,
        known: HashMap::new(),
        live: 0,
        reported_live: 0,
        consumed_order: VecDeque::new(),
        next_seq: 0,
        accepting: true,
        consumer_gone: false,
        inbox: Arc::clone(&inbox),
        accepted: VecDeque::new(),
        replies: Vec::new(),
        acked: Vec::new(),
    };
    crate::metrics::loop_running(true);
    for notification in seed {
        actor.seed(notification);
    }
    // Seeded notifications are queued before `spawn` returns.
    inbox.publish(&mut actor.accepted, false);
    crate::metrics::live_changed(&mut actor.reported_live, actor.live);
    tokio::spawn(actor.run(requests_rx));
    (
        LoopHandle::new(session_id, loop_id, requests_tx),
        LoopConsumer::new(session_id, loop_id, inbox),
    )
}

impl Drop for LoopActor {
    fn drop(&mut self) {
        // Also when the task is dropped without finishing (its runtime shut down): a
        // waiting `recv` ends with `None` instead of waiting forever. Idempotent.
        self.inbox.close();
        crate::metrics::live_changed(&mut self.reported_live, 0);
        crate::metrics::loop_running(false);
    }
}

impl LoopActor {
    async fn run(mut self, mut requests: mpsc::Receiver<Request>) {
        let mut batch = Vec::with_capacity(REQUEST_BUFFER);
        let mut requests_open = true;
        while !self.finished() {
            let woken =
                poll_fn(|cx| self.poll_work(cx, &mut requests, &mut batch, requests_open)).await;
            if let Work::Requests(n) = woken {
                if n == 0 {
                    // Every handle is gone: nothing more can be delivered.
                    requests_open = false;
                    self.accepting = false;
                }
                for request in batch.drain(..) {
                    self.on_request(request, &mut requests);
                }
            }
            self.publish();
        }
        // Refuse new messages first, so `is_closed` and later sends see the exit.
        requests.close();
        batch.clear();
        while let Ok(request) = requests.try_recv() {
            self.on_request(request, &mut requests);
        }
        self.inbox.close();
        self.send_replies();
    }

    /// Waits for a batch of requests, or for the consumer side to need the task (its
    /// consumer dropped, or a release while draining). Either way, first applies every
    /// release recorded so far.
    fn poll_work(
        &mut self,
        cx: &mut Context<'_>,
        requests: &mut mpsc::Receiver<Request>,
        batch: &mut Vec<Request>,
        requests_open: bool,
    ) -> Poll<Work> {
        let polled = if requests_open {
            requests.poll_recv_many(cx, batch, REQUEST_BUFFER)
        } else {
            Poll::Pending
        };
        // Taken after the batch, so every release recorded before one of its requests
        // was sent is applied before that request is decided: a delivery that follows
        // an ack in program order always sees it.
        let mut acked = std::mem::take(&mut self.acked);
        self.consumer_gone |= self.inbox.take_releases(&mut acked, cx.waker());
        let released = !acked.is_empty();
        for command_id in acked.drain(..) {
            self.release(command_id);
        }
        self.acked = acked;
        match polled {
            Poll::Ready(n) => Poll::Ready(Work::Requests(n)),
            Poll::Pending if self.finished() => Poll::Ready(Work::ConsumerSide),
            Poll::Pending if released && !self.accepting => Poll::Ready(Work::ConsumerSide),
            Poll::Pending => Poll::Pending,
        }
    }

    /// The task ends when the consumer is gone, or when the loop stopped accepting and
    /// every live notification has been acknowledged.
    fn finished(&self) -> bool {
        self.consumer_gone || (!self.accepting && self.live == 0)
    }

    /// Queues what this batch accepted for the consumer, then sends the batch's answers.
    fn publish(&mut self) {
        self.inbox.publish(&mut self.accepted, !self.accepting);
        crate::metrics::live_changed(&mut self.reported_live, self.live);
        self.send_replies();
    }

    fn send_replies(&mut self) {
        for reply in self.replies.drain(..) {
            // A caller that gave up waiting is a normal event; the outcome stands.
            match reply {
                Reply::Delivery(reply, answer) => {
                    let _ = reply.send(answer);
                }
                Reply::Shutdown(reply) => {
                    let _ = reply.send(());
                }
            }
        }
    }

    fn on_request(&mut self, request: Request, requests: &mut mpsc::Receiver<Request>) {
        match request {
            Request::Deliver {
                notification,
                reply,
            } => {
                let answer = self.deliver(notification);
                self.replies.push(Reply::Delivery(reply, answer));
            }
            Request::Shutdown { reply } => {
                self.accepting = false;
                requests.close();
                self.replies.push(Reply::Shutdown(reply));
            }
        }
    }

    /// The spec's delivery rules, in order.
    fn deliver(&mut self, notification: ProcessNotification) -> Delivery {
        if !self.accepting || self.consumer_gone {
            return Delivery::Stopped(StopCause::Exited);
        }
        if let Err(refusal) = self.check(&notification) {
            self.warn_refused(&notification, &refusal, "refused delivery");
            return Delivery::Stopped(StopCause::Refused);
        }
        let full = self.live >= self.capacity;
        match self.known.entry(notification.command_id()) {
            Entry::Occupied(_) => Delivery::Duplicate,
            Entry::Vacant(_) if full => Delivery::Stopped(StopCause::Full),
            Entry::Vacant(slot) => {
                slot.insert(Known::Live);
                self.accept(notification);
                Delivery::Accepted
            }
        }
    }

    /// Seeding: the delivery guards without the capacity bound.
    fn seed(&mut self, notification: ProcessNotification) {
        if let Err(refusal) = self.check(&notification) {
            self.warn_refused(&notification, &refusal, "skipped seeded notification");
        } else if let Entry::Vacant(slot) = self.known.entry(notification.command_id()) {
            slot.insert(Known::Live);
            self.accept(notification);
        }
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

    fn warn_refused(&self, notification: &ProcessNotification, refusal: &Refusal, what: &str) {
        let command_id = notification.command_id();
        match refusal {
            Refusal::Invalid(err) => tracing::warn!(
                %command_id, session_id = %self.session_id, loop_id = %self.loop_id,
                field = %err.field(), "{what}: invalid notification"
            ),
            Refusal::WrongSession(got) => tracing::warn!(
                %command_id, session_id = %self.session_id, loop_id = %self.loop_id,
                got_session_id = %got, "{what}: addressed to another session"
            ),
            Refusal::WrongLoop(got) => tracing::warn!(
                %command_id, session_id = %self.session_id, loop_id = %self.loop_id,
                got_loop_id = %got, "{what}: addressed to another loop"
            ),
        }
    }

    /// Counts a notification already marked live in `known`; it is queued for the
    /// consumer at the end of the batch.
    fn accept(&mut self, notification: ProcessNotification) {
        self.live += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.accepted.push_back(Pending { seq, notification });
    }

    /// An acknowledgement: the ID leaves the live set and is remembered as consumed,
    /// forgetting the oldest remembered one if memory is full.
    fn release(&mut self, id: CommandId) {
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
