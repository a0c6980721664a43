//! The console's sessions page on a large journal (`cargo bench -p notify-testkit
//! --features serve --bench console`): a redb journal of 1,000,000 records in 100,000
//! sessions (10 frames each: 5 completions, 4 consumptions and an end marker; every
//! 100th session live instead, with 10 completions), served in process by
//! `notify_session::serve` (unsigned on loopback), and `GET /console/sessions` timed
//! over HTTP: the first page, the last page (its keyset cursor: the ID 50 before the
//! end), and the first page filtered to live sessions (a sparse filter: one request
//! examines up to 2,000 sessions).
//!
//! The fixture is built once and cached under the target directory
//! (`bench-fixtures/console-1m-100k.redb`); it is written with non-durable commits
//! (`RedbDurability::NonDurableForTestsOnly`) and closed cleanly, which makes it whole.
//! The server opens it without the background scrub, so the timings are the page's
//! alone.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use notify_journal::{
    JournalBackend, JournalRead, RedbDurability, RedbJournal, RedbOptions, RedbVerifyOnOpen,
};
use notify_session::SessionHost;
use notify_session::serve::{JournalInspect, ServeConfig, Server};
use notify_testkit::bench::{fixture, target_dir};
use notify_types::{JournalRecord, SessionEnded, SessionEvent, SessionId};

const SESSIONS: u64 = 100_000;
const FRAMES: u64 = 10;
const LIVE_EVERY: u64 = 100;

fn records(n: u64) -> Vec<JournalRecord> {
    let s = fixture::session(n);
    let base = n * FRAMES;
    if n.is_multiple_of(LIVE_EVERY) {
        return (0..FRAMES).map(|i| fixture::record(s, base + i)).collect();
    }
    let mut r: Vec<JournalRecord> = (0..5).map(|i| fixture::record(s, base + i)).collect();
    r.extend((0..4).map(|i| fixture::consumed(s, base + i)));
    r.push(JournalRecord::from(SessionEvent::SessionEnded(
        SessionEnded::new(s),
    )));
    r
}

/// The fixture's path, built if missing.
fn fixture_file(rt: &tokio::runtime::Runtime) -> std::path::PathBuf {
    let dir = target_dir().join("bench-fixtures");
    let path = dir.join("console-1m-100k.redb");
    let done = dir.join("console-1m-100k.done");
    if done.exists() && path.exists() {
        return path;
    }
    std::fs::create_dir_all(&dir).unwrap();
    let _ = std::fs::remove_file(&path);
    let started = Instant::now();
    let journal = Arc::new(
        RedbJournal::open(
            &path,
            RedbOptions::default()
                .durability(RedbDurability::NonDurableForTestsOnly)
                .verify_on_open(RedbVerifyOnOpen::Off),
        )
        .unwrap(),
    );
    rt.block_on(async {
        let mut tasks = Vec::new();
        for worker in 0..64u64 {
            let journal = Arc::clone(&journal);
            tasks.push(tokio::spawn(async move {
                let mut n = worker;
                while n < SESSIONS {
                    let s = fixture::session(n);
                    journal.append_all(s, records(n), None).await.unwrap();
                    n += 64;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    journal.close();
    std::fs::write(&done, b"").unwrap();
    eprintln!(
        "built the console fixture ({} records, {SESSIONS} sessions) in {:.1} s",
        SESSIONS * FRAMES,
        started.elapsed().as_secs_f64()
    );
    path
}

fn console(c: &mut Criterion) {
    let rt = fixture::runtime();
    let path = fixture_file(&rt);
    let journal = Arc::new(
        RedbJournal::open(
            &path,
            RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Off),
        )
        .unwrap(),
    );
    let ids = rt
        .block_on(journal.sessions_after(None, usize::MAX))
        .unwrap();
    assert_eq!(ids.len() as u64, SESSIONS);
    let last_cursor: SessionId = ids[ids.len() - 51];
    let mut config = ServeConfig::new("127.0.0.1:0".parse().unwrap());
    config.insecure_unsigned = true;
    let server = rt
        .block_on(
            Server::builder(config)
                .inspect(Arc::clone(&journal) as Arc<dyn JournalInspect>)
                .start(SessionHost::builder(Arc::clone(&journal))),
        )
        .unwrap();
    let base = server.base_url().to_owned();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let get = |url: String| {
        let http = http.clone();
        rt.block_on(async move {
            let r = http.get(&url).send().await.unwrap();
            assert_eq!(r.status(), reqwest::StatusCode::OK, "{url}");
            let body = r.text().await.unwrap();
            assert!(body.contains("<table>"), "{body}");
            body
        })
    };
    // The pages show what they should: 50 rows, and the last page ends the list.
    let first = get(format!("{base}/console/sessions"));
    assert!(first.contains(&ids[0].to_string()) && first.contains("next page"));
    let last = get(format!("{base}/console/sessions?after={last_cursor}"));
    assert!(last.contains(&ids[ids.len() - 1].to_string()) && !last.contains("next page"));
    let mut group = c.benchmark_group("console");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(10));
    group.bench_function("sessions/first_page", |b| {
        b.iter(|| get(format!("{base}/console/sessions")));
    });
    group.bench_function("sessions/last_page", |b| {
        b.iter(|| get(format!("{base}/console/sessions?after={last_cursor}")));
    });
    group.bench_function("sessions/live_filter_first_page", |b| {
        b.iter(|| get(format!("{base}/console/sessions?state=live")));
    });
    group.finish();
    rt.block_on(server.shutdown()).unwrap();
}

criterion_group!(benches, console);
criterion_main!(benches);
