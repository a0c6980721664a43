//! Shutting a host down, cooperatively and within a bound: nothing more opens, every
//! session held (those being opened too) is fenced off at once and then stopped,
//! many at a time, and its lease released; the background tasks (and the stops the
//! keeper began) finish the step they are in, and whatever is still running when the
//! shutdown grace has passed (counted from the start of shutdown) is cut short: a
//! task is aborted (then the leases it may have left are released), a stop still
//! waiting (for an append in flight, a loop, or a release waiting for a lock another
//! transaction holds) is abandoned and its lease left to expire. The application is
//! told of every session it started, a stop cut short included.
//!
//! **Architecture Invariant:** when shutdown returns, no session is served here, no
//! loop a stopped session registered here still runs (unless the application
//! registers one after its session was stopped and its open was aborted past the
//! grace, or shutting a loop took past the grace), and every lease this host's
//! journal handle held was released, or its release failed (reported) or was cut
//! short by the grace (left to expire); no background task of the host runs. It
//! returns within the grace plus one renewal interval (the listing and the releases
//! of the leases left) and the aborted tasks' own unwinding.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use notify_journal::{JournalLeases, LeaseError};

use super::app::StopReason;
use super::inner::{Inner, PARALLEL_STOPS, Task};
use super::stop::{begin_stop, finish_stop};
use crate::session::Session;

/// Shuts the host down (see [`SessionHost::shutdown`](crate::SessionHost::shutdown));
/// answers the first release that failed. A second shutdown (from a clone of the
/// handle) waits for the first to finish, then answers `Ok`.
pub(crate) async fn shut_down<J: JournalLeases + 'static>(
    inner: &Arc<Inner<J>>,
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
    // the loops the application registered. Every fence closes first, at once; the
    // stops then run many at a time, each cut short at the deadline (the session is
    // no longer served here, the application is told, its lease expires).
    let mut stopped: Vec<Session> = Vec::new();
    let mut stops = JoinSet::new();
    let permits = Arc::new(Semaphore::new(PARALLEL_STOPS));
    for session in held {
        let Some(stopping) = begin_stop(inner, session, StopReason::ShutDown) else {
            continue;
        };
        stopped.push(stopping.handle());
        let (inner, permits) = (Arc::clone(inner), Arc::clone(&permits));
        stops.spawn(async move {
            let stop = async {
                let _permit = permits.acquire().await;
                finish_stop(&inner, stopping).await
            };
            match tokio::time::timeout_at(deadline, stop).await {
                Ok(released) => released,
                Err(_) => {
                    tracing::warn!(%session, "stopping the session took past the shutdown grace: its lease is left to expire");
                    Ok(())
                }
            }
        });
    }
    let mut first = None;
    while let Some(stop) = stops.join_next().await {
        if let Ok(Err(e)) = stop {
            first.get_or_insert(e);
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
    // The keeper's stops (and stray releases) in flight: each finishes, or is cut
    // short at the deadline (the application is told all the same).
    let keepers = std::mem::take(&mut *inner.stops.lock().unwrap_or_else(|p| p.into_inner()));
    aborted |= join(
        keepers
            .into_iter()
            .map(|handle| Task {
                handle,
                abort_at_once: false,
            })
            .collect(),
        deadline,
    )
    .await;
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
async fn release_strays<J: JournalLeases + 'static>(
    inner: &Arc<Inner<J>>,
) -> Result<(), LeaseError> {
    // The listing and the releases together take at most one renewal interval.
    let until = Instant::now() + inner.options.renew_every.max(Duration::from_millis(1));
    let renewal = match tokio::time::timeout_at(until, inner.journal.renew_leases()).await {
        Ok(renewal) => renewal?,
        Err(_) => {
            tracing::warn!("listing the leases left after shutdown timed out");
            return Ok(());
        }
    };
    let permits = Arc::new(Semaphore::new(PARALLEL_STOPS));
    let mut releases = JoinSet::new();
    for lease in renewal.renewed {
        let (inner, permits) = (Arc::clone(inner), Arc::clone(&permits));
        releases.spawn(async move {
            let _permit = permits.acquire().await;
            inner.journal.release_lease(lease.session()).await
        });
    }
    let mut first = Ok(());
    loop {
        match tokio::time::timeout_at(until, releases.join_next()).await {
            Ok(Some(Ok(Err(e)))) if first.is_ok() => first = Err(e),
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(_) => {
                tracing::warn!("releasing the leases left after shutdown timed out: they expire");
                releases.shutdown().await;
                break;
            }
        }
    }
    first
}
