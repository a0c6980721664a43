//! Acquire and release: the statements that change who holds a lease, run on the
//! change connection (`conn.rs`). Each locks the lease row `FOR UPDATE`, so it waits
//! for the appends in flight to the session, which commit under the epoch they
//! carry first.

use notify_types::{SessionId, Uuid};

use super::{left, storage};
use crate::lease::{Lease, LeaseError};
use crate::postgres::{PgJournal, lock, seq_u64};

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

    /// Gives up this journal's live lease on `session`: later appends behave as if
    /// it had never been acquired ([`LeasePolicy`](crate::LeasePolicy) decides). The
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
}
