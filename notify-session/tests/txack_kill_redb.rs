//! Effectively once on redb, with real processes: a consumer that, for each
//! notification, appends a row to its own table and acknowledges in one transaction
//! (`SessionReceived::ack_with`), while a notifier keeps notifying, killed with SIGKILL
//! at random points over and over (each run restores what the last left pending).
//! Afterwards the application's table holds exactly one row per notification the
//! journal records as consumed: none twice, none missing.
//!
//! The same consumer with a plain `ack` after a separate write (its own redb file)
//! shows the duplicates at-least-once allows: printed, not a failure.
//!
//! Set `NOTIFY_TXACK_KILL_SEED` to replay a run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use notify_journal::{AppTableError, RedbJournal, RedbOptions, replay_all};
use notify_loop::LoopConfig;
use notify_session::{Session, restore};
use notify_testkit::kill::{self, xorshift as next};
use notify_types::{
    CommandId, JournalRecord, LoopId, NotifyError, ProcessCompletionNotification,
    ProcessLifecycleState, ProcessTerminalReason, SessionEvent, SessionId, Uuid,
};

const CHILD_DIR: &str = "NOTIFY_TXACK_CHILD_DIR";
const CHILD_MODE: &str = "NOTIFY_TXACK_CHILD_MODE";
/// Kills of the transactional consumer.
const TX_KILLS: u64 = 200;
/// Kills of the plain consumer (for the duplicate count).
const PLAIN_KILLS: u64 = 60;
/// The application's table: row number -> command ID.
const ROWS: &str = "app/rows";
const PLAIN_ROWS: redb::TableDefinition<'_, u64, u128> = redb::TableDefinition::new("rows");

fn session_id() -> SessionId {
    SessionId::from_uuid(Uuid::from_u128(0x7a_0000_0000_0000_0000_0000_0000_0001))
}

fn loop_id() -> LoopId {
    LoopId::from_uuid(Uuid::from_u128(0x7a_0000_0000_0000_0000_0000_0000_0002))
}

fn notification(id: CommandId) -> ProcessCompletionNotification {
    ProcessCompletionNotification {
        command_id: id,
        session_id: session_id(),
        loop_id: loop_id(),
        process_handle: format!("job-{id}"),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }
}

/// The child: restore, then notify and consume (transactionally or plainly) until
/// killed. Prints `ACK <id>` once an acknowledgement returned.
#[test]
fn txack_kill_child() {
    let (Ok(dir), Ok(mode)) = (std::env::var(CHILD_DIR), std::env::var(CHILD_MODE)) else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let journal = RedbJournal::open(dir.join("journal.redb"), RedbOptions::default()).unwrap();
        let mut report = restore(session_id(), &journal).await.unwrap();
        let session = Session::new(session_id(), journal.clone());
        let mut consumer = session
            .register_loop(
                LoopConfig::new(session_id(), loop_id()).seed(report.take_pending(loop_id())),
            )
            .unwrap();
        let notifier = session.clone();
        tokio::spawn(async move {
            loop {
                let n = notification(CommandId::new());
                // Full: retry the same notification (its frame is journaled).
                while let Err(NotifyError::DeliveryStopped { .. }) =
                    notifier.notify_process_completion(n.clone()).await
                {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        });
        let plain =
            (mode == "plain").then(|| redb::Database::create(dir.join("app.redb")).unwrap());
        while let Some(received) = consumer.recv().await {
            let id = received.command_id().as_uuid().as_u128();
            match &plain {
                None => received
                    .ack_with(&journal, move |tables| {
                        let mut rows = tables.open_table::<u64, u128>(ROWS)?;
                        let n = rows.len()?;
                        rows.insert(n, id)?;
                        Ok(())
                    })
                    .await
                    .unwrap(),
                Some(app) => {
                    let txn = app.begin_write().unwrap();
                    {
                        use redb::ReadableTableMetadata as _;
                        let mut rows = txn.open_table(PLAIN_ROWS).unwrap();
                        let n = rows.len().unwrap();
                        rows.insert(n, id).unwrap();
                    }
                    txn.commit().unwrap();
                    received.ack().await.unwrap();
                }
            }
            kill::say(&format!("ACK {id}")).unwrap();
        }
    });
}

/// What the journal records: notifications journaled, and those consumed.
async fn journaled(journal: &RedbJournal) -> (HashSet<u128>, HashSet<u128>) {
    let mut notified = HashSet::new();
    let mut consumed = HashSet::new();
    for (_, record) in replay_all(journal, session_id()).await.unwrap() {
        match record {
            JournalRecord::Command(n) => {
                notified.insert(n.command_id().as_uuid().as_u128());
            }
            JournalRecord::Event(SessionEvent::NotificationConsumed(c)) => {
                assert!(
                    consumed.insert(c.cause().as_uuid().as_u128()),
                    "consumed twice in the journal"
                );
            }
            _ => {}
        }
    }
    (notified, consumed)
}

/// Runs `kills` children of `mode` against `dir`, each killed after a random number
/// of acknowledgements; the IDs they acknowledged.
fn kill_rounds(dir: &std::path::Path, mode: &str, kills: u64, seed: &mut u64) -> HashSet<u128> {
    let mut acked = HashSet::new();
    for _ in 0..kills {
        let wanted = next(seed) % 12;
        let lines = kill::run_and_kill(
            "txack_kill_child",
            [(CHILD_DIR, dir.to_str().unwrap()), (CHILD_MODE, mode)],
            &["ACK "],
            wanted,
        )
        .unwrap();
        for line in lines {
            acked.insert(line["ACK ".len()..].parse::<u128>().unwrap());
        }
    }
    acked
}

/// Counts each command ID's rows.
fn counts(rows: impl IntoIterator<Item = u128>) -> HashMap<u128, usize> {
    let mut counts = HashMap::new();
    for id in rows {
        *counts.entry(id).or_insert(0) += 1;
    }
    counts
}

#[test]
fn transactional_acks_leave_exactly_one_row_per_consumed_notification_across_sigkills() {
    if std::env::var_os(CHILD_DIR).is_some() {
        return;
    }
    let mut seed = kill::seed("NOTIFY_TXACK_KILL_SEED");
    let dir = tempfile::tempdir().unwrap();
    let acked = kill_rounds(dir.path(), "tx", TX_KILLS, &mut seed);

    let journal =
        RedbJournal::open(dir.path().join("journal.redb"), RedbOptions::default()).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (notified, consumed) = rt.block_on(journaled(&journal));
    let rows: Vec<u128> = journal
        .read_app_tables(|t| {
            let Some(table) = t.open_table::<u64, u128>(ROWS)? else {
                return Ok::<_, AppTableError>(Vec::new());
            };
            Ok(table.iter()?.map(|e| e.unwrap().1.value()).collect())
        })
        .unwrap();
    let counts = counts(rows.iter().copied());
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "rows written twice: {twice:?}");
    let with_rows: HashSet<u128> = counts.keys().copied().collect();
    assert_eq!(with_rows, consumed, "rows and consumptions differ");
    assert!(consumed.is_subset(&notified));
    assert!(
        acked.is_subset(&consumed),
        "an acknowledged notification is not consumed"
    );
    assert!(!consumed.is_empty());
    eprintln!(
        "transactional ack: {TX_KILLS} kills, {} journaled, {} consumed, {} rows, 0 duplicates",
        notified.len(),
        consumed.len(),
        rows.len()
    );
}

#[test]
fn plain_acks_after_a_separate_write_allow_duplicates_across_sigkills() {
    if std::env::var_os(CHILD_DIR).is_some() {
        return;
    }
    let mut seed = kill::seed("NOTIFY_TXACK_KILL_SEED");
    let dir = tempfile::tempdir().unwrap();
    let acked = kill_rounds(dir.path(), "plain", PLAIN_KILLS, &mut seed);

    let journal =
        RedbJournal::open(dir.path().join("journal.redb"), RedbOptions::default()).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_, consumed) = rt.block_on(journaled(&journal));
    let app = redb::Database::create(dir.path().join("app.redb")).unwrap();
    let rows: Vec<u128> = {
        use redb::{ReadableDatabase as _, ReadableTable as _};
        let txn = app.begin_read().unwrap();
        match txn.open_table(PLAIN_ROWS) {
            Ok(t) => t.iter().unwrap().map(|e| e.unwrap().1.value()).collect(),
            Err(_) => Vec::new(),
        }
    };
    let counts = counts(rows.iter().copied());
    let duplicates: usize = counts.values().map(|n| n - 1).sum();
    // At least once still holds: every consumption has its row.
    assert!(consumed.iter().all(|id| counts.contains_key(id)));
    assert!(acked.is_subset(&consumed));
    eprintln!(
        "plain ack after a separate write: {PLAIN_KILLS} kills, {} consumed, {} rows, \
         {duplicates} duplicate rows (at-least-once)",
        consumed.len(),
        rows.len()
    );
}
