//! The transactional acknowledgement (`SessionReceived::ack_with`) in the model: a
//! commit acknowledges and writes the application's row, a rollback does neither and
//! hands the notification again, and a crash while it is under way leaves both or
//! neither. The application table holds exactly one row per transactional ack the
//! journal records, never two.

use notify_journal::{AppTableError, RedbJournal};
use notify_session::{AckError, SessionReceived, TxAckError};
use notify_types::consumed_event_id;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::real::{Real, ack, crash_then, poll_then_drop, recv};
use crate::reference::Model;

/// The application's rows: command -> 1.
const ROWS: &str = "app/rows";
/// A row written a second time would land here.
const TWICE: &str = "app/twice";

/// Acknowledges `received` transactionally, writing its row; `fail`: the application
/// refuses after writing, so the transaction rolls back.
async fn ack_with(
    journal: &RedbJournal,
    received: SessionReceived,
    fail: bool,
) -> Result<(), TxAckError> {
    let key = received.command_id().as_uuid().as_u128();
    received
        .ack_with(journal, move |t| {
            let mut rows = t.open_table::<u128, u64>(ROWS)?;
            if rows.contains(key)? {
                t.open_table::<u128, u64>(TWICE)?.insert(key, 1)?;
            }
            rows.insert(key, 1)?;
            if fail {
                return Err("the application refused".into());
            }
            Ok(())
        })
        .await
}

/// Receives from `lp` and acknowledges transactionally (plainly on the in-memory
/// journal, which has no application tables).
pub(crate) async fn tx_ack(
    real: &mut Real,
    model: &mut Model,
    lp: usize,
    fail: bool,
) -> Result<(), TestCaseError> {
    let Some(received) = recv(real, model, lp).await? else {
        return Ok(());
    };
    let Some(journal) = real.redb.clone() else {
        return ack(real, model, lp, received).await;
    };
    let id = received.command_id();
    let result = ack_with(&journal, received, fail).await;
    if model.refusal().is_some() {
        prop_assert!(
            matches!(result, Err(TxAckError::Ack(AckError::SessionEnded { .. }))),
            "transactional ack of {id} after the end: {result:?}"
        );
    } else if fail {
        // Rolled back: nothing acknowledged, handed again first (as a drop).
        prop_assert!(
            matches!(result, Err(TxAckError::Write(_))),
            "failing transactional ack of {id}: {result:?}"
        );
    } else {
        prop_assert!(result.is_ok(), "transactional ack of {id}: {result:?}");
        real.acked.insert(id);
        real.tx_rows.insert(id);
        model.ack(lp, id);
    }
    check_rows(real)
}

/// Receives from `lp`, starts a transactional ack, drops it after `polls` polls and
/// crashes: after the restart the row and the consumption are both there or neither.
pub(crate) async fn tx_ack_crash(
    real: &mut Real,
    model: &mut Model,
    lp: usize,
    polls: usize,
) -> Result<(), TestCaseError> {
    let Some(received) = recv(real, model, lp).await? else {
        return Ok(());
    };
    let Some(journal) = real.redb.clone() else {
        drop(received);
        return crash_then(real, model, None).await;
    };
    let id = received.command_id();
    let done = poll_then_drop(ack_with(&journal, received, false), polls).await;
    drop(journal);
    let unseen = match done {
        Some(result) if model.refusal().is_some() => {
            prop_assert!(
                matches!(result, Err(TxAckError::Ack(AckError::SessionEnded { .. }))),
                "transactional ack of {id} after the end: {result:?}"
            );
            None
        }
        Some(result) => {
            prop_assert!(result.is_ok(), "transactional ack of {id}: {result:?}");
            real.acked.insert(id);
            real.tx_rows.insert(id);
            model.ack(lp, id);
            None
        }
        None => {
            // Committed or not: the reopened journal says; its event may or may not
            // have been broadcast.
            model
                .maybe_unbroadcast
                .insert(*consumed_event_id(id).as_uuid());
            Some((lp, id))
        }
    };
    crash_then(real, model, unseen).await?;
    check_rows(real)
}

/// The application table holds exactly the transactionally acknowledged commands, each
/// once.
fn check_rows(real: &Real) -> Result<(), TestCaseError> {
    let Some(journal) = &real.redb else {
        return Ok(());
    };
    let (rows, twice) = journal
        .read_app_tables(|t| {
            let keys = |name: &str| -> Result<Vec<u128>, AppTableError> {
                let Some(table) = t.open_table::<u128, u64>(name)? else {
                    return Ok(Vec::new());
                };
                Ok(table.iter()?.map(|e| e.unwrap().0.value()).collect())
            };
            Ok::<_, AppTableError>((keys(ROWS)?, keys(TWICE)?))
        })
        .unwrap();
    prop_assert!(twice.is_empty(), "rows written twice: {twice:?}");
    let rows: std::collections::HashSet<u128> = rows.into_iter().collect();
    let want: std::collections::HashSet<u128> = real
        .tx_rows
        .iter()
        .map(|id| id.as_uuid().as_u128())
        .collect();
    prop_assert_eq!(rows, want, "the application's rows");
    Ok(())
}
