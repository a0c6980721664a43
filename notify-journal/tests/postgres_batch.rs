//! The PostgreSQL journal's one-statement batch (`append_batch`, schema version 2):
//! duplicates and collisions inside one batch, migrating a version-1 schema forward,
//! how a batch whose answer is lost is reported, and terminated backends during
//! appends.
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default);
//! without either, each test says it was skipped and returns.
#![cfg(feature = "postgres")]
// Test code: a failed expectation is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod postgres_support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use notify_journal::{
    AppendError, AppendOutcome, JournalBackend, JournalRead, PG_SCHEMA_VERSION, PgJournal,
    PgOptions, replay_all,
};
use notify_types::{SessionId, Uuid};
use postgres_support::{
    HANG_GUARD, StallingProxy, back_to, command, conninfo_with, database_url, drop_schema,
    fresh_schema, journal, migrated, raw_client,
};

/// Many appends of one key at once (they share batches): exactly one is written,
/// identical retries are duplicates of it, other bytes collide with it, and the
/// other keys of the same batches get gap-free sequences.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_and_collisions_inside_one_batch() {
    let Some(url) = database_url("duplicates_and_collisions_inside_one_batch") else {
        return;
    };
    let schema = fresh_schema("batch");
    let j = Arc::new(journal(&url, &schema, PgOptions::default()).await);
    let s = SessionId::new();
    let hot_key = Uuid::now_v7();
    let mut tasks = Vec::new();
    for i in 0..60_u32 {
        let j = Arc::clone(&j);
        tasks.push(tokio::spawn(async move {
            let (key, variant) = match i % 3 {
                0 => (hot_key, 0),
                1 => (hot_key, u32::from(i == 1)),
                _ => (Uuid::now_v7(), 0),
            };
            (key, variant, j.append(s, command(s, key, variant)).await)
        }));
    }
    // (variant, seq, appended) of every answered append of the hot key, and the
    // variants that collided with the seq they named.
    let mut hot = Vec::new();
    let mut collided = Vec::new();
    let mut others = BTreeSet::new();
    for t in tasks {
        let (key, variant, got) = t.await.unwrap();
        match got {
            Ok(AppendOutcome { seq, appended }) if key == hot_key => {
                hot.push((variant, seq, appended));
            }
            Ok(AppendOutcome { seq, appended }) => {
                assert!(appended);
                assert!(others.insert(seq), "seq {seq} given twice");
            }
            Err(AppendError::Collision { key, seq }) => {
                assert_eq!(key, hot_key);
                collided.push((variant, seq));
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    // Exactly one hot append was written; every other identical one is its
    // duplicate, every different one collides with it (whichever variant won).
    let winners: Vec<_> = hot.iter().filter(|h| h.2).collect();
    assert_eq!(
        winners.len(),
        1,
        "the hot key written exactly once: {hot:?}"
    );
    let (winner, hot_seq, _) = *winners[0];
    assert!(hot.iter().all(|&(v, q, _)| v == winner && q == hot_seq));
    assert!(collided.iter().all(|&(v, q)| v != winner && q == hot_seq));
    assert_eq!(hot.len() + collided.len(), 40);
    let mut all: BTreeSet<u64> = others.clone();
    all.insert(hot_seq);
    assert_eq!(
        all,
        (1..=21).collect::<BTreeSet<_>>(),
        "gap-free, no doubles"
    );
    assert_eq!(j.last_seq(s).await.unwrap(), 21);
    assert_eq!(replay_all(&*j, s).await.unwrap().len(), 21);
    j.close().await;
    drop_schema(&url, &schema).await;
}

/// A database left at schema version 1 (before `append_batch`) opens: it is
/// migrated forward, its frames replay, its keys still deduplicate, and appends
/// continue its sequences.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_schema_is_migrated_forward() {
    let Some(url) = database_url("a_version_1_schema_is_migrated_forward") else {
        return;
    };
    let schema = fresh_schema("v1");
    let s = SessionId::new();
    let keys: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
    let j = journal(&url, &schema, PgOptions::default()).await;
    for k in &keys {
        j.append(s, command(s, *k, 0)).await.unwrap();
    }
    j.close().await;
    // Back to version 1: exactly what versions 2 to 4 added is removed (so these
    // frames have no checksum, as frames written before version 3 do not).
    let raw = raw_client(&url).await;
    let undo = format!(
        "DROP FUNCTION \"{schema}\".append_batch;
         DROP FUNCTION \"{schema}\".purge_step;
         DROP INDEX \"{schema}\".sessions_due, \"{schema}\".sessions_purging,
                    \"{schema}\".sessions_tombstones;
         ALTER TABLE \"{schema}\".sessions DROP COLUMN ended_at, DROP COLUMN purged_at,
                                           DROP COLUMN purge_done;
         ALTER TABLE \"{schema}\".frames DROP COLUMN checksum;"
    );
    back_to(&raw, &schema, 1, &undo).await;
    const { assert!(PG_SCHEMA_VERSION >= 4) };

    let j = migrated(&url, &schema, &raw).await;
    let frames = replay_all(&j, s).await.unwrap();
    assert_eq!(frames.len(), 3);
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(frames[i], (i as u64 + 1, command(s, *k, 0)));
    }
    assert_eq!(
        j.append(s, command(s, keys[1], 0)).await.unwrap(),
        AppendOutcome {
            seq: 2,
            appended: false
        }
    );
    assert_eq!(
        j.append(s, command(s, Uuid::now_v7(), 0)).await.unwrap(),
        AppendOutcome {
            seq: 4,
            appended: true
        }
    );
    j.close().await;
    drop_schema(&url, &schema).await;
}

/// A batch sent but never answered has an unknown outcome, whether it would have
/// written frames or (all duplicates) nothing: both are `CommitFailed`, as the
/// journal documents, and retrying with the same record is then safe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_batch_is_commit_failed_even_when_all_duplicates() {
    let Some(url) = database_url("an_unanswered_batch_is_commit_failed_even_when_all_duplicates")
    else {
        return;
    };
    let Some(proxy) = StallingProxy::start(&url).await else {
        panic!("the test database must be reached over TCP");
    };
    let schema = fresh_schema("unanswered");
    // Create the schema directly, so the proxied journal needs no migration.
    journal(&url, &schema, PgOptions::default())
        .await
        .close()
        .await;
    let via_proxy = conninfo_with(&url, Some(proxy.port), "").unwrap();
    // One writer, so the second append goes out on the connection that is stalled
    // (another writer would still have to connect, and fail before sending).
    let opts = PgOptions::default()
        .schema(&schema)
        .writers(1)
        .operation_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500));
    let j = PgJournal::connect(&via_proxy, opts).await.unwrap();
    let s = SessionId::new();
    let k = Uuid::now_v7();
    assert!(j.append(s, command(s, k, 0)).await.unwrap().appended);
    proxy.stall();
    let got = tokio::time::timeout(HANG_GUARD, j.append(s, command(s, k, 0)))
        .await
        .unwrap_or_else(|_| panic!("append hung past the guard"));
    assert!(matches!(got, Err(AppendError::CommitFailed(_))), "{got:?}");
    j.close().await;

    // The retry, through a working connection, finds the original.
    let direct = journal(&url, &schema, PgOptions::default()).await;
    assert_eq!(
        direct.append(s, command(s, k, 0)).await.unwrap(),
        AppendOutcome {
            seq: 1,
            appended: false
        }
    );
    direct.close().await;
    drop_schema(&url, &schema).await;
}

/// Backends terminated with `pg_terminate_backend` while appenders run: every
/// failure is a typed, retryable error (`Storage`: nothing written, or
/// `CommitFailed`: unknown), the journal reconnects on the next call, and after
/// retrying each record until it is answered, every key is journaled exactly once
/// with gap-free sequences.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_backends_lose_and_double_nothing() {
    let Some(url) = database_url("terminated_backends_lose_and_double_nothing") else {
        return;
    };
    let schema = fresh_schema("terminate");
    let app = format!("nj_terminate_{}", Uuid::now_v7().simple());
    let conninfo = conninfo_with(&url, None, &format!("application_name={app}"))
        .expect("the test database must be reached over TCP");
    let j = Arc::new(
        PgJournal::connect(&conninfo, PgOptions::default().schema(&schema))
            .await
            .unwrap(),
    );
    let sessions: Vec<SessionId> = (0..4).map(|_| SessionId::new()).collect();
    let done = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let mut appenders = Vec::new();
    for (n, &s) in sessions.iter().cycle().take(16).enumerate() {
        let (j, errors) = (Arc::clone(&j), Arc::clone(&errors));
        appenders.push(tokio::spawn(async move {
            let mut keys = Vec::new();
            for _ in 0..40 {
                let key = Uuid::now_v7();
                let mut tries = 0;
                loop {
                    tries += 1;
                    assert!(tries < 200, "appender {n} never got an answer");
                    match j.append(s, command(s, key, 0)).await {
                        Ok(_) => break,
                        Err(AppendError::Storage(_) | AppendError::CommitFailed(_)) => {
                            errors.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        Err(e) => panic!("not a retryable error: {e:?}"),
                    }
                }
                keys.push(key);
            }
            (s, keys)
        }));
    }
    let killer = {
        let (done, app, url) = (Arc::clone(&done), app.clone(), url.clone());
        tokio::spawn(async move {
            let raw = raw_client(&url).await;
            let mut killed = 0_u64;
            // Bounded: at most 200 rounds, and only while the appenders run.
            for _ in 0..200 {
                if done.load(Ordering::SeqCst) {
                    break;
                }
                let n: i64 = raw
                    .query_one(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                         WHERE application_name = $1",
                        &[&app],
                    )
                    .await
                    .unwrap()
                    .get(0);
                killed += u64::try_from(n).unwrap();
                tokio::time::sleep(Duration::from_millis(15)).await;
            }
            killed
        })
    };
    let mut written: Vec<(SessionId, Vec<Uuid>)> = Vec::new();
    for a in appenders {
        written.push(a.await.unwrap());
    }
    done.store(true, Ordering::SeqCst);
    let killed = killer.await.unwrap();
    assert!(
        killed > 0,
        "no backend was terminated: the test proved nothing"
    );
    let errors = errors.load(Ordering::SeqCst);
    eprintln!("terminated {killed} backends; {errors} retryable errors");
    // The fault fired where it matters: appends met terminated connections (a backend
    // killed only while idle, or after the appenders finished, tests no append).
    assert!(
        errors > 0,
        "{killed} backends terminated, but no append met one: the test proved nothing"
    );

    // Nothing lost, nothing doubled: each session holds exactly its keys, 1..=n.
    for &s in &sessions {
        let expected: BTreeSet<Uuid> = written
            .iter()
            .filter(|(ws, _)| *ws == s)
            .flat_map(|(_, keys)| keys.iter().copied())
            .collect();
        let frames = replay_all(&*j, s).await.unwrap();
        let seqs: Vec<u64> = frames.iter().map(|(q, _)| *q).collect();
        assert_eq!(seqs, (1..=expected.len() as u64).collect::<Vec<_>>());
        let got: BTreeSet<Uuid> = frames.iter().map(|(_, r)| r.key()).collect();
        assert_eq!(got, expected);
        assert_eq!(j.last_seq(s).await.unwrap(), expected.len() as u64);
    }
    j.close().await;
    drop_schema(&url, &schema).await;
}

/// A TCP proxy in front of the test database that counts round trips: how many
/// times, on any connection, the client starts sending after the server last sent
/// (or at the start). Stops by itself after a minute, and when dropped.
struct RoundTripProxy {
    port: u16,
    round_trips: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl RoundTripProxy {
    async fn start(url: &str) -> Self {
        let config: tokio_postgres::Config = url.parse().unwrap();
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            _ => panic!("the test database must be reached over TCP"),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let local = listener.local_addr().unwrap().port();
        let round_trips = Arc::new(AtomicU64::new(0));
        let count = Arc::clone(&round_trips);
        let task = tokio::spawn(async move {
            let mut pipes = tokio::task::JoinSet::new();
            let serve = async {
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        return;
                    };
                    let Ok(server) = tokio::net::TcpStream::connect((host.as_str(), port)).await
                    else {
                        return;
                    };
                    // 0: the server spoke last (or nobody yet); 1: the client.
                    let last = Arc::new(AtomicU8::new(0));
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let (l1, c1) = (Arc::clone(&last), Arc::clone(&count));
                    pipes.spawn(relay(cr, sw, move || {
                        if l1.swap(1, Ordering::SeqCst) == 0 {
                            c1.fetch_add(1, Ordering::SeqCst);
                        }
                    }));
                    pipes.spawn(relay(sr, cw, move || last.store(0, Ordering::SeqCst)));
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(60), serve).await;
        });
        Self {
            port: local,
            round_trips,
            task,
        }
    }

    fn count(&self) -> u64 {
        self.round_trips.load(Ordering::SeqCst)
    }
}

impl Drop for RoundTripProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    on_data: impl Fn(),
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0_u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        on_data();
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// A batch costs one round trip to the server, commit included, whether it writes
/// one frame, many, or only finds duplicates (measured on the wire by a proxy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_one_round_trip() {
    let Some(url) = database_url("a_batch_is_one_round_trip") else {
        return;
    };
    let schema = fresh_schema("rt");
    journal(&url, &schema, PgOptions::default())
        .await
        .close()
        .await;
    let proxy = RoundTripProxy::start(&url).await;
    let app = format!("nj_rt_{}", Uuid::now_v7().simple());
    let via_proxy =
        conninfo_with(&url, Some(proxy.port), &format!("application_name={app}")).unwrap();
    let j = Arc::new(
        PgJournal::connect(&via_proxy, PgOptions::default().schema(&schema).writers(1))
            .await
            .unwrap(),
    );
    // Warm up: the writer's connection is open and its statement prepared.
    let s = SessionId::new();
    j.append(s, command(s, Uuid::now_v7(), 0)).await.unwrap();

    let s = SessionId::new();
    let k = Uuid::now_v7();
    let before = proxy.count();
    assert!(j.append(s, command(s, k, 0)).await.unwrap().appended);
    assert_eq!(proxy.count() - before, 1, "a lone append on a new session");

    let before = proxy.count();
    assert!(!j.append(s, command(s, k, 0)).await.unwrap().appended);
    assert_eq!(proxy.count() - before, 1, "a duplicate");

    // Many appends while the writer is busy: they queue, and the writer takes them
    // all (up to `max_batch`, 1024) into its next batch, one round trip. To make that
    // deterministic, the busy writer's batch is held at the server (a lock on the
    // frames table) until every other append has queued behind it.
    let admin = raw_client(&url).await;
    admin
        .batch_execute(&format!(
            "BEGIN; LOCK TABLE \"{schema}\".frames IN EXCLUSIVE MODE"
        ))
        .await
        .unwrap();
    let before = proxy.count();
    let held = {
        let j = Arc::clone(&j);
        tokio::spawn(async move {
            let s = SessionId::new();
            j.append(s, command(s, Uuid::now_v7(), 0)).await.unwrap()
        })
    };
    let waiting = || async {
        admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE application_name = $1 AND wait_event_type = 'Lock'",
                &[&app],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
            > 0
    };
    let mut tries = 0;
    while !waiting().await {
        tries += 1;
        assert!(tries < 1500, "the writer's batch never waited for the lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let queued = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..199)
        .map(|_| {
            let (j, queued) = (Arc::clone(&j), Arc::clone(&queued));
            tokio::spawn(async move {
                let s = SessionId::new();
                let append = j.append(s, command(s, Uuid::now_v7(), 0));
                queued.fetch_add(1, Ordering::SeqCst);
                append.await.unwrap()
            })
        })
        .collect();
    while queued.load(Ordering::SeqCst) < 199 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Each append reaches the queue in the poll that counted it; let the last polls
    // finish (the writer is still held, so nothing can be committed meanwhile).
    tokio::time::sleep(Duration::from_millis(200)).await;
    admin.batch_execute("ROLLBACK").await.unwrap();
    assert!(held.await.unwrap().appended);
    for t in tasks {
        assert!(t.await.unwrap().appended);
    }
    let trips = proxy.count() - before;
    assert_eq!(
        trips, 2,
        "the held batch and one batch of the 199 appends queued behind it"
    );
    j.close().await;
    drop_schema(&url, &schema).await;
}

/// The writer count is checked before anything connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_counts_out_of_range_are_refused() {
    for n in [0, 65] {
        let err = PgJournal::connect(
            "host=127.0.0.1 port=1 user=nobody",
            PgOptions::default().writers(n),
        )
        .await
        .expect_err("out of range");
        assert!(
            matches!(
                err,
                notify_journal::PgOpenError::InvalidOption {
                    option: "writers",
                    ..
                }
            ),
            "{err:?}"
        );
    }
}
