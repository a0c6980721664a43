//! Shutting a host down, cooperatively and within a bound: nothing more opens, every
//! session held (those being opened too) is stopped and its lease released, the
//! background tasks finish the step they are in, and only a task still running after
//! the shutdown grace is aborted (then what it may have left is cleaned up).
//!
//! **Architecture Invariant:** when shutdown returns, no session is served here, no
//! loop a stopped session registered here still runs (unless the application
//! registers one after its session was stopped and its open was aborted past the
//! grace), and every lease this host's journal handle held was released (or its
//! release failed and was reported); no background task of the host runs.

use std::time::Duration;

use tokio::time::Instant;

use notify_journal::{JournalLeases, LeaseError};

use super::app::StopReason;
use super::inner::{Inner, Task};
use super::stop::stop_session;
use crate::session::Session;

/// Shuts the host down (see [`SessionHost::shutdown`](crate::SessionHost::shutdown));
/// answers the first release that failed.
pub(crate) async fn shut_down<J: JournalLeases + 'static>(
    inner: &Inner<J>,
) -> Result<(), LeaseError> {
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
        if let Err(e) = stop_session(inner, session, StopReason::ShutDown).await {
            first.get_or_insert(e);
        }
    }
    let aborted = join(tasks, Instant::now() + inner.options.shutdown_grace).await;
    // A stop the keeper or an open left undone when aborted (none otherwise).
    for (session, h) in inner.table.all() {
        stopped.push(h.session);
        if let Err(e) = stop_session(inner, session, StopReason::ShutDown).await {
            first.get_or_insert(e);
        }
    }
    // Loops registered by an open cut short after its session was stopped.
    for session in &stopped {
        for loop_id in session.loops() {
            session.shutdown_loop(loop_id).await;
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
    first.map_or(Ok(()), Err)
}

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
