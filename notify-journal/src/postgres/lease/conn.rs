//! The lease connections, each of its own, opened on first use and reopened like the
//! read connection (`../read_conn.rs`):
//!
//! * the **renewal** connection ([`LeaseConn`]): renewals and lease reads, statements
//!   that never wait for an append, so a slow read, a full write queue or an
//!   application's open transaction never holds up a renewal;
//! * the **change** connection ([`LeaseChangeConn`]): acquire and release, which lock
//!   the lease row `FOR UPDATE` and so wait for the appends in flight (an
//!   application's transaction holding one open, up to the operation timeout): a
//!   takeover waiting there delays other acquires and releases of this handle, never
//!   a renewal.

use std::future::Future;
use std::sync::Arc;

use tokio_postgres::{Client, Statement};

use crate::error::StorageError;
use crate::postgres::PgJournal;
use crate::postgres::error::sanitize;
use crate::postgres::read_conn::{Prepared, ReadFailure};
use crate::postgres::sql::Sql;

/// Prepares `q` on `client`.
async fn prepare(client: &Client, q: &str) -> Result<Statement, StorageError> {
    client.prepare(q).await.map_err(|e| sanitize("prepare", &e))
}

/// The renewal connection's prepared statements.
pub(in crate::postgres) struct LeaseConn {
    pub(super) client: Client,
    pub(super) renew: Statement,
    pub(super) renew_all: Statement,
    pub(super) lease_info: Statement,
}

impl Prepared for LeaseConn {
    fn client(&self) -> &Client {
        &self.client
    }

    async fn prepare(client: Client, sql: &Sql) -> Result<Self, StorageError> {
        let renew = prepare(&client, &sql.renew).await?;
        let renew_all = prepare(&client, &sql.renew_all).await?;
        let lease_info = prepare(&client, &sql.lease_info).await?;
        Ok(Self {
            client,
            renew,
            renew_all,
            lease_info,
        })
    }
}

/// The change connection's prepared statements.
pub(in crate::postgres) struct LeaseChangeConn {
    pub(super) client: Client,
    pub(super) acquire: Statement,
    pub(super) release: Statement,
}

impl Prepared for LeaseChangeConn {
    fn client(&self) -> &Client {
        &self.client
    }

    async fn prepare(client: Client, sql: &Sql) -> Result<Self, StorageError> {
        let acquire = prepare(&client, &sql.acquire).await?;
        let release = prepare(&client, &sql.release).await?;
        Ok(Self {
            client,
            acquire,
            release,
        })
    }
}

impl PgJournal {
    /// Runs one renewal or lease read on the renewal connection within the operation
    /// timeout, counted in [`lease_round_trips`](Self::lease_round_trips).
    pub(super) async fn lease_statement<T, F, Fut>(
        &self,
        op: &'static str,
        f: F,
    ) -> Result<T, ReadFailure>
    where
        F: FnOnce(Arc<LeaseConn>) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        self.run_on(&self.lease_conn, &self.lease_round_trips, op, f)
            .await
    }

    /// Runs one acquire or release on the change connection within the operation
    /// timeout, counted in [`lease_round_trips`](Self::lease_round_trips).
    pub(super) async fn lease_change<T, F, Fut>(
        &self,
        op: &'static str,
        f: F,
    ) -> Result<T, ReadFailure>
    where
        F: FnOnce(Arc<LeaseChangeConn>) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        self.run_on(&self.lease_change_conn, &self.lease_round_trips, op, f)
            .await
    }
}
