//! Leases: a writer's epoch-fenced claim on a session, kept in the session's row of
//! the `leases` table (schema version 9, `migrations/0009_leases_table.sql`: appends
//! lock it `FOR KEY SHARE`, renewals update it beside them, acquire and release lock
//! it `FOR UPDATE`); [`PgJournal`]'s [`JournalLeases`] implementation. Renewals and lease
//! reads run on the renewal connection, acquire and release on the change connection
//! (`lease_conn.rs`); lease changes are heard on a `LISTEN` connection
//! (`lease_listen.rs`).

use std::time::Duration;

use notify_types::{SessionId, Uuid};
use tokio::sync::broadcast;

use super::error::sanitize;
use super::lease_listen::Listener;
use super::{PgJournal, lock, seq_u64};
use crate::backend::BoxFuture;
use crate::lease::{JournalLeases, Lease, LeaseError, LeaseInfo, Renewal};

fn storage(op: &'static str) -> impl Fn(tokio_postgres::Error) -> LeaseError {
    move |e| LeaseError::Storage(sanitize(op, &e))
}

/// Milliseconds left, as the database computed them, as a duration.
fn left(ms: Option<f64>) -> Option<Duration> {
    ms.map(|ms| Duration::try_from_secs_f64(ms.max(0.0) / 1000.0).unwrap_or(Duration::MAX))
}

impl PgJournal {
    /// Acquires this journal's lease on `session` for the configured lease duration.
    ///
    /// A free, released or expired lease is taken with a new epoch (one more than
    /// the last one handed out); a live lease this journal already holds is extended
    /// under its current epoch. Appends made from now on check the lease. Runs on the
    /// change connection: the statement locks the lease row `FOR UPDATE`, so it
    /// waits for the appends in flight to the session (an application's transaction
    /// holding one open, up to the operation timeout), which commit under the epoch
    /// they carry before the new lease is handed out; expiry is judged once the lock
    /// is held. Renewals, on a connection of their own, go on meanwhile.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Held`] if another writer holds a live lease, naming it and its
    /// time left (read under the same lock as the refusal).
    /// [`LeaseError::Storage`] (also after the operation timeout; retrying is safe),
    /// [`LeaseError::Closed`] or [`LeaseError::SchemaTooNew`].
    ///
    /// # Cancel safety
    ///
    /// If dropped, the lease may have been taken in the database without this
    /// journal knowing; acquiring again returns it.
    pub async fn acquire_lease(&self, session: SessionId) -> Result<Lease, LeaseError> {
        let s = *session.as_uuid();
        let (holder, lease_ms) = (self.holder, self.lease_ms);
        let row = self
            .lease_change("acquire lease", |c| async move {
                c.client
                    .query_one(&c.acquire, &[&s, &holder, &lease_ms])
                    .await
            })
            .await?;
        type Read = (bool, i64, Option<Uuid>, Option<f64>);
        let read = || -> Result<Read, tokio_postgres::Error> {
            Ok((
                row.try_get(0)?,
                row.try_get(1)?,
                row.try_get(2)?,
                row.try_get(3)?,
            ))
        };
        let (taken, epoch, by, ms) = read().map_err(storage("acquire lease"))?;
        let epoch = seq_u64(epoch).map_err(LeaseError::Storage)?;
        if !taken {
            return Err(LeaseError::Held {
                session,
                epoch,
                holder: by,
                expires_in: left(ms),
            });
        }
        lock(&self.leases).insert(session, epoch);
        lock(&self.lost).remove(&session);
        Ok(Lease::new(session, epoch))
    }

    /// Extends this journal's live lease on `session` by the lease duration, under
    /// the same epoch ([`renew_leases`](Self::renew_leases) renews them all at once).
    ///
    /// # Errors
    ///
    /// [`LeaseError::Lost`] if this journal holds no lease on the session, or it
    /// expired (judged once its lease row is locked) or was taken over
    /// (appends stay fenced: acquire a new lease); [`LeaseError::Storage`] (also
    /// after the operation timeout; retrying is safe), [`LeaseError::Closed`] or
    /// [`LeaseError::SchemaTooNew`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the lease is either extended or not.
    pub async fn renew_lease(&self, session: SessionId) -> Result<Lease, LeaseError> {
        let Some(epoch) = lock(&self.leases).get(&session).copied() else {
            return Err(LeaseError::Lost { session });
        };
        let epoch_i = i64::try_from(epoch).map_err(|_| LeaseError::Lost { session })?;
        let s = *session.as_uuid();
        let (holder, lease_ms) = (self.holder, self.lease_ms);
        let row = self
            .lease_statement("renew lease", |c| async move {
                c.client
                    .query_opt(&c.renew, &[&s, &holder, &epoch_i, &lease_ms])
                    .await
            })
            .await?;
        let renewed = match row {
            Some(row) => row.try_get::<_, bool>(0).map_err(storage("renew lease"))?,
            None => false,
        };
        if renewed {
            Ok(Lease::new(session, epoch))
        } else {
            self.mark_lost(session, epoch);
            Err(LeaseError::Lost { session })
        }
    }

    /// Renews every lease this journal believes live in one statement (one round
    /// trip on the renewal connection, whatever their number; none when it holds
    /// none). Each is extended if it is still this journal's under the same epoch
    /// and unexpired by the database's clock once its lease row is locked; the others
    /// are listed in [`Renewal::lost`] (each by the first renewal that finds it
    /// lost), announced on the lease channel, and stay fenced until acquired again.
    /// Every lease is judged every round: the statement locks lease rows in a mode
    /// the appends' lock (`FOR KEY SHARE`) does not conflict with, so it never waits
    /// for an append to a busy session, nor for an application's transaction holding
    /// a transactional ack open (only, for a moment, for an acquire or release of the
    /// same row).
    ///
    /// # Errors
    ///
    /// [`LeaseError::Storage`] (also after the operation timeout; nothing was
    /// renewed unless the statement committed unseen; retrying is safe),
    /// [`LeaseError::Closed`] or [`LeaseError::SchemaTooNew`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: each lease is either extended or not; a lease found lost is
    /// marked so before the answer is returned, and fences appends either way.
    pub async fn renew_leases(&self) -> Result<Renewal, LeaseError> {
        let held: Vec<(SessionId, u64)> = {
            let leases = lock(&self.leases);
            let lost = lock(&self.lost);
            leases
                .iter()
                .filter(|(s, _)| !lost.contains(s))
                .map(|(s, e)| (*s, *e))
                .collect()
        };
        if held.is_empty() {
            return Ok(Renewal::default());
        }
        let (mut sessions, mut epochs) = (Vec::new(), Vec::new());
        let mut renewal = Renewal::default();
        for (session, epoch) in &held {
            match i64::try_from(*epoch) {
                Ok(e) => {
                    sessions.push(*session.as_uuid());
                    epochs.push(e);
                }
                // No such epoch is ever handed out: the lease is not ours.
                Err(_) => renewal.lost.push(*session),
            }
        }
        let (holder, lease_ms) = (self.holder, self.lease_ms);
        let channel = &self.sql.lease_channel;
        let rows = self
            .lease_statement("renew leases", |c| async move {
                c.client
                    .query(
                        &c.renew_all,
                        &[&sessions, &epochs, &holder, &lease_ms, channel],
                    )
                    .await
            })
            .await?;
        let mut renewed = std::collections::HashSet::with_capacity(rows.len());
        for row in rows {
            let (session, ok): (Uuid, bool) = (
                row.try_get(0).map_err(storage("renew leases"))?,
                row.try_get(1).map_err(storage("renew leases"))?,
            );
            if ok {
                renewed.insert(SessionId::from_uuid(session));
            }
        }
        let leases = lock(&self.leases);
        let mut lost = lock(&self.lost);
        for (session, epoch) in held {
            if renewed.contains(&session) {
                renewal.renewed.push(Lease::new(session, epoch));
            } else if leases.get(&session) == Some(&epoch) && lost.insert(session) {
                // Still the lease the statement judged (not released or acquired
                // anew meanwhile), and not reported before.
                if !renewal.lost.contains(&session) {
                    renewal.lost.push(session);
                }
            }
        }
        Ok(renewal)
    }

    /// Gives up this journal's live lease on `session`: later appends behave as if
    /// it had never been acquired ([`LeasePolicy`](super::LeasePolicy) decides). The
    /// epoch is kept, so the next lease on the session has a higher one; the release
    /// is announced on the lease channel when it commits. Releasing when this
    /// journal holds no lease on the session is not an error.
    ///
    /// Runs on the change connection, locking the lease row `FOR UPDATE`: it waits
    /// for this journal's appends in flight to the session, which commit under the
    /// lease before it is freed.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Lost`] if the lease was no longer live: it expired (judged by
    /// the database's clock once the lease row lock is held) or was taken over (a
    /// higher epoch, or another holder). Every append made since it was lost was
    /// fenced, and **the journal stays fenced on the session** until it acquires a
    /// new lease: fencing is sticky, so a writer that lost its lease never goes back
    /// to writing without one just because no other lease is live at the moment. A
    /// release retried after an earlier attempt committed unseen is not an error.
    /// [`LeaseError::Storage`] (also after the operation timeout; the lease is still
    /// considered held; retry), [`LeaseError::Closed`] or
    /// [`LeaseError::SchemaTooNew`].
    ///
    /// # Cancel safety
    ///
    /// If dropped, the lease may or may not be released; it expires anyway, and the
    /// journal keeps checking it (appends are fenced once it expired) until a
    /// release answers or a new lease is acquired.
    pub async fn release_lease(&self, session: SessionId) -> Result<(), LeaseError> {
        let Some(epoch) = lock(&self.leases).get(&session).copied() else {
            return Ok(());
        };
        // Only a release that freed a live lease (or finds its own earlier attempt
        // did) forgets it; a lost lease keeps fencing.
        let forget = || {
            let mut leases = lock(&self.leases);
            if leases.get(&session) == Some(&epoch) {
                leases.remove(&session);
                lock(&self.lost).remove(&session);
            }
        };
        let Ok(epoch_i) = i64::try_from(epoch) else {
            return Err(LeaseError::Lost { session });
        };
        let s = *session.as_uuid();
        let holder = self.holder;
        let channel = &self.sql.lease_channel;
        let row = self
            .lease_change("release lease", |c| async move {
                c.client
                    .query_one(&c.release, &[&s, &holder, &epoch_i, channel])
                    .await
            })
            .await?;
        let released: bool = row.try_get(0).map_err(storage("release lease"))?;
        if !released {
            // A retried release whose first attempt did commit (its answer was lost to
            // a timeout or a broken connection) matches nothing either: the lease is
            // still at our epoch with no holder. An expired lease still names us as
            // its holder; a higher epoch, or another holder, means it was taken over.
            let info = self.lease_info(session).await?;
            if info.epoch == epoch && info.holder.is_none() {
                forget();
                return Ok(());
            }
            self.mark_lost(session, epoch);
            return Err(LeaseError::Lost { session });
        }
        forget();
        Ok(())
    }

    /// The session's lease as the database sees it now (its time left by the
    /// database's clock): its holder, epoch and expiry, one row read by its primary
    /// key on the renewal connection, never waiting for a lock. Who holds a session
    /// a renewal found lost, say.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Storage`] (also after the operation timeout),
    /// [`LeaseError::Closed`] or [`LeaseError::SchemaTooNew`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    pub async fn lease_info(&self, session: SessionId) -> Result<LeaseInfo, LeaseError> {
        let s = *session.as_uuid();
        let row = self
            .lease_statement("read lease", |c| async move {
                c.client.query_opt(&c.lease_info, &[&s]).await
            })
            .await?;
        let Some(row) = row else {
            return Ok(LeaseInfo {
                epoch: 0,
                holder: None,
                live: false,
                expires_in: None,
            });
        };
        type Read = (i64, Option<Uuid>, bool, Option<f64>);
        let read = || -> Result<Read, tokio_postgres::Error> {
            Ok((
                row.try_get(0)?,
                row.try_get(1)?,
                row.try_get(2)?,
                row.try_get(3)?,
            ))
        };
        let (epoch, holder, live, ms) = read().map_err(storage("read lease"))?;
        Ok(LeaseInfo {
            epoch: seq_u64(epoch).map_err(LeaseError::Storage)?,
            holder,
            live,
            expires_in: if live { left(ms) } else { None },
        })
    }

    /// Up to `limit` sessions neither ended nor purged whose lease is not live
    /// (never leased or released first, then the longest expired), read on the
    /// read connection by one statement (a range scan of the `leases_orphans`
    /// index).
    ///
    /// # Errors
    ///
    /// [`LeaseError::Storage`] (also after the operation timeout),
    /// [`LeaseError::Closed`] or [`LeaseError::SchemaTooNew`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    pub async fn orphaned_sessions(&self, limit: usize) -> Result<Vec<SessionId>, LeaseError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .read("orphaned sessions", |c| async move {
                c.client.query(&c.orphans, &[&limit]).await
            })
            .await?;
        rows.iter()
            .map(|row| {
                row.try_get::<_, Uuid>(0)
                    .map(SessionId::from_uuid)
                    .map_err(storage("orphaned sessions"))
            })
            .collect()
    }

    /// Sessions whose lease any holder released or lost, as announced on the
    /// schema's lease channel; the first call opens the `LISTEN` connection
    /// (reopened whenever it drops). `None` outside a tokio runtime or once closed.
    #[must_use]
    pub fn lease_changes(&self) -> Option<broadcast::Receiver<SessionId>> {
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return None;
        }
        let mut listener = lock(&self.listener);
        if listener.is_none() {
            *listener = Listener::start(
                std::sync::Arc::clone(&self.connector),
                self.sql.lease_channel.clone(),
                self.op_timeout,
            );
        }
        listener.as_ref().map(Listener::subscribe)
    }

    /// How many lease statements this journal has sent on its lease connections
    /// since [`connect`](Self::connect): acquire, renew (one per
    /// [`renew_leases`](Self::renew_leases), whatever the number of leases),
    /// release and lease reads.
    #[must_use]
    pub fn lease_round_trips(&self) -> u64 {
        self.lease_round_trips
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Marks the lease on `session` lost if it is still the one under `epoch`.
    fn mark_lost(&self, session: SessionId, epoch: u64) {
        if lock(&self.leases).get(&session) == Some(&epoch) {
            lock(&self.lost).insert(session);
        }
    }
}

impl JournalLeases for PgJournal {
    fn holder_id(&self) -> Uuid {
        self.holder
    }

    fn lease_duration(&self) -> Duration {
        self.lease_duration
    }

    fn acquire_lease(&self, session: SessionId) -> BoxFuture<'_, Result<Lease, LeaseError>> {
        Box::pin(PgJournal::acquire_lease(self, session))
    }

    fn renew_leases(&self) -> BoxFuture<'_, Result<Renewal, LeaseError>> {
        Box::pin(PgJournal::renew_leases(self))
    }

    fn release_lease(&self, session: SessionId) -> BoxFuture<'_, Result<(), LeaseError>> {
        Box::pin(PgJournal::release_lease(self, session))
    }

    fn lease_info(&self, session: SessionId) -> BoxFuture<'_, Result<LeaseInfo, LeaseError>> {
        Box::pin(PgJournal::lease_info(self, session))
    }

    fn orphaned_sessions(&self, limit: usize) -> BoxFuture<'_, Result<Vec<SessionId>, LeaseError>> {
        Box::pin(PgJournal::orphaned_sessions(self, limit))
    }

    fn lease_changes(&self) -> Option<broadcast::Receiver<SessionId>> {
        PgJournal::lease_changes(self)
    }
}
