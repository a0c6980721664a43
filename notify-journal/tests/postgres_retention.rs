//! The PostgreSQL journal's session end, purge and tombstones against a real server:
//! refusals after end and purge, truthful retries after the end, a purge in bounded
//! steps, ends inside one batch, leases held elsewhere and concurrent purgers.
//! Migrating version-3 and version-4 schemas is in `postgres_retention_migration.rs`;
//! re-registration after a drop and bounded whole-journal statements in
//! `postgres_retention_paging.rs`.
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default);
//! without either, each test says it was skipped and returns. Every test uses a fresh
//! schema of its own: a purge takes every ended session of its schema.
#![cfg(feature = "postgres")]
// Test code: a failed expectation is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod postgres_support;

use std::sync::Arc;

use notify_journal::{
    AppendError, JournalBackend, JournalError, JournalRead, PgOptions, PurgeStep, SessionState,
    purge, replay_all,
};
use notify_types::{SessionId, Timestamp, Uuid};
use postgres_support::retention::{appended, duplicate, ended_at, is_ended, just_after};
use postgres_support::{
    command, database_url, drop_schema, ended, fresh_schema, hold_row, journal, raw_client,
};

/// End, refusals, a purge in bounded steps (the tombstone from the first step, never
/// a partial log), the refusals after it, and dropping the tombstone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_purge_in_steps_and_drop_the_tombstone() {
    let Some(url) = database_url("end_purge_in_steps_and_drop_the_tombstone") else {
        return;
    };
    let schema = fresh_schema("ret_steps");
    let j = journal(&url, &schema, PgOptions::default()).await;
    let (s, live) = (SessionId::new(), SessionId::new());
    let keys: Vec<Uuid> = (0..4).map(|_| Uuid::now_v7()).collect();
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(
            j.append(s, command(s, *k, 0)).await.unwrap(),
            appended(i as u64 + 1)
        );
    }
    j.append(live, command(live, Uuid::now_v7(), 0))
        .await
        .unwrap();
    assert_eq!(j.session_state(s).await.unwrap(), SessionState::Live);
    assert_eq!(j.append(s, ended(s)).await.unwrap(), appended(5));
    let end = ended_at(&j, s).await;
    assert_eq!(
        j.session_state(s).await.unwrap(),
        SessionState::Ended {
            ended_at: end,
            last_seq: 5
        }
    );

    // Ended: new records are refused; a retry of an old one is answered from the
    // index (a duplicate, or a collision); the marker deduplicates.
    assert!(is_ended(
        &j.append(s, command(s, Uuid::now_v7(), 0)).await,
        s,
        false
    ));
    assert_eq!(
        j.append(s, command(s, keys[0], 0)).await.unwrap(),
        duplicate(1)
    );
    assert!(matches!(
        j.append(s, command(s, keys[0], 1)).await,
        Err(AppendError::Collision { key, seq: 1 }) if key == keys[0]
    ));
    assert_eq!(j.append(s, ended(s)).await.unwrap(), duplicate(5));
    assert_eq!(replay_all(&j, s).await.unwrap().len(), 5);

    // Not yet due at its own end time (strictly before).
    assert_eq!(j.purge_step(end, 2).await.unwrap(), PurgeStep::IDLE);

    // Step 1 of 3: the tombstone, two frames gone, nothing of the log answered.
    let step = j.purge_step(just_after(end), 2).await.unwrap();
    assert_eq!(
        step,
        PurgeStep {
            session: Some(s),
            frames_removed: 2,
            finished: false
        }
    );
    let SessionState::Purged(tomb) = j.session_state(s).await.unwrap() else {
        panic!("not purged after its first step");
    };
    assert_eq!((tomb.ended_at, tomb.last_seq, tomb.frames), (end, 5, 5));
    assert!(tomb.purged_at >= end);
    assert!(matches!(
        j.replay(s, 1, 100).await,
        Err(JournalError::Purged { session }) if session == s
    ));
    assert!(matches!(
        j.lookup(s, keys[3]).await,
        Err(JournalError::Purged { session }) if session == s
    ));
    assert_eq!(j.last_seq(s).await.unwrap(), 5);
    assert!(j.sessions().await.unwrap().contains(&s));
    assert!(is_ended(&j.append(s, ended(s)).await, s, true));
    // A partly removed log is not damage.
    let report = j.verify(100).await.unwrap();
    assert!(report.problems.is_empty(), "{report}");

    // An unfinished purge is finished whatever the horizon.
    let step = j.purge_step(Timestamp::MIN, 2).await.unwrap();
    assert_eq!((step.session, step.frames_removed), (Some(s), 2));
    let step = j.purge_step(Timestamp::MIN, 2).await.unwrap();
    assert_eq!(
        step,
        PurgeStep {
            session: Some(s),
            frames_removed: 1,
            finished: true
        }
    );
    assert_eq!(
        j.purge_step(Timestamp::MAX, 2).await.unwrap(),
        PurgeStep::IDLE
    );

    // Purged: every append is refused, retries and the marker too.
    for r in [
        command(s, keys[1], 0),
        command(s, Uuid::now_v7(), 0),
        ended(s),
    ] {
        assert!(is_ended(&j.append(s, r).await, s, true));
    }
    assert_eq!(j.last_seq(s).await.unwrap(), 5);
    assert_eq!(j.sessions_after(None, 10).await.unwrap().len(), 2);
    // The live session was never touched.
    assert_eq!(
        j.append(live, command(live, Uuid::now_v7(), 0))
            .await
            .unwrap(),
        appended(2)
    );

    // Tombstones go after their own horizon (strictly after the purge began).
    assert_eq!(j.drop_tombstones(tomb.purged_at, 10).await.unwrap(), 0);
    assert_eq!(j.drop_tombstones(Timestamp::MIN, 10).await.unwrap(), 0);
    assert_eq!(
        j.drop_tombstones(just_after(tomb.purged_at), 10)
            .await
            .unwrap(),
        1
    );
    assert_eq!(j.session_state(s).await.unwrap(), SessionState::Live);
    assert_eq!(j.last_seq(s).await.unwrap(), 0);
    assert_eq!(j.sessions().await.unwrap(), vec![live]);
    // Unknown again: the documented cost of dropping a tombstone.
    assert_eq!(
        j.append(s, command(s, keys[0], 0)).await.unwrap(),
        appended(1)
    );
    j.close().await;
    drop_schema(&url, &schema).await;
}

/// Inside one batch, the appends after a session's end marker are answered as after its
/// commit: a new key is refused, a key journaled before the marker (earlier in the
/// batch) is a duplicate; the marker's duplicate is a duplicate, other bytes under its
/// key collide, and another session of the batch is untouched. Called on
/// `append_batch` directly, so the batch's make-up is certain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_inside_one_batch_refuses_what_follows_it() {
    let Some(url) = database_url("an_end_inside_one_batch_refuses_what_follows_it") else {
        return;
    };
    let schema = fresh_schema("ret_batch");
    let j = journal(&url, &schema, PgOptions::default()).await;
    let raw = raw_client(&url).await;
    let (s, t) = (SessionId::new(), SessionId::new());
    let (k1, k2, kt) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let kend = ended(s).key();
    let rows = [
        (s, k1, "Cmd", b"a".as_slice()),
        (s, kend, "SessionEnded", b"end"),
        (t, kt, "Cmd", b"t"),
        (s, k2, "Cmd", b"b"),
        (s, kend, "SessionEnded", b"end"),
        (s, kend, "SessionEnded", b"other"),
        (s, k1, "Cmd", b"a"),
    ];
    let sessions: Vec<Uuid> = rows.iter().map(|r| *r.0.as_uuid()).collect();
    let keys: Vec<Uuid> = rows.iter().map(|r| r.1).collect();
    let kinds: Vec<&str> = rows.iter().map(|r| r.2).collect();
    let bytes: Vec<&[u8]> = rows.iter().map(|r| r.3).collect();
    let epochs: Vec<Option<i64>> = vec![None; rows.len()];
    let sums: Vec<i32> = vec![0; rows.len()];
    let answer: Vec<(i16, i64)> = raw
        .query(
            &format!(
                "SELECT o_status, o_seq FROM \"{schema}\".append_batch($1, $2, $3, $4, $5, $6, $7)"
            ),
            &[
                &Uuid::now_v7(),
                &sessions,
                &keys,
                &kinds,
                &bytes,
                &epochs,
                &sums,
            ],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        answer,
        vec![(0, 1), (0, 2), (0, 1), (5, 0), (1, 2), (2, 2), (1, 1)]
    );
    assert!(matches!(
        j.session_state(s).await.unwrap(),
        SessionState::Ended { last_seq: 2, .. }
    ));
    assert_eq!(j.session_state(t).await.unwrap(), SessionState::Live);
    j.close().await;
    drop_schema(&url, &schema).await;
}

/// Only the lease holder ends a session, and a session whose lease another writer
/// holds live is not purged until that lease is released; the holder may purge it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_held_elsewhere_blocks_ending_and_purging() {
    let Some(url) = database_url("a_lease_held_elsewhere_blocks_ending_and_purging") else {
        return;
    };
    let schema = fresh_schema("ret_lease");
    let me = journal(&url, &schema, PgOptions::default()).await;
    let other = journal(&url, &schema, PgOptions::default()).await;
    let (s, u) = (SessionId::new(), SessionId::new());
    other.acquire_lease(s).await.unwrap();
    other.acquire_lease(u).await.unwrap();
    let first = Uuid::now_v7();
    for x in [s, u] {
        other.append(x, command(x, first, 0)).await.unwrap();
    }

    // Ending is an append: without the lease it is fenced.
    assert!(matches!(
        me.append(s, ended(s)).await,
        Err(AppendError::Fenced { session }) if session == s
    ));
    assert_eq!(me.session_state(s).await.unwrap(), SessionState::Live);
    for x in [s, u] {
        assert_eq!(other.append(x, ended(x)).await.unwrap(), appended(2));
    }
    let horizon = just_after(ended_at(&other, u).await.max(ended_at(&other, s).await));
    // Nothing can be written to an ended session, so its answers do not depend on the
    // lease: without it, a retry of a journaled record is a duplicate, other bytes
    // collide, and a new record is refused as ended (never `Fenced`).
    assert_eq!(
        me.append(s, command(s, first, 0)).await.unwrap(),
        duplicate(1)
    );
    assert!(matches!(
        me.append(s, command(s, first, 1)).await,
        Err(AppendError::Collision { seq: 1, .. })
    ));
    assert!(is_ended(
        &me.append(s, command(s, Uuid::now_v7(), 0)).await,
        s,
        false
    ));

    // Both are due, but the lease is another writer's: nothing for `me`.
    assert_eq!(me.purge_step(horizon, 10).await.unwrap(), PurgeStep::IDLE);
    assert!(matches!(
        me.session_state(s).await.unwrap(),
        SessionState::Ended { .. }
    ));

    // The holder purges its own sessions; once it lets `s` go, so may anyone.
    other.release_lease(s).await.unwrap();
    let first = me.purge_step(horizon, 10).await.unwrap();
    assert_eq!(
        first,
        PurgeStep {
            session: Some(s),
            frames_removed: 2,
            finished: true
        }
    );
    assert_eq!(me.purge_step(horizon, 10).await.unwrap(), PurgeStep::IDLE);
    let report = purge(&other, horizon, 10).await.unwrap();
    assert_eq!((report.sessions, report.frames), (1, 2));
    assert!(other.session_state(u).await.unwrap().is_purged());
    // A purged session refuses even its lease holder.
    assert!(is_ended(
        &other.append(u, command(u, Uuid::now_v7(), 0)).await,
        u,
        true
    ));
    me.close().await;
    other.close().await;
    drop_schema(&url, &schema).await;
}

/// Two journals purging the same schema at once share the work: every session is
/// purged exactly once, every frame removed exactly once, while a live session takes
/// appends throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_purgers_share_the_work() {
    let Some(url) = database_url("concurrent_purgers_share_the_work") else {
        return;
    };
    let schema = fresh_schema("ret_many");
    let a = Arc::new(journal(&url, &schema, PgOptions::default()).await);
    let b = Arc::new(journal(&url, &schema, PgOptions::default()).await);
    let mut ended_sessions = Vec::new();
    for _ in 0..16 {
        let s = SessionId::new();
        for _ in 0..4 {
            a.append(s, command(s, Uuid::now_v7(), 0)).await.unwrap();
        }
        a.append(s, ended(s)).await.unwrap();
        ended_sessions.push(s);
    }
    let mut last_end = Timestamp::MIN;
    for s in &ended_sessions {
        last_end = last_end.max(ended_at(&a, *s).await);
    }
    let horizon = just_after(last_end);
    let live = SessionId::new();
    let writer = {
        let a = Arc::clone(&a);
        tokio::spawn(async move {
            for i in 1..=50 {
                let got = a.append(live, command(live, Uuid::now_v7(), 0)).await;
                assert_eq!(got.unwrap(), appended(i));
            }
        })
    };
    let pa = tokio::spawn({
        let a = Arc::clone(&a);
        async move { purge(&*a, horizon, 3).await }
    });
    let pb = tokio::spawn({
        let b = Arc::clone(&b);
        async move { purge(&*b, horizon, 3).await }
    });
    let (ra, rb) = (pa.await.unwrap().unwrap(), pb.await.unwrap().unwrap());
    writer.await.unwrap();
    assert_eq!(ra.sessions + rb.sessions, 16, "{ra:?} {rb:?}");
    assert_eq!(ra.frames + rb.frames, 16 * 5, "{ra:?} {rb:?}");
    for s in &ended_sessions {
        assert!(a.session_state(*s).await.unwrap().is_purged());
    }
    assert_eq!(replay_all(&*a, live).await.unwrap().len(), 50);
    a.close().await;
    b.close().await;
    drop_schema(&url, &schema).await;
}

/// A purge never answers "nothing due" while a session it left part-purged is only
/// locked by another transaction for a moment (an append refused because the session
/// is purged, or another purger passing over the row): it waits for the lock and
/// finishes the session. Before, the purge skipped the locked row and returned with
/// the session's last frames still stored; two concurrent purgers could both do so
/// (`concurrent_purgers_share_the_work` failed that way, now and then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_waits_for_a_part_purged_session_locked_elsewhere() {
    let Some(url) = database_url("a_purge_waits_for_a_part_purged_session_locked_elsewhere") else {
        return;
    };
    let schema = fresh_schema("ret_wait");
    let j = Arc::new(journal(&url, &schema, PgOptions::default()).await);
    let s = SessionId::new();
    for _ in 0..4 {
        j.append(s, command(s, Uuid::now_v7(), 0)).await.unwrap();
    }
    j.append(s, ended(s)).await.unwrap();
    let horizon = just_after(ended_at(&j, s).await);
    let first = j.purge_step(horizon, 3).await.unwrap();
    assert_eq!((first.frames_removed, first.finished), (3, false));

    // Another transaction holds the tombstone's row, as an append to it does.
    let mut holder = raw_client(&url).await;
    let tx = hold_row(&mut holder, &schema, s).await;
    let purging = tokio::spawn({
        let j = Arc::clone(&j);
        async move { purge(&*j, horizon, 3).await }
    });
    // Let go once the purge waits for the row (or has answered without waiting).
    let watcher = raw_client(&url).await;
    let waiting = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
         AND query LIKE '%{schema}%purge_step%'"
    );
    let mut waited = false;
    tokio::time::timeout(postgres_support::HANG_GUARD, async {
        while !purging.is_finished() {
            let n: i64 = watcher.query_one(&waiting, &[]).await.unwrap().get(0);
            if n > 0 {
                waited = true;
                break;
            }
        }
    })
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let first = purging.await.unwrap().unwrap();
    assert!(
        waited,
        "the purge answered {first:?} without waiting for the row"
    );
    // Let go within the wait's bound (250 ms), the purge finishes the session; a
    // machine so loaded that it did not leaves it to the next purge.
    let next = purge(&*j, horizon, 3).await.unwrap();
    assert_eq!(
        (first.sessions + next.sessions, first.frames + next.frames),
        (1, 2),
        "{first:?} {next:?}"
    );
    assert_eq!(j.purge_step(horizon, 3).await.unwrap(), PurgeStep::IDLE);
    j.close().await;
    drop_schema(&url, &schema).await;
}

/// The wait for a part-purged session's row is bounded (250 ms): a transaction that
/// holds it longer (an application's) leaves the session to a later purge, which
/// finishes it once the row is free, and does not hold up the purge of any other
/// session, started or part-purged. The purge runs on the journal's read connection,
/// whose other reads would wait with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_leaves_a_session_held_past_its_wait_to_a_later_purge() {
    let Some(url) = database_url("a_purge_leaves_a_session_held_past_its_wait_to_a_later_purge")
    else {
        return;
    };
    let schema = fresh_schema("ret_held");
    let j = journal(&url, &schema, PgOptions::default()).await;
    // `held` ends first and so is purged first; it is also first in session order.
    let (held, other) = (SessionId::new(), SessionId::new());
    assert!(held.as_uuid() < other.as_uuid());
    for s in [held, other] {
        for _ in 0..4 {
            j.append(s, command(s, Uuid::now_v7(), 0)).await.unwrap();
        }
        j.append(s, ended(s)).await.unwrap();
    }
    let horizon = just_after(ended_at(&j, other).await);
    let first = j.purge_step(horizon, 3).await.unwrap();
    assert_eq!(
        (first.session, first.frames_removed, first.finished),
        (Some(held), 3, false)
    );

    let mut holder = raw_client(&url).await;
    let tx = hold_row(&mut holder, &schema, held).await;
    // Held throughout: the purge gives up waiting for it, and purges `other`
    // whole, its part-purged steps included.
    let report = purge(&j, horizon, 3).await.unwrap();
    assert_eq!((report.sessions, report.frames), (1, 5), "{report:?}");
    assert!(j.session_state(other).await.unwrap().is_purged());
    tx.commit().await.unwrap();
    let report = purge(&j, horizon, 3).await.unwrap();
    assert_eq!((report.sessions, report.frames), (1, 2), "{report:?}");
    assert!(j.session_state(held).await.unwrap().is_purged());
    j.close().await;
    drop_schema(&url, &schema).await;
}
