//! What a host reports about itself: the sessions it serves and each one's lease.

use std::time::Duration;

use tokio::time::Instant;

use notify_types::{SessionId, Uuid};

use super::table::LeaseTable;

/// One session a host serves, as [`SessionHost::status`](crate::SessionHost::status)
/// reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionStatus {
    /// The session.
    pub session: SessionId,
    /// Its lease's epoch.
    pub epoch: u64,
    /// Time since the last successful renewal (or the acquisition) started.
    pub since_renewal: Duration,
    /// Time left before the host stops serving the session unless a renewal
    /// succeeds (its lease's end by this host's clock, less the safety margin).
    pub time_left: Duration,
    /// Notifications handed to its loops here (seeded or accepted) and not yet
    /// acknowledged.
    pub pending: u64,
    /// Whether the application has started it (false while it is being opened).
    pub started: bool,
}

/// A host's health: who it is and the sessions it serves, in session ID order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostStatus {
    /// The host's identity as a lease holder.
    pub holder: Uuid,
    /// Its capacity.
    pub capacity: usize,
    /// Whether it has been shut down.
    pub shut_down: bool,
    /// The sessions it serves.
    pub sessions: Vec<SessionStatus>,
}

/// The status of `table` now.
pub(crate) fn snapshot(table: &LeaseTable, holder: Uuid, capacity: usize) -> HostStatus {
    let now = Instant::now();
    let mut sessions: Vec<SessionStatus> = table
        .all()
        .into_iter()
        .map(|(session, held)| SessionStatus {
            session,
            epoch: held.epoch,
            since_renewal: now.saturating_duration_since(held.renewed),
            time_left: held.deadline.saturating_duration_since(now),
            pending: held.session.shared.pending(),
            started: held.started,
        })
        .collect();
    sessions.sort_by_key(|s| s.session);
    HostStatus {
        holder,
        capacity,
        shut_down: table.is_closed(),
        sessions,
    }
}
