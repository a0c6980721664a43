//! Adopting orphaned sessions: on every poll interval, and at once when the engine
//! announces a lease released or lost, this host opens sessions whose owner is gone,
//! up to its capacity. When two hosts race for one session the lease decides: the
//! loser's acquisition is refused `Held` and it moves on.

use std::sync::{Arc, Weak};
use tokio::time::Instant;

use notify_journal::JournalLeases;
use notify_types::SessionId;
use tokio::sync::{broadcast, watch};

use super::error::HostError;
use super::inner::Inner;
use super::open::open_session;

/// The adopter task: polls every `adopt_every` and listens to the engine's lease
/// changes, until the host shuts down or is dropped.
pub(crate) async fn run<J: JournalLeases + 'static>(
    host: Weak<Inner<J>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let Some(mut changes) = host.upgrade().and_then(|h| h.journal.lease_changes()) else {
        return poll_only(host, shutdown).await;
    };
    loop {
        let Some(every) = host.upgrade().map(|h| h.options.adopt_every) else {
            return;
        };
        let announced = tokio::select! {
            () = tokio::time::sleep(every) => None,
            change = changes.recv() => match change {
                Ok(session) => Some(session),
                // Missed announcements: the orphans are still there, poll for them.
                Err(broadcast::error::RecvError::Lagged(_)) => None,
                Err(broadcast::error::RecvError::Closed) => break,
            },
            _ = shutdown.wait_for(|down| *down) => return,
        };
        let Some(inner) = host.upgrade() else {
            return;
        };
        match announced {
            Some(session) => adopt_one(&inner, session).await,
            None => adopt_once(&inner).await,
        }
    }
    // The engine stopped announcing: poll alone.
    poll_only(host, shutdown).await;
}

/// The adopter of an engine that announces nothing: polls alone.
async fn poll_only<J: JournalLeases + 'static>(
    host: Weak<Inner<J>>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let Some(every) = host.upgrade().map(|h| h.options.adopt_every) else {
            return;
        };
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = shutdown.wait_for(|down| *down) => return,
        }
        let Some(inner) = host.upgrade() else {
            return;
        };
        adopt_once(&inner).await;
    }
}

/// Adopts the announced `session` if it has room and did not give it up itself
/// lately (then the announcement is its own release, meant for other hosts).
async fn adopt_one<J: JournalLeases + 'static>(inner: &Arc<Inner<J>>, session: SessionId) {
    if inner.table.room(inner.options.capacity) == 0
        || inner
            .table
            .recently_gone(session, Instant::now(), inner.options.readopt_after)
    {
        return;
    }
    log_outcome(session, open_session(inner, session, true).await);
}

/// One poll: adopts orphans up to the room left.
pub(crate) async fn adopt_once<J: JournalLeases + 'static>(inner: &Arc<Inner<J>>) {
    let room = inner.table.room(inner.options.capacity);
    if room == 0 {
        return;
    }
    // Ask for more than the room: some may be ones this host just gave up.
    let orphans = match inner
        .journal
        .orphaned_sessions(room.saturating_mul(2))
        .await
    {
        Ok(orphans) => orphans,
        Err(e) => {
            tracing::warn!(error = %e, "listing orphaned sessions failed");
            return;
        }
    };
    for session in orphans {
        if inner.table.room(inner.options.capacity) == 0 {
            return;
        }
        if inner
            .table
            .recently_gone(session, Instant::now(), inner.options.readopt_after)
        {
            continue;
        }
        log_outcome(session, open_session(inner, session, true).await);
    }
}

fn log_outcome<T>(session: SessionId, outcome: Result<T, HostError>) {
    match outcome {
        Ok(_) => {}
        // Another host won the race, or the session is opening or ended: not an error.
        Err(
            HostError::Held { .. }
            | HostError::Opening { .. }
            | HostError::Ended { .. }
            | HostError::AtCapacity { .. }
            | HostError::ShutDown,
        ) => tracing::debug!(%session, "not adopted"),
        Err(e) => tracing::warn!(%session, error = %e, "adopting the session failed"),
    }
}
