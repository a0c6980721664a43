//! The PostgreSQL journal's session end, purge and tombstones against a real server:
//! refusals after end and purge, truthful retries after the end, a purge in bounded
//! steps, ends inside one batch, leases held elsewhere, concurrent purgers, and
//! migrating version-3 and version-4 schemas.
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
    AppendError, AppendOutcome, JournalBackend, JournalError, JournalRead, PG_SCHEMA_VERSION,
    PgJournal, PgOptions, PurgeStep, SessionState, purge, replay_all,
};
use notify_types::{SessionId, Timestamp, Uuid};
use postgres_support::{
    command, consumed, database_url, drop_schema, ended, fresh_schema, journal, raw_client,
};

fn appended(seq: u64) -> AppendOutcome {
    AppendOutcome {
        seq,
        appended: true,
    }
}

fn duplicate(seq: u64) -> AppendOutcome {
    AppendOutcome {
        seq,
        appended: false,
    }
}

/// The next microsecond: stored times are whole microseconds, so this is the
/// earliest horizon that `t` is before.
fn just_after(t: Timestamp) -> Timestamp {
    Timestamp::from_microsecond(t.as_microsecond() + 1).unwrap()
}

async fn ended_at(j: &PgJournal, s: SessionId) -> Timestamp {
    match j.session_state(s).await.unwrap() {
        SessionState::Ended { ended_at, .. } => ended_at,
        other => panic!("{s} is not ended: {other:?}"),
    }
}

fn is_ended(r: &Result<AppendOutcome, AppendError>, s: SessionId, purged: bool) -> bool {
    matches!(r, Err(AppendError::SessionEnded { session, purged: p }) if *session == s && *p == purged)
}

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

/// A database at schema version 3 opens: it is migrated to the current version, a
/// session whose end marker version 3 journaled is ended as of that frame's commit,
/// and a live session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_3_schema_is_migrated_forward() {
    let Some(url) = database_url("a_version_3_schema_is_migrated_forward") else {
        return;
    };
    let schema = fresh_schema("ret_v3");
    let (live, done) = (SessionId::new(), SessionId::new());
    let keys: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
    let j = journal(&url, &schema, PgOptions::default()).await;
    for k in &keys {
        j.append(live, command(live, *k, 0)).await.unwrap();
        j.append(done, command(done, *k, 0)).await.unwrap();
    }
    j.append(done, ended(done)).await.unwrap();
    j.close().await;
    // Back to version 3: exactly what version 4 added is removed (the columns take
    // their check constraint with them).
    let raw = raw_client(&url).await;
    raw.batch_execute(&format!(
        "DROP FUNCTION \"{schema}\".purge_step;
         DROP INDEX \"{schema}\".sessions_due, \"{schema}\".sessions_purging,
                    \"{schema}\".sessions_tombstones;
         ALTER TABLE \"{schema}\".sessions DROP COLUMN ended_at, DROP COLUMN purged_at,
                                           DROP COLUMN purge_done;
         DELETE FROM \"{schema}\".schema_version WHERE version > 3;"
    ))
    .await
    .unwrap();
    const { assert!(PG_SCHEMA_VERSION >= 4) };

    let j = journal(&url, &schema, PgOptions::default()).await;
    let version: i32 = raw
        .query_one(
            &format!("SELECT max(version) FROM \"{schema}\".schema_version"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(u32::try_from(version).unwrap(), PG_SCHEMA_VERSION);
    let committed: std::time::SystemTime = raw
        .query_one(
            &format!("SELECT committed_at FROM \"{schema}\".frames WHERE session = $1 AND seq = 4"),
            &[done.as_uuid()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        j.session_state(done).await.unwrap(),
        SessionState::Ended {
            ended_at: Timestamp::try_from(committed).unwrap(),
            last_seq: 4
        }
    );
    assert!(is_ended(
        &j.append(done, command(done, Uuid::now_v7(), 0)).await,
        done,
        false
    ));
    assert_eq!(j.append(done, ended(done)).await.unwrap(), duplicate(4));
    assert_eq!(j.session_state(live).await.unwrap(), SessionState::Live);
    assert_eq!(
        j.append(live, command(live, keys[1], 0)).await.unwrap(),
        duplicate(2)
    );
    assert_eq!(
        j.append(live, command(live, Uuid::now_v7(), 0))
            .await
            .unwrap(),
        appended(4)
    );
    assert_eq!(replay_all(&j, done).await.unwrap().len(), 4);
    let report = purge(&j, Timestamp::MAX, 2).await.unwrap();
    assert_eq!((report.sessions, report.frames, report.steps), (1, 4, 2));
    j.close().await;
    drop_schema(&url, &schema).await;
}

/// The `append_batch` a version-4 schema has: migration 4's, as this build's source
/// holds it (migrations never change once shipped).
fn version_4_append_batch() -> String {
    let source = include_str!("../src/postgres/migrations.rs");
    let start = source
        .find("CREATE OR REPLACE FUNCTION {s}.append_batch(")
        .expect("migration 4 replaces append_batch");
    let len = source[start..]
        .find("$fn$;")
        .expect("the function's body ends")
        + "$fn$;".len();
    source[start..start + len].to_owned()
}

/// A database at schema version 4 (where an ended session refuses every key) opens: it
/// is migrated to version 5, and a retry after the end of a record journaled before it
/// is then answered truthfully — a duplicate at its seq, a collision for other bytes —
/// while a new key is refused and a purged session refuses every key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_4_schema_is_migrated_to_truthful_retries_after_the_end() {
    let Some(url) =
        database_url("a_version_4_schema_is_migrated_to_truthful_retries_after_the_end")
    else {
        return;
    };
    let schema = fresh_schema("ret_v4");
    let (done, other) = (SessionId::new(), SessionId::new());
    let keys: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
    let j = journal(&url, &schema, PgOptions::default()).await;
    for k in &keys {
        j.append(done, command(done, *k, 0)).await.unwrap();
        j.append(other, command(other, *k, 0)).await.unwrap();
    }
    let cause = notify_types::CommandId::from_uuid(keys[0]);
    j.append(done, consumed(done, cause)).await.unwrap();
    j.append(done, ended(done)).await.unwrap();
    j.append(other, ended(other)).await.unwrap();
    j.close().await;
    // Back to version 4: its `append_batch`, and no record of version 5.
    let raw = raw_client(&url).await;
    raw.batch_execute(&format!(
        "{};
         DELETE FROM \"{schema}\".schema_version WHERE version > 4;",
        version_4_append_batch().replace("{s}", &format!("\"{schema}\""))
    ))
    .await
    .unwrap();
    const { assert!(PG_SCHEMA_VERSION >= 5) };
    // What version 4 answers a retry of a consumed notification: ended (status 5).
    let call = format!(
        "SELECT o_status, o_seq FROM \"{schema}\".append_batch($1, $2, $3, $4, $5, $6, $7)"
    );
    let retry = command(done, keys[0], 0);
    let old: (i16, i64) = {
        let row = raw
            .query_one(
                &call,
                &[
                    &Uuid::now_v7(),
                    &vec![*done.as_uuid()],
                    &vec![keys[0]],
                    &vec![retry.type_name()],
                    &vec![retry.encode()],
                    &vec![None::<i64>],
                    &vec![i32::from_be_bytes(
                        notify_journal::__private::frame_checksum(&retry.encode()).to_be_bytes(),
                    )],
                ],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(old, (5, 0), "version 4 refuses the retry");

    let j = journal(&url, &schema, PgOptions::default()).await;
    let version: i32 = raw
        .query_one(
            &format!("SELECT max(version) FROM \"{schema}\".schema_version"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(u32::try_from(version).unwrap(), PG_SCHEMA_VERSION);
    assert_eq!(j.append(done, retry).await.unwrap(), duplicate(1));
    assert_eq!(
        j.append(done, command(done, keys[2], 0)).await.unwrap(),
        duplicate(3)
    );
    assert_eq!(
        j.append(done, consumed(done, cause)).await.unwrap(),
        duplicate(4)
    );
    assert!(matches!(
        j.append(done, command(done, keys[1], 7)).await,
        Err(AppendError::Collision { key, seq: 2 }) if key == keys[1]
    ));
    assert!(is_ended(
        &j.append(done, command(done, Uuid::now_v7(), 0)).await,
        done,
        false
    ));
    assert!(is_ended(
        &j.append(
            done,
            consumed(done, notify_types::CommandId::from_uuid(keys[1]))
        )
        .await,
        done,
        false
    ));
    assert_eq!(j.append(done, ended(done)).await.unwrap(), duplicate(5));
    assert_eq!(j.last_seq(done).await.unwrap(), 5);
    assert_eq!(replay_all(&j, done).await.unwrap().len(), 5);

    // Purged: every key is refused, a journaled one too.
    purge(&j, Timestamp::MAX, 16).await.unwrap();
    for r in [
        command(done, keys[0], 0),
        command(done, keys[1], 7),
        command(done, Uuid::now_v7(), 0),
        ended(done),
    ] {
        assert!(is_ended(&j.append(done, r).await, done, true));
    }
    assert_eq!(j.last_seq(done).await.unwrap(), 5);
    j.close().await;
    drop_schema(&url, &schema).await;
}

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
    let tx = dropper.transaction().await.unwrap();
    tx.execute(
        &format!("SELECT 1 FROM \"{schema}\".sessions WHERE session = $1 FOR UPDATE"),
        &[s.as_uuid()],
    )
    .await
    .unwrap();
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
/// frames, a head behind its log and a tail cut off.
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
    assert_eq!(whole.problem_count, 6, "{whole}");
    assert_eq!(whole.sessions, 12);
    for rows in [1, 2, 3, 5] {
        assert_eq!(report(rows, 100).await, whole, "pages of {rows}");
    }
    // Fewer problems kept: the first ones, and every one counted.
    for max in 0..6 {
        let r = report(2, max).await;
        assert_eq!(r.problems, whole.problems[..max].to_vec(), "keeping {max}");
        assert_eq!(r.problem_count, whole.problem_count);
    }
    drop_schema(&url, &schema).await;
}
