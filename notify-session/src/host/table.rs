//! The leases a host holds, as the host sees them: each one's placement (a generation
//! unique to one open), epoch, when it was last renewed and by when it must be renewed
//! again. The fences, the consumers, the keeper, the opener and the status all read it.
//!
//! **Architecture Invariant:** a placement is in the table exactly while this host may
//! append to its session: it is inserted once its lease is acquired and removed
//! (before anything else happens) when the lease is lost, past its deadline, released
//! or the host shuts down. A placement's fence refuses every append unless that very
//! placement (not merely its session) is in the table with its deadline ahead, and a
//! deadline once passed is never moved again: the session is stopped, however a
//! renewal answers afterwards.
//!
//! **Architecture Invariant:** a session whose stop has begun is not opened here again
//! until that stop has told the application and, for a placement stopped before it
//! started, until its open has returned: the application hears a placement's stop
//! before the next one's start, and the stop's release (under the same holder) never
//! releases the next placement's lease. A stopping session is known to the keeper, so
//! a renewal never releases it as a stray either.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use notify_types::SessionId;

use super::holdoff::HoldOff;
use crate::session::Session;

/// One lease this host holds.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    /// The session, as handed to the application (cloned out for `session()`).
    pub(crate) session: Session,
    /// The placement: unique to this open of the session on this host (a handle from
    /// an earlier placement is refused by its fence).
    pub(crate) generation: u64,
    /// The lease's epoch.
    pub(crate) epoch: u64,
    /// When the last successful renewal (or the acquisition) started.
    pub(crate) renewed: Instant,
    /// When the host stops serving the session unless a renewal succeeds first:
    /// `renewed + lease_duration - margin`.
    pub(crate) deadline: Instant,
    /// Whether the application has started it (false while it is being opened).
    pub(crate) started: bool,
}

#[derive(Debug, Default)]
struct State {
    held: HashMap<SessionId, Held>,
    /// Sessions being opened (lease being acquired, restore, application start).
    opening: HashSet<SessionId>,
    /// Sessions whose stop has begun and not finished (appends in flight, loops,
    /// release, telling the application): not opened again until it has.
    stopping: HashMap<SessionId, Stopping>,
    /// Sessions this host leaves alone for a while (given up, lost, failing to start).
    hold_off: HoldOff,
    /// The last placement generation handed out.
    generation: u64,
    /// Set once by shutdown: nothing more is opened.
    closed: bool,
}

/// A stop under way, of placement `generation`. It ends once the stop has finished
/// and, for a placement stopped before it started, once its open has given up too
/// (the open goes on until it sees the stop: the application must not hear of that
/// placement after the next one started).
#[derive(Debug, Clone, Copy)]
struct Stopping {
    generation: u64,
    stop_done: bool,
    open_done: bool,
}

/// A host's leases.
#[derive(Debug, Default)]
pub(crate) struct LeaseTable {
    state: Mutex<State>,
}

/// Why [`LeaseTable::begin_open`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BeginRefusal {
    /// The session is held here already.
    Held,
    /// It is being opened already, or its last placement here is still stopping.
    Opening,
    /// The host is at capacity.
    Full,
    /// The host is shut down.
    Closed,
}

impl LeaseTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether placement `generation` of `session` may append now: it is the
    /// placement held here and its deadline has not passed.
    pub(crate) fn may_append(&self, session: SessionId, generation: u64, now: Instant) -> bool {
        self.lock()
            .held
            .get(&session)
            .is_some_and(|h| h.generation == generation && h.deadline > now)
    }

    /// A new placement generation, for a session about to be opened.
    pub(crate) fn next_generation(&self) -> u64 {
        let mut state = self.lock();
        state.generation += 1;
        state.generation
    }

    /// Reserves a place for opening `session`, within `capacity`.
    pub(crate) fn begin_open(
        &self,
        session: SessionId,
        capacity: usize,
    ) -> Result<(), BeginRefusal> {
        let mut state = self.lock();
        if state.closed {
            return Err(BeginRefusal::Closed);
        }
        if state.held.contains_key(&session) {
            return Err(BeginRefusal::Held);
        }
        // A placement still stopping would tell the application it stopped after the
        // new one started, and its appends in flight could still commit.
        if state.opening.contains(&session) || state.stopping.contains_key(&session) {
            return Err(BeginRefusal::Opening);
        }
        if state.held.len() + state.opening.len() >= capacity {
            return Err(BeginRefusal::Full);
        }
        state.opening.insert(session);
        Ok(())
    }

    /// Ends an open that failed before the lease was recorded.
    pub(crate) fn abort_open(&self, session: SessionId) {
        self.lock().opening.remove(&session);
    }

    /// Records the lease of a session being opened (not started yet); `false` (and
    /// nothing recorded) once the host is shut down.
    pub(crate) fn insert(&self, held: Held) -> bool {
        let mut state = self.lock();
        let id = held.session.id();
        state.opening.remove(&id);
        if state.closed {
            return false;
        }
        state.hold_off.taken(id);
        state.held.insert(id, held);
        true
    }

    /// The sessions held here whose session has ended (through `Session::end`).
    pub(crate) fn ended(&self) -> Vec<SessionId> {
        self.lock()
            .held
            .iter()
            .filter(|(_, h)| h.started && h.session.shared.is_ended())
            .map(|(id, _)| *id)
            .collect()
    }

    /// Marks placement `generation` of `session` started; `false` if it is no longer
    /// held (lost or stopped meanwhile).
    pub(crate) fn mark_started(&self, session: SessionId, generation: u64) -> bool {
        let mut state = self.lock();
        match state.held.get_mut(&session) {
            Some(h) if h.generation == generation => {
                h.started = true;
                state.hold_off.started(session);
                true
            }
            _ => false,
        }
    }

    /// Removes `session` (the fence closes at once), remembering that this host gave
    /// it up; answers what it held.
    pub(crate) fn remove(&self, session: SessionId, now: Instant) -> Option<Held> {
        let mut state = self.lock();
        let held = state.held.remove(&session)?;
        state.hold_off.gone(session, now);
        Some(held)
    }

    /// [`remove`](Self::remove) for a stop: `session` is not opened again here until
    /// [`stopped`](Self::stopped).
    pub(crate) fn begin_stop(&self, session: SessionId, now: Instant) -> Option<Held> {
        let mut state = self.lock();
        let held = state.held.remove(&session)?;
        state.hold_off.gone(session, now);
        state.stopping.insert(
            session,
            Stopping {
                generation: held.generation,
                stop_done: false,
                open_done: held.started,
            },
        );
        Some(held)
    }

    /// The stop of placement `generation` begun by [`begin_stop`](Self::begin_stop) has
    /// finished: `session` may be opened here again, unless that placement's open is
    /// still going on.
    pub(crate) fn stopped(&self, session: SessionId, generation: u64) {
        self.end_stopping(session, generation, |s| s.stop_done = true);
    }

    /// The open of placement `generation` has returned: if that placement was stopped
    /// before it started, `session` may be opened here again once the stop finished.
    pub(crate) fn open_returned(&self, session: SessionId, generation: u64) {
        self.end_stopping(session, generation, |s| s.open_done = true);
    }

    fn end_stopping(&self, session: SessionId, generation: u64, done: impl FnOnce(&mut Stopping)) {
        let mut state = self.lock();
        if let Some(s) = state.stopping.get_mut(&session)
            && s.generation == generation
        {
            done(s);
            if s.stop_done && s.open_done {
                state.stopping.remove(&session);
            }
        }
    }

    /// Records a successful renewal of `session` under `epoch` that started at
    /// `started`; `false` if the table holds another epoch (or no lease) for it. A
    /// deadline already passed is not moved: that session is being stopped.
    pub(crate) fn renewed(
        &self,
        session: SessionId,
        epoch: u64,
        started: Instant,
        keep_for: Duration,
    ) -> bool {
        match self.lock().held.get_mut(&session) {
            Some(h) if h.epoch == epoch => {
                if started > h.renewed && h.deadline > Instant::now() {
                    h.renewed = started;
                    h.deadline = started + keep_for;
                }
                true
            }
            _ => false,
        }
    }

    /// Whether `session` is held, being opened or being stopped here.
    pub(crate) fn knows(&self, session: SessionId) -> bool {
        let state = self.lock();
        state.held.contains_key(&session)
            || state.opening.contains(&session)
            || state.stopping.contains_key(&session)
    }

    /// The sessions whose deadline has passed at `now`.
    pub(crate) fn overdue(&self, now: Instant) -> Vec<SessionId> {
        self.lock()
            .held
            .iter()
            .filter(|(_, h)| h.deadline <= now)
            .map(|(id, _)| *id)
            .collect()
    }

    /// The earliest deadline of the leases held, if any.
    pub(crate) fn earliest_deadline(&self) -> Option<Instant> {
        self.lock().held.values().map(|h| h.deadline).min()
    }

    /// The lease held on `session`, if any.
    pub(crate) fn get(&self, session: SessionId) -> Option<Held> {
        self.lock().held.get(&session).cloned()
    }

    /// Every lease held (started or being opened).
    pub(crate) fn all(&self) -> Vec<(SessionId, Held)> {
        self.lock()
            .held
            .iter()
            .map(|(id, h)| (*id, h.clone()))
            .collect()
    }

    /// How many leases are held.
    pub(crate) fn len(&self) -> usize {
        self.lock().held.len()
    }

    /// How many more sessions fit within `capacity`.
    pub(crate) fn room(&self, capacity: usize) -> usize {
        let state = self.lock();
        capacity.saturating_sub(state.held.len() + state.opening.len())
    }

    /// Whether this host leaves `session` alone at `now`: it gave it up or lost it
    /// less than `window` ago, or its start failed and its backoff has not passed.
    pub(crate) fn held_off(&self, session: SessionId, now: Instant, window: Duration) -> bool {
        self.lock().hold_off.holds(session, now, window)
    }

    /// How many sessions this host leaves alone at `now` (see [`held_off`](Self::held_off)).
    pub(crate) fn held_off_count(&self, now: Instant, window: Duration) -> usize {
        self.lock().hold_off.count(now, window)
    }

    /// Records a failed start of `session` at `now`: it is left alone for a backoff
    /// that doubles with each failure in a row, from `base`.
    pub(crate) fn start_failed(&self, session: SessionId, now: Instant, base: Duration) {
        self.lock().hold_off.failed(session, now, base);
    }

    /// Refuses every later open; answers the sessions held now.
    pub(crate) fn close(&self) -> Vec<SessionId> {
        let mut state = self.lock();
        state.closed = true;
        state.held.keys().copied().collect()
    }

    /// Whether the host is shut down.
    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(session: SessionId, generation: u64, started: bool) -> Held {
        let now = Instant::now();
        Held {
            session: Session::headless(session),
            generation,
            epoch: 1,
            renewed: now,
            deadline: now + Duration::from_secs(60),
            started,
        }
    }

    /// A started placement's stop: the session is known (a renewal that finds its lease
    /// does not release it as a stray) and not opened again until the stop finished.
    #[test]
    fn a_stopping_session_is_known_and_not_opened_until_its_stop_finished() {
        let table = LeaseTable::default();
        let id = SessionId::new();
        assert_eq!(table.begin_open(id, 8), Ok(()));
        assert!(table.insert(held(id, 1, true)));
        assert!(table.begin_stop(id, Instant::now()).is_some());
        assert!(table.knows(id), "a stopping session is known");
        assert_eq!(table.begin_open(id, 8), Err(BeginRefusal::Opening));
        // Another placement's end changes nothing.
        table.stopped(id, 2);
        assert_eq!(table.begin_open(id, 8), Err(BeginRefusal::Opening));
        table.stopped(id, 1);
        assert!(!table.knows(id));
        assert_eq!(table.begin_open(id, 8), Ok(()));
    }

    /// A placement stopped before it started: its open goes on until it sees the stop,
    /// so the session is opened again only once both the stop finished and the open
    /// returned; the open cannot mark the next placement started.
    #[test]
    fn a_placement_stopped_before_it_started_waits_for_its_open() {
        let table = LeaseTable::default();
        let id = SessionId::new();
        assert_eq!(table.begin_open(id, 8), Ok(()));
        assert!(table.insert(held(id, 1, false)));
        assert!(table.begin_stop(id, Instant::now()).is_some());
        table.stopped(id, 1);
        assert_eq!(
            table.begin_open(id, 8),
            Err(BeginRefusal::Opening),
            "its open is still going on"
        );
        assert!(!table.mark_started(id, 1), "stopped: not started");
        table.open_returned(id, 1);
        assert_eq!(table.begin_open(id, 8), Ok(()));
        assert!(table.insert(held(id, 2, false)));
        assert!(!table.mark_started(id, 1), "an earlier placement's open");
        assert!(table.mark_started(id, 2));
    }
}
