//! The loop task: it owns every piece of loop state and answers messages in order.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use notify_types::{CommandId, LoopId, ProcessNotification, SessionId, StopCause};
use tokio::sync::{mpsc, oneshot};

use crate::config::LoopConfig;
use crate::consumer::{LoopConsumer, Received};
use crate::handle::{Delivery, LoopHandle};

/// Buffer of the bounded command channel between handles and the loop task.
///
/// Deliveries beyond it wait in `send` (back-pressure), they are not refused.
const COMMAND_BUFFER: usize = 64;

/// What a [`LoopHandle`] asks of the loop (bounded channel: producers get
/// back-pressure).
pub(crate) enum Command {
    /// Offer a notification; the answer comes back on `reply`.
    Deliver {
        command: ProcessNotification,
        reply: oneshot::Sender<Delivery>,
    },
    /// Stop accepting; `reply` fires once the loop refuses further deliveries.
    Shutdown { reply: oneshot::Sender<()> },
}

/// What the consumer side tells the loop (unbounded channel, so that a synchronous
/// `Drop` can send). It is bounded in practice: one outstanding `Recv` per consumer,
/// and at most one `Ack` or `Requeue` per live notification.
pub(crate) enum Control {
    /// The consumer waits for the next notification.
    Recv { reply: oneshot::Sender<Received> },
    /// Release a received notification: it leaves the live set and is remembered.
    Ack { command_id: CommandId },
    /// A received notification was dropped unacknowledged: queue it again.
    Requeue(Pending),
    /// The [`LoopConsumer`] was dropped: nobody can receive any more, so the loop exits.
    ConsumerDropped,
}

/// An accepted notification waiting in the consumer queue.
pub(crate) struct Pending {
    /// Acceptance order; keeps a requeued notification ahead of later ones.
    pub(crate) seq: u64,
    /// Shared with the [`Received`] handed out, so requeueing copies nothing.
    pub(crate) command: Arc<ProcessNotification>,
}

/// Why a delivery was refused as invalid or misaddressed.
enum Refusal {
    Invalid(notify_types::ValidationError),
    WrongSession(SessionId),
    WrongLoop(LoopId),
}

/// The state owned by one loop task.
struct LoopActor {
    /// The owner; a delivery for another session is refused.
    session_id: SessionId,
    /// This loop; a delivery for another loop is refused.
    loop_id: LoopId,
    /// Most live notifications a delivery may bring the live set to.
    capacity: usize,
    /// Most consumed IDs remembered in `consumed`.
    consumed_memory: usize,
    /// Accepted and not yet acknowledged, whether queued or handed out: the duplicate
    /// guard and the capacity count.
    live: HashSet<CommandId>,
    /// Live notifications not currently handed out, in acceptance order (`seq`
    /// ascending), so the consumer receives them in order.
    queue: VecDeque<Pending>,
    /// Acknowledged IDs still remembered, so a late retry answers Duplicate.
    consumed: HashSet<CommandId>,
    /// The same IDs oldest first, to forget the oldest when memory is full.
    consumed_order: VecDeque<CommandId>,
    /// The next acceptance sequence number.
    next_seq: u64,
    /// The consumer's pending `recv`, answered as soon as the queue is non-empty.
    waiter: Option<oneshot::Sender<Received>>,
    /// False after shutdown or once every handle is gone: deliveries answer Exited,
    /// and the task ends when the live set drains.
    accepting: bool,
    /// True once the consumer is dropped: the task ends at once.
    consumer_gone: bool,
    /// Given to every [`Received`], so that it can acknowledge or requeue itself.
    control_tx: mpsc::UnboundedSender<Control>,
}

/// Starts a loop task on the current runtime.
pub(crate) fn spawn(config: LoopConfig) -> (LoopHandle, LoopConsumer) {
    let (commands_tx, commands_rx) = mpsc::channel(COMMAND_BUFFER);
    let (control_tx, control_rx) = mpsc::unbounded_channel();
    let LoopConfig {
        session_id,
        loop_id,
        capacity,
        consumed_memory,
        seed,
    } = config;
    let mut actor = LoopActor {
        session_id,
        loop_id,
        capacity,
        consumed_memory,
        live: HashSet::new(),
        queue: VecDeque::new(),
        consumed: HashSet::new(),
        consumed_order: VecDeque::new(),
        next_seq: 0,
        waiter: None,
        accepting: true,
        consumer_gone: false,
        control_tx: control_tx.clone(),
    };
    for command in seed {
        actor.seed(command);
    }
    tokio::spawn(actor.run(commands_rx, control_rx));
    (
        LoopHandle::new(session_id, loop_id, commands_tx),
        LoopConsumer::new(session_id, loop_id, control_tx),
    )
}

impl LoopActor {
    async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        mut control: mpsc::UnboundedReceiver<Control>,
    ) {
        let mut commands_open = true;
        while !self.finished() {
            tokio::select! {
                // Consumer messages first: releases free capacity before deliveries.
                biased;
                ctl = control.recv() => match ctl {
                    Some(ctl) => self.on_control(ctl),
                    // Unreachable while `self.control_tx` lives; treat as consumer gone.
                    None => self.consumer_gone = true,
                },
                cmd = commands.recv(), if commands_open => match cmd {
                    Some(cmd) => {
                        // An ack is fire-and-forget. Apply every control message sent
                        // before this command, so a delivery that follows an ack in
                        // program order always sees it.
                        while let Ok(ctl) = control.try_recv() {
                            self.on_control(ctl);
                        }
                        self.on_command(cmd, &mut commands);
                    }
                    // Every handle is gone: nothing more can be delivered.
                    None => {
                        commands_open = false;
                        self.accepting = false;
                    }
                },
            }
        }
        // Refuse new messages first, so `is_closed` and later sends see the exit.
        commands.close();
        control.close();
        while let Ok(cmd) = commands.try_recv() {
            self.on_command(cmd, &mut commands);
        }
        // Dropping `self.waiter` ends a pending `recv` with `None`.
    }

    /// The task ends when the consumer is gone, or when the loop stopped accepting and
    /// every live notification has been acknowledged.
    fn finished(&self) -> bool {
        self.consumer_gone || (!self.accepting && self.live.is_empty())
    }

    fn on_command(&mut self, cmd: Command, commands: &mut mpsc::Receiver<Command>) {
        match cmd {
            Command::Deliver { command, reply } => {
                let answer = self.deliver(command);
                // A caller that gave up waiting is a normal event; the outcome stands.
                let _ = reply.send(answer);
                self.serve_waiter();
            }
            Command::Shutdown { reply } => {
                self.accepting = false;
                commands.close();
                // A caller that gave up waiting is a normal event; the shutdown stands.
                let _ = reply.send(());
            }
        }
    }

    fn on_control(&mut self, ctl: Control) {
        match ctl {
            Control::Recv { reply } => {
                // One consumer, `&mut` receive: a newer request replaces a cancelled one.
                self.waiter = Some(reply);
                self.serve_waiter();
            }
            Control::Ack { command_id } => {
                if self.live.remove(&command_id) {
                    self.remember_consumed(command_id);
                }
            }
            Control::Requeue(pending) => {
                if self.live.contains(&pending.command.command_id()) {
                    self.requeue(pending);
                    self.serve_waiter();
                }
            }
            Control::ConsumerDropped => self.consumer_gone = true,
        }
    }

    /// The spec's delivery rules, in order.
    fn deliver(&mut self, command: ProcessNotification) -> Delivery {
        if !self.accepting || self.consumer_gone {
            return Delivery::Stopped(StopCause::Exited);
        }
        if let Err(refusal) = self.check(&command) {
            self.warn_refused(&command, &refusal, "refused delivery");
            return Delivery::Stopped(StopCause::Refused);
        }
        let id = command.command_id();
        if self.live.contains(&id) || self.consumed.contains(&id) {
            return Delivery::Duplicate;
        }
        if self.live.len() >= self.capacity {
            return Delivery::Stopped(StopCause::Full);
        }
        self.accept(command);
        Delivery::Accepted
    }

    /// Seeding: the delivery guards without the capacity bound.
    fn seed(&mut self, command: ProcessNotification) {
        if let Err(refusal) = self.check(&command) {
            self.warn_refused(&command, &refusal, "skipped seeded notification");
        } else if !self.live.contains(&command.command_id()) {
            self.accept(command);
        }
    }

    fn check(&self, command: &ProcessNotification) -> Result<(), Refusal> {
        command.validate().map_err(Refusal::Invalid)?;
        if command.session_id() != self.session_id {
            return Err(Refusal::WrongSession(command.session_id()));
        }
        if command.loop_id() != self.loop_id {
            return Err(Refusal::WrongLoop(command.loop_id()));
        }
        Ok(())
    }

    fn warn_refused(&self, command: &ProcessNotification, refusal: &Refusal, what: &str) {
        let command_id = command.command_id();
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

    fn accept(&mut self, command: ProcessNotification) {
        self.live.insert(command.command_id());
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queue.push_back(Pending {
            seq,
            command: Arc::new(command),
        });
    }

    /// Puts a returned notification back at its acceptance position: ahead of every
    /// notification never handed out, behind any returned one accepted earlier.
    fn requeue(&mut self, pending: Pending) {
        let at = self.queue.partition_point(|p| p.seq < pending.seq);
        self.queue.insert(at, pending);
    }

    fn remember_consumed(&mut self, id: CommandId) {
        if self.consumed_memory == 0 || !self.consumed.insert(id) {
            return;
        }
        self.consumed_order.push_back(id);
        while self.consumed_order.len() > self.consumed_memory {
            if let Some(oldest) = self.consumed_order.pop_front() {
                self.consumed.remove(&oldest);
            }
        }
    }

    /// Hands the front of the queue to a waiting `recv`, if both exist.
    fn serve_waiter(&mut self) {
        if self.queue.is_empty() {
            return;
        }
        let Some(waiter) = self.waiter.take() else {
            return;
        };
        if waiter.is_closed() {
            return;
        }
        if let Some(next) = self.queue.pop_front() {
            let received = Received::new(next, self.control_tx.clone());
            if let Err(received) = waiter.send(received) {
                // The `recv` was cancelled meanwhile: keep the notification at the front.
                self.queue.push_front(received.into_pending());
            }
        }
    }
}
