//! The PostgreSQL journal's writers and busy sessions: every append to a session goes
//! to one writer, so a session whose row is locked (by another host, a lease or purge
//! statement) holds up only that writer, however many appends to it wait; the other
//! writers keep committing the other sessions.
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default);
//! without either, each test says it was skipped and returns.
#![cfg(feature = "postgres")]
// Test code: a failed expectation is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod postgres_support;

use std::sync::Arc;
use std::time::Duration;

use notify_journal::{AppendOutcome, JournalBackend, JournalRead, PgOptions, replay_all};
use notify_types::{SessionId, Uuid};
use postgres_support::{
    HANG_GUARD, command, database_url, drop_schema, fresh_schema, hold_row, journal, raw_client,
};

/// Another connection holds a session's row lock while as many appends to that
/// session as the journal has writers wait for it: appends to other sessions still
/// commit meanwhile (before, every writer took one of the waiting appends, the
/// journal stalled until the lock wait timed out, and the waiting appends failed).
/// Once the lock is released every waiting append commits, gap-free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_session_holds_up_only_its_own_writer() {
    let Some(url) = database_url("a_locked_session_holds_up_only_its_own_writer") else {
        return;
    };
    let schema = fresh_schema("hot");
    let writers = 3;
    let j = Arc::new(journal(&url, &schema, PgOptions::default().writers(writers)).await);
    // Fixed IDs: which writer each session goes to is then fixed too.
    let hot = SessionId::from_uuid(Uuid::from_u128(1));
    let others: Vec<SessionId> = (2..=17_u128)
        .map(|n| SessionId::from_uuid(Uuid::from_u128(n)))
        .collect();
    j.append(hot, command(hot, Uuid::now_v7(), 0))
        .await
        .unwrap();

    let mut locker = raw_client(&url).await;
    let tx = hold_row(&mut locker, &schema, hot).await;
    let waiting: Vec<_> = (0..writers)
        .map(|_| {
            let j = Arc::clone(&j);
            tokio::spawn(async move { j.append(hot, command(hot, Uuid::now_v7(), 0)).await })
        })
        .collect();
    // Until a batch of this schema waits for the lock (the appends were taken).
    let watcher = raw_client(&url).await;
    tokio::time::timeout(HANG_GUARD, async {
        loop {
            let n: i64 = watcher
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0",
                    &[&schema],
                )
                .await
                .unwrap()
                .get(0);
            if n > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("hang guard: no append waited for the lock");

    let mut rest = tokio::task::JoinSet::new();
    for &s in &others {
        let j = Arc::clone(&j);
        rest.spawn(async move { j.append(s, command(s, Uuid::now_v7(), 0)).await });
    }
    // One of them commits while the hot row is still locked.
    let first = tokio::time::timeout(HANG_GUARD, rest.join_next())
        .await
        .expect("hang guard")
        .expect("a task")
        .unwrap();
    assert_eq!(
        first.unwrap(),
        AppendOutcome {
            seq: 1,
            appended: true
        }
    );

    tx.rollback().await.unwrap();
    let mut seqs = Vec::new();
    for w in waiting {
        let outcome = w.await.unwrap().expect("the waiting append commits");
        assert!(outcome.appended);
        seqs.push(outcome.seq);
    }
    seqs.sort_unstable();
    assert_eq!(seqs, vec![2, 3, 4], "gap-free after the first frame");
    while let Some(done) = rest.join_next().await {
        assert!(done.unwrap().unwrap().appended);
    }
    assert_eq!(replay_all(&*j, hot).await.unwrap().len(), 4);
    for &s in &others {
        assert_eq!(j.last_seq(s).await.unwrap(), 1);
    }
    j.close().await;
    drop_schema(&url, &schema).await;
}
