//! Restore's peak memory (`cargo bench -p notify-testkit --bench restore_memory`).
//!
//! Not a time, so not criterion: builds one session of 1,000,000 frames (500,500
//! completions, 499,500 of them consumed: 1,000 pending), then runs
//! `notify_session::restore` on it in a fresh child process (this executable again)
//! and reads the child's peak resident set from `/proc/self/status` (`VmHWM`), reset
//! after the journal is open (`/proc/self/clear_refs`), so the figure is what restore
//! itself adds on top of an open journal. Two runs: the default options (whose redb
//! page cache, `RedbOptions::default()`'s, a long replay fills) and a 1 MiB cache
//! (restore's own memory). Recorded as `restore/peak_rss_mb/{default_cache,cache_1mib}` metrics.
//! Linux only; elsewhere it records nothing.
//!
//! Then the writer's memory per session written (issue 34): a child opens a fresh file
//! with the default options and 1,024 tasks append one record to each of 1,000,000
//! sessions (`NOTIFY_BENCH_WRITER_SESSIONS` to change); its peak resident set over the
//! open journal's is `writer/peak_rss_growth_mb/sessions_1m` (another count:
//! `sessions_N`, which issue 34's table does not read).
//!
//! The records, sessions, runtime and metric side-channel are the journal benches'
//! (`notify_testkit::bench`), so the fixture is the same one and `cargo xtask bench`
//! reads the figures back from the same place.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use notify_journal::{RedbDurability, RedbJournal, RedbOptions, RedbVerifyOnOpen};
use notify_testkit::bench::fixture::{consumed, record, runtime, session};
use notify_testkit::bench::metric;

const COMMANDS: u64 = 500_500;
const PENDING: u64 = 1_000;
const CHILD_ENV: &str = "NOTIFY_BENCH_RESTORE_CHILD";
const CACHE_ENV: &str = "NOTIFY_BENCH_RESTORE_CACHE";
const WRITER_ENV: &str = "NOTIFY_BENCH_WRITER_CHILD";
const WRITER_SESSIONS: u64 = 1_000_000;

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// The child: open, reset the peak, restore, report.
fn child(path: &Path, cache: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // 0: the default cache size.
    let options = RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Off);
    let options = if cache == 0 {
        options
    } else {
        options.cache_size(cache)
    };
    let j = RedbJournal::open(path, options).unwrap();
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let base = status_kib("VmRSS:");
    let report = rt
        .block_on(notify_session::restore(session(0), &j))
        .unwrap();
    let peak = status_kib("VmHWM:");
    assert_eq!(report.pending_count() as u64, PENDING);
    assert_eq!(report.last_seq, 2 * COMMANDS - PENDING);
    drop(report);
    j.close();
    println!("base_kib={base} peak_kib={peak}");
}

/// The writer child: a fresh file at `path`, one record to each of `sessions`
/// sessions; reports the peak resident set over the open journal's.
fn writer_child(path: &Path, sessions: u64) {
    let rt = runtime();
    let j = Arc::new(RedbJournal::open(path, RedbOptions::default()).unwrap());
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let base = status_kib("VmRSS:");
    const WRITERS: u64 = 1024;
    rt.block_on(async {
        let tasks: Vec<_> = (0..WRITERS)
            .map(|w| {
                let j = Arc::clone(&j);
                tokio::spawn(async move {
                    for n in (w..sessions).step_by(WRITERS as usize) {
                        let s = session(n);
                        j.append(s, record(s, n)).await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    let peak = status_kib("VmHWM:");
    j.close();
    println!("base_kib={base} peak_kib={peak}");
}

/// Runs this executable as a child with `env`, and reads its `base_kib=` and
/// `peak_kib=` back.
fn run_child(env: &[(&str, String)]) -> (f64, f64) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let field = |k: &str| -> f64 {
        stdout
            .split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .unwrap()
            .parse()
            .unwrap()
    };
    (field("base_kib="), field("peak_kib="))
}

fn fixture(path: &Path) {
    let rt = runtime();
    let j = Arc::new(
        RedbJournal::open(
            path,
            RedbOptions::default().durability(RedbDurability::NonDurableForTestsOnly),
        )
        .unwrap(),
    );
    const WRITERS: u64 = 1024;
    rt.block_on(async {
        let tasks: Vec<_> = (0..WRITERS)
            .map(|w| {
                let j = Arc::clone(&j);
                tokio::spawn(async move {
                    let s = session(0);
                    for i in (w..COMMANDS).step_by(WRITERS as usize) {
                        j.append(s, record(s, i)).await.unwrap();
                        if i < COMMANDS - PENDING {
                            j.append(s, consumed(s, i)).await.unwrap();
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    j.close();
}

fn main() {
    if let Some(path) = std::env::var_os(WRITER_ENV) {
        let sessions = std::env::var("NOTIFY_BENCH_WRITER_SESSIONS")
            .unwrap()
            .parse()
            .unwrap();
        writer_child(Path::new(&path), sessions);
        return;
    }
    if let Some(path) = std::env::var_os(CHILD_ENV) {
        let cache = std::env::var(CACHE_ENV).unwrap().parse().unwrap();
        child(Path::new(&path), cache);
        return;
    }
    if !Path::new("/proc/self/clear_refs").exists() {
        eprintln!("restore_memory: no /proc/self/clear_refs here; nothing measured");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("restore.redb");
    fixture(&path);
    for (name, cache) in [("default_cache", 0usize), ("cache_1mib", 1 << 20)] {
        let (base, peak) = run_child(&[
            (CHILD_ENV, path.display().to_string()),
            (CACHE_ENV, cache.to_string()),
        ]);
        metric(
            &format!("restore/peak_rss_growth_mb/{name}"),
            (peak - base) / 1024.0,
            "MB",
        );
        metric(&format!("restore/peak_rss_mb/{name}"), peak / 1024.0, "MB");
    }
    let sessions = std::env::var("NOTIFY_BENCH_WRITER_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(WRITER_SESSIONS);
    let (base, peak) = run_child(&[
        (
            WRITER_ENV,
            dir.path().join("writer.redb").display().to_string(),
        ),
        ("NOTIFY_BENCH_WRITER_SESSIONS", sessions.to_string()),
    ]);
    let name = match sessions {
        WRITER_SESSIONS => "sessions_1m".to_owned(),
        n => format!("sessions_{n}"),
    };
    metric(
        &format!("writer/peak_rss_growth_mb/{name}"),
        (peak - base) / 1024.0,
        "MB",
    );
}
