//! Writing a session's records to its journal: one append inside a tracing span, and
//! what an append answers once the session has ended, found without writing.

use notify_journal::{
    AppendError, AppendOutcome, Corruption, JournalBackend, JournalError, StorageError,
};
use notify_types::{JournalRecord, SessionId};
use tracing::Instrument as _;

/// What appending `record` to `session`, a session that has ended, answers, found
/// without writing anything: the original seq (`appended: false`) when the identical
/// record is journaled under its key, [`AppendError::Collision`] when another record
/// is, and [`AppendError::SessionEnded`] when the key is not journaled or the session
/// was purged — the journal's own answers after the end (`JournalBackend::append`).
/// A read failure is the matching [`AppendError`] (damage is `Corrupt`, never an
/// answer).
pub(crate) async fn answer_after_end(
    journal: &dyn JournalBackend,
    session: SessionId,
    record: &JournalRecord,
) -> Result<AppendOutcome, AppendError> {
    let key = record.key();
    let read = |e: JournalError| match e {
        JournalError::Purged { .. } => AppendError::SessionEnded {
            session,
            purged: true,
        },
        JournalError::Corrupt {
            session,
            seq,
            source,
        } => AppendError::Corrupt {
            session,
            seq,
            source,
        },
        JournalError::Closed => AppendError::Closed,
        JournalError::Storage(e) => AppendError::Storage(e),
        other => AppendError::Storage(StorageError::new("journal read after the end", other)),
    };
    let span = tracing::debug_span!("answer_after_end", %session, %key);
    async {
        let Some(seq) = journal.lookup(session, key).await.map_err(read)? else {
            return Err(AppendError::SessionEnded {
                session,
                purged: false,
            });
        };
        let frames = journal.replay(session, seq, 1).await.map_err(read)?;
        match frames.first() {
            Some((at, stored)) if *at == seq => {
                if stored.encode() == record.encode() {
                    Ok(AppendOutcome {
                        seq,
                        appended: false,
                    })
                } else {
                    Err(AppendError::Collision { key, seq })
                }
            }
            _ => Err(AppendError::Corrupt {
                session,
                seq,
                source: Corruption::Missing,
            }),
        }
    }
    .instrument(span)
    .await
}

/// Appends one record, inside an `append` tracing span.
pub(crate) async fn append(
    journal: &dyn JournalBackend,
    session: SessionId,
    record: JournalRecord,
) -> Result<AppendOutcome, AppendError> {
    let span =
        tracing::debug_span!("append", %session, key = %record.key(), kind = record.type_name());
    journal.append(session, record).instrument(span).await
}
