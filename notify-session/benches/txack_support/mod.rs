//! What the two acknowledgement benches (`txack`, `txack_pg`) share: the criterion
//! group, sessions whose loops already hold their notifications, and the measured
//! loop over their consumers.

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

/// Where the consumers are: `consumers` loops over `sessions` sessions (loop `i` on
/// session `i % sessions`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) consumers: usize,
    pub(crate) sessions: usize,
}

impl Shape {
    /// The criterion parameter: `64` for one session, `64x8` for 64 over 8.
    fn label(self) -> String {
        if self.sessions == 1 {
            self.consumers.to_string()
        } else {
            format!("{}x{}", self.consumers, self.sessions)
        }
    }
}

/// 1 and 64 consumers of one session: the shapes both benches run.
pub(crate) const ONE_SESSION: [Shape; 2] = [
    Shape {
        consumers: 1,
        sessions: 1,
    },
    Shape {
        consumers: 64,
        sessions: 1,
    },
];

/// The group a bench runs, named `group`: each of `modes` (`plain`, `tx`, ...) at each
/// of `shapes` (criterion IDs `GROUP/plain/1`, `GROUP/tx/64x8`, ..., which the
/// xtask's bench figures read), each sample timed by the engine's
/// `acks(rt, shape, mode, iters)`.
pub(crate) fn ack_group(
    c: &mut Criterion,
    group: &str,
    modes: &[&'static str],
    shapes: &[Shape],
    acks: impl Fn(&tokio::runtime::Runtime, Shape, &'static str, u64) -> Duration,
) {
    let rt = runtime();
    let mut g = c.benchmark_group(group);
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    for &shape in shapes {
        for &mode in modes {
            g.bench_with_input(BenchmarkId::new(mode, shape.label()), &(), |b, ()| {
                b.iter_custom(|iters| acks(&rt, shape, mode, iters));
            });
        }
    }
    g.finish();
}

/// Sessions over `journal` with `shape.consumers` loops, each holding `per`
/// notifications (notified before any clock starts).
pub(crate) async fn prepared<J: JournalBackend + Clone + 'static>(
    journal: J,
    shape: Shape,
    per: u64,
) -> (Vec<Session>, Vec<SessionConsumer>) {
    let sessions: Vec<Session> = (0..shape.sessions)
        .map(|_| Session::new(SessionId::new(), journal.clone()))
        .collect();
    let mut inboxes = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..shape.consumers {
        let session = sessions[i % sessions.len()].clone();
        let loop_id = LoopId::new();
        let config = LoopConfig::new(session.id(), loop_id).capacity(usize::MAX);
        inboxes.push(session.register_loop(config).unwrap());
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
    (sessions, inboxes)
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
