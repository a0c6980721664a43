//! The reference model: what the session and its journal should do, kept in plain
//! collections.

use std::collections::{HashMap, HashSet};

use notify_session::Published;
use notify_types::{
    CommandId, EventId, JournalRecord, LoopId, Notified, NotifyError,
    ProcessCompletionNotification, ProcessLifecycleMetadata, SessionEvent, SessionId, StopCause,
    Uuid, consumed_event_id,
};

use crate::CAPACITY;

/// A notification's answer, as the model predicts it and as the session gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    Accepted,
    Duplicate,
    Collision { seq: u64 },
    Full,
    Exited,
    Unsupported,
    LoopNotFound,
    Invalid,
    OwnerMismatch,
    Other(String),
}

impl Outcome {
    pub(crate) fn of(result: &Result<Notified, NotifyError>) -> Self {
        match result {
            Ok(Notified::Accepted) => Self::Accepted,
            Ok(Notified::Duplicate) => Self::Duplicate,
            Err(NotifyError::Collision { seq, .. }) => Self::Collision { seq: *seq },
            Err(NotifyError::DeliveryStopped {
                cause: StopCause::Full,
                ..
            }) => Self::Full,
            Err(NotifyError::DeliveryStopped {
                cause: StopCause::Exited,
                ..
            }) => Self::Exited,
            Err(NotifyError::Unsupported { .. }) => Self::Unsupported,
            Err(NotifyError::LoopNotFound { .. }) => Self::LoopNotFound,
            Err(NotifyError::Invalid { .. }) => Self::Invalid,
            Err(NotifyError::OwnerMismatch { .. }) => Self::OwnerMismatch,
            other => Self::Other(format!("{other:?}")),
        }
    }
}

/// A journal frame, as the model sees it: its kind and key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MFrame {
    Command(CommandId),
    Consumed(CommandId),
    Abandoned(CommandId),
    Lifecycle(EventId),
    Ended(SessionId),
}

impl MFrame {
    pub(crate) fn of(record: &JournalRecord) -> Self {
        match record {
            JournalRecord::Command(c) => Self::Command(c.command_id()),
            JournalRecord::Event(SessionEvent::NotificationConsumed(c)) => {
                Self::Consumed(c.cause())
            }
            JournalRecord::Event(SessionEvent::NotificationAbandoned(a)) => {
                Self::Abandoned(a.cause())
            }
            JournalRecord::Event(SessionEvent::Lifecycle(m)) => Self::Lifecycle(m.event_id),
            JournalRecord::Event(SessionEvent::SessionEnded(e)) => Self::Ended(e.session_id()),
        }
    }

    pub(crate) fn key(self) -> Uuid {
        match self {
            Self::Command(id) => *id.as_uuid(),
            Self::Consumed(id) => *consumed_event_id(id).as_uuid(),
            Self::Abandoned(id) => *notify_types::abandoned_event_id(id).as_uuid(),
            Self::Lifecycle(id) => *id.as_uuid(),
            Self::Ended(s) => *notify_types::ended_event_id(s).as_uuid(),
        }
    }
}

/// One loop, as seen in the current process lifetime.
#[derive(Debug, Default)]
pub(crate) struct MLoop {
    /// Accepted or seeded, not acknowledged, in acceptance order (held one included).
    pub(crate) live: Vec<CommandId>,
    /// The notification received and kept by a `Hold`.
    pub(crate) held: Option<CommandId>,
    /// Shut down since the last (re)start.
    pub(crate) closed: bool,
}

impl MLoop {
    /// What the next receive returns: the oldest live notification not held.
    pub(crate) fn next(&self) -> Option<CommandId> {
        self.live.iter().copied().find(|id| Some(*id) != self.held)
    }
}

/// A process whose lifecycle the model follows.
#[derive(Debug)]
pub(crate) struct MProcess {
    pub(crate) started: ProcessLifecycleMetadata,
    pub(crate) completed: Option<ProcessLifecycleMetadata>,
    /// Whether its last journaled event is terminal, and that event's seq.
    pub(crate) terminal: bool,
    pub(crate) last_seq: u64,
}

#[derive(Debug)]
pub(crate) struct Model {
    pub(crate) session_id: SessionId,
    pub(crate) loop_ids: Vec<LoopId>,
    pub(crate) frames: Vec<MFrame>,
    /// Journaled commands and their seq.
    pub(crate) commands: HashMap<CommandId, (ProcessCompletionNotification, u64)>,
    /// Journaled lifecycle events and their seq.
    pub(crate) events: HashMap<EventId, u64>,
    /// Acknowledged (consumption journaled).
    pub(crate) consumed: HashSet<CommandId>,
    /// Every notification sent that the journal holds, in order: retry and reuse pick here.
    pub(crate) issued: Vec<ProcessCompletionNotification>,
    pub(crate) loops: Vec<MLoop>,
    pub(crate) processes: Vec<MProcess>,
    /// Frames before this index have been checked against the broadcast stream.
    pub(crate) checked: usize,
    /// Events whose publisher was cancelled: they may be missing from the stream.
    pub(crate) maybe_unbroadcast: HashSet<Uuid>,
}

impl Model {
    pub(crate) fn new(session_id: SessionId, loop_ids: Vec<LoopId>) -> Self {
        Self {
            session_id,
            loops: loop_ids.iter().map(|_| MLoop::default()).collect(),
            loop_ids,
            frames: Vec::new(),
            commands: HashMap::new(),
            events: HashMap::new(),
            consumed: HashSet::new(),
            issued: Vec::new(),
            processes: Vec::new(),
            checked: 0,
            maybe_unbroadcast: HashSet::new(),
        }
    }

    pub(crate) fn seq(&self) -> u64 {
        self.frames.len() as u64
    }

    pub(crate) fn loop_index(&self, loop_id: LoopId) -> usize {
        self.loop_ids.iter().position(|&l| l == loop_id).unwrap()
    }

    /// The session's six steps, for a notification to one of the native loops.
    pub(crate) fn notify(&mut self, n: &ProcessCompletionNotification) -> Outcome {
        let id = n.command_id;
        match self.commands.get(&id) {
            Some((original, seq)) if original != n => return Outcome::Collision { seq: *seq },
            Some(_) => {
                if self.consumed.contains(&id) {
                    return Outcome::Duplicate;
                }
            }
            None => {
                self.frames.push(MFrame::Command(id));
                self.commands.insert(id, (n.clone(), self.seq()));
                self.issued.push(n.clone());
            }
        }
        let index = self.loop_index(n.loop_id);
        let lp = &mut self.loops[index];
        if lp.closed {
            Outcome::Exited
        } else if lp.live.contains(&id) {
            Outcome::Duplicate
        } else if lp.live.len() >= CAPACITY {
            Outcome::Full
        } else {
            lp.live.push(id);
            Outcome::Accepted
        }
    }

    pub(crate) fn ack(&mut self, lp: usize, id: CommandId) {
        self.loops[lp].live.retain(|&l| l != id);
        if self.loops[lp].held == Some(id) {
            self.loops[lp].held = None;
        }
        if self.consumed.insert(id) {
            self.frames.push(MFrame::Consumed(id));
        }
    }

    /// Publishes a lifecycle event: `Some(seq)` if new, else the original seq.
    pub(crate) fn publish(&mut self, m: &ProcessLifecycleMetadata) -> Published {
        if let Some(&seq) = self.events.get(&m.event_id) {
            return Published::Duplicate { seq };
        }
        self.frames.push(MFrame::Lifecycle(m.event_id));
        let seq = self.seq();
        self.events.insert(m.event_id, seq);
        if let Some(p) = self
            .processes
            .iter_mut()
            .find(|p| p.started.process_handle == m.process_handle)
        {
            p.terminal = m.is_terminal();
            p.last_seq = seq;
        }
        Published::New { seq }
    }

    /// Journaled, unconsumed commands of `loop_id`, in journal order.
    pub(crate) fn pending(&self, loop_id: LoopId) -> Vec<CommandId> {
        self.frames
            .iter()
            .filter_map(|f| match f {
                MFrame::Command(id) if !self.consumed.contains(id) => Some(*id),
                _ => None,
            })
            .filter(|id| self.commands[id].0.loop_id == loop_id)
            .collect()
    }

    /// Unfinished processes' last events (their `Started`), in order of that event.
    pub(crate) fn orphans(&self) -> Vec<EventId> {
        let mut open: Vec<&MProcess> = self.processes.iter().filter(|p| !p.terminal).collect();
        open.sort_by_key(|p| p.last_seq);
        open.iter().map(|p| p.started.event_id).collect()
    }

    /// A restart: every loop comes back open, seeded with its pending notifications.
    pub(crate) fn restart(&mut self) {
        for i in 0..self.loops.len() {
            let live = self.pending(self.loop_ids[i]);
            self.loops[i] = MLoop {
                live,
                held: None,
                closed: false,
            };
        }
    }
}
