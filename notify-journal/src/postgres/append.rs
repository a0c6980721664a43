//! The append path: encoding and size checks, the lease epoch an append carries,
//! and handing requests to the writers' queue.

use notify_types::{JournalRecord, SessionId};
use tokio::sync::oneshot;

use super::frame::pg_checksum;
use super::options::LeasePolicy;
use super::writer::{AppendReq, GroupReq, Job};
use super::{PgJournal, lock};
use crate::backend::AppendOutcome;
use crate::error::{AppendError, StorageError};

impl PgJournal {
    pub(super) async fn append_inner(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> Result<AppendOutcome, AppendError> {
        let bytes = crate::check_append(session, &record, self.max_record_bytes)?;
        let epoch = lock(&self.leases).get(&session).copied();
        if epoch.is_none() && self.policy == LeasePolicy::Required {
            return Err(AppendError::Fenced { session });
        }
        let Some(queue) = lock(&self.queue).clone() else {
            return Err(AppendError::Closed);
        };
        let (reply, answer) = oneshot::channel();
        let (writer, pin) = queue.route(session.as_uuid());
        let req = AppendReq {
            session: *session.as_uuid(),
            key: record.key(),
            kind: record.type_name(),
            checksum: pg_checksum(&bytes),
            bytes,
            epoch,
            reply,
            _pin: pin,
        };
        writer
            .send(Job::One(req))
            .await
            .map_err(|_| self.writer_gone())?;
        drop(queue);
        // The writer answers every request it took; if it vanished mid-batch the
        // outcome is unknown.
        answer.await.map_err(|_| {
            AppendError::CommitFailed(StorageError::msg("postgres: journal writer stopped"))
        })?
    }

    pub(super) async fn append_all_inner(
        &self,
        session: SessionId,
        records: Vec<JournalRecord>,
        if_head: Option<u64>,
    ) -> Result<Vec<AppendOutcome>, AppendError> {
        let encoded = crate::check_group(session, &records, self.max_record_bytes)?;
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let epoch = lock(&self.leases).get(&session).copied();
        if epoch.is_none() && self.policy == LeasePolicy::Required {
            return Err(AppendError::Fenced { session });
        }
        let Some(queue) = lock(&self.queue).clone() else {
            return Err(AppendError::Closed);
        };
        let mut requests = Vec::with_capacity(records.len());
        let mut answers = Vec::with_capacity(records.len());
        let mut writer = None;
        for (record, bytes) in records.iter().zip(encoded) {
            let (reply, answer) = oneshot::channel();
            // One pin per record: every record of the group is on the same writer.
            let (sender, pin) = queue.route(session.as_uuid());
            writer = Some(sender);
            requests.push(AppendReq {
                session: *session.as_uuid(),
                key: record.key(),
                kind: record.type_name(),
                checksum: pg_checksum(&bytes),
                bytes,
                epoch,
                reply,
                _pin: pin,
            });
            answers.push(answer);
        }
        let group = GroupReq {
            session,
            requests,
            if_head,
        };
        let Some(writer) = writer else {
            return Ok(Vec::new());
        };
        writer
            .send(Job::Group(group))
            .await
            .map_err(|_| self.writer_gone())?;
        drop(queue);
        let mut outcomes = Vec::with_capacity(answers.len());
        for answer in answers {
            // Every record of a group is answered alike when the group is refused.
            let outcome = answer.await.map_err(|_| {
                AppendError::CommitFailed(StorageError::msg("postgres: journal writer stopped"))
            })??;
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }
}
