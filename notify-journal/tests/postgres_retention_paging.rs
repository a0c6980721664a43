//! The PostgreSQL journal's retention against a real server, whole-journal: a tombstone
//! dropped under a waiting append, listings and drops in bounded statements, and a
//! deep verify whose report is the same whatever its page.
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default);
//! without either, each test says it was skipped and returns. Every test uses a fresh
//! schema of its own: a purge takes every ended session of its schema.

#![cfg(feature = "postgres")]
// Test code: a failed expectation is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod postgres_support;

use std::sync::Arc;

use notify_journal::{JournalBackend, JournalRead, PgOptions, SessionState, purge};
use notify_types::{SessionId, Timestamp, Uuid};
use postgres_support::retention::appended;
use postgres_support::{
    command, database_url, drop_schema, ended, fresh_schema, hold_row, journal, raw_client,
};

/// A tombstone dropped while an append to its session waits for the session's row
/// (after registering it found the row there) is a registration to redo, not a
/// broken batch: the append starts the session anew at seq 1, and the other appends
/// of its batch are not disturbed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tombstone_dropped_under_a_waiting_append_is_registered_again() {
    let Some(url) = database_url("a_tombstone_dropped_under_a_waiting_append_is_registered_again")
    else {
        return;
    };
    let schema = fresh_schema("ret_race");
    let j = Arc::new(journal(&url, &schema, PgOptions::default()).await);
    let s = SessionId::new();
    j.append(s, ended(s)).await.unwrap();
    purge(&*j, Timestamp::MAX, 8).await.unwrap();
    assert!(j.session_state(s).await.unwrap().is_purged());

    // A dropper that has locked the tombstone's row and not yet deleted it.
    let mut dropper = raw_client(&url).await;
    let tx = hold_row(&mut dropper, &schema, s).await;
    let append = tokio::spawn({
        let j = Arc::clone(&j);
        async move { j.append(s, command(s, Uuid::now_v7(), 0)).await }
    });
    // Bounded wait until the append is blocked on the row lock (never timed).
    let watcher = raw_client(&url).await;
    let pattern = format!("%{schema}%append_batch%");
    let mut waiting = false;
    for _ in 0..1500 {
        let n: i64 = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE wait_event_type = 'Lock' AND query LIKE $1",
                &[&pattern],
            )
            .await
            .unwrap()
            .get(0);
        if n > 0 {
            waiting = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(waiting, "the append never waited for the locked row");
    tx.execute(
        &format!("DELETE FROM \"{schema}\".sessions WHERE session = $1"),
        &[s.as_uuid()],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(append.await.unwrap().unwrap(), appended(1));
    assert_eq!(j.session_state(s).await.unwrap(), SessionState::Live);
    assert_eq!(j.last_seq(s).await.unwrap(), 1);
    j.close().await;
    drop_schema(&url, &schema).await;
}

/// `sessions()` reads the listing in pages of `page_rows`, each its own statement
/// with that LIMIT, and still answers every session in order; `drop_tombstones` with
/// a huge limit deletes in statements of at most `page_rows`, answering the total.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_journal_operations_run_in_bounded_statements() {
    let Some(url) = database_url("whole_journal_operations_run_in_bounded_statements") else {
        return;
    };
    let schema = fresh_schema("bounded");
    let j = journal(&url, &schema, PgOptions::default().page_rows(3)).await;
    let mut all: Vec<SessionId> = (0..10).map(|_| SessionId::new()).collect();
    for (i, s) in all.iter().enumerate() {
        j.append(*s, command(*s, Uuid::from_u128(i as u128 + 1), 0))
            .await
            .unwrap();
    }
    all.sort();
    // 10 sessions in pages of 3: 3 + 3 + 3 + 1, four statements.
    let before = j.read_statements();
    assert_eq!(j.sessions().await.unwrap(), all);
    assert_eq!(j.read_statements() - before, 4, "one statement per page");
    // A page that comes back full is followed by one more (here an empty one).
    let nine = &all[..9];
    for s in &all[9..] {
        j.append(*s, ended(*s)).await.unwrap();
    }
    assert_eq!(purge(&j, Timestamp::MAX, 10).await.unwrap().sessions, 1);
    // The tombstone is still listed.
    assert_eq!(j.sessions().await.unwrap(), all);

    // Seven tombstones dropped by a limit far above the page: 3 + 3 + 1.
    for s in &nine[..6] {
        j.append(*s, ended(*s)).await.unwrap();
    }
    assert_eq!(purge(&j, Timestamp::MAX, 10).await.unwrap().sessions, 6);
    let before = j.read_statements();
    assert_eq!(
        j.drop_tombstones(Timestamp::MAX, usize::MAX).await.unwrap(),
        7
    );
    assert_eq!(j.read_statements() - before, 3, "one statement per step");
    // A limit below a page, then nothing left.
    assert_eq!(j.sessions().await.unwrap(), all[6..9].to_vec());
    let before = j.read_statements();
    assert_eq!(j.sessions().await.unwrap().len(), 3);
    assert_eq!(
        j.read_statements() - before,
        2,
        "a full page, then an empty one"
    );
    assert_eq!(j.drop_tombstones(Timestamp::MAX, 2).await.unwrap(), 0);
    j.close().await;
    drop_schema(&url, &schema).await;
}

/// The deep verify reads the heads page by page alongside the frames (memory for a
/// page of each, whatever the number of sessions), and its report is the same
/// whatever the page: damage before, at and after page boundaries, sessions without
/// frames, a head behind its log, a tail cut off, and frames whose session has no
/// row (orphans: on the code before they were never read, and the report was clean
/// of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_reports_the_same_whatever_the_page() {
    let Some(url) = database_url("verify_reports_the_same_whatever_the_page") else {
        return;
    };
    let schema = fresh_schema("verify_pages");
    let j = journal(&url, &schema, PgOptions::default()).await;
    let mut sessions: Vec<SessionId> = (0..12).map(|_| SessionId::new()).collect();
    sessions.sort();
    for (i, s) in sessions.iter().enumerate() {
        for k in 0..(i % 4 + 1) {
            j.append(
                *s,
                command(*s, Uuid::from_u128((i * 10 + k) as u128 + 1), 0),
            )
            .await
            .unwrap();
        }
    }
    j.close().await;
    let raw = raw_client(&url).await;
    let q = |s: SessionId| *s.as_uuid();
    // A head behind its log, a tail cut off (head ahead), a frame gone from the middle,
    // a damaged frame, and two sessions with a head and no frames at all.
    raw.execute(
        &format!("UPDATE \"{schema}\".sessions SET last_seq = 1 WHERE session = $1"),
        &[&q(sessions[3])],
    )
    .await
    .unwrap();
    raw.execute(
        &format!("DELETE FROM \"{schema}\".frames WHERE session = $1 AND seq = 3"),
        &[&q(sessions[6])],
    )
    .await
    .unwrap();
    raw.execute(
        &format!("DELETE FROM \"{schema}\".frames WHERE session = $1 AND seq = 2"),
        &[&q(sessions[7])],
    )
    .await
    .unwrap();
    raw.execute(
        &format!(
            "UPDATE \"{schema}\".frames SET checksum = checksum + 1 WHERE session = $1 AND seq = 1"
        ),
        &[&q(sessions[10])],
    )
    .await
    .unwrap();
    for _ in 0..2 {
        raw.execute(
            &format!("INSERT INTO \"{schema}\".sessions (session, last_seq) VALUES ($1, 2)"),
            &[&Uuid::now_v7()],
        )
        .await
        .unwrap();
    }
    // Two frames of a session with no row (copies of a session's frames, moved under
    // an ID between the first two sessions': the orphans sit inside a page).
    let mut between = *sessions[0].as_uuid().as_bytes();
    between[15] = between[15].wrapping_add(1);
    let rowless = Uuid::from_bytes(between);
    assert!(rowless > *sessions[0].as_uuid() && rowless < *sessions[1].as_uuid());
    raw.batch_execute(&format!(
        "CREATE TEMP TABLE moved AS SELECT * FROM \"{schema}\".frames WHERE session = '{}';
         UPDATE moved SET session = '{rowless}';
         INSERT INTO \"{schema}\".frames SELECT * FROM moved;",
        sessions[1].as_uuid()
    ))
    .await
    .unwrap();
    let report = |rows: usize, max: usize| {
        let (url, schema) = (url.clone(), schema.clone());
        async move {
            let j = journal(&url, &schema, PgOptions::default().page_rows(rows)).await;
            let r = j.verify(max).await.unwrap();
            j.close().await;
            r
        }
    };
    let whole = report(1024, 100).await;
    assert_eq!(whole.problem_count, 8, "{whole}");
    assert_eq!(whole.sessions, 12);
    let orphans = whole
        .problems
        .iter()
        .filter(|p| matches!(p, notify_journal::Problem::Orphan { location } if location.contains(&rowless.to_string())))
        .count();
    assert_eq!(orphans, 2, "{whole}");
    for rows in [1, 2, 3, 5] {
        assert_eq!(report(rows, 100).await, whole, "pages of {rows}");
    }
    // Fewer problems kept: the first ones, and every one counted.
    for max in 0..8 {
        let r = report(2, max).await;
        assert_eq!(r.problems, whole.problems[..max].to_vec(), "keeping {max}");
        assert_eq!(r.problem_count, whole.problem_count);
    }
    drop_schema(&url, &schema).await;
}
