//! Effectively once on redb, with real processes: a consumer that, for each
//! notification, appends a row to its own table and acknowledges in one transaction
//! (`SessionReceived::ack_with`), while a notifier keeps notifying, killed with SIGKILL
//! at random points over and over (each run restores what the last left pending).
//! Afterwards the application's table holds exactly one row per notification the
//! journal records as consumed: none twice, none missing. Every kill is proven to land
//! mid-work (the child running, past its start). A final phase restores: what it hands
//! back is exactly what was journaled and not consumed; drained, the table holds one
//! row per journaled notification.
//!
//! The same consumer with a plain `ack` after a separate write (its own redb file)
//! shows the duplicates at-least-once allows: printed, not a failure.
//!
//! Set `NOTIFY_TXACK_KILL_SEED` to replay a run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod txack_kill_support;

use notify_journal::{AppTableError, RedbJournal, RedbOptions};
use notify_session::SessionReceived;
use notify_testkit::kill;
use txack_kill_support::{
    Fixed, assert_drained_to_one_row_each, assert_exactly_once, at_least_once, child_runtime,
    journaled, kill_rounds, restored_for_the_final_drain, restored_with_a_notifier, say_acked,
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

/// The session and loop every child run restores.
fn fixed() -> Fixed {
    Fixed::new(0x7a)
}

/// The child: restore, then notify and consume (transactionally or plainly) until
/// killed. Prints `ACK <id>` once an acknowledgement returned.
#[test]
fn txack_kill_child() {
    let (Ok(dir), Ok(mode)) = (std::env::var(CHILD_DIR), std::env::var(CHILD_MODE)) else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    child_runtime().block_on(async move {
        let journal = RedbJournal::open(dir.join("journal.redb"), RedbOptions::default()).unwrap();
        let (_session, mut consumer) = restored_with_a_notifier(fixed(), journal.clone()).await;
        let plain =
            (mode == "plain").then(|| redb::Database::create(dir.join("app.redb")).unwrap());
        while let Some(received) = consumer.recv().await {
            let id = received.command_id().as_uuid().as_u128();
            match &plain {
                None => consume_tx(&journal, received).await,
                Some(app) => consume_plain(app, received).await,
            }
            say_acked(id);
        }
    });
}

/// The transactional consumer: its row and the acknowledgement in one transaction.
async fn consume_tx(journal: &RedbJournal, received: SessionReceived) {
    let id = received.command_id().as_uuid().as_u128();
    received
        .ack_with(journal, move |tables| {
            let mut rows = tables.open_table::<u64, u128>(ROWS)?;
            let n = rows.len()?;
            rows.insert(n, id)?;
            Ok(())
        })
        .await
        .unwrap();
}

/// The plain consumer: its row committed in its own file, then a plain ack.
async fn consume_plain(app: &redb::Database, received: SessionReceived) {
    let id = received.command_id().as_uuid().as_u128();
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

/// The transactional consumer's rows.
fn tx_rows(journal: &RedbJournal) -> Vec<u128> {
    journal
        .read_app_tables(|t| {
            let Some(table) = t.open_table::<u64, u128>(ROWS)? else {
                return Ok::<_, AppTableError>(Vec::new());
            };
            Ok(table.iter()?.map(|e| e.unwrap().1.value()).collect())
        })
        .unwrap()
}

/// The plain consumer's rows.
fn plain_rows(app: &redb::Database) -> Vec<u128> {
    use redb::{ReadableDatabase as _, ReadableTable as _};
    let txn = app.begin_read().unwrap();
    match txn.open_table(PLAIN_ROWS) {
        Ok(t) => t.iter().unwrap().map(|e| e.unwrap().1.value()).collect(),
        Err(_) => Vec::new(),
    }
}

/// Runs `kills` children of `mode` against `dir`; the IDs they acknowledged.
fn kill_children(dir: &std::path::Path, mode: &str, kills: u64) -> std::collections::HashSet<u128> {
    let mut seed = kill::seed("NOTIFY_TXACK_KILL_SEED");
    kill_rounds(
        "txack_kill_child",
        [(CHILD_DIR, dir.to_str().unwrap()), (CHILD_MODE, mode)],
        kills,
        &mut seed,
    )
}

#[test]
fn transactional_acks_leave_exactly_one_row_per_consumed_notification_across_sigkills() {
    if std::env::var_os(CHILD_DIR).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let acked = kill_children(dir.path(), "tx", TX_KILLS);

    let journal =
        RedbJournal::open(dir.path().join("journal.redb"), RedbOptions::default()).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (notified, consumed) = rt.block_on(journaled(&journal, fixed().session));
    let rows = tx_rows(&journal);
    assert_exactly_once(&acked, &consumed, &rows);
    assert!(consumed.is_subset(&notified));
    eprintln!(
        "transactional ack: {TX_KILLS} kills, {} journaled, {} consumed, {} rows, 0 duplicates",
        notified.len(),
        consumed.len(),
        rows.len()
    );

    // The final phase: what the kills left journaled and unconsumed comes back, and
    // draining it leaves one row per journaled notification.
    rt.block_on(async {
        let (session, mut consumer, left, notified) =
            restored_for_the_final_drain(fixed(), journal.clone()).await;
        for _ in 0..left {
            consume_tx(&journal, consumer.recv().await.unwrap()).await;
        }
        drop((consumer, session));
        assert_drained_to_one_row_each(&journal, fixed(), &notified, &tx_rows(&journal)).await;
    });
}

#[test]
fn plain_acks_after_a_separate_write_allow_duplicates_across_sigkills() {
    if std::env::var_os(CHILD_DIR).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let acked = kill_children(dir.path(), "plain", PLAIN_KILLS);

    let journal =
        RedbJournal::open(dir.path().join("journal.redb"), RedbOptions::default()).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_, consumed) = rt.block_on(journaled(&journal, fixed().session));
    let app = redb::Database::create(dir.path().join("app.redb")).unwrap();
    let rows = plain_rows(&app);
    // At least once still holds: every consumption has its row.
    let duplicates = at_least_once(&acked, &consumed, &rows);
    // The final phase: what the kills left pending comes back; drained, every
    // journaled notification has its row (some twice: at least once).
    rt.block_on(async {
        let (session, mut consumer, left, notified) =
            restored_for_the_final_drain(fixed(), journal.clone()).await;
        for _ in 0..left {
            consume_plain(&app, consumer.recv().await.unwrap()).await;
        }
        drop((consumer, session));
        let rows = plain_rows(&app);
        let (_, consumed) = journaled(&journal, fixed().session).await;
        assert_eq!(consumed, notified, "consumed after the drain");
        at_least_once(&notified, &consumed, &rows);
    });
    eprintln!(
        "plain ack after a separate write: {PLAIN_KILLS} kills, {} consumed, {} rows, \
         {duplicates} duplicate rows (at-least-once)",
        consumed.len(),
        rows.len()
    );
}
