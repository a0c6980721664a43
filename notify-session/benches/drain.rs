//! One consumer draining a backlog on redb (`cargo bench -p notify-session --bench
//! drain`): acknowledgements awaited in turn against acknowledged in batches.
//!
//! * `drain/turn/1`: `recv`, then `ack` (one durable commit each), in turn.
//! * `drain/batch/1`: `recv_many(BATCH)`, then `SessionBatch::ack` (one durable commit
//!   per batch, every notification released after it, in order).
//!
//! The backlog is notified (by 64 concurrent supervisors) before the clock starts; every
//! sample starts from an empty file. After criterion's samples, one figure run per way
//! (turn first, then batch, same process) on a backlog of [`BACKLOG`] records
//! `drain/turn_per_s`, `drain/batch_per_s` (completions a second) and `drain/ratio`
//! (batch over turn) with `notify_testkit::bench::metric`. The batched run drains the
//! whole backlog; the run in turn times its first [`TURN_FIGURE`] (at one commit each,
//! the whole backlog would take a minute or more, for the same rate).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use notify_journal::{RedbJournal, RedbOptions};
use notify_loop::LoopConfig;
use notify_session::{Session, SessionConsumer};
use notify_testkit::bench::metric;
use notify_types::{
    CommandId, LoopId, ProcessCompletionNotification, ProcessLifecycleState, ProcessTerminalReason,
    SessionId,
};

/// The figure run's backlog.
const BACKLOG: u64 = 20_000;
/// How many of the backlog the figure run in turn drains.
const TURN_FIGURE: u64 = 2_000;
/// Issue 34's target for the batched drain, completions a second.
const TARGET: f64 = 20_000.0;
/// The most one batch takes.
const BATCH: usize = 1_000;
const SUPERVISORS: u64 = 64;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A session over a fresh file whose one loop holds `backlog` notifications.
async fn backlog(journal: RedbJournal, backlog: u64) -> (Session, SessionConsumer) {
    let session = Session::new(SessionId::new(), journal);
    let loop_id = LoopId::new();
    let config = LoopConfig::new(session.id(), loop_id).capacity(usize::MAX);
    let inbox = session.register_loop(config).unwrap();
    let per = backlog.div_ceil(SUPERVISORS);
    let tasks: Vec<_> = (0..SUPERVISORS)
        .map(|s| {
            let session = session.clone();
            let count = per.min(backlog.saturating_sub(s * per));
            tokio::spawn(async move {
                for i in 0..count {
                    let n = ProcessCompletionNotification {
                        command_id: CommandId::new(),
                        session_id: session.id(),
                        loop_id,
                        process_handle: format!("build-{s}-{i}"),
                        state: ProcessLifecycleState::Exited,
                        reason: ProcessTerminalReason::Exited,
                    };
                    session.notify_process_completion(n).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    (session, inbox)
}

/// Drains `count` notifications from a fresh backlog of `backlog`, batched or in turn;
/// the time from the first receive to the last release.
fn drain(rt: &tokio::runtime::Runtime, backlog_of: u64, count: u64, batched: bool) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let journal = RedbJournal::open(dir.path().join("drain.redb"), RedbOptions::default()).unwrap();
    let elapsed = rt.block_on(async {
        let (session, mut inbox) = backlog(journal.clone(), backlog_of).await;
        let started = Instant::now();
        let mut done = 0;
        while done < count {
            if batched {
                let batch = inbox.recv_many(BATCH.min((count - done) as usize)).await;
                done += batch.len() as u64;
                batch.ack().await.unwrap();
            } else {
                inbox.recv().await.unwrap().ack().await.unwrap();
                done += 1;
            }
        }
        let elapsed = started.elapsed();
        assert_eq!(done, count);
        drop(session);
        elapsed
    });
    journal.close();
    elapsed
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    let mut g = c.benchmark_group("drain");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    for (name, batched) in [("turn", false), ("batch", true)] {
        g.bench_with_input(BenchmarkId::new(name, 1), &(), |b, ()| {
            b.iter_custom(|iters| drain(&rt, iters, iters, batched));
        });
    }
    g.finish();
    let rate = |count, batched| count as f64 / drain(&rt, BACKLOG, count, batched).as_secs_f64();
    let turn = rate(TURN_FIGURE, false);
    let batch = rate(BACKLOG, true);
    metric("drain/turn_per_s", turn.round(), "completions/s");
    metric("drain/batch_per_s", batch.round(), "completions/s");
    metric("drain/ratio", (batch / turn * 100.0).round() / 100.0, "x");
    let met = if batch >= TARGET { "met" } else { "UNMET" };
    eprintln!("one consumer draining a backlog, batched: target >= {TARGET} completions/s: {met}");
}

criterion_group!(benches, bench);
criterion_main!(benches);
