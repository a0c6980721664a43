//! The PostgreSQL journal's schemas migrated forward: a version-3 schema's ended
//! sessions, a version-4 schema's retries after the end made truthful, and a
//! version-7 schema's foreign key from frames to sessions dropped.
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default);
//! without either, each test says it was skipped and returns. Every test uses a fresh
//! schema of its own: a purge takes every ended session of its schema.

#![cfg(feature = "postgres")]
// Test code: a failed expectation is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod postgres_support;

use notify_journal::{
    AppendError, JournalBackend, JournalRead, PG_SCHEMA_VERSION, PgOptions, SessionState, purge,
    replay_all,
};
use notify_types::{SessionId, Timestamp, Uuid};
use postgres_support::retention::{appended, duplicate, is_ended};
use postgres_support::{
    back_to, command, consumed, database_url, drop_schema, ended, fresh_schema, journal, migrated,
    raw_client,
};

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
    let undo = format!(
        "DROP FUNCTION \"{schema}\".purge_step;
         DROP INDEX \"{schema}\".sessions_due, \"{schema}\".sessions_purging,
                    \"{schema}\".sessions_tombstones;
         ALTER TABLE \"{schema}\".sessions DROP COLUMN ended_at, DROP COLUMN purged_at,
                                           DROP COLUMN purge_done;"
    );
    back_to(&raw, &schema, 3, &undo).await;
    const { assert!(PG_SCHEMA_VERSION >= 4) };

    let j = migrated(&url, &schema, &raw).await;
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
    let source = include_str!("../src/postgres/migrations/0004_session_end_and_purge.sql");
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
    // Back to version 4: its `append_batch`, no index of version 6, and no record of
    // version 5 or later.
    let raw = raw_client(&url).await;
    let undo = format!(
        "{};
         DROP INDEX IF EXISTS \"{schema}\".sessions_orphans;",
        version_4_append_batch().replace("{s}", &format!("\"{schema}\""))
    );
    back_to(&raw, &schema, 4, &undo).await;
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

    let j = migrated(&url, &schema, &raw).await;
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

/// A database at schema version 7 (frames keyed to sessions by a foreign key, checked
/// by a trigger on every inserted frame) opens: it is migrated to the current version,
/// which has no foreign key on the frames, and its sessions go on where they were
/// (duplicates answered from the log, new appends after its head).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_7_schema_is_migrated_without_the_frames_foreign_key() {
    let Some(url) = database_url("a_version_7_schema_is_migrated_without_the_frames_foreign_key")
    else {
        return;
    };
    let schema = fresh_schema("ret_v7");
    let (one, other) = (SessionId::new(), SessionId::new());
    let keys: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
    let j = journal(&url, &schema, PgOptions::default()).await;
    for k in &keys {
        j.append(one, command(one, *k, 0)).await.unwrap();
    }
    j.append(other, command(other, keys[0], 0)).await.unwrap();
    j.close().await;
    // Back to version 7: the foreign key migration 1 made (under the name PostgreSQL
    // gives it), and no record of version 8 or later.
    let raw = raw_client(&url).await;
    let undo = format!(
        "ALTER TABLE \"{schema}\".frames DROP CONSTRAINT IF EXISTS frames_session_fkey;
         ALTER TABLE \"{schema}\".frames ADD CONSTRAINT frames_session_fkey
             FOREIGN KEY (session) REFERENCES \"{schema}\".sessions (session);"
    );
    back_to(&raw, &schema, 7, &undo).await;
    const { assert!(PG_SCHEMA_VERSION >= 8) };
    let foreign_keys = format!(
        "SELECT count(*) FROM pg_constraint
         WHERE conrelid = '\"{schema}\".frames'::regclass AND contype = 'f'"
    );
    let count: i64 = raw.query_one(&foreign_keys, &[]).await.unwrap().get(0);
    assert_eq!(count, 1, "the version-7 layout has the foreign key");

    let j = migrated(&url, &schema, &raw).await;
    let count: i64 = raw.query_one(&foreign_keys, &[]).await.unwrap().get(0);
    assert_eq!(count, 0, "migrated: no foreign key on the frames");
    assert_eq!(
        j.append(one, command(one, keys[1], 0)).await.unwrap(),
        duplicate(2)
    );
    assert_eq!(
        j.append(one, command(one, Uuid::now_v7(), 0))
            .await
            .unwrap(),
        appended(4)
    );
    assert_eq!(
        j.append(other, command(other, Uuid::now_v7(), 0))
            .await
            .unwrap(),
        appended(2)
    );
    let fresh = SessionId::new();
    assert_eq!(
        j.append(fresh, command(fresh, keys[0], 0)).await.unwrap(),
        appended(1)
    );
    assert_eq!(replay_all(&j, one).await.unwrap().len(), 4);
    assert_eq!(replay_all(&j, other).await.unwrap().len(), 2);
    j.close().await;
    drop_schema(&url, &schema).await;
}
