//! The lease connection: a connection of its own for the lease statements (acquire,
//! renew, release, read a lease), opened on first use, so a slow read or a full
//! write queue never holds up a renewal. Reopened like the read connection
//! (`read_conn.rs`).

use std::future::Future;
use std::sync::Arc;

use tokio_postgres::{Client, Statement};

use super::PgJournal;
use super::error::sanitize;
use super::read_conn::{Prepared, ReadFailure};
use super::sql::Sql;
use crate::error::StorageError;

/// The lease connection's prepared statements.
pub(super) struct LeaseConn {
    pub(super) client: Client,
    pub(super) acquire: Statement,
    pub(super) renew: Statement,
    pub(super) renew_all: Statement,
    pub(super) release: Statement,
    pub(super) lease_info: Statement,
}

impl Prepared for LeaseConn {
    fn client(&self) -> &Client {
        &self.client
    }

    async fn prepare(client: Client, sql: &Sql) -> Result<Self, StorageError> {
        let p = |q: &str| {
            let q = q.to_owned();
            let c = &client;
            async move { c.prepare(&q).await.map_err(|e| sanitize("prepare", &e)) }
        };
        let acquire = p(&sql.acquire).await?;
        let renew = p(&sql.renew).await?;
        let renew_all = p(&sql.renew_all).await?;
        let release = p(&sql.release).await?;
        let lease_info = p(&sql.lease_info).await?;
        Ok(Self {
            client,
            acquire,
            renew,
            renew_all,
            release,
            lease_info,
        })
    }
}

impl PgJournal {
    /// Runs one lease statement on the lease connection within the operation
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
}
