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

/// The writers' channels: one per writer. A session with appends in flight (routed
/// and not yet answered) stays on the writer it is pinned to ([`Senders::route`]),
/// so that no two writers of this journal ever hold batches that touch the same
/// session row (see `docs/postgres.md`, "Group commit"); a session with none goes to
/// the live writer with the fewest appends in flight.
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
    /// the live writer (its task still running) with the fewest appends in flight
    /// (the first of those).
    ///
    /// A session stays on its writer even if that writer's task ended: its appends
    /// in flight there have failed, and so does this one (the send fails, the
    /// journal says [`AppendError::Poisoned`]), so no two writers ever hold appends
    /// of one session at once. Once they are all answered (dropped with the dead
    /// writer's queue) the session is idle and its next append goes to a live writer.
    pub(crate) fn route(&self, session: &Uuid) -> (&mpsc::Sender<Job>, Pin) {
        let mut pins = lock(&self.pins);
        let writer = match pins.sessions.get_mut(session) {
            Some((writer, n)) => {
                *n += 1;
                *writer
            }
            None => {
                // A writer whose task ended (its receiver is gone) has no load left
                // and would come first: skip it while a live one exists. With none
                // alive, any channel will do: the send fails and says why.
                let least_busy = |live: bool| {
                    pins.load
                        .iter()
                        .enumerate()
                        .filter(|(w, _)| {
                            !live || self.channels.get(*w).is_some_and(|c| !c.is_closed())
                        })
                        .min_by_key(|(_, load)| **load)
                        .map(|(w, _)| w)
                };
                let writer = least_busy(true).or_else(|| least_busy(false)).unwrap_or(0);
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

    #[test]
    fn an_idle_session_never_goes_to_a_dead_writer_while_a_live_one_exists() {
        let (senders, mut rx) = Senders::new(3, 8);
        let busy = Uuid::new_v4();
        let (w0, busy_pin) = writer_of(&senders, &busy);
        let (w1, p1) = writer_of(&senders, &Uuid::new_v4());
        let (w2, p2) = writer_of(&senders, &Uuid::new_v4());
        assert_eq!((w0, w1, w2), (0, 1, 2));
        // Writer 0's task ends: its receiver is dropped.
        drop(rx.remove(0));
        // While `busy` has an append in flight there, its next one goes there too
        // (and its send fails): never two writers for one session.
        let (again, again_pin) = writer_of(&senders, &busy);
        assert_eq!(again, 0);
        assert!(senders.channels[0].is_closed());
        // Its appends answered (dropped with the dead writer's queue), writer 0 has
        // no load left and would come first; idle sessions, `busy` included, go to
        // the live writers only, by load.
        drop((busy_pin, again_pin));
        let mut pins = vec![p1, p2];
        let idle = std::iter::once(busy).chain((0..5).map(|_| Uuid::new_v4()));
        for session in idle {
            let (w, pin) = writer_of(&senders, &session);
            assert_ne!(w, 0, "an idle session was routed to the dead writer");
            pins.push(pin);
        }
        assert_eq!(lock(&senders.pins).load, vec![0, 4, 4]);
        // Every writer dead: routing still answers, with a channel whose send fails.
        drop(pins);
        rx.clear();
        assert!(senders.channels.iter().all(mpsc::Sender::is_closed));
        let (w, _pin) = writer_of(&senders, &Uuid::new_v4());
        assert_eq!(w, 0);
    }
}
