//! Shutting a host down, cooperatively and within a bound: nothing more opens, every
//! session held (those being opened too) is stopped and its lease released, the
//! background tasks finish the step they are in, and whatever is still running when
//! the shutdown grace has passed (counted from the start of shutdown) is cut short:
//! a task is aborted (then the leases it may have left are released), a stop still
//! waiting (for an append in flight, a loop, or a release waiting for a lock another
//! transaction holds) is abandoned and its lease left to expire.
//!
//! **Architecture Invariant:** when shutdown returns, no session is served here, no
//! loop a stopped session registered here still runs (unless the application
//! registers one after its session was stopped and its open was aborted past the
//! grace, or shutting a loop took past the grace), and every lease this host's
//! journal handle held was released, or its release failed (reported) or was cut
//! short by the grace (left to expire); no background task of the host runs. It
//! returns within the grace plus one renewal interval (the listing of the leases
//! left) and the aborted tasks' own unwinding.

use std::time::Duration;

use tokio::time::Instant;

use notify_journal::{JournalLeases, LeaseError};

use super::app::StopReason;
use super::inner::{Inner, Task};
use super::stop::stop_session;
use crate::session::Session;

/// Shuts the host down (see [`SessionHost::shutdown`](crate::SessionHost::shutdown));
/// answers the first release that failed. A second shutdown (from a clone of the
/// handle) waits for the first to finish, then answers `Ok`.
pub(crate) async fn shut_down<J: JournalLeases + 'static>(
    inner: &Inner<J>,
) -> Result<(), LeaseError> {
    let mut done = inner.shutdown_done.lock().await;
    if *done {
        return Ok(());
    }
    let deadline = deadline_after(inner.options.shutdown_grace);
    // Nothing more opens (an open in flight finds its lease refused a place in the
    // table and releases it); the tasks end at their next step.
    let held = inner.table.close();
    let _ = inner.shutdown.send(true);
    let tasks = std::mem::take(&mut *inner.tasks.lock().unwrap_or_else(|p| p.into_inner()));
    // Stop every session held, including one whose open is in flight: its lease is
    // released now, and the open, when it goes on, finds its session gone and shuts
    // the loops the application registered.
    let mut first = None;
    let mut stopped: Vec<Session> = Vec::new();
    for session in held {
        if let Some(h) = inner.table.get(session) {
            stopped.push(h.session);
        }
        // Removed from the table (fenced) at its first step: cut short, the session
        // is no longer served here and its lease expires.
        match tokio::time::timeout_at(deadline, stop_session(inner, session, StopReason::ShutDown))
            .await
        {
            Ok(Err(e)) => {
                first.get_or_insert(e);
            }
            Ok(Ok(_)) => {}
            Err(_) => {
                tracing::warn!(%session, "stopping the session took past the shutdown grace: its lease is left to expire");
            }
        }
    }
    let mut aborted = join(tasks, deadline).await;
    // The adopter's opens, which outlive it when it is aborted: none may go on past
    // shutdown.
    let opens = std::mem::take(&mut *inner.opens.lock().unwrap_or_else(|p| p.into_inner()));
    let opens = opens.into_iter().map(|handle| Task {
        handle,
        abort_at_once: false,
    });
    aborted |= join(opens.collect(), deadline).await;
    // Loops registered by an open cut short after its session was stopped.
    for session in &stopped {
        for loop_id in session.loops() {
            if tokio::time::timeout_at(deadline, session.shutdown_loop(loop_id))
                .await
                .is_err()
            {
                tracing::warn!(session = %session.id(), "shutting a loop took past the shutdown grace");
            }
        }
    }
    if aborted {
        // An open aborted between taking a lease and recording it leaves the lease
        // held by this handle and known to no one: the engine names it among the
        // leases it renews for this handle; release them all.
        if let Err(e) = release_strays(inner).await {
            first.get_or_insert(e);
        }
    }
    *done = true;
    first.map_or(Ok(()), Err)
}

/// `grace` from now, or a far future if that is past what an instant can hold
/// (`Duration::MAX`: wait as long as it takes).
fn deadline_after(grace: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(grace)
        .or_else(|| now.checked_add(FAR_FUTURE))
        .unwrap_or(now)
}

/// What "wait as long as it takes" means to a deadline: about thirty years.
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// Waits for `tasks` to end until `deadline`, aborting the ones that may stop at any
/// point at once and the others past the deadline; `true` if any was aborted in the
/// middle of its work.
async fn join(tasks: Vec<Task>, deadline: Instant) -> bool {
    let mut aborted = false;
    for task in tasks {
        let mut handle = task.handle;
        if task.abort_at_once {
            handle.abort();
            let _ = handle.await;
            continue;
        }
        if tokio::time::timeout_at(deadline, &mut handle)
            .await
            .is_err()
        {
            tracing::warn!("a host task did not finish its step within the shutdown grace");
            handle.abort();
            let _ = handle.await;
            aborted = true;
        }
    }
    aborted
}

/// Releases every lease the engine still holds for this host's handle.
async fn release_strays<J: JournalLeases + 'static>(inner: &Inner<J>) -> Result<(), LeaseError> {
    let bound = inner.options.renew_every.max(Duration::from_millis(1));
    let renewal = match tokio::time::timeout(bound, inner.journal.renew_leases()).await {
        Ok(renewal) => renewal?,
        Err(_) => {
            tracing::warn!("listing the leases left after shutdown timed out");
            return Ok(());
        }
    };
    let mut first = Ok(());
    for lease in renewal.renewed {
        if let Err(e) = inner.journal.release_lease(lease.session()).await
            && first.is_ok()
        {
            first = Err(e);
        }
    }
    first
}
