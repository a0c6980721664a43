//! The PostgreSQL journal's purge metrics: a recorder installed for the whole process
//! sees one `purge_step_seconds` sample per step that worked, and the sessions and
//! frames purged.
//!
//! One test in this binary: the recorder is global, so nothing else may record
//! meanwhile, and every figure is exact. Needs `NOTIFY_TEST_DATABASE_URL` (or `CI`
//! set, which implies the local default); without either, it says it was skipped and
//! returns.
#![cfg(feature = "postgres")]
// Test code: a failed expectation is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod postgres_support;

use std::collections::BTreeMap;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use notify_journal::{JournalBackend, PgOptions, purge};
use notify_types::{SessionId, Timestamp, Uuid};
use postgres_support::{command, database_url, drop_schema, ended, fresh_schema, journal};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_steps_sessions_and_frames_are_counted() {
    let Some(url) = database_url("purge_steps_sessions_and_frames_are_counted") else {
        return;
    };
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this binary");
    let schema = fresh_schema("ret_metrics");
    let j = journal(&url, &schema, PgOptions::default()).await;
    for _ in 0..2 {
        let s = SessionId::new();
        for _ in 0..4 {
            j.append(s, command(s, Uuid::now_v7(), 0)).await.unwrap();
        }
        j.append(s, ended(s)).await.unwrap();
    }
    // Two sessions of five frames, three frames a step: four steps, then one idle.
    let report = purge(&j, Timestamp::MAX, 3).await.unwrap();
    assert_eq!((report.sessions, report.frames, report.steps), (2, 10, 4));

    let mut counters = BTreeMap::new();
    let mut steps = 0;
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let (_, key) = key.into_parts();
        if !key
            .labels()
            .any(|l| l.key() == "backend" && l.value() == "postgres")
        {
            continue;
        }
        match value {
            DebugValue::Counter(n) => {
                counters.insert(key.name().to_owned(), n);
            }
            DebugValue::Histogram(samples) if key.name() == "notify_journal_purge_step_seconds" => {
                steps += samples.len();
            }
            _ => {}
        }
    }
    assert_eq!(
        counters.get("notify_journal_purged_sessions_total"),
        Some(&2)
    );
    assert_eq!(
        counters.get("notify_journal_purged_frames_total"),
        Some(&10)
    );
    assert_eq!(
        steps, 4,
        "one sample per step that worked, none for the idle one"
    );
    j.close().await;
    drop_schema(&url, &schema).await;
}
