//! The leases a host holds, as the host sees them: each one's epoch, when it was last
//! renewed and by when it must be renewed again. The fence, the keeper, the opener and
//! the status all read it.
//!
//! **Architecture Invariant:** a session is in the table exactly while this host may
//! append to it: it is inserted once its lease is acquired and removed (before
//! anything else happens) when the lease is lost, past its deadline, released or the
//! host shuts down. The fence refuses every append for a session that is not in it,
//! or whose deadline has passed.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use notify_types::SessionId;

use crate::session::Session;

/// One lease this host holds.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    /// The session, as handed to the application (cloned out for `session()`).
    pub(crate) session: Session,
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
    /// Sessions this host gave up or lost, and when: not adopted again by this host
    /// for a while, so that another host takes them over.
    gone: HashMap<SessionId, Instant>,
    /// Set once by shutdown: nothing more is opened.
    closed: bool,
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
    /// It is being opened already.
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

    /// Whether this host may append to `session` now: it holds the lease and its
    /// deadline has not passed.
    pub(crate) fn may_append(&self, session: SessionId, now: Instant) -> bool {
        self.lock()
            .held
            .get(&session)
            .is_some_and(|h| h.deadline > now)
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
        if state.opening.contains(&session) {
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
        state.gone.remove(&id);
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

    /// Marks `session` started; `false` if it is no longer held (lost meanwhile).
    pub(crate) fn mark_started(&self, session: SessionId) -> bool {
        match self.lock().held.get_mut(&session) {
            Some(h) => {
                h.started = true;
                true
            }
            None => false,
        }
    }

    /// Removes `session` (the fence closes at once), remembering that this host gave
    /// it up; answers what it held.
    pub(crate) fn remove(&self, session: SessionId, now: Instant) -> Option<Held> {
        let mut state = self.lock();
        let held = state.held.remove(&session)?;
        state.gone.insert(session, now);
        Some(held)
    }

    /// Records a successful renewal of `session` under `epoch` that started at
    /// `started`; `false` if the table holds another epoch (or no lease) for it.
    pub(crate) fn renewed(
        &self,
        session: SessionId,
        epoch: u64,
        started: Instant,
        keep_for: Duration,
    ) -> bool {
        match self.lock().held.get_mut(&session) {
            Some(h) if h.epoch == epoch => {
                if started > h.renewed {
                    h.renewed = started;
                    h.deadline = started + keep_for;
                }
                true
            }
            _ => false,
        }
    }

    /// Whether `session` is held or being opened here.
    pub(crate) fn knows(&self, session: SessionId) -> bool {
        let state = self.lock();
        state.held.contains_key(&session) || state.opening.contains(&session)
    }

    /// Closes the fence on `session` at once (its deadline is now), ahead of its stop.
    pub(crate) fn fence_off(&self, session: SessionId) {
        if let Some(h) = self.lock().held.get_mut(&session) {
            h.deadline = Instant::now();
        }
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

    /// Whether this host gave `session` up or lost it less than `window` ago.
    pub(crate) fn recently_gone(&self, session: SessionId, now: Instant, window: Duration) -> bool {
        let mut state = self.lock();
        state.gone.retain(|_, at| now.duration_since(*at) < window);
        state.gone.contains_key(&session)
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
