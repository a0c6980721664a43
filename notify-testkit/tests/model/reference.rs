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
    Collision {
        seq: u64,
    },
    Full,
    Exited,
    Unsupported,
    LoopNotFound,
    Invalid,
    OwnerMismatch,
    /// `SessionEnded`, and whether the refusal says the log was purged.
    Ended {
        purged: bool,
    },
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
            Err(NotifyError::SessionEnded { purged, .. }) => Self::Ended { purged: *purged },
            other => Self::Other(format!("{other:?}")),
        }
    }
}

/// What the journal says of a session's life, as the model follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MState {
    Live,
    /// Its end marker is journaled: the log is whole, nothing more is appended (a new
    /// key is refused, a journaled one answered from the log).
    Ended,
    /// Purged: only its tombstone remains.
    Purged,
    /// Its tombstone was dropped: the journal knows nothing of it (retired sessions
    /// only).
    Forgotten,
}

/// What `Session::end` answers, as the model predicts it and as the session gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MEnd {
    Ended {
        seq: u64,
        abandoned: Vec<CommandId>,
        already: bool,
    },
    /// Refused: this many notifications are pending (nothing was written).
    Pending { count: usize },
}

/// An earlier session of the case, ended, in the same journal.
#[derive(Debug)]
pub(crate) struct Retired {
    pub(crate) session_id: SessionId,
    pub(crate) frames: Vec<MFrame>,
    pub(crate) state: MState,
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

/// The current session (its journal, its loops and processes) and what else the case
/// journaled in the same file.
#[derive(Debug)]
pub(crate) struct Model {
    pub(crate) session_id: SessionId,
    /// What the journal says of the session.
    pub(crate) state: MState,
    /// Whether this process's session handle has ended (it then appends and
    /// dispatches nothing, and answers from the journal's record). A restart forgets
    /// it.
    pub(crate) handle_ended: bool,
    pub(crate) loop_ids: Vec<LoopId>,
    pub(crate) frames: Vec<MFrame>,
    /// Journaled commands and their seq.
    pub(crate) commands: HashMap<CommandId, (ProcessCompletionNotification, u64)>,
    /// Journaled lifecycle events and their seq.
    pub(crate) events: HashMap<EventId, u64>,
    /// Acknowledged (consumption journaled).
    pub(crate) consumed: HashSet<CommandId>,
    /// Abandoned when the session ended.
    pub(crate) abandoned: HashSet<CommandId>,
    /// Every notification sent that the journal holds, in order: retry and reuse pick here.
    pub(crate) issued: Vec<ProcessCompletionNotification>,
    pub(crate) loops: Vec<MLoop>,
    pub(crate) processes: Vec<MProcess>,
    /// Frames before this index have been checked against the broadcast stream.
    pub(crate) checked: usize,
    /// Events whose publisher was cancelled: they may be missing from the stream.
    pub(crate) maybe_unbroadcast: HashSet<Uuid>,
    /// Earlier sessions of the case, ended, oldest first.
    pub(crate) retired: Vec<Retired>,
    /// The neighbour sessions sharing the journal (a new one after each crash), and how
    /// many frames each has; all live.
    pub(crate) neighbours: Vec<(SessionId, u64)>,
}

impl Model {
    pub(crate) fn new(session_id: SessionId, loop_ids: Vec<LoopId>) -> Self {
        Self {
            session_id,
            state: MState::Live,
            handle_ended: false,
            loops: loop_ids.iter().map(|_| MLoop::default()).collect(),
            loop_ids,
            frames: Vec::new(),
            commands: HashMap::new(),
            events: HashMap::new(),
            consumed: HashSet::new(),
            abandoned: HashSet::new(),
            issued: Vec::new(),
            processes: Vec::new(),
            checked: 0,
            maybe_unbroadcast: HashSet::new(),
            retired: Vec::new(),
            neighbours: Vec::new(),
        }
    }

    /// Retires the current (ended) session and starts modelling a fresh one in the
    /// same journal.
    pub(crate) fn renew(&mut self, session_id: SessionId, loop_ids: Vec<LoopId>) {
        let old = std::mem::replace(self, Self::new(session_id, loop_ids));
        self.neighbours = old.neighbours;
        self.retired = old.retired;
        self.retired.push(Retired {
            session_id: old.session_id,
            frames: old.frames,
            state: old.state,
        });
    }

    /// Whether an append of a new key to the session is refused, and with what
    /// `purged` flag (the journal's record decides, for an ended handle too; a
    /// retry of a key journaled before the end is answered from it instead, unless
    /// the session was purged: see [`after_end`](Self::after_end)).
    pub(crate) fn refusal(&self) -> Option<bool> {
        match self.state {
            MState::Live if self.handle_ended => Some(false),
            MState::Live => None,
            MState::Ended | MState::Forgotten => Some(false),
            MState::Purged => Some(true),
        }
    }

    /// After the end, what a key's retry is answered: `Some(Ok(seq))`, journaled
    /// before the end at `seq` (a duplicate or a collision); `Some(Err(purged))`,
    /// refused as ended; `None` while the session is live.
    fn after_end(&self, journaled: Option<u64>) -> Option<Result<u64, bool>> {
        match (self.refusal()?, journaled) {
            (false, Some(seq)) => Some(Ok(seq)),
            (purged, _) => Some(Err(purged)),
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
        let journaled = self.commands.get(&id).map(|(_, seq)| *seq);
        match self.after_end(journaled) {
            None => {}
            Some(Err(purged)) => return Outcome::Ended { purged },
            // Journaled before the end: answered truthfully, never dispatched.
            Some(Ok(seq)) if self.commands[&id].0 != *n => return Outcome::Collision { seq },
            Some(Ok(_)) => return Outcome::Duplicate,
        }
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

    /// Publishes a lifecycle event: `New` at its seq, else `Duplicate` at the original
    /// one (after the end too); `Err(purged)` for a new one once the session has
    /// ended, for every one once it is purged.
    pub(crate) fn publish(&mut self, m: &ProcessLifecycleMetadata) -> Result<Published, bool> {
        if let Some(Err(purged)) = self.after_end(self.events.get(&m.event_id).copied()) {
            return Err(purged);
        }
        if let Some(&seq) = self.events.get(&m.event_id) {
            return Ok(Published::Duplicate { seq });
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
        Ok(Published::New { seq })
    }

    /// Journaled commands of `loop_id` neither consumed nor abandoned, in journal order.
    pub(crate) fn pending(&self, loop_id: LoopId) -> Vec<CommandId> {
        self.frames
            .iter()
            .filter_map(|f| match f {
                MFrame::Command(id)
                    if !self.consumed.contains(id) && !self.abandoned.contains(id) =>
                {
                    Some(*id)
                }
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

    /// What restore reports pending, per loop in the order of their IDs (as
    /// `Session::end` abandons them): nothing once the session has ended.
    pub(crate) fn all_pending(&self) -> Vec<CommandId> {
        if self.state != MState::Live {
            return Vec::new();
        }
        let mut loop_ids = self.loop_ids.clone();
        loop_ids.sort();
        loop_ids.iter().flat_map(|&l| self.pending(l)).collect()
    }

    /// `Session::end`: refuse while anything is pending (unless abandoning), else
    /// journal each pending notification's abandonment, then the end marker; the
    /// handle's loops close and deliver nothing more.
    pub(crate) fn end(&mut self, abandon: bool) -> MEnd {
        let already = |seq| MEnd::Ended {
            seq,
            abandoned: Vec::new(),
            already: true,
        };
        if self.handle_ended {
            // The journal's word: the end marker's seq, or 0 once purged.
            return match self.state {
                MState::Ended => already(self.seq()),
                _ => already(0),
            };
        }
        let answer = match self.state {
            MState::Ended => already(self.seq()),
            MState::Purged => already(0),
            MState::Forgotten => unreachable!("only retired sessions are forgotten"),
            MState::Live => {
                let pending = self.all_pending();
                if !abandon && !pending.is_empty() {
                    return MEnd::Pending {
                        count: pending.len(),
                    };
                }
                for &id in &pending {
                    self.frames.push(MFrame::Abandoned(id));
                    self.abandoned.insert(id);
                }
                self.frames.push(MFrame::Ended(self.session_id));
                self.state = MState::Ended;
                MEnd::Ended {
                    seq: self.seq(),
                    abandoned: pending,
                    already: false,
                }
            }
        };
        self.handle_ended = true;
        for lp in &mut self.loops {
            lp.live.clear();
            lp.closed = true;
        }
        answer
    }

    /// Sessions a purge is due to remove, and how many frames each has.
    pub(crate) fn purgeable(&self) -> Vec<(SessionId, u64)> {
        let current = (self.state == MState::Ended).then_some((self.session_id, self.seq()));
        let retired = self
            .retired
            .iter()
            .filter(|r| r.state == MState::Ended)
            .map(|r| (r.session_id, r.frames.len() as u64));
        current.into_iter().chain(retired).collect()
    }

    /// A whole purge: every ended session becomes a tombstone.
    pub(crate) fn purge(&mut self) {
        if self.state == MState::Ended {
            self.state = MState::Purged;
        }
        for r in &mut self.retired {
            if r.state == MState::Ended {
                r.state = MState::Purged;
            }
        }
    }

    /// Drops the retired sessions' tombstones; answers how many.
    pub(crate) fn drop_tombstones(&mut self) -> u64 {
        let mut dropped = 0;
        for r in &mut self.retired {
            if r.state == MState::Purged {
                r.state = MState::Forgotten;
                dropped += 1;
            }
        }
        dropped
    }

    /// A restart: every loop comes back open, seeded with its pending notifications
    /// (none once the session has ended), and the new handle has not ended.
    pub(crate) fn restart(&mut self) {
        self.handle_ended = false;
        let live = self.state == MState::Live;
        for i in 0..self.loops.len() {
            let live = if live {
                self.pending(self.loop_ids[i])
            } else {
                Vec::new()
            };
            self.loops[i] = MLoop {
                live,
                held: None,
                closed: false,
            };
        }
    }
}
