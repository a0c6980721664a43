//! What a failed batch means: rolled back (nothing written, perhaps worth a retry),
//! outcome unknown, or refused for a newer schema; and the SQLSTATE classes that
//! tell them apart.

use tokio_postgres::error::SqlState;

use crate::error::StorageError;
use crate::postgres::error::sanitize;

/// How a batch failed.
pub(super) enum Failure {
    /// The batch was not sent, or the server reported an error while running it:
    /// its transaction rolled back, nothing was written. `transient`: a
    /// serialization failure or deadlock, worth retrying at once on the same
    /// connection; any other failure drops the connection.
    Before {
        error: StorageError,
        transient: bool,
    },
    /// The batch was sent but its answer never came or made no sense (lost
    /// connection, terminated backend, timeout): whether it committed is unknown.
    Commit(StorageError),
    /// The batch was not sent: the schema is at this newer version (a newer build
    /// migrated it), so this build writes nothing more.
    SchemaTooNew(u32),
}

impl Failure {
    pub(super) fn msg(text: &'static str) -> Self {
        Self::Before {
            error: StorageError::msg(text),
            transient: false,
        }
    }
}

/// SQLSTATE classes that the server raises while executing a statement, before
/// its implicit transaction commits: the batch was rolled back, nothing written.
/// Any other failure (a lost connection, a terminated backend, a server crash,
/// errors of classes 08, 57, 58, XX, ...) leaves the outcome unknown.
const ROLLED_BACK_CLASSES: &[&str] = &["22", "23", "25", "40", "42", "54", "55", "P0"];

/// Classifies a failure of the batch statement.
pub(super) fn classify(e: &tokio_postgres::Error) -> Failure {
    let error = sanitize("journal batch", e);
    match e.code() {
        Some(c) if ROLLED_BACK_CLASSES.contains(&c.code().get(..2).unwrap_or_default()) => {
            Failure::Before {
                error,
                transient: *c == SqlState::T_R_SERIALIZATION_FAILURE
                    || *c == SqlState::T_R_DEADLOCK_DETECTED,
            }
        }
        _ => Failure::Commit(error),
    }
}

pub(super) fn to_u64(v: i64) -> Result<u64, Failure> {
    u64::try_from(v).map_err(|_| Failure::Commit(StorageError::msg("postgres: negative sequence")))
}
