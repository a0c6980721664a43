//! Leases: a writer's epoch-fenced claim on a session, kept in the session's row.

use notify_types::{SessionId, Uuid};

use super::error::sanitize;
use super::{PgJournal, lock, seq_u64};
use crate::lease::LeaseError;

/// A lease this journal holds on a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PgLease {
    session: SessionId,
    epoch: u64,
}

impl PgLease {
    /// The leased session.
    #[must_use]
    pub fn session(&self) -> SessionId {
        self.session
    }

    /// The lease's epoch: it grows by one each time the lease changes hands or is
    /// acquired again after expiring or being released.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
}

/// A session's lease as the database sees it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PgLeaseInfo {
    epoch: u64,
    holder: Option<Uuid>,
    live: bool,
}

impl PgLeaseInfo {
    /// The latest epoch handed out (0: never leased).
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The holder's identity ([`PgJournal::holder_id`]), if the lease has not been
    /// released (it may have expired).
    #[must_use]
    pub fn holder(&self) -> Option<Uuid> {
        self.holder
    }

    /// Whether the lease is held and unexpired by the database's clock.
    #[must_use]
    pub fn is_live(&self) -> bool {
        self.live
    }
}

/// How many times `acquire_lease` retries when the lease it found held was freed
/// before it could be reported.
const ACQUIRE_ATTEMPTS: usize = 3;

impl PgJournal {
    /// Acquires this journal's lease on `session` for the configured lease duration.
    ///
    /// A free, released or expired lease is taken with a new epoch (one more than
    /// the last one handed out); a live lease this journal already holds is extended
    /// under its current epoch. Appends made from now on check the lease.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Held`] if another writer holds a live lease. Its epoch is read
    /// by a second statement right after the refused one; should the lease be freed
    /// in between, acquiring is retried (three times); if the lease keeps changing
    /// hands that fast, `Held` may report one that is no longer live: retry. [`LeaseError::Storage`] (also after the operation
    /// timeout; retrying is safe) or [`LeaseError::Closed`].
    ///
    /// # Cancel safety
    ///
    /// If dropped, the lease may have been taken in the database without this
    /// journal knowing; acquiring again returns it.
    pub async fn acquire_lease(&self, session: SessionId) -> Result<PgLease, LeaseError> {
        let s = *session.as_uuid();
        let (holder, lease_ms) = (self.holder, self.lease_ms);
        let mut held = (0, None);
        for _ in 0..ACQUIRE_ATTEMPTS {
            let row = self
                .read("acquire lease", |c| async move {
                    c.client
                        .query_opt(&c.acquire, &[&s, &holder, &lease_ms])
                        .await
                })
                .await?;
            if let Some(row) = row {
                let epoch = row
                    .try_get::<_, i64>(0)
                    .map_err(|e| LeaseError::Storage(sanitize("acquire lease", &e)))
                    .and_then(|v| seq_u64(v).map_err(LeaseError::Storage))?;
                lock(&self.leases).insert(session, epoch);
                return Ok(PgLease { session, epoch });
            }
            let info = self.lease_info(session).await?;
            held = (info.epoch, info.holder);
            if info.live {
                break;
            }
        }
        Err(LeaseError::Held {
            session,
            epoch: held.0,
            holder: held.1,
            expires_in: None,
        })
    }

    /// Extends this journal's live lease on `session` by the lease duration, under
    /// the same epoch.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Lost`] if this journal holds no lease on the session, or it
    /// expired (judged once the session row lock is held) or was taken over
    /// (appends stay fenced: acquire a new lease); [`LeaseError::Storage`] (also
    /// after the operation timeout; retrying is safe) or [`LeaseError::Closed`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the lease is either extended or not.
    pub async fn renew_lease(&self, session: SessionId) -> Result<PgLease, LeaseError> {
        let Some(epoch) = lock(&self.leases).get(&session).copied() else {
            return Err(LeaseError::Lost { session });
        };
        let epoch_i = i64::try_from(epoch).map_err(|_| LeaseError::Lost { session })?;
        let s = *session.as_uuid();
        let (holder, lease_ms) = (self.holder, self.lease_ms);
        let row = self
            .read("renew lease", |c| async move {
                c.client
                    .query_opt(&c.renew, &[&s, &holder, &epoch_i, &lease_ms])
                    .await
            })
            .await?;
        let renewed_by = match row {
            Some(row) => row
                .try_get::<_, Option<Uuid>>(0)
                .map_err(|e| LeaseError::Storage(sanitize("renew lease", &e)))?,
            None => None,
        };
        if renewed_by == Some(self.holder) {
            Ok(PgLease { session, epoch })
        } else {
            Err(LeaseError::Lost { session })
        }
    }

    /// Gives up this journal's live lease on `session`: later appends behave as if
    /// it had never been acquired ([`LeasePolicy`](super::LeasePolicy) decides). The
    /// epoch is kept, so the next lease on the session has a higher one. Releasing
    /// when this journal holds no lease on the session is not an error.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Lost`] if the lease was no longer live: it expired (judged by
    /// the database's clock once the session row lock is held) or was taken over (a
    /// higher epoch, or another holder). Every append made since it was lost was
    /// fenced, and **the journal stays fenced on the session** until it acquires a
    /// new lease: fencing is sticky, so a writer that lost its lease never goes back
    /// to writing without one just because no other lease is live at the moment. A
    /// release retried after an earlier attempt committed unseen is not an error.
    /// [`LeaseError::Storage`] (also after the operation timeout; the lease is still
    /// considered held; retry) or [`LeaseError::Closed`].
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
            }
        };
        let Ok(epoch_i) = i64::try_from(epoch) else {
            return Err(LeaseError::Lost { session });
        };
        let s = *session.as_uuid();
        let holder = self.holder;
        let released = self
            .read("release lease", |c| async move {
                c.client.execute(&c.release, &[&s, &holder, &epoch_i]).await
            })
            .await?;
        if released == 0 {
            // A retried release whose first attempt did commit (its answer was lost to
            // a timeout or a broken connection) matches nothing either: the lease is
            // still at our epoch with no holder. An expired lease still names us as
            // its holder; a higher epoch, or another holder, means it was taken over.
            let info = self.lease_info(session).await?;
            if info.epoch == epoch && info.holder.is_none() {
                forget();
                return Ok(());
            }
            return Err(LeaseError::Lost { session });
        }
        forget();
        Ok(())
    }

    /// The session's lease as the database sees it now.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Storage`] (also after the operation timeout) or
    /// [`LeaseError::Closed`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    pub async fn lease_info(&self, session: SessionId) -> Result<PgLeaseInfo, LeaseError> {
        let s = *session.as_uuid();
        let row = self
            .read("read lease", |c| async move {
                c.client.query_opt(&c.lease_info, &[&s]).await
            })
            .await?;
        let Some(row) = row else {
            return Ok(PgLeaseInfo {
                epoch: 0,
                holder: None,
                live: false,
            });
        };
        let read = || -> Result<(i64, Option<Uuid>, bool), tokio_postgres::Error> {
            Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
        };
        let (epoch, holder, live) =
            read().map_err(|e| LeaseError::Storage(sanitize("read lease", &e)))?;
        Ok(PgLeaseInfo {
            epoch: seq_u64(epoch).map_err(LeaseError::Storage)?,
            holder,
            live,
        })
    }
}
