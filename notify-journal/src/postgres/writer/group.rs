//! Atomic groups: one transaction around one `append_batch` call, committed only
//! if every record was taken, and what each record of the group is told.

use notify_types::Uuid;

use super::batch::transact;
use super::conn::WriterConn;
use super::failure::{Failure, classify};
use super::queue::GroupReq;
use crate::backend::AppendOutcome;
use crate::error::{AppendError, StorageError};
use crate::group::{GroupVerdict, judge_group};
use crate::postgres::version::SchemaGuard;

/// What every record of an atomic group is told.
pub(super) enum GroupAnswer {
    /// Committed: each record's outcome, in order.
    Committed(Vec<AppendOutcome>),
    /// Refused or failed as a whole.
    Refused(AppendError),
}

impl GroupAnswer {
    /// The answer of the group's record at `index`.
    pub(super) fn of(&self, index: usize) -> Result<AppendOutcome, AppendError> {
        match self {
            Self::Committed(outcomes) => outcomes.get(index).copied().ok_or_else(|| {
                AppendError::CommitFailed(StorageError::msg(
                    "postgres: journal group answered the wrong number of rows",
                ))
            }),
            Self::Refused(e) => Err(e.clone()),
        }
    }
}

/// An atomic group: `BEGIN`, one `append_batch` call with the group's records, then
/// `COMMIT` if every record was taken (appended or a duplicate) and the head was the
/// expected one, else `ROLLBACK` and the refusal naming the first refused record.
/// `commit_sent` is set just before the `COMMIT` goes out: until then a failure
/// leaves nothing written.
pub(super) async fn transact_group(
    conn: &mut WriterConn,
    guard: &SchemaGuard,
    me: Uuid,
    group: &GroupReq,
    commit_sent: &mut bool,
) -> Result<Result<Vec<AppendOutcome>, AppendError>, Failure> {
    // Until the COMMIT is sent, nothing can have committed, whatever the failure.
    let rolled_back = |failure: Failure| match failure {
        Failure::Commit(error) => Failure::Before {
            error,
            transient: false,
        },
        before => before,
    };
    conn.client
        .batch_execute("BEGIN")
        .await
        .map_err(|e| rolled_back(classify(&e)))?;
    let results = transact(conn, guard, me, &group.requests)
        .await
        .map_err(rolled_back)?;
    let outcomes = match judge_group(
        group.session,
        group.if_head,
        results
            .into_iter()
            .map(|result| result.map_err(rolled_back_refusal)),
    ) {
        GroupVerdict::Commit(outcomes) => outcomes,
        GroupVerdict::Refuse { refusal, .. } => {
            conn.client
                .batch_execute("ROLLBACK")
                .await
                .map_err(|e| rolled_back(classify(&e)))?;
            return Ok(Err(refusal));
        }
    };
    *commit_sent = true;
    conn.client
        .batch_execute("COMMIT")
        .await
        .map_err(|e| classify(&e))?;
    Ok(Ok(outcomes))
}

/// A record's refusal inside a group's transaction, which is then rolled back: nothing
/// of the group was written, whatever a one-statement batch's answer would have meant
/// (an unknown status there may have committed; here the `ROLLBACK` follows).
fn rolled_back_refusal(e: AppendError) -> AppendError {
    match e {
        AppendError::SchemaTooNew {
            found, supported, ..
        } => AppendError::SchemaTooNew {
            found,
            supported,
            outcome_unknown: false,
        },
        AppendError::CommitFailed(error) => AppendError::Storage(error),
        other => other,
    }
}
