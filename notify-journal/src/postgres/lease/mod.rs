//! Leases: a writer's epoch-fenced claim on a session, kept in the session's row of
//! the `leases` table (schema version 9, `migrations/0009_leases_table.sql`: appends
//! lock it `FOR KEY SHARE`, renewals update it beside them, acquire and release lock
//! it `FOR UPDATE`); [`PgJournal`]'s [`JournalLeases`] implementation. One file per
//! concern:
//!
//! * `change.rs`: acquire and release, on the change connection;
//! * `renew.rs`: renewing one lease or all of them in one statement, on the renewal
//!   connection;
//! * `read.rs`: a lease as the database sees it, orphaned sessions;
//! * `conn.rs`: the two lease connections and their prepared statements;
//! * `listen.rs`: lease changes heard on a `LISTEN` connection.
//!
//! The statements are in `../sql.rs`; the SQL functions they call, in
//! `../migrations/0009_leases_table.sql`.

mod change;
mod conn;
mod listen;
mod read;
mod renew;

use std::time::Duration;

use notify_types::{SessionId, Uuid};
use tokio::sync::broadcast;

pub(super) use conn::{LeaseChangeConn, LeaseConn};
pub(super) use listen::Listener;

use super::error::sanitize;
use super::{PgJournal, lock};
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
