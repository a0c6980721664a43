//! What the two acknowledgement benches (`txack`, `txack_pg`) share: the criterion
//! group, a session whose loops already hold their notifications, and the measured
//! loop over its consumers.

use std::future::Future;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use notify_journal::JournalBackend;
use notify_loop::LoopConfig;
use notify_session::{Session, SessionConsumer, SessionReceived};
use notify_types::{
    CommandId, LoopId, ProcessCompletionNotification, ProcessLifecycleState, ProcessTerminalReason,
    SessionId,
};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The group both benches run, named `group`: `plain/N` and `tx/N` for 1 and 64
/// consumers (criterion IDs `GROUP/plain/1`, `GROUP/tx/64`, ..., which the xtask's
/// bench figures read), each sample timed by the engine's `acks(rt, consumers, tx,
/// iters)`.
pub(crate) fn ack_group(
    c: &mut Criterion,
    group: &str,
    acks: impl Fn(&tokio::runtime::Runtime, usize, bool, u64) -> Duration,
) {
    let rt = runtime();
    let mut g = c.benchmark_group(group);
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    for consumers in [1usize, 64] {
        for (name, tx) in [("plain", false), ("tx", true)] {
            g.bench_with_input(BenchmarkId::new(name, consumers), &(), |b, ()| {
                b.iter_custom(|iters| acks(&rt, consumers, tx, iters));
            });
        }
    }
    g.finish();
}

/// A session over `journal` with `consumers` loops, each holding `per` notifications
/// (notified before any clock starts).
pub(crate) async fn prepared(
    journal: impl JournalBackend + 'static,
    consumers: usize,
    per: u64,
) -> (Session, Vec<SessionConsumer>) {
    let session = Session::new(SessionId::new(), journal);
    let mut inboxes = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..consumers {
        let loop_id = LoopId::new();
        let config = LoopConfig::new(session.id(), loop_id).capacity(usize::MAX);
        inboxes.push(session.register_loop(config).unwrap());
        let session = session.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                let n = ProcessCompletionNotification {
                    command_id: CommandId::new(),
                    session_id: session.id(),
                    loop_id,
                    process_handle: format!("build-{i}"),
                    state: ProcessLifecycleState::Exited,
                    reason: ProcessTerminalReason::Exited,
                };
                session.notify_process_completion(n).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (session, inboxes)
}

/// Each consumer receives its `per` notifications and hands each to `ack` (its own
/// state `S`, made by `state(i)` before the clock starts). Returns the time from the
/// first receive to the last acknowledgement.
pub(crate) async fn timed<S, Fut>(
    inboxes: Vec<SessionConsumer>,
    per: u64,
    state: impl AsyncFnMut(usize) -> S,
    ack: impl Fn(SessionReceived, S) -> Fut + Clone + Send + 'static,
) -> Duration
where
    S: Send + 'static,
    Fut: Future<Output = S> + Send + 'static,
{
    let mut state = state;
    let mut states = Vec::new();
    for i in 0..inboxes.len() {
        states.push(state(i).await);
    }
    let started = Instant::now();
    let tasks: Vec<_> = inboxes
        .into_iter()
        .zip(states)
        .map(|(mut inbox, mut s)| {
            let ack = ack.clone();
            tokio::spawn(async move {
                for _ in 0..per {
                    let received = inbox.recv().await.unwrap();
                    s = ack(received, s).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    started.elapsed()
}
