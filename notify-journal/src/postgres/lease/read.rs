//! Reading leases: one session's lease as the database sees it now (on the renewal
//! connection) and the orphaned sessions (on the read connection).

use notify_types::{SessionId, Uuid};

use super::{left, storage};
use crate::lease::{LeaseError, LeaseInfo};
use crate::postgres::{PgJournal, seq_u64};

impl PgJournal {
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
}
