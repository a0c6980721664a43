//! The PostgreSQL journal against a real server: append semantics, group commit,
//! schema versioning, connection failures. Leases: `postgres_leases.rs`.
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default);
//! without either, each test says it was skipped and returns.
#![cfg(feature = "postgres")]
// Test code: a failed expectation is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod postgres_support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use notify_journal::{
    AppendError, AppendOutcome, JournalBackend, JournalError, JournalRead, LeaseError,
    MigrationMode, PG_SCHEMA_VERSION, PgJournal, PgOpenError, PgOptions, replay_all,
};
use notify_types::{CommandId, SessionId, Uuid, consumed_event_id};
use postgres_support::{
    HANG_GUARD, StallingProxy, command, conninfo_with, consumed, database_url, drop_schema,
    fresh_schema, journal, not_over_tcp, raw_client,
};

/// The tests' shared schema (each test uses fresh sessions in it).
// Named for the journal schema version: builds at different versions sharing a test
// database never meet (and refuse) each other's tables.
const SHARED: &str = "nj_test_shared_v9";

async fn shared(url: &str) -> PgJournal {
    journal(url, SHARED, PgOptions::default()).await
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_deduplicate_collide_replay_and_look_up() {
    let Some(url) = database_url("appends_deduplicate_collide_replay_and_look_up") else {
        return;
    };
    let j = shared(&url).await;
    let s = SessionId::new();
    let other = SessionId::new();
    let keys: Vec<Uuid> = (0..5).map(|_| Uuid::now_v7()).collect();

    assert_eq!(j.last_seq(s).await.unwrap(), 0);
    for (i, k) in keys.iter().enumerate() {
        let got = j.append(s, command(s, *k, 0)).await.unwrap();
        assert_eq!(got, appended(i as u64 + 1));
    }
    // Same key, identical record: the original seq, nothing written.
    assert_eq!(
        j.append(s, command(s, keys[2], 0)).await.unwrap(),
        duplicate(3)
    );
    // Same key, other bytes: collision naming the original seq.
    match j.append(s, command(s, keys[2], 1)).await {
        Err(AppendError::Collision { key, seq }) => assert_eq!((key, seq), (keys[2], 3)),
        other => panic!("expected a collision, got {other:?}"),
    }
    // Same key, other record kind: collision too.
    let cause = CommandId::new();
    let consumed_key = *consumed_event_id(cause).as_uuid();
    assert_eq!(j.append(s, consumed(s, cause)).await.unwrap(), appended(6));
    match j.append(s, command(s, consumed_key, 0)).await {
        Err(AppendError::Collision { key, seq }) => assert_eq!((key, seq), (consumed_key, 6)),
        other => panic!("expected a cross-kind collision, got {other:?}"),
    }
    // Keys are per session.
    assert_eq!(
        j.append(other, command(other, keys[0], 0)).await.unwrap(),
        appended(1)
    );
    // A record of another session is refused.
    assert!(matches!(
        j.append(s, command(other, Uuid::now_v7(), 0)).await,
        Err(AppendError::SessionMismatch { .. })
    ));
    // One append at a time: each committed alone (collisions and duplicates too); the
    // refused one never reached the writer.
    let stats = j.commit_stats();
    assert_eq!(
        (stats.commits, stats.appends, stats.writer_wakeups),
        (10, 10, 0)
    );

    assert_eq!(j.last_seq(s).await.unwrap(), 6);
    let frames = replay_all(&j, s).await.unwrap();
    let seqs: Vec<u64> = frames.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(seqs, (1..=6).collect::<Vec<_>>());
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(frames[i].1, command(s, *k, 0));
        assert_eq!(j.lookup(s, *k).await.unwrap(), Some(i as u64 + 1));
    }
    assert_eq!(j.lookup(s, Uuid::now_v7()).await.unwrap(), None);
    let page = j.replay(s, 3, 2).await.unwrap();
    assert_eq!(page.iter().map(|(q, _)| *q).collect::<Vec<_>>(), vec![3, 4]);
    assert!(j.replay(s, 7, 10).await.unwrap().is_empty());
    assert!(j.replay(s, u64::MAX, 10).await.unwrap().is_empty());

    let sessions = j.sessions().await.unwrap();
    assert!(sessions.contains(&s) && sessions.contains(&other));
    assert!(
        sessions.windows(2).all(|w| w[0] < w[1]),
        "sessions in ID order"
    );
    j.close().await;
    assert!(matches!(
        j.append(s, command(s, Uuid::now_v7(), 0)).await,
        Err(AppendError::Closed)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_are_group_committed_gap_free() {
    let Some(url) = database_url("concurrent_appends_are_group_committed_gap_free") else {
        return;
    };
    let j = Arc::new(shared(&url).await);
    let sessions: Vec<SessionId> = (0..4).map(|_| SessionId::new()).collect();
    let keys: Vec<Uuid> = (0..50).map(|_| Uuid::now_v7()).collect();
    let mut tasks = Vec::new();
    // Every key twice per session, concurrently: one frame each, both calls agree.
    for round in 0..2 {
        for s in &sessions {
            for k in &keys {
                let (j, s, k) = (Arc::clone(&j), *s, *k);
                tasks.push(tokio::spawn(async move {
                    (round, s, k, j.append(s, command(s, k, 0)).await.unwrap())
                }));
            }
        }
    }
    let mut outcomes = std::collections::HashMap::new();
    for t in tasks {
        let (_, s, k, out) = t.await.unwrap();
        outcomes.entry((s, k)).or_insert_with(Vec::new).push(out);
    }
    for s in &sessions {
        let frames = replay_all(&*j, *s).await.unwrap();
        assert_eq!(frames.len(), keys.len());
        for (i, (seq, rec)) in frames.iter().enumerate() {
            assert_eq!(*seq, i as u64 + 1);
            let outs = &outcomes[&(*s, rec.key())];
            assert_eq!(outs.iter().filter(|o| o.appended).count(), 1);
            assert!(outs.iter().all(|o| o.seq == *seq));
        }
    }
    // Every append answered by a commit; the batches grouped some of them.
    let stats = j.commit_stats();
    assert_eq!(stats.appends, 400);
    assert!((1..=400).contains(&stats.commits), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_newer_than_the_code_is_refused() {
    let Some(url) = database_url("a_schema_newer_than_the_code_is_refused") else {
        return;
    };
    let schema = fresh_schema("newer");
    let j = journal(&url, &schema, PgOptions::default()).await;
    j.close().await;
    // Validating a current schema succeeds and changes nothing.
    let v = journal(
        &url,
        &schema,
        PgOptions::default().migration(MigrationMode::ValidateOnly),
    )
    .await;
    v.close().await;

    let admin = raw_client(&url).await;
    let newer = i32::try_from(PG_SCHEMA_VERSION + 1).unwrap();
    admin
        .execute(
            &format!("INSERT INTO {schema}.schema_version (version) VALUES ($1)"),
            &[&newer],
        )
        .await
        .unwrap();
    for mode in [MigrationMode::Apply, MigrationMode::ValidateOnly] {
        match PgJournal::connect(&url, PgOptions::default().schema(&schema).migration(mode)).await {
            Err(PgOpenError::SchemaTooNew { found, supported }) => {
                assert_eq!(
                    (found, supported),
                    (PG_SCHEMA_VERSION + 1, PG_SCHEMA_VERSION)
                );
            }
            other => panic!("expected SchemaTooNew, got {other:?}"),
        }
    }
    // Refusing changed nothing.
    let max: i32 = admin
        .query_one(
            &format!("SELECT max(version) FROM {schema}.schema_version"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(max, newer);

    // Validate-only on a database without the journal's schema changes nothing either.
    let empty = fresh_schema("empty");
    match PgJournal::connect(
        &url,
        PgOptions::default()
            .schema(&empty)
            .migration(MigrationMode::ValidateOnly),
    )
    .await
    {
        Err(PgOpenError::SchemaOutdated { found, required }) => {
            assert_eq!((found, required), (0, PG_SCHEMA_VERSION));
        }
        other => panic!("expected SchemaOutdated, got {other:?}"),
    }
    let exists: bool = admin
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
            &[&empty],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!exists, "validate-only created nothing");
    drop_schema(&url, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_openers_migrate_once() {
    let Some(url) = database_url("concurrent_openers_migrate_once") else {
        return;
    };
    let schema = fresh_schema("race");
    let opens: Vec<_> = (0..4)
        .map(|_| {
            let (url, schema) = (url.clone(), schema.clone());
            tokio::spawn(async move {
                PgJournal::connect(&url, PgOptions::default().schema(schema)).await
            })
        })
        .collect();
    for o in opens {
        o.await.unwrap().unwrap();
    }
    let admin = raw_client(&url).await;
    let rows: i64 = admin
        .query_one(
            &format!("SELECT count(*) FROM {schema}.schema_version"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, i64::from(PG_SCHEMA_VERSION));
    drop_schema(&url, &schema).await;
}

/// Runs without a database: nothing here needs one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_database_is_a_typed_error_not_a_hang() {
    // Guard against the failure this test exists to catch: a hang becomes a failure.
    let guard = Duration::from_secs(60);
    let timeout = Duration::from_millis(500);
    let opts = || PgOptions::default().connect_timeout(timeout);

    // Nothing listens on port 1: refused at once. The error never repeats the
    // connection string's secrets.
    let secret = "host=127.0.0.1 port=1 user=sekrit_user password=hunter2 dbname=test";
    let err = tokio::time::timeout(guard, PgJournal::connect(secret, opts()))
        .await
        .expect("connect returned")
        .unwrap_err();
    assert!(
        matches!(
            err,
            PgOpenError::Unreachable(_) | PgOpenError::ConnectTimeout { .. }
        ),
        "{err:?}"
    );
    let mut text = format!("{err} {err:?}");
    let mut source = std::error::Error::source(&err);
    while let Some(s) = source {
        text.push_str(&format!(" {s} {s:?}"));
        source = s.source();
    }
    assert!(
        !text.contains("hunter2") && !text.contains("sekrit"),
        "{text}"
    );

    // A server that accepts TCP but never answers: the connect timeout fires.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let conninfo = format!("host=127.0.0.1 port={port} user=postgres dbname=test");
    let err = tokio::time::timeout(guard, PgJournal::connect(&conninfo, opts()))
        .await
        .expect("connect returned")
        .unwrap_err();
    assert!(
        matches!(err, PgOpenError::ConnectTimeout { after } if after == timeout),
        "{err:?}"
    );
    drop(silent);

    // Malformed input is refused before any I/O, without echoing it.
    let err = PgJournal::connect("port=notaport password=hunter2", opts())
        .await
        .unwrap_err();
    assert!(matches!(err, PgOpenError::InvalidConfig), "{err:?}");
    assert!(!format!("{err} {err:?}").contains("hunter2"));
    // Out-of-range options are refused before any I/O.
    for (opts, option) in [
        (opts().max_batch(usize::MAX), "max_batch"),
        (opts().max_batch(0), "max_batch"),
        (
            opts().lease_duration(Duration::from_secs(30 * 24 * 60 * 60)),
            "lease_duration",
        ),
        (
            opts().operation_timeout(Duration::ZERO),
            "operation_timeout",
        ),
        (opts().schema("pg_journal"), "schema"),
    ] {
        match PgJournal::connect(secret, opts).await {
            Err(PgOpenError::InvalidOption { option: got, .. }) => assert_eq!(got, option),
            other => panic!("expected InvalidOption {option}, got {other:?}"),
        }
    }
    for bad in ["", "Upper", "1abc", "a-b", "a;drop"] {
        let err = PgJournal::connect(secret, opts().schema(bad))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                PgOpenError::InvalidOption {
                    option: "schema",
                    ..
                }
            ),
            "{bad}: {err:?}"
        );
    }
}

/// The sessions listing skips sessions that were only leased, never written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_lists_only_sessions_with_frames() {
    let Some(url) = database_url("sessions_lists_only_sessions_with_frames") else {
        return;
    };
    let schema = fresh_schema("sessions");
    let j = journal(&url, &schema, PgOptions::default()).await;
    let mut written = BTreeSet::new();
    for _ in 0..3 {
        let s = SessionId::new();
        j.append(s, command(s, Uuid::now_v7(), 0)).await.unwrap();
        written.insert(s);
    }
    let leased_only = SessionId::new();
    j.acquire_lease(leased_only).await.unwrap();
    assert_eq!(
        j.sessions().await.unwrap(),
        written.into_iter().collect::<Vec<_>>()
    );
    drop_schema(&url, &schema).await;
}

/// A silent partition (a proxy that stops forwarding) turns every call into a
/// typed error after the operation timeout: appends, reads, leases, and `close`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_yields_typed_errors_not_hangs() {
    let Some(url) = database_url("a_partition_yields_typed_errors_not_hangs") else {
        return;
    };
    let Some(proxy) = StallingProxy::start(&url).await else {
        not_over_tcp("a_partition_yields_typed_errors_not_hangs");
        return;
    };
    let via_proxy = conninfo_with(&url, Some(proxy.port), "").unwrap();
    // One writer, so the appends below meet its connection in a known order
    // (stalled, then dropped and replaced); with more, an idle writer's stalled
    // connection would answer an append after the first reconnect.
    let opts = PgOptions::default()
        .schema(SHARED)
        .writers(1)
        .operation_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500));
    let j = PgJournal::connect(&via_proxy, opts).await.unwrap();
    let s = SessionId::new();
    let k = Uuid::now_v7();
    assert_eq!(j.append(s, command(s, k, 0)).await.unwrap(), appended(1));
    assert_eq!(j.lookup(s, k).await.unwrap(), Some(1));

    proxy.stall();
    let err = tokio::time::timeout(HANG_GUARD, j.append(s, command(s, Uuid::now_v7(), 0)))
        .await
        .unwrap_or_else(|_| panic!("append hung past the guard"));
    assert!(
        matches!(
            err,
            Err(AppendError::Storage(_) | AppendError::CommitFailed(_))
        ),
        "{err:?}"
    );
    let err = tokio::time::timeout(HANG_GUARD, j.lookup(s, k))
        .await
        .unwrap_or_else(|_| panic!("lookup hung past the guard"));
    assert!(matches!(err, Err(JournalError::Storage(_))), "{err:?}");
    let err = tokio::time::timeout(HANG_GUARD, j.acquire_lease(s))
        .await
        .unwrap_or_else(|_| panic!("acquire_lease hung past the guard"));
    assert!(matches!(err, Err(LeaseError::Storage(_))), "{err:?}");
    // The dropped connections are replaced by new ones, which cannot get through
    // either: still typed errors (the connect timeout), never a hang.
    let err = tokio::time::timeout(HANG_GUARD, j.append(s, command(s, Uuid::now_v7(), 0)))
        .await
        .unwrap_or_else(|_| panic!("append after reconnect hung past the guard"));
    assert!(matches!(err, Err(AppendError::Storage(_))), "{err:?}");
    let err = tokio::time::timeout(HANG_GUARD, j.last_seq(s))
        .await
        .unwrap_or_else(|_| panic!("last_seq after reconnect hung past the guard"));
    assert!(matches!(err, Err(JournalError::Storage(_))), "{err:?}");
    tokio::time::timeout(HANG_GUARD, j.close())
        .await
        .unwrap_or_else(|_| panic!("close hung past the guard"));

    // Connecting through the partition fails with a typed error too.
    let err = tokio::time::timeout(
        HANG_GUARD,
        PgJournal::connect(
            &via_proxy,
            PgOptions::default().connect_timeout(Duration::from_millis(300)),
        ),
    )
    .await
    .unwrap_or_else(|_| panic!("connect hung past the guard"));
    assert!(
        matches!(err, Err(PgOpenError::ConnectTimeout { .. })),
        "{err:?}"
    );
    // Nothing the partition swallowed was written.
    let direct = shared(&url).await;
    assert_eq!(direct.last_seq(s).await.unwrap(), 1);
}

/// Connecting while another session holds a lock the migration needs fails after
/// the operation timeout (the server's `lock_timeout`), never waits unbounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_gives_up_on_a_held_migration_lock() {
    let Some(url) = database_url("connect_gives_up_on_a_held_migration_lock") else {
        return;
    };
    let schema = fresh_schema("locked");
    journal(&url, &schema, PgOptions::default())
        .await
        .close()
        .await;
    let admin = raw_client(&url).await;
    admin
        .batch_execute(&format!(
            "BEGIN; LOCK TABLE {schema}.schema_version IN ACCESS EXCLUSIVE MODE"
        ))
        .await
        .unwrap();
    let opts = PgOptions::default()
        .schema(&schema)
        .operation_timeout(Duration::from_millis(300));
    let err = tokio::time::timeout(HANG_GUARD, PgJournal::connect(&url, opts))
        .await
        .expect("connect hung on the lock");
    assert!(matches!(err, Err(PgOpenError::Storage(_))), "{err:?}");
    admin.batch_execute("ROLLBACK").await.unwrap();
    journal(&url, &schema, PgOptions::default())
        .await
        .close()
        .await;
    drop_schema(&url, &schema).await;
}

/// A server (or connection string) whose default isolation is SERIALIZABLE does
/// not make concurrent appends fail: the journal runs at READ COMMITTED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serializable_server_default_does_not_fail_appends() {
    let Some(url) = database_url("serializable_server_default_does_not_fail_appends") else {
        return;
    };
    let Some(serializable) = conninfo_with(
        &url,
        None,
        "options='-c default_transaction_isolation=serializable'",
    ) else {
        not_over_tcp("serializable_server_default_does_not_fail_appends");
        return;
    };
    // The fault is in place: a connection made with these options starts every
    // transaction SERIALIZABLE unless the journal says otherwise.
    let probe = raw_client(&serializable).await;
    let default: String = probe
        .query_one("SHOW default_transaction_isolation", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(default, "serializable", "the server default did not take");
    let in_txn: String = probe
        .query_one("SELECT current_setting('transaction_isolation')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(in_txn, "serializable");
    let a = Arc::new(journal(&serializable, SHARED, PgOptions::default()).await);
    let b = Arc::new(journal(&serializable, SHARED, PgOptions::default()).await);
    let s = SessionId::new();
    let mut tasks = Vec::new();
    for i in 0..200 {
        let j = Arc::clone(if i % 2 == 0 { &a } else { &b });
        tasks.push(tokio::spawn(async move {
            j.append(s, command(s, Uuid::now_v7(), 0)).await
        }));
    }
    let mut seqs = Vec::new();
    for t in tasks {
        let out = t.await.unwrap().expect("every append succeeds at once");
        assert!(out.appended);
        seqs.push(out.seq);
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=200).collect::<Vec<u64>>());
    let frames = replay_all(&*a, s).await.unwrap();
    assert_eq!(
        frames.iter().map(|(q, _)| *q).collect::<Vec<_>>(),
        (1..=200).collect::<Vec<u64>>()
    );
}

/// Schema names that are SQL reserved words work: the name is always quoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserved_word_schema_names_work() {
    let Some(url) = database_url("reserved_word_schema_names_work") else {
        return;
    };
    for schema in ["select", "user"] {
        let j = journal(&url, schema, PgOptions::default()).await;
        let s = SessionId::new();
        let k = Uuid::now_v7();
        let first = j.append(s, command(s, k, 0)).await.unwrap();
        assert!(first.appended);
        assert_eq!(j.lookup(s, k).await.unwrap(), Some(first.seq));
        j.acquire_lease(s).await.unwrap();
        j.renew_lease(s).await.unwrap();
        j.release_lease(s).await.unwrap();
        assert_eq!(replay_all(&j, s).await.unwrap().len(), 1);
        j.close().await;
    }
}
