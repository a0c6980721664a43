//! What the two drain benches (`drain` on redb, `drain_pg` on PostgreSQL) share: a
//! session whose one loop holds a backlog, the drain (in turn or in batches) timed on
//! it, and the criterion group with the figure run that records the metrics.

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use notify_journal::JournalBackend;
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

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A session over `journal` whose one loop holds `backlog` notifications (notified by
/// 64 concurrent supervisors).
async fn backlog<J: JournalBackend + 'static>(
    journal: J,
    backlog: u64,
) -> (Session, SessionConsumer) {
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

/// Drains `count` notifications from a backlog of `backlog_of` in a fresh session over
/// `journal`, batched or in turn; the time from the first receive to the last release.
pub(crate) async fn drain_on<J: JournalBackend + 'static>(
    journal: J,
    backlog_of: u64,
    count: u64,
    batched: bool,
) -> Duration {
    let (session, mut inbox) = backlog(journal, backlog_of).await;
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
}

/// The group `name`: `turn/1` and `batch/1`, each sample timed by `drain(backlog, count,
/// batched)` on a fresh journal; then the figure run (turn first, then batch) records
/// `NAME/turn_per_s`, `NAME/batch_per_s` and `NAME/ratio`.
pub(crate) fn drain_group(
    c: &mut Criterion,
    name: &str,
    drain: impl Fn(u64, u64, bool) -> Duration,
) {
    let mut g = c.benchmark_group(name);
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    for (way, batched) in [("turn", false), ("batch", true)] {
        g.bench_with_input(BenchmarkId::new(way, 1), &(), |b, ()| {
            b.iter_custom(|iters| drain(iters, iters, batched));
        });
    }
    g.finish();
    let rate = |count, batched| count as f64 / drain(BACKLOG, count, batched).as_secs_f64();
    let turn = rate(TURN_FIGURE, false);
    let batch = rate(BACKLOG, true);
    metric(&format!("{name}/turn_per_s"), turn.round(), "completions/s");
    metric(
        &format!("{name}/batch_per_s"),
        batch.round(),
        "completions/s",
    );
    metric(
        &format!("{name}/ratio"),
        (batch / turn * 100.0).round() / 100.0,
        "x",
    );
    let met = if batch >= TARGET { "met" } else { "UNMET" };
    eprintln!(
        "{name}: one consumer draining a backlog, batched: target >= {TARGET} completions/s: {met}"
    );
}
