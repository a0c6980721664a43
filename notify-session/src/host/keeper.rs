//! Keeping a host's leases: one renewal of all of them per interval, the deadline of
//! each, and stopping a session at once when its lease is lost or its deadline
//! passes.
//!
//! **Architecture Invariant:** a host renews its leases with one
//! `JournalLeases::renew_leases` call per interval, whatever their number; rounds are
//! scheduled from the start of the previous one, a failed round is retried after a
//! quarter of the interval, and no renewal runs past the earliest deadline. The
//! keeper also wakes at the earliest deadline: a session whose renewal reports it
//! lost, or whose last successful renewal started more than the lease duration less
//! the safety margin ago, is fenced off then (no await first) and its stop runs as a
//! task of its own, so that no stop (however slow its appends in flight, loops or
//! release) holds back another lease's renewal. A session ended through its handle is
//! released at the next interval, the same way.

use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::time::Instant;

use notify_journal::JournalLeases;
use notify_types::SessionId;
use tokio::sync::watch;

use super::app::StopReason;
use super::inner::Inner;
use super::metrics;
use super::stop::spawn_stop;

/// The keeper task: renews every `renew_every`, counted from the start of each round
/// (a slow round does not push the next one back), and sooner after a failed round;
/// between rounds it wakes at the earliest deadline to stop what is overdue; until
/// the host shuts down or is dropped.
pub(crate) async fn run<J: JournalLeases + 'static>(
    host: Weak<Inner<J>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let Some(first) = host.upgrade().map(|h| h.options.renew_every) else {
        return;
    };
    let mut next = Instant::now() + first;
    loop {
        let Some((every, wake)) = host.upgrade().map(|h| {
            let wake = h.table.earliest_deadline().map_or(next, |d| d.min(next));
            (h.options.renew_every, wake)
        }) else {
            return;
        };
        tokio::select! {
            () = tokio::time::sleep_until(wake) => {}
            _ = shutdown.wait_for(|down| *down) => return,
        }
        let Some(inner) = host.upgrade() else {
            return;
        };
        // Once shutdown closed the table, its stops own every session.
        if inner.table.is_closed() {
            return;
        }
        let now = Instant::now();
        if now < next {
            stop_overdue(&inner);
            continue;
        }
        next = now + every;
        if !keep_once(&inner).await {
            next = now + retry_after(every);
        }
    }
}

/// How soon after the start of a failed round the next one starts: a quarter of the
/// interval, at least [`MIN_RETRY`] (and at most the interval).
fn retry_after(every: Duration) -> Duration {
    (every / 4).max(MIN_RETRY).min(every)
}

/// The shortest wait before retrying a failed renewal.
const MIN_RETRY: Duration = Duration::from_millis(10);

/// One renewal of all leases, then the deadlines and the ended sessions; `false` if
/// the renewal failed or timed out. Every stop it begins runs on in a task of its own.
pub(crate) async fn keep_once<J: JournalLeases + 'static>(inner: &Arc<Inner<J>>) -> bool {
    // Once shutdown closed the table, its stops own every session: a lease the table
    // no longer knows is one being stopped, not a stray to release before its stop
    // waited out its appends and shut its loops.
    if inner.table.is_closed() {
        return true;
    }
    // What is past its deadline is lost whatever the renewal answers (a deadline is
    // never moved once passed): stop it first, so that the renewal's bound below is
    // the next deadline, not one already gone (a host resumed from a pause).
    stop_overdue(inner);
    let started = Instant::now();
    // A renewal stuck behind a slow database must not hold the deadlines back: it is
    // cut short at the interval, or at the earliest deadline if that comes first.
    let limit = inner
        .table
        .earliest_deadline()
        .map_or(inner.options.renew_every, |d| {
            d.saturating_duration_since(started)
                .min(inner.options.renew_every)
        });
    let renewal = tokio::time::timeout(limit, inner.journal.renew_leases()).await;
    let renewed = matches!(renewal, Ok(Ok(_)));
    match renewal {
        Ok(Ok(renewal)) => {
            metrics::renewal(true);
            for lease in &renewal.renewed {
                let id = lease.session();
                if !inner
                    .table
                    .renewed(id, lease.epoch(), started, inner.keep_for())
                    && !inner.table.knows(id)
                    && !inner.table.is_closed()
                {
                    // A lease the engine holds for this handle and the host does not
                    // serve (an open cancelled after acquiring it): give it up.
                    release_stray(inner, id);
                }
            }
            for id in renewal.lost {
                if inner.table.get(id).is_some() {
                    lose(inner, id, false);
                }
            }
        }
        Ok(Err(e)) => {
            metrics::renewal(false);
            tracing::warn!(error = %e, "lease renewal failed");
        }
        Err(_) => {
            metrics::renewal(false);
            tracing::warn!("lease renewal timed out");
        }
    }
    stop_overdue(inner);
    // A session ended through its handle has nothing more to serve: give it up, so
    // that retention may purge it wherever it runs.
    for id in inner.table.ended() {
        spawn_stop(inner, id, StopReason::Ended, None);
    }
    renewed
}

/// Stops every session past its deadline now.
fn stop_overdue<J: JournalLeases + 'static>(inner: &Arc<Inner<J>>) {
    for id in inner.table.overdue(Instant::now()) {
        lose(inner, id, true);
    }
}

/// Stops `session`, whose lease is lost (`deadline`: renewals failed past it): its
/// fence closes now; its stop first asks the engine who holds the lease (bounded by
/// the renewal interval), to name the new holder.
fn lose<J: JournalLeases + 'static>(inner: &Arc<Inner<J>>, session: SessionId, deadline: bool) {
    metrics::lost(deadline);
    tracing::warn!(%session, deadline, "lease lost");
    spawn_stop(
        inner,
        session,
        StopReason::LeaseLost { owner: None },
        Some(inner.options.renew_every),
    );
}

/// Releases, in a task of its own, a lease the engine holds for this handle that the
/// host does not serve.
fn release_stray<J: JournalLeases + 'static>(inner: &Arc<Inner<J>>, session: SessionId) {
    let task = {
        let inner = Arc::clone(inner);
        tokio::spawn(async move {
            let _ = inner.journal.release_lease(session).await;
        })
    };
    inner.track_stop(task);
}
