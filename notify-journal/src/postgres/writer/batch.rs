//! One batch, one statement: the `append_batch` call with the batch's arrays, and
//! its answer read back status by status.

use notify_types::{SessionId, Uuid};

use super::conn::WriterConn;
use super::failure::{Failure, classify, to_u64};
use super::queue::AppendReq;
use crate::backend::AppendOutcome;
use crate::error::{AppendError, StorageError};
use crate::postgres::error::sanitize;
use crate::postgres::frame::decode_row;
use crate::postgres::status::AppendStatus;
use crate::postgres::version::{PG_SCHEMA_VERSION, SchemaGuard, VersionCheck};

/// A collision as the batch answered it, unless the stored row's bytes fail their
/// checksum: then the row was changed behind the journal's back, and the append is
/// refused as damage, never judged against damaged bytes. (Collisions are rare; this
/// costs one more round trip each. If the row cannot be read, the collision stands.)
async fn judge_collision(conn: &WriterConn, req: &AppendReq, seq: u64) -> AppendError {
    let collision = AppendError::Collision { key: req.key, seq };
    let Ok(Some(row)) = conn
        .client
        .query_opt(&conn.stored, &[&req.session, &req.key])
        .await
    else {
        return collision;
    };
    let (Ok(bytes), Ok(checksum)) = (row.try_get::<_, &[u8]>(1), row.try_get::<_, Option<i32>>(2))
    else {
        return collision;
    };
    let session = SessionId::from_uuid(req.session);
    match decode_row(session, seq, bytes, checksum) {
        Err(crate::JournalError::Corrupt { source, .. }) => AppendError::Corrupt {
            session,
            seq,
            source,
        },
        _ => collision,
    }
}

/// One batch, one statement: `append_batch` in the statement's implicit
/// `READ COMMITTED` transaction (one round trip: Bind, Execute, Sync; the rows
/// arrive after the commit). Its answer is one row per append, in order.
///
/// A status this build does not know comes from a newer schema's `append_batch` (a
/// newer build migrated the schema while this one was connected): the batch did
/// commit, so that append may have been written. It is answered, alone, with
/// [`AppendError::SchemaTooNew`] (`outcome_unknown`) naming the version read back;
/// the other appends keep their answers (codes never change meaning), and the
/// journal refuses everything from then on.
pub(super) async fn transact(
    conn: &mut WriterConn,
    guard: &SchemaGuard,
    me: Uuid,
    batch: &[AppendReq],
) -> Result<Vec<Result<AppendOutcome, AppendError>>, Failure> {
    let mut sessions = Vec::with_capacity(batch.len());
    let mut keys = Vec::with_capacity(batch.len());
    let mut kinds = Vec::with_capacity(batch.len());
    let mut bytes: Vec<&[u8]> = Vec::with_capacity(batch.len());
    let mut epochs: Vec<Option<i64>> = Vec::with_capacity(batch.len());
    let mut checksums: Vec<i32> = Vec::with_capacity(batch.len());
    for req in batch {
        checksums.push(req.checksum);
        sessions.push(req.session);
        keys.push(req.key);
        kinds.push(req.kind);
        bytes.push(&req.bytes);
        // An epoch beyond i64 cannot match any stored one: fenced, as it should be.
        epochs.push(req.epoch.map(|e| i64::try_from(e).unwrap_or(-1)));
    }
    let rows = conn
        .client
        .query(
            &conn.append_batch,
            &[&me, &sessions, &keys, &kinds, &bytes, &epochs, &checksums],
        )
        .await
        .map_err(|e| classify(&e))?;
    if rows.len() != batch.len() {
        // Committed, but the answer does not fit the batch: unknown per append.
        return Err(Failure::Commit(StorageError::msg(
            "postgres: journal batch answered the wrong number of rows",
        )));
    }
    let mut out = Vec::with_capacity(batch.len());
    // The schema version behind an unknown status, read once per batch.
    let mut newer: Option<Result<u32, StorageError>> = None;
    for (req, row) in batch.iter().zip(&rows) {
        let read = || -> Result<(i16, i64), tokio_postgres::Error> {
            Ok((row.try_get(0)?, row.try_get(1)?))
        };
        let (status, seq) = read().map_err(|e| Failure::Commit(sanitize("journal batch", &e)))?;
        // The codes and their meaning: `postgres/status.rs`.
        out.push(match AppendStatus::from_code(status) {
            Some(AppendStatus::Collision) => Err(judge_collision(conn, req, to_u64(seq)?).await),
            Some(known) => known.answer(SessionId::from_uuid(req.session), req.key, to_u64(seq)?),
            None => {
                if newer.is_none() {
                    newer = Some(match guard.check(&conn.client).await {
                        Err(VersionCheck::TooNew(found)) => Ok(found),
                        Err(VersionCheck::Failed(e)) => Err(e),
                        Ok(()) => Err(StorageError::msg(format!(
                            "postgres: journal batch answered status {status}, unknown \
                             to schema version {PG_SCHEMA_VERSION}, which the database \
                             still records"
                        ))),
                    });
                }
                match &newer {
                    Some(Ok(found)) => Err(AppendError::SchemaTooNew {
                        found: *found,
                        supported: PG_SCHEMA_VERSION,
                        outcome_unknown: true,
                    }),
                    // Committed, answered in a way no known version defines: this
                    // append's outcome is unknown (the others' answers stand).
                    Some(Err(e)) => Err(AppendError::CommitFailed(e.clone())),
                    None => Err(AppendError::CommitFailed(StorageError::msg(
                        "postgres: journal batch answered an unknown status",
                    ))),
                }
            }
        });
    }
    Ok(out)
}
