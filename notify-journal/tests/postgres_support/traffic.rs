//! Lease traffic for the contention tests: appenders (plain and inside application
//! transactions) hammering one session until told to stop, renewal rounds classified
//! by what they said of it, and joining both within the hang guard.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use notify_journal::{AppendError, JournalBackend, PgJournal};
use notify_types::{CommandId, SessionId, Uuid};

use super::{HANG_GUARD, command, consumed, raw_client};

/// What the renewal rounds of one run found for the session.
#[derive(Debug, Default)]
pub struct Rounds {
    pub rounds: u64,
    pub renewed: u64,
    /// In neither list: not judged this round.
    pub not_judged: u64,
    pub lost: u64,
    pub failed: u64,
}

/// Renews `j`'s leases `every` so often until `stop`, classifying what each
/// round said about `session`.
pub async fn renew_until(
    j: Arc<PgJournal>,
    session: SessionId,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> Rounds {
    let mut rounds = Rounds::default();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    while !stop.load(Ordering::SeqCst) {
        tick.tick().await;
        rounds.rounds += 1;
        match j.renew_leases().await {
            Ok(r) if r.renewed.iter().any(|l| l.session() == session) => rounds.renewed += 1,
            Ok(r) if r.lost.contains(&session) => rounds.lost += 1,
            Ok(_) => rounds.not_judged += 1,
            Err(e) => {
                eprintln!("renewal failed: {e}");
                rounds.failed += 1;
            }
        }
    }
    rounds
}

/// Appends counted by outcome.
#[derive(Debug, Default)]
pub struct Appends {
    pub ok: AtomicU64,
    pub fenced: AtomicU64,
    pub other: AtomicU64,
}

/// `n` appenders to `session` until `stop`.
pub fn hammer(
    j: &Arc<PgJournal>,
    session: SessionId,
    n: usize,
    stop: &Arc<AtomicBool>,
    counts: &Arc<Appends>,
) -> tokio::task::JoinSet<()> {
    let mut set = tokio::task::JoinSet::new();
    for a in 0..n {
        let (j, stop, counts) = (Arc::clone(j), Arc::clone(stop), Arc::clone(counts));
        set.spawn(async move {
            let variant = u32::try_from(a).unwrap();
            while !stop.load(Ordering::SeqCst) {
                match j
                    .append(session, command(session, Uuid::now_v7(), variant))
                    .await
                {
                    Ok(_) => counts.ok.fetch_add(1, Ordering::Relaxed),
                    Err(AppendError::Fenced { .. }) => {
                        counts.fenced.fetch_add(1, Ordering::Relaxed)
                    }
                    Err(e) => {
                        eprintln!("append failed: {e}");
                        counts.other.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        });
    }
    set
}

/// `n` transactional appenders to `session` until `stop`, each on a connection of
/// its own: an application transaction holding one `append_in` for `hold` before it
/// commits (counted once committed).
pub async fn hammer_in_tx(
    url: &str,
    j: &Arc<PgJournal>,
    session: SessionId,
    n: usize,
    hold: Duration,
    stop: &Arc<AtomicBool>,
    counts: &Arc<Appends>,
) -> tokio::task::JoinSet<()> {
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let mut app = raw_client(url).await;
        let (j, stop, counts) = (Arc::clone(j), Arc::clone(stop), Arc::clone(counts));
        set.spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let tx = app.transaction().await.unwrap();
                let cause = CommandId::from_uuid(Uuid::now_v7());
                match j.append_in(&tx, session, &consumed(session, cause)).await {
                    Ok(out) => {
                        assert!(out.appended);
                        tokio::time::sleep(hold).await;
                        tx.commit().await.unwrap();
                        counts.ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(AppendError::Fenced { .. }) => {
                        tx.rollback().await.unwrap();
                        counts.fenced.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        eprintln!("append in a transaction failed: {e}");
                        counts.other.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
    }
    set
}

impl Rounds {
    /// Asserts that every round renewed the session's lease (none lost, failed or
    /// passed over), `why` saying what was running meanwhile.
    pub fn assert_all_renewed(&self, why: &str) {
        assert_eq!(
            (self.renewed, self.not_judged, self.lost, self.failed),
            (self.rounds, 0, 0, 0),
            "every round renews the lease {why}: {self:?}"
        );
    }
}

impl Appends {
    /// `(ok, fenced, other)` so far.
    pub fn totals(&self) -> (u64, u64, u64) {
        (
            self.ok.load(Ordering::SeqCst),
            self.fenced.load(Ordering::SeqCst),
            self.other.load(Ordering::SeqCst),
        )
    }
}

/// Raises `stop`, then waits for every appender of `appenders`, within
/// [`HANG_GUARD`] each.
pub async fn stop_appenders(stop: &AtomicBool, appenders: &mut [&mut tokio::task::JoinSet<()>]) {
    stop.store(true, Ordering::SeqCst);
    for set in appenders {
        while let Some(done) = tokio::time::timeout(HANG_GUARD, set.join_next())
            .await
            .expect("hang guard: the appenders")
        {
            done.unwrap();
        }
    }
}

/// Raises `stop`, then waits for the renewer's rounds and every appender, within
/// [`HANG_GUARD`] each.
pub async fn stop_and_join(
    stop: &AtomicBool,
    renewer: tokio::task::JoinHandle<Rounds>,
    appenders: &mut [&mut tokio::task::JoinSet<()>],
) -> Rounds {
    stop.store(true, Ordering::SeqCst);
    let rounds = tokio::time::timeout(HANG_GUARD, renewer)
        .await
        .expect("hang guard: the renewals")
        .unwrap();
    stop_appenders(stop, appenders).await;
    rounds
}
