//! Accepted-and-acknowledged notifications per second through one loop and through 8
//! loops in parallel, beside a bare tokio `mpsc` + `oneshot` round trip in the same run.
//!
//! Each element is one full cycle: the producer awaits `deliver` (Accepted) while a
//! consumer task concurrently `recv`s and `ack`s; an iteration ends when the consumer
//! has acknowledged everything. The bare baseline is a producer awaiting one
//! `mpsc::send` + `oneshot` reply per element from an echo task.
//! Target: loop throughput >= 0.5x the bare round trip.
//!
//! Fairness: both sides run on the same runtime, in the same process, one after the
//! other for each case; setup (spawning the loops or echo tasks, building the
//! notifications) is outside the timed region on both sides. The loop side carries a
//! real notification (and clones it per delivery, as a caller that may have to retry
//! after `Stopped(Full)` must keep its copy) and keeps the default bounds (capacity 64,
//! consumed memory 4096), so its duplicate guard does real work; the bare side sends a
//! `u64`. Both costs are part of what the loop is, so they stay in.
//!
//! Backpressure: the bare producer waits on its bounded `send` and on the reply; a
//! loop producer is told `Stopped(Full)` and awaits `LoopHandle::wait_for_room`, the
//! library's own wait, and the consumer does nothing but `recv` and `ack`. The loop
//! wakes a waiting producer with hysteresis (once the live set has drained to half the
//! capacity), so refilling costs one cross-thread wake per batch. Before it existed the
//! bench spun on `yield_now` (0.11x of the bare round trip with one loop on the
//! multi-thread runtime: the loop was charged for the busy-wait), then waited on a
//! `Notify` its consumer signalled after every ack (0.34x: one cross-thread wake per
//! element).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use notify_loop::{Delivery, LoopConfig, spawn};
use notify_types::{
    CommandId, LoopId, ProcessCompletionNotification, ProcessLifecycleState, ProcessNotification,
    ProcessTerminalReason, SessionId, StopCause,
};
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, oneshot};

/// Elements per producer per iteration.
const N: usize = 2_000;
/// Parallel producers (loops, or bare channels) in the parallel variants.
const PARALLEL: usize = 8;

/// Both runtime flavours: `current_thread` measures CPU cost per element without
/// cross-thread wake-ups; `multi_thread` (2 workers) adds them, as in a server.
fn runtimes() -> [(&'static str, Runtime); 2] {
    let current = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    [("current_thread", current), ("multi_thread", multi)]
}

fn commands(session_id: SessionId, loop_id: LoopId, n: usize) -> Vec<ProcessNotification> {
    (0..n)
        .map(|_| {
            ProcessNotification::new(ProcessCompletionNotification {
                command_id: CommandId::new(),
                session_id,
                loop_id,
                process_handle: "bench-1".into(),
                state: ProcessLifecycleState::Exited,
                reason: ProcessTerminalReason::Exited,
            })
        })
        .collect()
}

/// Runs `loops` loops in parallel, `N` notifications each; returns the elapsed time.
async fn loops_round(loops: usize) -> Duration {
    let mut setups = Vec::with_capacity(loops);
    for _ in 0..loops {
        let (session_id, loop_id) = (SessionId::new(), LoopId::new());
        let (handle, consumer) = spawn(LoopConfig::new(session_id, loop_id));
        setups.push((handle, consumer, commands(session_id, loop_id, N)));
    }
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(loops * 2);
    for (handle, mut consumer, commands) in setups {
        tasks.push(tokio::spawn(async move {
            for command in commands {
                loop {
                    match handle.deliver(command.clone()).await {
                        Delivery::Accepted => break,
                        Delivery::Stopped(StopCause::Full) => handle.wait_for_room().await,
                        other => panic!("unexpected {other:?}"),
                    }
                }
            }
        }));
        tasks.push(tokio::spawn(async move {
            for _ in 0..N {
                let received = consumer.recv().await.unwrap();
                black_box(received.command_id());
                received.ack().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    start.elapsed()
}

/// Runs `producers` bare mpsc + oneshot round-trip pairs in parallel, `N` each.
async fn bare_round(producers: usize) -> Duration {
    let mut senders = Vec::with_capacity(producers);
    for _ in 0..producers {
        let (tx, mut rx) = mpsc::channel::<(u64, oneshot::Sender<u64>)>(64);
        tokio::spawn(async move {
            while let Some((x, reply)) = rx.recv().await {
                let _ = reply.send(x + 1);
            }
        });
        senders.push(tx);
    }
    let start = Instant::now();
    let tasks: Vec<_> = senders
        .into_iter()
        .map(|tx| {
            tokio::spawn(async move {
                for i in 0..N as u64 {
                    let (reply, answer) = oneshot::channel();
                    tx.send((i, reply)).await.unwrap();
                    black_box(answer.await.unwrap());
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    for (flavour, rt) in runtimes() {
        for (name, parallel) in [("x1", 1), ("x8", PARALLEL)] {
            let mut group = c.benchmark_group(format!("{flavour}/deliver_ack_{name}"));
            group
                .sample_size(10)
                .warm_up_time(Duration::from_millis(500))
                .measurement_time(Duration::from_secs(2))
                .throughput(Throughput::Elements((N * parallel) as u64));
            group.bench_function("bare_mpsc_oneshot", |b| {
                b.iter_custom(|iters| (0..iters).map(|_| rt.block_on(bare_round(parallel))).sum())
            });
            group.bench_function("notify_loop", |b| {
                b.iter_custom(|iters| (0..iters).map(|_| rt.block_on(loops_round(parallel))).sum())
            });
            group.finish();
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
