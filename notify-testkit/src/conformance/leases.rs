//! Leases: the [`JournalLeases`] contract (the list in its trait doc), for every
//! engine that implements it.
//!
//! One-holder checks ([`LEASE_CHECKS`]) run on any engine; two-holder checks
//! ([`TWO_HOLDER_CHECKS`]) need a second handle on the same store with its own
//! holder identity (another PostgreSQL connect, [`MemoryJournal::another_holder`](crate::MemoryJournal::another_holder)),
//! and leases short enough to wait out (the expiry check polls until the lease is
//! gone; at most 10 s). The orphan check lists up to 100 000 orphans: give it a
//! backend of its own. Wire them with
//! [`conformance_lease_tests!`](crate::conformance_lease_tests).

use std::time::Duration;

use notify_journal::{AppendError, JournalLeases, LeaseError};
use notify_types::{JournalRecord, LoopId, SessionEnded, SessionId};

use super::support::{Check, CheckResult};
use crate::sample;

/// The one-holder checks, in [`run_leases`] order.
pub const LEASE_CHECKS: &[&str] = &[
    "acquire_is_reentrant_and_names_the_holder",
    "release_frees_and_epochs_grow",
    "renew_extends_every_lease",
    "orphans_are_the_open_sessions_nobody_leases",
];

/// The two-holder checks, in [`run_two_holder_leases`] order.
pub const TWO_HOLDER_CHECKS: &[&str] = &[
    "another_holders_live_lease_is_held",
    "lost_lease_is_reported_and_stays_fenced",
    "release_is_announced",
];

/// How many orphans the orphan check asks for at most.
const ORPHAN_LIMIT: usize = 100_000;

/// Runs every one-holder check in [`LEASE_CHECKS`] order.
///
/// # Errors
///
/// The first failing check's [`ConformanceError`](super::ConformanceError).
pub async fn run_leases<B: JournalLeases + ?Sized>(a: &B) -> CheckResult {
    acquire_is_reentrant_and_names_the_holder(a).await?;
    release_frees_and_epochs_grow(a).await?;
    renew_extends_every_lease(a).await?;
    orphans_are_the_open_sessions_nobody_leases(a).await
}

/// Runs every two-holder check in [`TWO_HOLDER_CHECKS`] order.
///
/// # Errors
///
/// The first failing check's [`ConformanceError`](super::ConformanceError).
pub async fn run_two_holder_leases<B: JournalLeases + ?Sized>(a: &B, b: &B) -> CheckResult {
    another_holders_live_lease_is_held(a, b).await?;
    lost_lease_is_reported_and_stays_fenced(a, b).await?;
    release_is_announced(a, b).await
}

fn end_of(session: SessionId) -> JournalRecord {
    JournalRecord::from(notify_types::SessionEvent::from(SessionEnded::new(session)))
}

impl Check {
    async fn append_ok<B: JournalLeases + ?Sized>(self, j: &B, s: SessionId) -> CheckResult {
        let r = j.append(s, sample::command(s, LoopId::new())).await;
        self.ok(&format!("append to {s}"), r).map(|_| ())
    }

    async fn append_fenced<B: JournalLeases + ?Sized>(self, j: &B, s: SessionId) -> CheckResult {
        match j.append(s, sample::command(s, LoopId::new())).await {
            Err(AppendError::Fenced { session }) if session == s => Ok(()),
            other => Err(self.fail(format!("append to {s}: got {other:?}, want Fenced"))),
        }
    }
}

/// Acquiring twice returns the same epoch; the lease is live, names this holder,
/// and has at most the lease duration left.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) naming what differed.
pub async fn acquire_is_reentrant_and_names_the_holder<B: JournalLeases + ?Sized>(
    a: &B,
) -> CheckResult {
    let c = Check("acquire_is_reentrant_and_names_the_holder");
    let s = SessionId::new();
    let first = c.ok("acquire", a.acquire_lease(s).await)?;
    c.ensure(first.epoch() >= 1 && first.session() == s, || {
        format!("first lease {first:?}")
    })?;
    let again = c.ok("acquire again", a.acquire_lease(s).await)?;
    c.eq(
        "epoch of the lease acquired again",
        &again.epoch(),
        &first.epoch(),
    )?;
    let info = c.ok("lease info", a.lease_info(s).await)?;
    c.ensure(info.live && info.epoch == first.epoch(), || {
        format!("info {info:?} of lease {first:?}")
    })?;
    c.eq("holder", &info.holder, &Some(a.holder_id()))?;
    c.ensure(
        info.expires_in.is_some_and(|d| d <= a.lease_duration()),
        || {
            format!(
                "expires_in {:?} for a lease of {:?}",
                info.expires_in,
                a.lease_duration()
            )
        },
    )?;
    let never = c.ok(
        "info of a session never leased",
        a.lease_info(SessionId::new()).await,
    )?;
    c.ensure(
        never.epoch == 0 && !never.live && never.holder.is_none(),
        || format!("never leased: {never:?}"),
    )?;
    c.ok("release", a.release_lease(s).await)
}

/// Releasing frees the lease (the epoch stays); the next lease's epoch is higher;
/// releasing a lease not held is not an error.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) naming what differed.
pub async fn release_frees_and_epochs_grow<B: JournalLeases + ?Sized>(a: &B) -> CheckResult {
    let c = Check("release_frees_and_epochs_grow");
    let s = SessionId::new();
    let first = c.ok("acquire", a.acquire_lease(s).await)?;
    c.ok("release", a.release_lease(s).await)?;
    let info = c.ok("lease info", a.lease_info(s).await)?;
    c.ensure(
        !info.live && info.holder.is_none() && info.epoch == first.epoch(),
        || format!("after release: {info:?}"),
    )?;
    c.ok("release again", a.release_lease(s).await)?;
    c.ok(
        "release of a session never leased",
        a.release_lease(SessionId::new()).await,
    )?;
    let second = c.ok("acquire after release", a.acquire_lease(s).await)?;
    c.ensure(second.epoch() > first.epoch(), || {
        format!("epoch {} after {}", second.epoch(), first.epoch())
    })?;
    c.append_ok(a, s).await?;
    c.ok("release", a.release_lease(s).await)
}

/// One renewal extends every lease held, each under its epoch, and loses none.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) naming what differed.
pub async fn renew_extends_every_lease<B: JournalLeases + ?Sized>(a: &B) -> CheckResult {
    let c = Check("renew_extends_every_lease");
    let mut leases = Vec::new();
    for _ in 0..5 {
        leases.push(c.ok("acquire", a.acquire_lease(SessionId::new()).await)?);
    }
    let renewal = c.ok("renew", a.renew_leases().await)?;
    for lease in &leases {
        c.ensure(renewal.renewed.contains(lease), || {
            format!("{lease:?} not among the renewed {:?}", renewal.renewed)
        })?;
        c.ensure(!renewal.lost.contains(&lease.session()), || {
            format!("{lease:?} reported lost")
        })?;
        c.append_ok(a, lease.session()).await?;
    }
    for lease in &leases {
        c.ok("release", a.release_lease(lease.session()).await)?;
    }
    Ok(())
}

/// Orphans: open sessions never leased, or released, are listed; leased or ended
/// ones are not; the limit bounds the list.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) naming what differed.
pub async fn orphans_are_the_open_sessions_nobody_leases<B: JournalLeases + ?Sized>(
    a: &B,
) -> CheckResult {
    let c = Check("orphans_are_the_open_sessions_nobody_leases");
    let (never, leased, ended, released) = (
        SessionId::new(),
        SessionId::new(),
        SessionId::new(),
        SessionId::new(),
    );
    c.append_ok(a, never).await?;
    c.ok("acquire", a.acquire_lease(leased).await)?;
    c.append_ok(a, leased).await?;
    c.append_ok(a, ended).await?;
    c.ok("end", a.append(ended, end_of(ended)).await)?;
    c.ok("acquire", a.acquire_lease(released).await)?;
    c.append_ok(a, released).await?;
    c.ok("release", a.release_lease(released).await)?;
    let orphans = c.ok("orphaned sessions", a.orphaned_sessions(ORPHAN_LIMIT).await)?;
    for (s, what, want) in [
        (never, "never leased", true),
        (released, "released", true),
        (leased, "leased", false),
        (ended, "ended", false),
    ] {
        c.ensure(orphans.contains(&s) == want, || {
            format!("{what} session {s}: listed {}, want {want}", !want)
        })?;
    }
    c.eq(
        "orphans with limit 0",
        &c.ok("orphans", a.orphaned_sessions(0).await)?,
        &vec![],
    )?;
    let one = c.ok("orphans with limit 1", a.orphaned_sessions(1).await)?;
    c.eq("orphans with limit 1", &one.len(), &1)?;
    c.ok("release", a.release_lease(leased).await)
}

/// Another holder's live lease is `Held` (naming the holder and its time left) and
/// fences the other's appends; once released, the other takes it under a higher
/// epoch.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) naming what differed.
pub async fn another_holders_live_lease_is_held<B: JournalLeases + ?Sized>(
    a: &B,
    b: &B,
) -> CheckResult {
    let c = Check("another_holders_live_lease_is_held");
    c.ensure(a.holder_id() != b.holder_id(), || {
        "the two handles are one holder".into()
    })?;
    let s = SessionId::new();
    let lease = c.ok("acquire", a.acquire_lease(s).await)?;
    match b.acquire_lease(s).await {
        Err(LeaseError::Held {
            session,
            epoch,
            holder,
            expires_in,
        }) => {
            c.eq("Held session", &session, &s)?;
            c.eq("Held epoch", &epoch, &lease.epoch())?;
            c.eq("Held holder", &holder, &Some(a.holder_id()))?;
            c.ensure(expires_in.is_some_and(|d| d <= a.lease_duration()), || {
                format!("Held expires_in {expires_in:?}")
            })?;
        }
        other => return Err(c.fail(format!("second holder's acquire: got {other:?}, want Held"))),
    }
    c.append_fenced(b, s).await?;
    c.append_ok(a, s).await?;
    c.ok("release", a.release_lease(s).await)?;
    let taken = c.ok("acquire after release", b.acquire_lease(s).await)?;
    c.eq(
        "epoch after the hand-over",
        &taken.epoch(),
        &(lease.epoch() + 1),
    )?;
    c.append_ok(b, s).await?;
    c.append_fenced(a, s).await?;
    c.ok("release", b.release_lease(s).await)
}

/// Waits until `s`'s lease is no longer live (at most 10 s).
async fn expire<B: JournalLeases + ?Sized>(c: Check, j: &B, s: SessionId) -> CheckResult {
    let step = (j.lease_duration() / 4).max(Duration::from_millis(5));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if !c.ok("lease info", j.lease_info(s).await)?.live {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(c.fail(format!(
                "the lease on {s} did not expire (lease duration {:?}: give the check short leases)",
                j.lease_duration()
            )));
        }
        tokio::time::sleep(step).await;
    }
}

/// A lease that expired and was taken over is listed lost by the next renewal,
/// and the loser's appends stay fenced (even after the new holder released) until
/// it acquires the lease again; releasing it is `Lost`.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) naming what differed.
pub async fn lost_lease_is_reported_and_stays_fenced<B: JournalLeases + ?Sized>(
    a: &B,
    b: &B,
) -> CheckResult {
    let c = Check("lost_lease_is_reported_and_stays_fenced");
    let s = SessionId::new();
    let lease = c.ok("acquire", a.acquire_lease(s).await)?;
    c.append_ok(a, s).await?;
    expire(c, a, s).await?;
    let taken = c.ok("take over", b.acquire_lease(s).await)?;
    c.eq(
        "epoch after the take-over",
        &taken.epoch(),
        &(lease.epoch() + 1),
    )?;
    let renewal = c.ok("renew", a.renew_leases().await)?;
    c.ensure(renewal.lost.contains(&s), || {
        format!("{s} not in lost: {renewal:?}")
    })?;
    c.ensure(renewal.renewed.iter().all(|l| l.session() != s), || {
        format!("{s} renewed: {renewal:?}")
    })?;
    c.append_fenced(a, s).await?;
    c.append_ok(b, s).await?;
    c.ok("release", b.release_lease(s).await)?;
    c.append_fenced(a, s).await?;
    match a.release_lease(s).await {
        Err(LeaseError::Lost { session }) if session == s => {}
        other => return Err(c.fail(format!("release of a lost lease: got {other:?}, want Lost"))),
    }
    c.append_fenced(a, s).await?;
    let again = c.ok("acquire again", a.acquire_lease(s).await)?;
    c.ensure(again.epoch() > taken.epoch(), || {
        format!("epoch {} after {}", again.epoch(), taken.epoch())
    })?;
    c.append_ok(a, s).await?;
    c.ok("release", a.release_lease(s).await)
}

/// A release by one holder is announced to the other's
/// [`lease_changes`](JournalLeases::lease_changes) (skipped when the engine
/// announces nothing).
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) naming what differed.
pub async fn release_is_announced<B: JournalLeases + ?Sized>(a: &B, b: &B) -> CheckResult {
    let c = Check("release_is_announced");
    let Some(mut changes) = b.lease_changes() else {
        return Ok(());
    };
    // The other side may start listening a moment after subscribing: release probe
    // leases until one is heard.
    let mut heard = false;
    for _ in 0..100 {
        let probe = SessionId::new();
        c.ok("acquire probe", a.acquire_lease(probe).await)?;
        c.ok("release probe", a.release_lease(probe).await)?;
        if wait_for(&mut changes, probe, Duration::from_millis(100)).await {
            heard = true;
            break;
        }
    }
    c.ensure(heard, || "no release was ever announced".into())?;
    let s = SessionId::new();
    c.ok("acquire", a.acquire_lease(s).await)?;
    c.ok("release", a.release_lease(s).await)?;
    c.ensure(
        wait_for(&mut changes, s, Duration::from_secs(10)).await,
        || format!("the release of {s} was not announced"),
    )
}

/// Whether `want` is announced within `within` (other announcements are skipped).
async fn wait_for(
    changes: &mut tokio::sync::broadcast::Receiver<SessionId>,
    want: SessionId,
    within: Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, changes.recv()).await {
            Ok(Ok(s)) if s == want => return true,
            Ok(Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
            Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) | Err(_) => return false,
        }
    }
}
