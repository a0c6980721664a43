//! The sessions a host leaves alone for a while: those it gave up or lost (for the
//! re-adoption window, so that another host takes them over) and those whose start
//! failed (for a backoff doubling with each failure in a row, so that a session that
//! cannot start is not retried at every poll by every host).

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use notify_types::SessionId;

/// The most doublings of a failed start's backoff: at most 32 times the base.
const MAX_DOUBLINGS: u32 = 5;

/// One session whose start failed.
#[derive(Debug, Clone, Copy)]
struct Failing {
    /// Failures in a row.
    failures: u32,
    /// Not tried again before this.
    until: Instant,
    /// The backoff that ends at `until`.
    backoff: Duration,
}

/// The sessions a host leaves alone, and until when.
#[derive(Debug, Default)]
pub(crate) struct HoldOff {
    /// Sessions given up or lost, and when.
    gone: HashMap<SessionId, Instant>,
    /// Sessions whose start failed.
    failing: HashMap<SessionId, Failing>,
}

impl HoldOff {
    /// `session` was given up or lost at `now`.
    pub(crate) fn gone(&mut self, session: SessionId, now: Instant) {
        self.gone.insert(session, now);
    }

    /// `session`'s lease was taken here again (its failures, if any, are kept until it
    /// starts).
    pub(crate) fn taken(&mut self, session: SessionId) {
        self.gone.remove(&session);
    }

    /// `session` started: its failures are forgotten.
    pub(crate) fn started(&mut self, session: SessionId) {
        self.failing.remove(&session);
    }

    /// `session`'s start failed at `now`: left alone for `base` doubled once per
    /// earlier failure in a row (at most [`MAX_DOUBLINGS`] times).
    pub(crate) fn failed(&mut self, session: SessionId, now: Instant, base: Duration) {
        let failures = self.failing.get(&session).map_or(0, |f| f.failures) + 1;
        let backoff = base.saturating_mul(1 << (failures - 1).min(MAX_DOUBLINGS));
        self.failing.insert(
            session,
            Failing {
                failures,
                until: now.checked_add(backoff).unwrap_or(now),
                backoff,
            },
        );
    }

    /// Whether `session` is left alone at `now` (`window`: how long one given up or
    /// lost is).
    pub(crate) fn holds(&mut self, session: SessionId, now: Instant, window: Duration) -> bool {
        self.forget_past(now, window);
        self.gone.contains_key(&session)
            || self.failing.get(&session).is_some_and(|f| f.until > now)
    }

    /// How many sessions are left alone at `now`.
    pub(crate) fn count(&mut self, now: Instant, window: Duration) -> usize {
        self.forget_past(now, window);
        let failing = self.failing.values().filter(|f| f.until > now).count();
        self.gone.len() + failing
    }

    /// Forgets what no longer holds: a session given up or lost `window` ago, and a
    /// failing one whose backoff ended a whole backoff ago without another failure
    /// (it started elsewhere, or is no longer listed). Until then a failing session
    /// past its backoff is tried again, and a failure then doubles its backoff.
    fn forget_past(&mut self, now: Instant, window: Duration) {
        self.gone
            .retain(|_, at| now.saturating_duration_since(*at) < window);
        self.failing
            .retain(|_, f| now.saturating_duration_since(f.until) < f.backoff);
    }
}
