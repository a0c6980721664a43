//! `notify compact`: the space purges freed given back (redb: offline compaction of the
//! file; PostgreSQL: `VACUUM (ANALYZE)`).

use notify_session::notify_journal::{PgJournal, RedbJournal};
use serde_json::json;

use crate::error::{CliError, Exit};
use crate::journal::{Location, pg_options};
use crate::output::{Out, Progress};

/// `notify compact`: a redb file offline (redb's compaction gives its free pages back
/// to the file system), a PostgreSQL schema online (`VACUUM (ANALYZE)`).
pub(crate) async fn compact(at: &Location, out: &mut Out) -> Result<(), CliError> {
    let what = at.describe();
    match at {
        Location::File(path) => {
            let mut progress = Progress::new();
            progress.update(|| format!("compacting {what}"));
            let path_owned = path.clone();
            let result =
                tokio::task::spawn_blocking(move || RedbJournal::compact_file(&path_owned))
                    .await
                    .map_err(|e| {
                        CliError::new(Exit::Failed, format!("{what}: compaction failed: {e}"))
                    })?;
            progress.clear();
            let report = result.map_err(|e| CliError::open(path, &e))?;
            if out.json {
                return out.json(&json!({
                    "journal": what,
                    "bytes_before": report.bytes_before,
                    "bytes_after": report.bytes_after,
                }));
            }
            out.line(&format!(
                "{what}: compacted from {} to {} bytes",
                report.bytes_before, report.bytes_after
            ))
        }
        Location::Postgres { conninfo, schema } => {
            // Validate only: compacting never creates or migrates a schema.
            let journal = PgJournal::connect(conninfo, pg_options(schema, false))
                .await
                .map_err(|e| CliError::postgres(schema, &e))?;
            let result = journal.compact().await;
            journal.close().await;
            result.map_err(|e| CliError::journal(&what, &e))?;
            if out.json {
                return out.json(&json!({ "journal": what, "vacuumed": true }));
            }
            out.line(&format!(
                "{what}: vacuumed (purged rows' space is reused; the tables' files keep their size)"
            ))
        }
    }
}
