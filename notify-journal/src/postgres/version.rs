//! The schema version: the one this build writes ([`PG_SCHEMA_VERSION`]), reading
//! the recorded one, and the check of every reconnect ([`SchemaGuard`]), which
//! remembers a newer version once seen.

use std::sync::atomic::{AtomicU32, Ordering};

use tokio_postgres::Client;

use super::error::sanitize;
use super::schema_name::quoted;
use crate::error::StorageError;

/// The journal schema version this code writes and understands.
pub const PG_SCHEMA_VERSION: u32 = 10;

/// Reads the schema's recorded version (0 when the journal's tables are missing).
pub(crate) async fn read_version<C: tokio_postgres::GenericClient>(
    client: &C,
    schema: &str,
) -> Result<u32, StorageError> {
    let table = format!("{}.schema_version", quoted(schema));
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .and_then(|row| row.try_get(0))
        .map_err(|e| sanitize("read schema version", &e))?;
    if !exists {
        return Ok(0);
    }
    let v: i32 = client
        .query_one(
            &format!("SELECT coalesce(max(version), 0) FROM {table}"),
            &[],
        )
        .await
        .and_then(|row| row.try_get(0))
        .map_err(|e| sanitize("read schema version", &e))?;
    u32::try_from(v).map_err(|_| StorageError::msg("postgres: negative journal schema version"))
}

/// What a reconnect's schema check found wrong.
#[derive(Debug, Clone)]
pub(crate) enum VersionCheck {
    /// A newer build migrated the schema to this version.
    TooNew(u32),
    /// The check failed, or the version went back.
    Failed(StorageError),
}

/// The schema version as this handle knows it: checked on every reconnect, and
/// remembered once a newer one was seen (a schema's version never goes back), so
/// the handle then refuses everything without asking again.
#[derive(Debug)]
pub(crate) struct SchemaGuard {
    schema: String,
    /// The newer version seen; 0 while none was.
    newer: AtomicU32,
}

impl SchemaGuard {
    pub(crate) fn new(schema: &str) -> Self {
        Self {
            schema: schema.to_owned(),
            newer: AtomicU32::new(0),
        }
    }

    /// The newer schema version this handle has seen, if any.
    pub(crate) fn newer(&self) -> Option<u32> {
        match self.newer.load(Ordering::SeqCst) {
            0 => None,
            v => Some(v),
        }
    }

    /// Records a version read from the database; `Some(v)` if it is newer than this
    /// build's.
    fn note(&self, found: u32) -> Option<u32> {
        (found > PG_SCHEMA_VERSION).then(|| {
            self.newer.fetch_max(found, Ordering::SeqCst);
            found
        })
    }

    /// Reads the schema's version on `client` (a fresh connection, or the writer's
    /// after an answer this build does not know) and remembers a newer one.
    pub(crate) async fn check(&self, client: &Client) -> Result<(), VersionCheck> {
        if let Some(found) = self.newer() {
            return Err(VersionCheck::TooNew(found));
        }
        let found = read_version(client, &self.schema)
            .await
            .map_err(VersionCheck::Failed)?;
        if let Some(found) = self.note(found) {
            return Err(VersionCheck::TooNew(found));
        }
        if found < PG_SCHEMA_VERSION {
            return Err(VersionCheck::Failed(StorageError::msg(format!(
                "postgres: journal schema version {found} is older than this build's \
                 {PG_SCHEMA_VERSION}, which it was migrated to at connect"
            ))));
        }
        Ok(())
    }
}
