//! Stopping a session on this host: close its fence, refuse new work, wait out the
//! appends in flight, shut its loops, release its lease (unless lost) and tell the
//! application.
//!
//! A stop has two steps: [`begin_stop`], which closes the fence and refuses new work
//! at once (no await), and [`finish_stop`], which waits for what is in flight, shuts
//! the loops, releases the lease and tells the application. The keeper runs the
//! second step as a task of its own ([`spawn_stop`]), so that no stop holds a renewal
//! back. The application is told exactly once per session it started, even when the
//! second step is cut short (a shutdown's grace, an abort): then as the [`Stopping`]
//! is dropped.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use notify_journal::{JournalLeases, LeaseError};
use notify_types::{SessionId, Uuid};

use super::app::{HostApp, StopReason};
use super::inner::Inner;
use super::metrics;
use super::table::{Held, LeaseTable};

/// A session whose stop has begun: fenced off and refusing new work, its loops not
/// shut yet. Dropped before [`finish_stop`] told the application, it tells it then.
pub(crate) struct Stopping {
    pub(crate) session: SessionId,
    held: Held,
    why: StopReason,
    app: Arc<dyn HostApp>,
    table: Arc<LeaseTable>,
    told: bool,
}

impl Stopping {
    /// The session's handle.
    pub(crate) fn handle(&self) -> crate::session::Session {
        self.held.session.clone()
    }

    /// Names the holder that took the session over: in the reason the application is
    /// told, and in every `NotOwner` the session answers from here on.
    fn learn_owner(&mut self, owner: Uuid) {
        self.why = StopReason::LeaseLost { owner: Some(owner) };
        self.held.session.shared.learn_owner(owner);
    }

    /// Tells the application (once, and only of a session it started), then lets the
    /// session be opened here again.
    fn tell(&mut self) {
        if self.told {
            return;
        }
        self.told = true;
        if self.held.started {
            self.app.stopped(self.session, self.why);
        }
        self.table.stopped(self.session, self.held.generation);
    }
}

impl Drop for Stopping {
    fn drop(&mut self) {
        self.tell();
    }
}

/// Begins stopping `session` for `why`: from here no append of this placement
/// reaches the journal, new notifications are refused and consumers receive nothing
/// more. `None` if the session is not served here.
pub(crate) fn begin_stop<J: JournalLeases + 'static>(
    inner: &Inner<J>,
    session: SessionId,
    why: StopReason,
) -> Option<Stopping> {
    // First the fence: from here no append of this host reaches the journal. Nor is
    // the session opened here again until the application is told.
    let held = inner.table.begin_stop(session, Instant::now())?;
    metrics::leases_held(inner.table.len());
    let owner = match why {
        StopReason::LeaseLost { owner } => owner,
        _ => None,
    };
    held.session.shared.stop_by_host(owner);
    Some(Stopping {
        session,
        held,
        why,
        app: Arc::clone(&inner.app),
        table: Arc::clone(&inner.table),
        told: false,
    })
}

/// Finishes a stop: waits out the appends in flight, shuts the loops, releases the
/// lease unless it was lost, and tells the application; answers the release's error
/// (the session is stopped here all the same).
pub(crate) async fn finish_stop<J: JournalLeases + 'static>(
    inner: &Inner<J>,
    mut stopping: Stopping,
) -> Result<(), LeaseError> {
    let session = stopping.session;
    let shared = Arc::clone(&stopping.held.session.shared);
    // Every notify, publish or ack that checked the stop before it was set holds the
    // end gate for reading through its append: taking it for writing waits them out.
    drop(shared.end_gate.write().await);
    for loop_id in stopping.held.session.loops() {
        stopping.held.session.shutdown_loop(loop_id).await;
    }
    let released = match stopping.why {
        StopReason::LeaseLost { .. } => Ok(()),
        _ => {
            let released = inner.journal.release_lease(session).await;
            if released.is_ok() {
                metrics::released();
            }
            released
        }
    };
    stopping.tell();
    tracing::info!(%session, why = %stopping.why, "host stopped serving the session");
    released
}

/// Stops serving `session` here for `why`, both steps in one; releases the lease
/// unless it was lost. Answers `Ok(false)` if the session was not served here, and
/// the release's error if it failed (the session is stopped here all the same).
pub(crate) async fn stop_session<J: JournalLeases + 'static>(
    inner: &Inner<J>,
    session: SessionId,
    why: StopReason,
) -> Result<bool, LeaseError> {
    match begin_stop(inner, session, why) {
        Some(stopping) => finish_stop(inner, stopping).await.map(|()| true),
        None => Ok(false),
    }
}

/// Begins stopping `session` now and finishes in a task of its own, recorded among
/// the host's stops (shutdown waits for them): the caller, the keeper, goes on with
/// its round. A lease lost (`lost`: a renewal found it lost, or it is past its
/// deadline) is looked up first, bounded by `lookup`, to name the holder that took
/// it.
pub(crate) fn spawn_stop<J: JournalLeases + 'static>(
    inner: &Arc<Inner<J>>,
    session: SessionId,
    why: StopReason,
    lookup: Option<Duration>,
) {
    let Some(mut stopping) = begin_stop(inner, session, why) else {
        return;
    };
    let task = {
        let inner = Arc::clone(inner);
        tokio::spawn(async move {
            // At most a few stops at once: each waits on the journal.
            let _permit = inner.stop_permits.acquire().await;
            if let Some(bound) = lookup
                && let Some(owner) = holder_now(&inner, session, bound).await
            {
                stopping.learn_owner(owner);
            }
            let _ = finish_stop(&inner, stopping).await;
        })
    };
    inner.track_stop(task);
}

/// The holder of `session`'s live lease if it is another than this host, as the
/// engine answers within `bound`.
async fn holder_now<J: JournalLeases + 'static>(
    inner: &Inner<J>,
    session: SessionId,
    bound: Duration,
) -> Option<Uuid> {
    let me = inner.journal.holder_id();
    match tokio::time::timeout(bound, inner.journal.lease_info(session)).await {
        Ok(Ok(info)) if info.live => info.holder.filter(|h| *h != me),
        _ => None,
    }
}
