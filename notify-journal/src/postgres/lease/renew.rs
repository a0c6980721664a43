//! Renewals: one lease, or every lease of the handle in one statement, run on the
//! renewal connection (`conn.rs`), which never waits for an append.

use notify_types::{SessionId, Uuid};

use super::storage;
use crate::lease::{Lease, LeaseError, Renewal};
use crate::postgres::{PgJournal, lock};

impl PgJournal {
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
}
