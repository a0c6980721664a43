//! Rolling upgrades of the PostgreSQL journal's schema, against a real server.
//!
//! * An older build against a schema a newer build migrated refuses with typed
//!   errors naming both versions: an append answered with a status only the newer
//!   schema defines is `SchemaTooNew` with its outcome unknown (it may have
//!   committed), alone in its batch; every reconnect checks the version.
//! * A migration over two million frames completes although it runs far longer
//!   than the operation timeout.
//!
//! How the "older build" is simulated: this build is the older one. What a newer
//! build's migration leaves behind is made with SQL: its recorded version (this
//! build's + 1) and, for the unknown status, `append_batch` replaced in place
//! (`CREATE OR REPLACE`, as a real migration does) by a version that answers a
//! status code this build does not know. That is all an older build can see of a
//! newer schema, so nothing about this build is faked (no test hook changes what it
//! believes its own version is).
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default);
//! without either, each test says it was skipped and returns.
#![cfg(feature = "postgres")]
// Test code: a failed expectation is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod postgres_support;

use std::time::Duration;

use notify_journal::{
    AppendError, AppendOutcome, JournalBackend, JournalError, JournalRead, LeaseError,
    PG_SCHEMA_VERSION, PgJournal, PgOpenError, PgOptions, SessionState, replay_all,
};
use notify_types::{CommandId, JournalRecord, SessionId, Uuid};
use postgres_support::{
    command, conninfo_with, consumed, database_url, drop_schema, ended, fresh_schema, hold_row,
    journal, raw_client, version_1,
};

/// The version a newer build would record.
fn newer() -> u32 {
    PG_SCHEMA_VERSION + 1
}

/// Frames of `session` in `schema`, counted directly.
async fn frames(raw: &tokio_postgres::Client, schema: &str, session: SessionId) -> i64 {
    raw.query_one(
        &format!("SELECT count(*) FROM \"{schema}\".frames WHERE session = $1"),
        &[session.as_uuid()],
    )
    .await
    .unwrap()
    .get(0)
}

/// What a newer build's migration leaves behind: its version recorded, and, with
/// `new_status_for`, `append_batch` replaced in place by one that answers status 7
/// (unknown to this build) for appends of that record kind it wrote, keeping every
/// other answer. The replacement calls the current function's body, copied under
/// another name, so it depends on no particular version of it.
async fn newer_build_migrates(
    raw: &tokio_postgres::Client,
    schema: &str,
    new_status_for: Option<&str>,
) {
    let mut sql = format!(
        "INSERT INTO \"{schema}\".schema_version (version) VALUES ({});",
        newer()
    );
    if let Some(kind) = new_status_for {
        let row = raw
            .query_one(
                "SELECT pg_get_functiondef(p.oid), pg_get_function_arguments(p.oid),
                        pg_get_function_result(p.oid),
                        array_to_string(p.proargnames[1:p.pronargs], ', ')
                 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                 WHERE n.nspname = $1 AND p.proname = 'append_batch'",
                &[&schema],
            )
            .await
            .unwrap();
        let (def, args, result, names): (String, String, String, String) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        assert!(def.contains("append_batch("), "{def}");
        let older = def.replacen("append_batch(", "append_batch_older(", 1);
        sql.push_str(&older);
        sql.push_str(&format!(
            ";
             CREATE OR REPLACE FUNCTION \"{schema}\".append_batch({args}) RETURNS {result}
             LANGUAGE sql VOLATILE AS $fn$
                 SELECT CASE WHEN b.o_status = 0 AND p_kind[b.n::int] = '{kind}' THEN 7::int2
                             ELSE b.o_status END,
                        b.o_seq
                 FROM \"{schema}\".append_batch_older({names})
                      WITH ORDINALITY AS b(o_status, o_seq, n)
             $fn$;"
        ));
    }
    raw.batch_execute(&format!("BEGIN; {sql} COMMIT;"))
        .await
        .unwrap();
}

fn schema_too_new(e: &AppendError, unknown: bool) -> bool {
    matches!(
        e,
        AppendError::SchemaTooNew { found, supported, outcome_unknown }
            if *found == newer() && *supported == PG_SCHEMA_VERSION && *outcome_unknown == unknown
    )
}

/// A newer build replaced `append_batch` while this (older) build was connected:
/// an append answered with a status only the newer schema defines is
/// `SchemaTooNew` with its outcome unknown (and it did commit), the other appends
/// keep their answers, and from then on the handle refuses everything, typed,
/// sending nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_status_is_schema_too_new_for_that_append_alone() {
    let Some(url) = database_url("an_unknown_status_is_schema_too_new_for_that_append_alone")
    else {
        return;
    };
    let schema = fresh_schema("upg_status");
    let j = journal(&url, &schema, PgOptions::default().writers(2)).await;
    let raw = raw_client(&url).await;
    let (s, s2) = (SessionId::new(), SessionId::new());
    let k0 = Uuid::now_v7();
    // Both at once, so they go to the two writers (an idle session goes to the least
    // busy one) and each writer has its connection from before the migration; a
    // writer that connects after it refuses at connect (tested below).
    let (first, second) = tokio::join!(
        j.append(s, command(s, k0, 0)),
        j.append(s2, command(s2, Uuid::now_v7(), 0))
    );
    assert!(first.unwrap().appended);
    assert!(second.unwrap().appended);
    let answered_anew = consumed(s, CommandId::from_uuid(k0));
    newer_build_migrates(&raw, &schema, Some(answered_anew.type_name())).await;

    // A batch held on `s2`'s row lock while the next appends queue behind it, so
    // they share batches with known and unknown answers.
    let mut locker = raw_client(&url).await;
    let tx = hold_row(&mut locker, &schema, s2).await;
    let (held, duplicate, unknown, ()) = tokio::join!(
        j.append(s2, command(s2, Uuid::now_v7(), 0)),
        j.append(s, command(s, k0, 0)),
        j.append(s, answered_anew.clone()),
        async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            tx.commit().await.unwrap();
        }
    );
    assert_eq!(
        held.unwrap(),
        AppendOutcome {
            seq: 2,
            appended: true
        }
    );
    assert_eq!(
        duplicate.unwrap(),
        AppendOutcome {
            seq: 1,
            appended: false
        }
    );
    let unknown = unknown.expect_err("a status this build does not know is an error");
    assert!(schema_too_new(&unknown, true), "{unknown:?}");
    assert!(!unknown.is_retryable());
    let text = unknown.to_string();
    assert!(
        text.contains(&newer().to_string()) && text.contains(&PG_SCHEMA_VERSION.to_string()),
        "names both versions: {text}"
    );
    // It did commit: "outcome unknown" was the honest answer.
    assert_eq!(frames(&raw, &schema, s).await, 2);

    // From now on nothing is sent: appends are refused with nothing written, reads
    // and lease statements too; a new handle is refused at connect.
    let refused = j
        .append(s, command(s, Uuid::now_v7(), 0))
        .await
        .expect_err("refused");
    assert!(schema_too_new(&refused, false), "{refused:?}");
    assert_eq!(frames(&raw, &schema, s).await, 2, "nothing written");
    assert!(matches!(
        j.last_seq(s).await,
        Err(JournalError::SchemaTooNew { found, supported })
            if found == newer() && supported == PG_SCHEMA_VERSION
    ));
    assert!(matches!(
        j.acquire_lease(s).await,
        Err(LeaseError::SchemaTooNew { found, .. }) if found == newer()
    ));
    assert!(matches!(
        PgJournal::connect(&url, PgOptions::default().schema(&schema)).await,
        Err(PgOpenError::SchemaTooNew { found, supported })
            if found == newer() && supported == PG_SCHEMA_VERSION
    ));
    j.close().await;
    drop_schema(&url, &schema).await;
}

/// A newer build recorded its version (its `append_batch` answers as this build's
/// does): the older build's open connections keep working, and every reconnect,
/// of the writer or of the read connection, finds the newer version and refuses,
/// typed, writing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reconnect_checks_the_schema_version() {
    let Some(url) = database_url("every_reconnect_checks_the_schema_version") else {
        return;
    };
    let schema = fresh_schema("upg_reconnect");
    let apps = [0, 1].map(|i| format!("nj_upg_{i}_{}", Uuid::now_v7().simple()));
    let open = |app: &str| {
        let conninfo = conninfo_with(&url, None, &format!("application_name={app}"))
            .expect("the test database is reached over TCP");
        let schema = schema.clone();
        async move {
            PgJournal::connect(&conninfo, PgOptions::default().schema(&schema).writers(1))
                .await
                .unwrap()
        }
    };
    let (w, r) = (open(&apps[0]).await, open(&apps[1]).await);
    let raw = raw_client(&url).await;
    let s = SessionId::new();
    assert!(
        w.append(s, command(s, Uuid::now_v7(), 0))
            .await
            .unwrap()
            .appended
    );
    assert_eq!(r.last_seq(s).await.unwrap(), 1);

    newer_build_migrates(&raw, &schema, None).await;
    // Until they reconnect, its connections work on (the function is one it knows).
    assert_eq!(
        w.append(s, command(s, Uuid::now_v7(), 0)).await.unwrap(),
        AppendOutcome {
            seq: 2,
            appended: true
        }
    );
    let killed: i64 = raw
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE application_name = ANY ($1)",
            &[&apps.to_vec()],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        killed >= 4,
        "both handles' connections terminated: {killed}"
    );

    // The writer: an append on the dead connection may fail as such; the one that
    // reconnects finds the newer schema and sends nothing.
    let mut refused = None;
    for _ in 0..5 {
        match w.append(s, command(s, Uuid::now_v7(), 0)).await {
            Err(e @ AppendError::SchemaTooNew { .. }) => {
                refused = Some(e);
                break;
            }
            Err(AppendError::CommitFailed(_) | AppendError::Storage(_)) => {}
            other => panic!("expected SchemaTooNew after a reconnect, got {other:?}"),
        }
    }
    let refused = refused.expect("a reconnect finds the newer schema");
    assert!(schema_too_new(&refused, false), "{refused:?}");
    assert_eq!(frames(&raw, &schema, s).await, 2, "nothing written");
    assert!(matches!(
        w.last_seq(s).await,
        Err(JournalError::SchemaTooNew { .. })
    ));

    // The read connection: the read that reconnects finds it too; the handle's
    // appends are then refused without being sent.
    let mut found = None;
    for _ in 0..5 {
        match r.last_seq(s).await {
            Err(JournalError::SchemaTooNew {
                found: f,
                supported,
            }) => {
                assert_eq!(supported, PG_SCHEMA_VERSION);
                found = Some(f);
                break;
            }
            Err(JournalError::Storage(_)) => {}
            other => panic!("expected SchemaTooNew after a reconnect, got {other:?}"),
        }
    }
    assert_eq!(found, Some(newer()));
    let refused = r
        .append(s, command(s, Uuid::now_v7(), 0))
        .await
        .expect_err("refused");
    assert!(schema_too_new(&refused, false), "{refused:?}");
    assert_eq!(frames(&raw, &schema, s).await, 2, "nothing written");
    w.close().await;
    r.close().await;
    drop_schema(&url, &schema).await;
}

/// The bulk of the big schema: sessions of this many frames each.
const FRAMES_PER_SESSION: i64 = 100;
/// Bulk sessions: 20,000 x 100 = 2,000,000 frames.
const BULK_SESSIONS: i64 = 20_000;
/// Every this-many-th bulk session ended (its last frame is its end marker).
const ENDED_EVERY: i64 = 10;

/// The bulk sessions' IDs (valid UUIDs from their number).
fn bulk_session(n: i64) -> SessionId {
    SessionId::from_uuid(Uuid::from_u128(u128::try_from(n).unwrap()))
}

/// A database at the oldest schema version (1) holding more than two million
/// frames is migrated to the current version by the current build, although the
/// migration runs far longer than the operation timeout (set to 1 s here): it is
/// bounded by the migration timeout (default: none), so it completes instead of
/// rolling back at every open. The migration's backfill (ending sessions whose end
/// marker an earlier version journaled) reaches every such session, and the real
/// records among the bulk replay, deduplicate and continue after it.
///
/// The bulk frames' bytes are filler (the migrations never read a frame's bytes);
/// the probe sessions hold real records. The version-1 tables are built from the
/// version-1 layout, frozen in `postgres_support/version_1.rs` as migration 1 created
/// it (constraints added after
/// the bulk load, with the names migration 1 gives them), so the test does not
/// depend on the latest version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_over_two_million_frames_completes() {
    let Some(url) = database_url("a_migration_over_two_million_frames_completes") else {
        return;
    };
    let schema = fresh_schema("upg_big");
    let q = format!("\"{schema}\"");
    let raw = raw_client(&url).await;
    raw.batch_execute(&format!(
        "{tables}
         INSERT INTO {q}.sessions (session, last_seq)
         SELECT lpad(to_hex(n), 32, '0')::uuid, {FRAMES_PER_SESSION}
         FROM generate_series(1, {BULK_SESSIONS}) n;
         INSERT INTO {q}.frames (session, seq, key, kind, bytes)
         SELECT lpad(to_hex(i / {FRAMES_PER_SESSION} + 1), 32, '0')::uuid,
                i % {FRAMES_PER_SESSION} + 1,
                gen_random_uuid(),
                CASE WHEN i % {FRAMES_PER_SESSION} = {FRAMES_PER_SESSION} - 1
                          AND (i / {FRAMES_PER_SESSION} + 1) % {ENDED_EVERY} = 0
                     THEN 'SessionEnded' ELSE 'ProcessNotification' END,
                '\\x00'::bytea
         FROM generate_series(0, {BULK_SESSIONS} * {FRAMES_PER_SESSION} - 1) i;",
        tables = version_1::tables(&q),
    ))
    .await
    .unwrap();
    // Probe sessions with real records: one live, one ended.
    let (live, done) = (SessionId::new(), SessionId::new());
    let live_records: Vec<JournalRecord> =
        (0..3).map(|i| command(live, Uuid::now_v7(), i)).collect();
    let done_records = vec![
        command(done, Uuid::now_v7(), 0),
        command(done, Uuid::now_v7(), 1),
        ended(done),
    ];
    for (session, records) in [(live, &live_records), (done, &done_records)] {
        let n = i64::try_from(records.len()).unwrap();
        raw.execute(
            &format!("INSERT INTO {q}.sessions (session, last_seq) VALUES ($1, $2)"),
            &[session.as_uuid(), &n],
        )
        .await
        .unwrap();
        version_1::write_frames(&raw, &q, session, records).await;
    }
    raw.batch_execute(&format!(
        "{keys}
         ANALYZE {q}.sessions, {q}.frames;",
        keys = version_1::frame_keys(&q),
    ))
    .await
    .unwrap();
    let total: i64 = raw
        .query_one(&format!("SELECT count(*) FROM {q}.frames"), &[])
        .await
        .unwrap()
        .get(0);
    assert!(total >= 2_000_000, "{total} frames");

    let j = PgJournal::connect(
        &url,
        PgOptions::default()
            .schema(&schema)
            .operation_timeout(Duration::from_secs(1)),
    )
    .await
    .expect("the migration completes, bounded by the migration timeout only");
    let version: i32 = raw
        .query_one(&format!("SELECT max(version) FROM {q}.schema_version"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(u32::try_from(version).unwrap(), PG_SCHEMA_VERSION);

    // The backfill reached every session with an end marker, and only those.
    let ended_rows: i64 = raw
        .query_one(
            &format!("SELECT count(*) FROM {q}.sessions WHERE ended_at IS NOT NULL"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(ended_rows, BULK_SESSIONS / ENDED_EVERY + 1);
    assert!(matches!(
        j.session_state(bulk_session(ENDED_EVERY)).await.unwrap(),
        SessionState::Ended { .. }
    ));
    assert!(matches!(
        j.session_state(bulk_session(1)).await.unwrap(),
        SessionState::Live
    ));
    assert_eq!(
        j.last_seq(bulk_session(BULK_SESSIONS)).await.unwrap(),
        u64::try_from(FRAMES_PER_SESSION).unwrap()
    );
    assert!(matches!(
        j.session_state(done).await.unwrap(),
        SessionState::Ended { .. }
    ));
    assert!(matches!(
        j.append(done, command(done, Uuid::now_v7(), 9)).await,
        Err(AppendError::SessionEnded { purged: false, .. })
    ));

    // The real records replay, deduplicate and continue.
    let replayed = replay_all(&j, live).await.unwrap();
    assert_eq!(
        replayed,
        (1..).zip(live_records.iter().cloned()).collect::<Vec<_>>()
    );
    assert_eq!(
        j.append(live, live_records[1].clone()).await.unwrap(),
        AppendOutcome {
            seq: 2,
            appended: false
        }
    );
    assert_eq!(
        j.append(live, command(live, Uuid::now_v7(), 7))
            .await
            .unwrap(),
        AppendOutcome {
            seq: 4,
            appended: true
        }
    );
    j.close().await;
    drop_schema(&url, &schema).await;
}

/// An unknown status inside an atomic group: the group's transaction is rolled back, so
/// the answer says nothing was written (`outcome_unknown: false`), never "may have
/// committed".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_status_in_a_group_is_rolled_back_and_says_so() {
    let Some(url) = database_url("an_unknown_status_in_a_group_is_rolled_back_and_says_so") else {
        return;
    };
    let schema = fresh_schema("upg_group");
    // One writer connection, made before the newer build migrates: the group reaches
    // the replaced function (a fresh connection would be refused at its version check).
    let j = journal(&url, &schema, PgOptions::default().writers(1)).await;
    let raw = raw_client(&url).await;
    let s = SessionId::new();
    let k0 = Uuid::now_v7();
    assert!(j.append(s, command(s, k0, 0)).await.unwrap().appended);
    let answered_anew = consumed(s, CommandId::from_uuid(k0));
    newer_build_migrates(&raw, &schema, Some(answered_anew.type_name())).await;
    let err = j
        .append_all(s, vec![command(s, Uuid::now_v7(), 0), answered_anew], None)
        .await
        .expect_err("a status this build does not know refuses the group");
    match &err {
        AppendError::GroupRefused { index: 1, source } => {
            assert!(schema_too_new(source, false), "{err:?}");
        }
        other => panic!("expected the group refused at its second record: {other:?}"),
    }
    assert_eq!(
        frames(&raw, &schema, s).await,
        1,
        "the group was rolled back"
    );
    drop(j);
    drop_schema(&url, &schema).await;
}
