//! Three OS processes append the same keys, with retries, to one session of the
//! PostgreSQL journal at once: the session ends gap-free with exactly one frame per
//! key, and every process agrees on each key's sequence.
//!
//! The test re-executes its own binary as the child processes (filtered to this test,
//! with `NJ_PG_CHILD` telling the child its role).
#![cfg(feature = "postgres")]
// Test code: a failed expectation is a test failure.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod postgres_support;

use std::collections::{BTreeMap, HashMap};
use std::process::{Command, Stdio};
use std::sync::Arc;

use notify_journal::{JournalBackend, JournalRead, PgOptions, replay_all};
use notify_types::{SessionId, Uuid};
use postgres_support::{DATABASE_URL_VAR, command, database_url, journal};

const CHILD_VAR: &str = "NJ_PG_CHILD";
// Named for the journal schema version: builds at different versions sharing a test
// database never meet (and refuse) each other's tables.
const SCHEMA: &str = "nj_test_shared_v9";
const PROCESSES: usize = 3;
const KEYS: u128 = 90;
const TASKS_PER_PROCESS: usize = 6;
/// How many times a child retries one append after retryable failures.
const ATTEMPTS: usize = 100;
/// How long the parent waits for its children before killing them and failing.
const DEADLINE: std::time::Duration = std::time::Duration::from_secs(300);

fn key(session: SessionId, i: u128) -> Uuid {
    Uuid::from_u128(session.as_uuid().as_u128() ^ (i + 1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_append_one_session_gap_free() {
    if let Ok(role) = std::env::var(CHILD_VAR) {
        return child(&role).await;
    }
    let Some(url) = database_url("three_processes_append_one_session_gap_free") else {
        return;
    };
    let session = SessionId::new();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..PROCESSES)
        .map(|i| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "three_processes_append_one_session_gap_free",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_VAR, format!("{session}/{i}"))
                .env(DATABASE_URL_VAR, &url)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();

    // Collect the children's output on threads, so the wait below can give up.
    let mut running = Vec::new();
    for mut child in children {
        let mut out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let read = |r: &mut dyn std::io::Read| {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        };
        let out = std::thread::spawn(move || read(&mut out));
        let err = std::thread::spawn(move || read(&mut err));
        running.push((child, out, err));
    }
    let deadline = std::time::Instant::now() + DEADLINE;
    let mut statuses = vec![None; running.len()];
    while statuses.iter().any(Option::is_none) {
        for (i, (child, _, _)) in running.iter_mut().enumerate() {
            if statuses[i].is_none() {
                statuses[i] = child.try_wait().unwrap();
            }
        }
        if statuses.iter().any(Option::is_none) {
            if std::time::Instant::now() >= deadline {
                for (child, _, _) in &mut running {
                    let _ = child.kill();
                }
                panic!("the child processes did not finish within {DEADLINE:?}; killed them");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    let mut outputs = Vec::new();
    for ((_, out, err), status) in running.into_iter().zip(statuses) {
        outputs.push((status.unwrap(), out.join().unwrap(), err.join().unwrap()));
    }

    // Each child prints `KEY <key> <seq> <appended>` per key.
    let mut seqs: HashMap<Uuid, u64> = HashMap::new();
    let mut appended_total = 0;
    for (status, stdout, stderr) in outputs {
        let stdout = String::from_utf8_lossy(&stdout);
        assert!(
            status.success(),
            "child failed: {stdout}\n{}",
            String::from_utf8_lossy(&stderr)
        );
        let mut lines = 0;
        // The harness may print its own text on the same line before ours.
        for line in stdout
            .lines()
            .filter_map(|l| l.find("KEY ").map(|at| &l[at..]))
        {
            let parts: Vec<&str> = line.split_whitespace().collect();
            let (k, seq, appended): (Uuid, u64, bool) = (
                parts[1].parse().unwrap(),
                parts[2].parse().unwrap(),
                parts[3].parse().unwrap(),
            );
            if let Some(prev) = seqs.insert(k, seq) {
                assert_eq!(prev, seq, "processes disagree on the seq of {k}");
            }
            appended_total += usize::from(appended);
            lines += 1;
        }
        assert_eq!(lines, KEYS as usize, "every child reports every key");
    }
    assert_eq!(
        appended_total, KEYS as usize,
        "each key appended by exactly one call"
    );

    let j = journal(&url, SCHEMA, PgOptions::default()).await;
    let frames = replay_all(&j, session).await.unwrap();
    let got: Vec<u64> = frames.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(
        got,
        (1..=KEYS as u64).collect::<Vec<_>>(),
        "gap-free from 1"
    );
    let mut per_key: BTreeMap<Uuid, u64> = BTreeMap::new();
    for (seq, record) in &frames {
        assert!(
            per_key.insert(record.key(), *seq).is_none(),
            "one frame per key"
        );
        assert_eq!(*record, command(session, record.key(), 0));
        assert_eq!(seqs[&record.key()], *seq);
    }
    for i in 0..KEYS {
        assert!(per_key.contains_key(&key(session, i)));
    }
    assert_eq!(j.last_seq(session).await.unwrap(), KEYS as u64);
}

/// One child process: appends every key (in its own order, several tasks at once),
/// retrying transient failures and then retrying each success once more, as a
/// publisher that lost the reply would.
async fn child(role: &str) {
    let (session, index) = role.split_once('/').unwrap();
    let session = SessionId::from_uuid(session.parse().unwrap());
    let index: u128 = index.parse().unwrap();
    let url = std::env::var(DATABASE_URL_VAR).unwrap();
    let j = Arc::new(journal(&url, SCHEMA, PgOptions::default()).await);

    // Child 0 ascending, child 1 descending, child 2 from the middle.
    let mut order: Vec<u128> = (0..KEYS).collect();
    match index {
        1 => order.reverse(),
        2 => order.rotate_left(KEYS as usize / 2),
        _ => {}
    }
    let chunks: Vec<Vec<u128>> = order
        .chunks(KEYS as usize / TASKS_PER_PROCESS)
        .map(<[u128]>::to_vec)
        .collect();
    let mut tasks = Vec::new();
    for chunk in chunks {
        let j = Arc::clone(&j);
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for i in chunk {
                let k = key(session, i);
                let record = command(session, k, 0);
                let mut first = None;
                for _ in 0..ATTEMPTS {
                    match j.append(session, record.clone()).await {
                        Ok(o) => {
                            first = Some(o);
                            break;
                        }
                        Err(e) if e.is_retryable() => {
                            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                        }
                        Err(e) => panic!("append failed: {e}"),
                    }
                }
                let first = first
                    .unwrap_or_else(|| panic!("append still failing after {ATTEMPTS} attempts"));
                let again = j.append(session, record).await.unwrap();
                assert_eq!((again.seq, again.appended), (first.seq, false));
                out.push((k, first));
            }
            out
        }));
    }
    for t in tasks {
        for (k, o) in t.await.unwrap() {
            println!("KEY {k} {} {}", o.seq, o.appended);
        }
    }
}
