//! Adopting orphaned sessions: on a fixed poll schedule (announcements handled in
//! between never push a poll back: an expired lease is found only by a poll), and at
//! once when the engine announces a lease released or lost (several announced
//! sessions opening at once, none waited for), this host opens sessions whose owner
//! is gone, up to its capacity. Each host tries the listed orphans from a
//! point of the list derived from its holder ID, so that hosts polling at once mostly
//! go for different sessions, and passes over the ones it leaves alone (given up or
//! lost lately, or backing off after failed starts), asking the engine for as many
//! more, so that those never hide a real orphan. When two hosts race for one session
//! the lease decides: the loser's acquisition is refused `Held` and it moves on.

use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::time::{Instant, Interval, MissedTickBehavior};

use notify_journal::JournalLeases;
use notify_types::{SessionId, Uuid};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast, watch};

use super::error::HostError;
use super::inner::Inner;
use super::open::open_session;

/// The adopter task: polls every `adopt_every` on a fixed schedule and listens to the
/// engine's lease changes (subscribed before the host's first poll, so that the
/// engine starts listening early), until the host shuts down or is dropped.
pub(crate) async fn run<J: JournalLeases + 'static>(
    host: Weak<Inner<J>>,
    changes: Option<broadcast::Receiver<SessionId>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let Some(mut polls) = host.upgrade().map(|h| schedule(h.options.adopt_every)) else {
        return;
    };
    let Some(mut changes) = changes else {
        return poll_only(host, polls, shutdown).await;
    };
    // The opens of announced sessions, a few at a time; the adopter does not wait for
    // them (a slow start holds back neither the next announcement nor a poll).
    let announced_opens = Arc::new(Semaphore::new(PARALLEL_ADOPTIONS));
    loop {
        let announced = tokio::select! {
            _ = polls.tick() => None,
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
            Some(session) => adopt_one(&inner, session, &announced_opens).await,
            None => adopt_once(&inner).await,
        }
    }
    // The engine stopped announcing: poll alone.
    poll_only(host, polls, shutdown).await;
}

/// Polls every `every`, the first one interval from now; a poll that runs late (the
/// adopter was busy) is followed by the next one a whole interval later.
fn schedule(every: Duration) -> Interval {
    let mut polls = tokio::time::interval_at(Instant::now() + every, every);
    polls.set_missed_tick_behavior(MissedTickBehavior::Delay);
    polls
}

/// The adopter of an engine that announces nothing: polls alone.
async fn poll_only<J: JournalLeases + 'static>(
    host: Weak<Inner<J>>,
    mut polls: Interval,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = polls.tick() => {}
            _ = shutdown.wait_for(|down| *down) => return,
        }
        let Some(inner) = host.upgrade() else {
            return;
        };
        adopt_once(&inner).await;
    }
}

/// Adopts the announced `session` if it has room and does not leave it alone (given
/// up lately: then the announcement is its own release, meant for other hosts; or
/// backing off after failed starts): once one of `permits` is free, as a recorded
/// open task (see `spawn_open`) that the adopter does not wait for.
async fn adopt_one<J: JournalLeases + 'static>(
    inner: &Arc<Inner<J>>,
    session: SessionId,
    permits: &Arc<Semaphore>,
) {
    if inner.table.room(inner.options.capacity) == 0
        || inner
            .table
            .held_off(session, Instant::now(), inner.options.readopt_after)
    {
        return;
    }
    open_when_free(inner, session, permits).await;
}

/// How many adoptions one host runs at once (each a few round trips).
const PARALLEL_ADOPTIONS: usize = 16;

/// The most orphans one poll asks for beyond twice its room, to pass over the
/// sessions this host leaves alone.
const MAX_HELD_OFF_ASKED: usize = 1024;

/// One poll: adopts orphans up to the room left, a few at a time.
pub(crate) async fn adopt_once<J: JournalLeases + 'static>(inner: &Arc<Inner<J>>) {
    let room = inner.table.room(inner.options.capacity);
    if room == 0 {
        return;
    }
    // Ask for more than the room: some may be taken by other hosts first, and the
    // ones this host leaves alone (given up lately, backing off) are passed over, so
    // as many more are asked for (they may all be listed first).
    let held_off = inner
        .table
        .held_off_count(Instant::now(), inner.options.readopt_after)
        .min(MAX_HELD_OFF_ASKED);
    let orphans = match inner
        .journal
        .orphaned_sessions(room.saturating_mul(2).saturating_add(held_off))
        .await
    {
        Ok(orphans) => start_at_holder(orphans, inner.journal.holder_id()),
        Err(e) => {
            tracing::warn!(error = %e, "listing orphaned sessions failed");
            return;
        }
    };
    let limit = PARALLEL_ADOPTIONS.min(room).max(1);
    // Each open runs as a task of its own, recorded in the host's open tasks so that
    // shutdown waits for it (and aborts and awaits it past the grace) even when this
    // adopter is aborted; the permits bound how many run at once.
    let permits = Arc::new(Semaphore::new(limit));
    let all = u32::try_from(limit).unwrap_or(u32::MAX);
    for session in orphans {
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            break;
        };
        if inner.table.room(inner.options.capacity) == 0 {
            // Opens in flight hold places they may lose to another host: wait for
            // them before deciding the host is full.
            drop(permit);
            let Ok(every) = permits.acquire_many(all).await else {
                break;
            };
            drop(every);
            if inner.table.room(inner.options.capacity) == 0 {
                break;
            }
            open_when_free(inner, session, &permits).await;
            continue;
        }
        spawn_open(inner, session, permit);
    }
    // Every open of this poll has ended.
    let _ = permits.acquire_many(all).await;
}

/// Opens `session` as [`spawn_open`] does, once one of `permits` is free.
async fn open_when_free<J: JournalLeases + 'static>(
    inner: &Arc<Inner<J>>,
    session: SessionId,
    permits: &Arc<Semaphore>,
) {
    if let Ok(permit) = Arc::clone(permits).acquire_owned().await {
        spawn_open(inner, session, permit);
    }
}

/// Opens `session` as a task recorded among the host's opens (unless this host leaves
/// it alone), holding `permit` until it ends.
fn spawn_open<J: JournalLeases + 'static>(
    inner: &Arc<Inner<J>>,
    session: SessionId,
    permit: OwnedSemaphorePermit,
) {
    if inner
        .table
        .held_off(session, Instant::now(), inner.options.readopt_after)
    {
        return;
    }
    let task = {
        let inner = Arc::clone(inner);
        tokio::spawn(async move {
            log_outcome(session, open_session(&inner, session, true).await);
            drop(permit);
        })
    };
    let mut opens = inner.opens.lock().unwrap_or_else(|p| p.into_inner());
    opens.retain(|open| !open.is_finished());
    opens.push(task);
}

/// `orphans` (listed oldest first, the same list for every host) rotated to start at
/// a point of the batch derived from this host's holder ID: hosts racing for the same
/// batch mostly try different sessions first instead of all the oldest few. The lease
/// still decides every race (exactly one host wins a session); every orphan listed
/// is still tried.
fn start_at_holder(mut orphans: Vec<SessionId>, holder: Uuid) -> Vec<SessionId> {
    if !orphans.is_empty() {
        let len = orphans.len() as u128;
        // In range: the remainder of a division by a `usize`.
        let start = usize::try_from(holder.as_u128() % len).unwrap_or(0);
        orphans.rotate_left(start);
    }
    orphans
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

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(n: usize) -> Vec<SessionId> {
        (0..n).map(|_| SessionId::new()).collect()
    }

    #[test]
    fn every_orphan_is_still_tried_once() {
        let orphans = batch(7);
        let mut rotated = start_at_holder(orphans.clone(), Uuid::from_u128(3));
        assert_eq!(rotated[0], orphans[3]);
        rotated.sort();
        let mut sorted = orphans;
        sorted.sort();
        assert_eq!(rotated, sorted);
        assert!(start_at_holder(Vec::new(), Uuid::from_u128(3)).is_empty());
    }

    /// Two hosts with room for `k` each over the same `2k` orphans: holders whose
    /// starting points are `k` apart go for disjoint halves, so neither races the
    /// other for any session (before the rotation, both went for the oldest `k`).
    #[test]
    fn two_hosts_with_room_for_half_go_for_different_orphans() {
        let k = 8;
        let orphans = batch(2 * k);
        let a = start_at_holder(orphans.clone(), Uuid::from_u128(5));
        let b = start_at_holder(orphans.clone(), Uuid::from_u128(5 + k as u128));
        let first_a: std::collections::HashSet<_> = a[..k].iter().collect();
        let collisions = b[..k].iter().filter(|s| first_a.contains(s)).count();
        assert_eq!(collisions, 0);
        // Over many holders, a pair's first picks overlap by half on average at most:
        // count over every pair of starting points.
        let mut overlap = 0;
        for x in 0..2 * k {
            for y in 0..2 * k {
                let a = start_at_holder(orphans.clone(), Uuid::from_u128(x as u128));
                let b = start_at_holder(orphans.clone(), Uuid::from_u128(y as u128));
                let first_a: std::collections::HashSet<_> = a[..k].iter().collect();
                overlap += b[..k].iter().filter(|s| first_a.contains(s)).count();
            }
        }
        assert_eq!(overlap, (2 * k) * (2 * k) * k / 2);
    }
}
