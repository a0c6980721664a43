//! An append inside a transaction the application runs on its own connection
//! ([`PgJournal::append_in`], or [`PgJournal::append_statement`] for another driver):
//! the journal's own `append_batch` function, so that the duplicate check, the lease
//! fencing and the numbering are the writer's, and the application's writes and the
//! record commit or roll back together (see `docs/postgres.md`).

use notify_types::{JournalRecord, SessionId, Uuid};
use tokio_postgres::types::{ToSql, Type};

use super::error::sanitize;
use super::frame::pg_checksum;
use super::options::LeasePolicy;
use super::status::AppendStatus;
use super::{PgJournal, lock};
use crate::backend::AppendOutcome;
use crate::error::{AppendError, StorageError};

/// One append as a statement and its parameters, to run inside the application's own
/// transaction with any PostgreSQL driver. Run [`sql`](Self::sql) with the seven
/// parameters in order (`uuid`, `uuid`, `uuid`, `text`, `bytea`, `int8` or NULL,
/// `int4`); it answers one row (`o_status int2`, `o_seq int8`): hand both to
/// [`answer`](Self::answer). If it answers an error, roll the transaction back.
///
/// With sqlx, for example:
///
/// ```text
/// let row: (i16, i64) = sqlx::query_as(&st.sql)
///     .bind(st.holder).bind(st.session).bind(st.key).bind(st.kind)
///     .bind(&st.bytes).bind(st.epoch).bind(st.checksum)
///     .fetch_one(&mut *tx).await?;
/// st.answer(row.0, row.1)?;          // Err: roll back
/// tx.commit().await?;
/// ```
#[derive(Debug, Clone)]
pub struct PgAppendStatement {
    /// The statement (schema-qualified; parameters `$1` to `$7`).
    pub sql: String,
    /// `$1`: this journal's lease-holder identity.
    pub holder: Uuid,
    /// `$2`: the session.
    pub session: Uuid,
    /// `$3`: the record's key.
    pub key: Uuid,
    /// `$4`: the record's kind.
    pub kind: &'static str,
    /// `$5`: the record's encoded bytes.
    pub bytes: Vec<u8>,
    /// `$6`: the epoch of the journal's lease on the session, `None` (NULL) when it
    /// holds none.
    pub epoch: Option<i64>,
    /// `$7`: the bytes' checksum.
    pub checksum: i32,
}

impl PgAppendStatement {
    /// The seven parameters in order, for tokio-postgres.
    #[must_use]
    pub fn params(&self) -> [&(dyn ToSql + Sync); 7] {
        [
            &self.holder,
            &self.session,
            &self.key,
            &self.kind,
            &self.bytes,
            &self.epoch,
            &self.checksum,
        ]
    }

    /// [`params`](Self::params) with their PostgreSQL types, in the same order, for
    /// drivers that send a statement without preparing it first (tokio-postgres'
    /// `query_typed`): `uuid`, `uuid`, `uuid`, `text`, `bytea`, `int8`, `int4`.
    #[must_use]
    pub fn typed_params(&self) -> [(&(dyn ToSql + Sync), Type); 7] {
        let [holder, session, key, kind, bytes, epoch, checksum] = self.params();
        [
            (holder, Type::UUID),
            (session, Type::UUID),
            (key, Type::UUID),
            (kind, Type::TEXT),
            (bytes, Type::BYTEA),
            (epoch, Type::INT8),
            (checksum, Type::INT4),
        ]
    }

    /// What the statement's row (`o_status`, `o_seq`) means: the record was appended
    /// (`appended: true`) or already journaled identically (`appended: false`, at its
    /// original seq), else the refusal. Either answer holds once the transaction
    /// commits; on an error, roll it back.
    ///
    /// # Errors
    ///
    /// [`AppendError::Collision`], [`AppendError::Fenced`] (another holder's lease, or
    /// this journal's lease lost), [`AppendError::SessionEnded`],
    /// [`AppendError::Corrupt`] (the stored frame's checksum disagrees), or
    /// [`AppendError::Storage`] for an answer this build does not know.
    pub fn answer(&self, status: i16, seq: i64) -> Result<AppendOutcome, AppendError> {
        let session = SessionId::from_uuid(self.session);
        let seq_u64 = || {
            u64::try_from(seq).map_err(|_| {
                AppendError::Storage(StorageError::msg(format!(
                    "postgres: append answered a negative seq {seq}"
                )))
            })
        };
        // The codes and their meaning: `postgres/status.rs`.
        match AppendStatus::from_code(status) {
            Some(known) => known.answer(session, self.key, seq_u64()?),
            None => Err(AppendError::Storage(StorageError::msg(format!(
                "postgres: append answered status {status}, unknown to this build \
                 (a newer schema?)"
            )))),
        }
    }

    /// [`answer`](Self::answer) for the statement's row as tokio-postgres returns it.
    pub(crate) fn answer_row(
        &self,
        row: &tokio_postgres::Row,
    ) -> Result<AppendOutcome, AppendError> {
        let read = || -> Result<(i16, i64), tokio_postgres::Error> {
            Ok((row.try_get(0)?, row.try_get(1)?))
        };
        let (status, seq) =
            read().map_err(|e| AppendError::Storage(sanitize("append's answer", &e)))?;
        self.answer(status, seq)
    }
}

impl PgJournal {
    /// The append of `record` to `session` as a statement to run inside a transaction
    /// of the application's own, with any driver ([`PgAppendStatement`]). The checks
    /// are the journal's: the record's validity and size here, and in the statement
    /// the duplicate check, the lease fencing (with this journal's lease epoch, as of
    /// this call) and the numbering of the writer's own `append_batch`.
    ///
    /// # Errors
    ///
    /// What [`check_append`](crate::check_append) refuses; [`AppendError::Fenced`]
    /// when the journal requires a lease ([`LeasePolicy::Required`]) and holds none
    /// on `session`; [`AppendError::Closed`] once closed.
    pub fn append_statement(
        &self,
        session: SessionId,
        record: &JournalRecord,
    ) -> Result<PgAppendStatement, AppendError> {
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(AppendError::Closed);
        }
        let bytes = crate::check_append(session, record, self.max_record_bytes)?;
        let epoch = lock(&self.leases).get(&session).copied();
        if epoch.is_none() && self.policy == LeasePolicy::Required {
            return Err(AppendError::Fenced { session });
        }
        Ok(PgAppendStatement {
            sql: self.sql.append_one.clone(),
            holder: self.holder,
            session: *session.as_uuid(),
            key: record.key(),
            kind: record.type_name(),
            checksum: pg_checksum(&bytes),
            bytes,
            // An epoch beyond i64 cannot match any stored one: fenced, as it should be.
            epoch: epoch.map(|e| i64::try_from(e).unwrap_or(-1)),
        })
    }

    /// Appends `record` to `session` inside `tx`, a transaction the application runs
    /// on its own connection (to the journal's database), beside its own writes: the
    /// record commits with them or not at all. The statement is the journal's own
    /// `append_batch` ([`append_statement`](Self::append_statement)), so a duplicate,
    /// a fenced or ended session and the numbering are judged as for any append.
    ///
    /// The append locks the session's row until `tx` ends: the journal's other appends
    /// to that session wait for it, and so does a takeover of the session's lease
    /// (the lease row is locked `FOR KEY SHARE`; renewals are not held up), so keep
    /// the transaction short. On an error, roll `tx` back.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the statement's outcome unknown inside `tx`: roll
    /// `tx` back (dropping it does) and append again in a new transaction.
    ///
    /// # Errors
    ///
    /// As [`append_statement`](Self::append_statement) and
    /// [`PgAppendStatement::answer`]; [`AppendError::Storage`] when the statement
    /// fails (the transaction is then aborted).
    pub async fn append_in(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
        session: SessionId,
        record: &JournalRecord,
    ) -> Result<AppendOutcome, AppendError> {
        let st = self.append_statement(session, record)?;
        // With its parameters' types given, the statement goes out as one round trip
        // (parse, bind and execute together), not a prepare and then an execute.
        let row = tx
            .query_typed_one(&st.sql, &st.typed_params())
            .await
            .map_err(|e| {
                AppendError::Storage(sanitize("append in the application's transaction", &e))
            })?;
        st.answer_row(&row)
    }
}
