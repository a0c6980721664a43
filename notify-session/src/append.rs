//! Writing a session's records to its journal: one append inside a tracing span, and
//! what an append answers once the session has ended, found without writing.

use notify_journal::{
    AppendError, AppendOutcome, Corruption, JournalBackend, JournalError, StorageError,
};
use notify_types::{JournalRecord, SessionEvent, SessionId};
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

/// Appends one record, inside a `notify.append` span (info): `session`, `key` (the
/// record's ID), `kind` (its wire type), `command_id` (for a completion and a
/// consumption: the command it is about) and, once answered, `outcome` (`appended`,
/// `duplicate`, or the refusal: `collision`, `ended`, `fenced`, `failed`).
///
/// The span is made here, in the caller's task and under the caller's span (a
/// request's, over HTTP), and wraps the awaited append: the journal may batch many
/// callers' appends in one writer, whose own spans (`journal.commit`) belong to no
/// caller.
pub(crate) async fn append(
    journal: &dyn JournalBackend,
    session: SessionId,
    record: JournalRecord,
) -> Result<AppendOutcome, AppendError> {
    let span = tracing::info_span!(
        "notify.append",
        %session,
        key = %record.key(),
        kind = record.type_name(),
        command_id = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    match &record {
        JournalRecord::Command(c) => {
            span.record("command_id", tracing::field::display(c.command_id()));
        }
        JournalRecord::Event(SessionEvent::NotificationConsumed(c)) => {
            span.record("command_id", tracing::field::display(c.cause()));
        }
        JournalRecord::Event(_) => {}
    }
    let answer = journal
        .append(session, record)
        .instrument(span.clone())
        .await;
    span.record("outcome", append_outcome(&answer));
    answer
}

/// The `outcome` field of a `notify.append` span.
fn append_outcome(answer: &Result<AppendOutcome, AppendError>) -> &'static str {
    match answer {
        Ok(AppendOutcome { appended: true, .. }) => "appended",
        Ok(AppendOutcome {
            appended: false, ..
        }) => "duplicate",
        Err(AppendError::Collision { .. }) => "collision",
        Err(AppendError::SessionEnded { .. }) => "ended",
        Err(AppendError::Fenced { .. }) => "fenced",
        Err(_) => "failed",
    }
}
