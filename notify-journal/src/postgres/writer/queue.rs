//! What the writers' channels carry (single appends and atomic groups), the
//! channels themselves with the routing of a session to its writer (pinned while it
//! has appends in flight, else the least busy writer), and the commit counters the
//! writers share.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use notify_types::{SessionId, Uuid};
use tokio::sync::{mpsc, oneshot};

use crate::backend::AppendOutcome;
use crate::error::AppendError;
use crate::postgres::lock;
use crate::stats::CommitStats;

/// One append waiting for its batch.
pub(crate) struct AppendReq {
    pub(crate) session: Uuid,
    pub(crate) key: Uuid,
    pub(crate) kind: &'static str,
    pub(crate) bytes: Vec<u8>,
    /// [`frame_checksum`](crate::integrity::frame_checksum) of `bytes`, as PostgreSQL's `int4`.
    pub(crate) checksum: i32,
    /// The epoch of this journal's lease on the session when the append was made;
    /// `None` when it held none.
    pub(crate) epoch: Option<u64>,
    pub(crate) reply: oneshot::Sender<Result<AppendOutcome, AppendError>>,
    /// Keeps the session on its writer until this request is dropped (answered).
    pub(crate) _pin: Pin,
}

/// An atomic group of appends to one session
/// ([`JournalBackend::append_all`](crate::JournalBackend::append_all)).
pub(crate) struct GroupReq {
    pub(crate) session: SessionId,
    /// In order; each answered through its own `reply`, all alike when the group is
    /// refused or fails.
    pub(crate) requests: Vec<AppendReq>,
    /// The head the group expects to find (its first new frame at `if_head + 1`).
    pub(crate) if_head: Option<u64>,
}

/// What the writers' channel carries.
pub(crate) enum Job {
    /// An append, committed in a batch with others.
    One(AppendReq),
    /// An atomic group, committed in a transaction of its own.
    Group(GroupReq),
}

/// The writers' channels: one per writer. A session with appends in flight (sent and
/// not yet answered) stays on the writer it is pinned to ([`Senders::route`]), so
/// that no two writers of this journal ever hold batches that touch the same session
/// row (see `docs/postgres.md`, "Group commit"); a session with none goes to the
/// writer with the fewest appends in flight.
pub(crate) struct Senders {
    channels: Vec<mpsc::Sender<Job>>,
    pins: Arc<Mutex<Pins>>,
}

/// Which writer each session with appends in flight is on, and each writer's load.
struct Pins {
    /// Session → (its writer, its appends in flight).
    sessions: HashMap<Uuid, (usize, usize)>,
    /// Appends in flight per writer.
    load: Vec<usize>,
}

/// One append's hold on its session's writer, released when the request is dropped
/// (after the writer answered it, or when it could not be sent).
pub(crate) struct Pin {
    pins: Arc<Mutex<Pins>>,
    session: Uuid,
    writer: usize,
}

impl Drop for Pin {
    fn drop(&mut self) {
        let mut pins = lock(&self.pins);
        if let Some(load) = pins.load.get_mut(self.writer) {
            *load = load.saturating_sub(1);
        }
        if let Some((_, n)) = pins.sessions.get_mut(&self.session) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                pins.sessions.remove(&self.session);
            }
        }
    }
}

impl Senders {
    /// `writers` channels of `capacity` each, and their receiving ends in order.
    pub(crate) fn new(writers: usize, capacity: usize) -> (Self, Vec<mpsc::Receiver<Job>>) {
        let (channels, receivers): (Vec<_>, Vec<_>) =
            (0..writers.max(1)).map(|_| mpsc::channel(capacity)).unzip();
        let pins = Pins {
            sessions: HashMap::new(),
            load: vec![0; channels.len()],
        };
        (
            Self {
                channels,
                pins: Arc::new(Mutex::new(pins)),
            },
            receivers,
        )
    }

    /// The channel of the writer that commits this append to `session`, and the
    /// append's pin on it: the writer the session's appends in flight are on, else
    /// the one with the fewest appends in flight (the first of those).
    pub(crate) fn route(&self, session: &Uuid) -> (&mpsc::Sender<Job>, Pin) {
        let mut pins = lock(&self.pins);
        let writer = match pins.sessions.get_mut(session) {
            Some((writer, n)) => {
                *n += 1;
                *writer
            }
            None => {
                let writer = pins
                    .load
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, load)| **load)
                    .map_or(0, |(w, _)| w);
                pins.sessions.insert(*session, (writer, 1));
                writer
            }
        };
        if let Some(load) = pins.load.get_mut(writer) {
            *load += 1;
        }
        drop(pins);
        let pin = Pin {
            pins: Arc::clone(&self.pins),
            session: *session,
            writer,
        };
        // `writer` < the number of channels (>= 1) by construction.
        (&self.channels[writer], pin)
    }
}

/// What the writers share: the commit counters.
pub(crate) struct Queue {
    /// Successful batches, for [`CommitStats`].
    pub(super) commits: AtomicU64,
    /// Appends answered by successful batches, for [`CommitStats`].
    pub(super) committed_appends: AtomicU64,
}

impl Queue {
    pub(crate) fn new() -> Self {
        Self {
            commits: AtomicU64::new(0),
            committed_appends: AtomicU64::new(0),
        }
    }

    /// The commit counters of every writer of the journal.
    pub(crate) fn stats(&self) -> CommitStats {
        CommitStats {
            commits: self.commits.load(Ordering::Relaxed),
            appends: self.committed_appends.load(Ordering::Relaxed),
            writer_wakeups: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer_of(senders: &Senders, session: &Uuid) -> (usize, Pin) {
        let (tx, pin) = senders.route(session);
        let index = senders
            .channels
            .iter()
            .position(|c| c.same_channel(tx))
            .unwrap();
        (index, pin)
    }

    #[test]
    fn busy_sessions_spread_evenly_and_stay_on_their_writer() {
        let (senders, _rx) = Senders::new(3, 8);
        let sessions: Vec<Uuid> = (0..8).map(|_| Uuid::new_v4()).collect();
        let mut pins = Vec::new();
        let mut counts = [0; 3];
        let mut first = Vec::new();
        for s in &sessions {
            let (w, pin) = writer_of(&senders, s);
            counts[w] += 1;
            first.push(w);
            pins.push(pin);
        }
        // Whatever their IDs, 8 busy sessions over 3 writers are 3, 3 and 2.
        let mut sorted = counts;
        sorted.sort_unstable();
        assert_eq!(sorted, [2, 3, 3]);
        // While a session has appends in flight, its next ones go to the same writer.
        for _ in 0..5 {
            for (s, w) in sessions.iter().zip(&first) {
                let (again, pin) = writer_of(&senders, s);
                assert_eq!(again, *w);
                pins.push(pin);
            }
        }
        drop(pins);
        // All answered: nothing pinned, no load left.
        let state = lock(&senders.pins);
        assert!(state.sessions.is_empty());
        assert_eq!(state.load, vec![0, 0, 0]);
    }

    #[test]
    fn an_idle_session_goes_to_the_least_busy_writer() {
        let (senders, _rx) = Senders::new(2, 8);
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let (wa, pa1) = writer_of(&senders, &a);
        let (wa2, pa2) = writer_of(&senders, &a);
        assert_eq!(wa, wa2);
        // Writer `wa` has two appends in flight: `b` goes to the other one.
        let (wb, pb) = writer_of(&senders, &b);
        assert_ne!(wb, wa);
        drop((pa1, pa2, pb));
        // Idle again: the first writer takes the next lone append.
        assert_eq!(writer_of(&senders, &b).0, 0);
    }
}
