//! Batch acknowledgements across SIGKILLs, with real processes: a consumer that
//! receives batches (`recv_many`) and acknowledges each in one commit, while a notifier
//! keeps notifying, killed at random points over and over (each run restores what the
//! last left pending). After every kill, on the engine itself: every batch whose
//! acknowledgement returned is consumed on the record, the batch in flight at the kill
//! is consumed whole or not at all (one atomic group), and restore hands back exactly
//! the journaled notifications not consumed: none consumed is redelivered, none left
//! out. On redb the batches are also acknowledged transactionally
//! (`SessionBatch::ack_with`, a row per notification in the application's table):
//! exactly one row per consumed notification, across every kill. A final phase drains
//! what restore hands back.
//!
//! The PostgreSQL test needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the
//! local default). Set `NOTIFY_BATCH_KILL_SEED` to replay a run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod txack_kill_support;

use std::collections::HashSet;
use std::sync::Arc;

use notify_journal::{
    AppTableError, JournalBackend, PgJournal, PgOptions, RedbJournal, RedbOptions,
};
use notify_session::{SessionBatch, SessionConsumer, restore};
use notify_testkit::kill::{self, xorshift as next};
use notify_testkit::postgres::database_url;
use notify_types::Uuid;
use txack_kill_support::{
    Fixed, assert_drained_to_one_row_each, assert_exactly_once, child_runtime, journaled,
    restored_for_the_final_drain, restored_with_a_notifier,
};

const CHILD_DIR: &str = "NOTIFY_BATCH_CHILD_DIR";
const CHILD_PG: &str = "NOTIFY_BATCH_CHILD_PG_SCHEMA";
const CHILD_MODE: &str = "NOTIFY_BATCH_CHILD_MODE";
/// The child says it is acknowledging a batch: `TRY id,id,...`.
const TRY: &str = "TRY ";
/// The child says a batch's acknowledgement returned: `ACKED id,id,...`.
const ACKED: &str = "ACKED ";
const KILLS: u64 = 40;
/// The most one batch takes.
const BATCH: usize = 16;
/// The application's table: command ID -> times written.
const ROWS: &str = "app/batch_rows";

fn fixed() -> Fixed {
    Fixed::new(0x7c)
}

/// The child: restore, then notify and consume in batches until killed.
#[test]
fn batch_kill_child() {
    let Ok(mode) = std::env::var(CHILD_MODE) else {
        return;
    };
    child_runtime().block_on(async move {
        if let Ok(schema) = std::env::var(CHILD_PG) {
            let url = database_url("batch_kill_child").unwrap();
            let journal = Arc::new(pg(&url, &schema).await);
            let (_session, consumer) = restored_with_a_notifier(fixed(), journal).await;
            consume(consumer, async |batch| batch.ack().await.unwrap()).await;
            return;
        }
        let dir = std::path::PathBuf::from(std::env::var(CHILD_DIR).unwrap());
        let journal = RedbJournal::open(dir.join("journal.redb"), RedbOptions::default()).unwrap();
        let (_session, consumer) = restored_with_a_notifier(fixed(), journal.clone()).await;
        if mode == "tx" {
            consume(consumer, async |batch| ack_with_rows(&journal, batch).await).await;
        } else {
            consume(consumer, async |batch| batch.ack().await.unwrap()).await;
        }
    });
}

async fn pg(url: &str, schema: &str) -> PgJournal {
    PgJournal::connect(url, PgOptions::default().schema(schema))
        .await
        .unwrap()
}

fn line(prefix: &str, batch: &SessionBatch) -> String {
    let ids: Vec<String> = batch
        .iter()
        .map(|r| r.command_id().as_uuid().as_u128().to_string())
        .collect();
    format!("{prefix}{}", ids.join(","))
}

/// Receives batches and acknowledges each with `ack`, saying so before and after.
async fn consume(mut consumer: SessionConsumer, mut ack: impl AsyncFnMut(SessionBatch)) {
    loop {
        let batch = consumer.recv_many(BATCH).await;
        if batch.is_empty() {
            return;
        }
        let acked = line(ACKED, &batch);
        kill::say(&line(TRY, &batch)).unwrap();
        ack(batch).await;
        kill::say(&acked).unwrap();
    }
}

/// The transactional acknowledgement: a row per new consumption, in one transaction
/// with the batch's consumptions.
async fn ack_with_rows(journal: &RedbJournal, batch: SessionBatch) {
    batch
        .ack_with(journal, |t, new| {
            let mut rows = t.open_table::<u128, u64>(ROWS)?;
            for n in new {
                let id = n.command_id().as_uuid().as_u128();
                let times = if rows.contains(id)? { 2 } else { 1 };
                rows.insert(id, times)?;
            }
            Ok(())
        })
        .await
        .unwrap();
}

/// The application's rows, one entry per write (an ID written twice appears twice).
fn rows(journal: &RedbJournal) -> Vec<u128> {
    journal
        .read_app_tables(|t| {
            let Some(table) = t.open_table::<u128, u64>(ROWS)? else {
                return Ok::<_, AppTableError>(Vec::new());
            };
            let mut out = Vec::new();
            for e in table.iter()? {
                let (k, v) = e.unwrap();
                for _ in 0..v.value() {
                    out.push(k.value());
                }
            }
            Ok(out)
        })
        .unwrap()
}

fn parse(line: &str, prefix: &str) -> Vec<u128> {
    line[prefix.len()..]
        .split(',')
        .map(|id| id.parse().unwrap())
        .collect()
}

/// After one killed run, on `journal`: every acknowledged batch is consumed, the batch
/// in flight at the kill is consumed whole or not at all, and restore hands back
/// exactly journaled - consumed. The IDs acknowledged in the run.
async fn check_after_kill(
    journal: &impl JournalBackend,
    lines: &[String],
    round: u64,
) -> HashSet<u128> {
    // A killed client's last statement may still commit on a PostgreSQL server after
    // the kill: read until the record holds still across the restore.
    let (mut report, (notified, consumed)) = loop {
        let before = journaled(journal, fixed().session).await;
        let report = restore(fixed().session, journal).await.unwrap();
        if journaled(journal, fixed().session).await == before {
            break (report, before);
        }
    };
    let mut acked = HashSet::new();
    let mut in_flight = None;
    for l in lines {
        if l.starts_with(TRY) {
            in_flight = Some(parse(l, TRY));
        } else {
            let ids = parse(l, ACKED);
            assert!(
                ids.iter().all(|id| consumed.contains(id)),
                "round {round}: an acknowledged batch is not consumed on the record"
            );
            acked.extend(ids);
            in_flight = None;
        }
    }
    if let Some(batch) = in_flight {
        let journaled = batch.iter().filter(|id| consumed.contains(id)).count();
        assert!(
            journaled == 0 || journaled == batch.len(),
            "round {round}: {journaled} of the {} consumptions of the batch in flight at the kill \
             are journaled",
            batch.len()
        );
    }
    let handed: Vec<u128> = report
        .take_pending(fixed().loop_id)
        .iter()
        .map(|n| n.command_id().as_uuid().as_u128())
        .collect();
    let handed_set: HashSet<u128> = handed.iter().copied().collect();
    assert_eq!(
        handed.len(),
        handed_set.len(),
        "round {round}: handed back twice"
    );
    let left: HashSet<u128> = notified.difference(&consumed).copied().collect();
    assert_eq!(
        handed_set, left,
        "round {round}: restore must hand back exactly journaled - consumed"
    );
    acked
}

/// Runs `KILLS` children with `env`, each killed after 1 to 12 lines; `check`s the
/// engine after each kill ([`check_after_kill`] on a journal it opens). The IDs
/// acknowledged.
async fn kill_rounds(
    env: &[(&str, &str)],
    check: impl AsyncFn(&[String], u64) -> HashSet<u128>,
) -> HashSet<u128> {
    let mut seed = kill::seed("NOTIFY_BATCH_KILL_SEED");
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let mut acked = HashSet::new();
    let mut mid_batch = 0;
    for round in 0..KILLS {
        let wanted = 1 + next(&mut seed) % 12;
        let env = env.clone();
        let killed = tokio::task::spawn_blocking(move || {
            kill::run_and_kill_mid_work("batch_kill_child", env, &[TRY, ACKED], wanted)
        })
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("round {round}: {e}"));
        if killed.lines.last().is_some_and(|l| l.starts_with(TRY)) {
            mid_batch += 1;
        }
        acked.extend(check(&killed.lines, round).await);
    }
    eprintln!("{KILLS} kills, each while running; {mid_batch} with a batch in flight");
    assert!(mid_batch > 0, "no kill landed while a batch was in flight");
    acked
}

/// [`check_after_kill`] on the redb file at `path`, closed afterwards (the next child
/// opens it).
async fn check_redb(path: &std::path::Path, lines: &[String], round: u64) -> HashSet<u128> {
    let journal = RedbJournal::open(path, RedbOptions::default()).unwrap();
    let acked = check_after_kill(&journal, lines, round).await;
    journal.close();
    acked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_batches_on_redb_stay_exact_across_sigkills() {
    if std::env::var_os(CHILD_MODE).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.redb");
    let acked = kill_rounds(
        &[
            (CHILD_DIR, dir.path().to_str().unwrap()),
            (CHILD_MODE, "tx"),
        ],
        async |lines, round| check_redb(&path, lines, round).await,
    )
    .await;
    let journal = RedbJournal::open(&path, RedbOptions::default()).unwrap();
    let (_, consumed) = journaled(&journal, fixed().session).await;
    assert_exactly_once(&acked, &consumed, &rows(&journal));
    let (session, mut consumer, left, notified) =
        restored_for_the_final_drain(fixed(), journal.clone()).await;
    let mut drained = 0;
    while drained < left {
        let batch = consumer.recv_many(BATCH).await;
        drained += batch.len();
        ack_with_rows(&journal, batch).await;
    }
    drop((consumer, session));
    assert_drained_to_one_row_each(&journal, fixed(), &notified, &rows(&journal)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_batches_on_redb_stay_exact_across_sigkills() {
    if std::env::var_os(CHILD_MODE).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.redb");
    kill_rounds(
        &[
            (CHILD_DIR, dir.path().to_str().unwrap()),
            (CHILD_MODE, "plain"),
        ],
        async |lines, round| check_redb(&path, lines, round).await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_batches_on_postgres_stay_exact_across_sigkills() {
    if std::env::var_os(CHILD_MODE).is_some() {
        return;
    }
    let Some(url) = database_url("plain_batches_on_postgres_stay_exact_across_sigkills") else {
        return;
    };
    let schema = format!("batch_kill_{}", Uuid::new_v4().simple());
    let journal = pg(&url, &schema).await;
    kill_rounds(
        &[(CHILD_PG, schema.as_str()), (CHILD_MODE, "plain")],
        async |lines, round| check_after_kill(&journal, lines, round).await,
    )
    .await;
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await
        .unwrap();
}
